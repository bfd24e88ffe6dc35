"""DDP231-DDP235: rendezvous and peer problems only a log shows (DDP230, a port below 1024, is
judged by the live rule in rules/rendezvous.py, for logs too).

Registered on import; the pattern table (patterns_network.py, patterns_ranks.py) and the
inference step (inference.py) emit them.
"""

from __future__ import annotations

from ddp_doctor.model import Remediation
from ddp_doctor.registry import describe

describe(
    "DDP231",
    Remediation(
        "Make the master reachable from every node: MASTER_ADDR must be an address the other "
        "nodes can route to (not 127.0.0.1 or a container-internal address), the port must be "
        "open in the firewall between the nodes, and rank 0's node must be started too. Test "
        "it from a worker node before launching.",
        ("nc -vz -w 5 $MASTER_ADDR $MASTER_PORT",),
    ),
    """What it finds: a client's connect to the store that timed out: "(errno: 110 - Connection
timed out)" (macOS 60, Windows 10060), "The client socket has timed out after ...ms while
trying to connect to (host, port)", "TCP client failed to connect/validate to host ... - timed
out", "The connection to the C10d store has failed", torch 1.8-1.10's "connect() timed out.
Original timeout was N ms" and 1.4-1.7's bare "RuntimeError: Connection timed out" (under the
TCPStore frame).
Why it matters: a timeout (no answer) and a refusal (DDP206, something answered "no") have
different causes: packets dropped by a firewall or sent to an unreachable address, against a
closed port on a reachable host.
Example: a second node behind a firewall that drops the master port; MASTER_ADDR set to the
master's address inside a docker bridge network.
Fix: a routable MASTER_ADDR, the port open between nodes, every node started.""",
)

describe(
    "DDP232",
    Remediation(
        "Raise the process-group timeout above the length of rank 0's solo work "
        "(init_process_group(timeout=timedelta(hours=2)); Hugging Face: "
        "TrainingArguments(ddp_timeout=7200)), or do that work before launching: preprocess "
        "and cache the dataset in a single-process step, log in to wandb beforehand (or "
        "WANDB_MODE=offline), save checkpoints asynchronously.",
    ),
    """What it finds: ranks that timed out waiting (a watchdog timeout, a store barrier, a
"store->get('0') got error: Socket Timeout" for NCCL's unique id) while rank 0 was still doing
work alone: a progress bar such as "Running tokenizer on dataset", "Map (num_proc=...)",
"Tokenizing Prompts", a checkpoint save, or a wandb login prompt waiting for input.
Why it matters: nothing is broken but the timeout: the other ranks wait in a barrier or their
first collective, rank 0 joins only after its work, and the default 30 minutes (10 for NCCL
in some versions) run out first. Changing ports, interfaces or NCCL settings does not help.
Example: Hugging Face's main_process_first() tokenising a large dataset on rank 0 for 35
minutes (huggingface/trl#1519, hiyouga/LlamaFactory#2424).
Fix: a timeout longer than the solo work, or the work done before the distributed job.""",
)

describe(
    "DDP233",
    Remediation(
        "Give every process its own rank instead of a fixed one: under torchrun read "
        "int(os.environ['RANK']) and int(os.environ['LOCAL_RANK']) and call "
        "init_process_group() without rank=; do not pass --local_rank 0 (or --rank 0) on the "
        "command line. A different port does not help: every process still tries to host it.",
        ("torchrun --nproc-per-node=N train.py",),
    ),
    """What it finds: "Address already in use" from a process that is not rank 0 (a [rank1] or
[default1] prefix, torchrun naming another rank, several processes failing to bind), or next
to a launch command that passes --local_rank 0 to every process.
Why it matters: only rank 0 hosts the store; a process that was told it is rank 0 tries to
bind the master port, which the real rank 0 (or torchrun) already holds. It looks like
"port in use" (DDP201) but a new port fails the same way.
Example: `torchrun --nproc_per_node=2 train.py --local_rank 0` with a script that passes
args.local_rank as rank= to init_process_group (pytorch/pytorch#85604).
Fix: ranks from the launcher's environment (RANK, LOCAL_RANK), no fixed rank arguments.""",
)

describe(
    "DDP234",
    Remediation(
        "Find the rank that left: if no rank crashed, one ended its loop early. Give every "
        "rank the same number of steps (DistributedSampler with drop_last=True, no per-rank "
        "early stopping or `break`), wrap uneven inputs in `with model.join():`, and let every "
        "rank reach destroy_process_group() after a final barrier. If a rank crashed on another "
        "node, its log there holds the cause.",
    ),
    """What it finds: "Connection closed by peer" / "Connection reset by peer" (gloo, c10d;
Windows 10054), gloo's "Socket closed" / "Socket unexpectedly closed [peer]", "Failed to recv,
got 0 bytes" from the store (lowercase in torch 2.4-2.6), store->get errors that end in a
closed connection, NCCL's "remote process exited" (ncclRemoteError) and "Connection closed by
remote peer".
Why it matters: it is what the other ranks see when one exits; when some rank crashed the
crash is the cause and this is reported after it, but when no rank reports an error of its own
a rank most likely left cleanly and early, and its peers died waiting in a collective.
Example: rank 1 has fewer batches than rank 0 (no drop_last), finishes its epoch and exits;
rank 0's next all_reduce fails with "Connection closed by peer".
Fix: the same number of collectives on every rank (drop_last, Join), or the crashed rank's own
log.""",
)

describe(
    "DDP235",
    Remediation(
        "Pick a port outside the ranges Windows reserves (Hyper-V, WSL and Docker reserve "
        "blocks of ports, often anew after a reboot): list them, then set MASTER_PORT to a "
        "port outside every range; or free the range (net stop winnat, then net start winnat, "
        "as administrator).",
        ("netsh interface ipv4 show excludedportrange protocol=tcp",),
    ),
    """What it finds: the store's bind refused on Windows with "(system error: 10013 - ...)"
(WSAEACCES), whatever the language of the text after the number.
Why it matters: nothing listens on the port and the user is not missing rights: Windows keeps
ranges of ports for Hyper-V, WSL and Docker and refuses to bind inside them, so the same port
fails every time until the ranges change.
Example: `The server socket has failed to bind to [kodachi]:51545 (system error: 10013 - 以一种访问
权限不允许的方式做了一个访问套接字的尝试。)` (RVC-Project/Retrieval-based-Voice-Conversion-WebUI#246).
Fix: a port outside `netsh interface ipv4 show excludedportrange protocol=tcp`.""",
)
