"""Precision of the first finding (issue 21, logs7a): the weakest evidence that puts a code
first must be evidence of that cause, not a line another cause's log holds too. Each case is
a firing and a silent (or other-cause) text; real lines, sources beside them."""

from __future__ import annotations

from log_scans import by_code, codes

from ddp_doctor.logscan import scan_text
from ddp_doctor.model import Severity

# --- DDP507: torchrun's SIGTERM alone says the run was stopped, not why ---------------------
SIGTERM_ONLY = (  # PrimeIntellect-ai/prime-rl#1360: the orchestrator stopped the trainer
    "W1130 12:13:49.388000 124326 torch/distributed/elastic/agent/server/api.py:723] Received "
    "15 death signal, shutting down workers\n"
    "W1130 12:13:49.389000 124326 torch/distributed/elastic/multiprocessing/api.py:900] "
    "Sending process 124533 closing signal SIGTERM\n"
)
SIGINT = (  # ctrl-C (corpus_e ctrl_c_sigint_death_signal_rtdaction31)
    "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting "
    "down workers\n"
)
TIME_LIMIT = (  # SLURM says why (corpus_c slurm_time_limit_*)
    "slurmstepd: error: *** JOB 4242 ON node01 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME "
    "LIMIT ***\n"
)
AFTER_SIGTERM = (  # a rank's exit after the agent's SIGTERM: the stop's consequence
    "E0423 12:18:09.000000 1 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: -15) local_rank: 0 (pid: 2630) of binary: /usr/bin/python\n"
)


def test_a_bare_sigterm_is_a_warning_that_names_no_cause() -> None:
    finding = by_code(SIGTERM_ONLY)["DDP507"]
    assert finding.severity == Severity.WARNING
    assert finding.evidence["signal"] in ("15", "SIGTERM")


def test_a_bare_sigterm_keeps_the_ranks_exits_behind_it() -> None:
    assert codes(SIGTERM_ONLY + AFTER_SIGTERM)[0] == "DDP507"


def test_a_sigint_or_a_scheduler_line_says_why_and_stays_an_error() -> None:
    assert by_code(SIGINT)["DDP507"].severity == Severity.ERROR
    assert by_code(TIME_LIMIT + SIGTERM_ONLY)["DDP507"].severity == Severity.ERROR


# --- DDP504: memory needs memory evidence; with it, the SIGKILL follows ----------------------
SIGKILL = (  # torchrun's exit line alone (xxayt/MGSV#2's log)
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
    "(pid: 178) of binary: /usr/bin/python\n"
)
KERNEL_OOM = (  # the kernel's own line (dmesg), as DDP504's explain text lists it
    "[Mon Jan  8 10:12:01 2024] Out of memory: Killed process 178 (python) total-vm:98765432kB, "
    "anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:171234kB oom_score_adj:0\n"
)
KUBELET_OOM = (  # kubectl describe pod of a container the kubelet killed for memory
    "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n"
)


def test_a_sigkill_alone_is_the_ranks_death_not_memory() -> None:
    assert codes(SIGKILL) == ["DDP307"]


def test_memory_evidence_puts_memory_first() -> None:
    assert codes(SIGKILL + KERNEL_OOM)[0] == "DDP504"
    assert codes(KUBELET_OOM)[0] == "DDP504"


# --- DDP203: a name lookup that failed for a download is not the master's --------------------
HF_DOWNLOAD = (  # huggingface/transformers#12575, PKU-YuanGroup/Chat-UniVi#12: no DNS for hf.co
    "    for res in _socket.getaddrinfo(host, port, family, type, proto, flags):\n"
    "socket.gaierror: [Errno -3] Temporary failure in name resolution\n"
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443):"
    " Max retries exceeded with url: /bert-base-cased/resolve/main/config.json (Caused by "
    "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7ff9e60c6dd0>: Failed "
    "to establish a new connection: [Errno -3] Temporary failure in name resolution'))\n"
)
HF_RESOLVE = (  # yerfor/GeneFace#283: urllib3 2.x names the host it could not resolve
    "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='huggingface.co', port=443): "
    "Max retries exceeded with url: /facebook/hubert-large-ls960-ft/resolve/main/preprocessor_"
    'config.json (Caused by NameResolutionError("<urllib3.connection.HTTPSConnection object at '
    "0x78a62d8f0040>: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name "
    'resolution)"))\n'
)
MASTER_GAIERROR = (  # pytorch/pytorch#74824: the rendezvous's own lookup of the master
    "socket.gaierror: [Errno -2] Name or service not known\n"
)


def test_a_downloads_failed_lookup_is_not_the_master_address() -> None:
    assert "DDP203" not in codes(HF_DOWNLOAD)
    assert "DDP203" not in codes(HF_RESOLVE)


def test_a_bare_gaierror_without_a_download_stays_ddp203() -> None:
    assert codes(MASTER_GAIERROR) == ["DDP203"]
    assert scan_text(MASTER_GAIERROR)[0].severity == Severity.ERROR


# --- DDP203 vs DDP231: an IPv6 lookup with no address records, then the client's timeout -----
def ipv6_lookup(host: str, error: str) -> str:  # allenai/FineGrainedRLHF#12's c10d lines
    return (
        f"[W socket.cpp:601] [c10d] The IPv6 network addresses of ({host}, 52533) cannot be "
        f"retrieved (gai error: {error}).\n"
    )


def client_timeout(host: str) -> str:
    return (
        "[E socket.cpp:860] [c10d] The client socket has timed out after 1800s while trying to "
        f"connect to ({host}, 52533).\n"
    )


NODATA = "-5 - No address associated with hostname"
NONAME = "-2 - Name or service not known"


def test_no_address_records_then_the_clients_timeout_is_the_unresolvable_name() -> None:
    found = codes(ipv6_lookup("cernet2.net", NODATA) * 3 + client_timeout("cernet2.net"))
    assert found[0] == "DDP203" and "DDP231" in found


def test_the_same_lookup_alone_or_for_another_host_names_no_unresolvable_master() -> None:
    assert "DDP203" not in codes(ipv6_lookup("cernet2.net", NODATA))
    assert codes(ipv6_lookup("cernet2.net", NODATA) + client_timeout("node-0"))[0] == "DDP231"


def test_no_such_ipv6_name_then_a_timeout_stays_the_timeout() -> None:
    # EAI_NONAME on the IPv6 lookup is the resolver's common answer for a name it knows only
    # by IPv4 (localhost, /etc/hosts entries): the timeout may be a store that never came up
    assert codes(ipv6_lookup("node-0", NONAME) + client_timeout("node-0"))[0] == "DDP231"


# --- DDP206 / DDP210 / DDP234: an HTTP client's connection is not the process group's --------
HTTP_REFUSED = (  # drprojects/superpoint_transformer#7: urllib3 retrying a telemetry upload
    "[2023-07-10 19:24:01,331][urllib3.connectionpool][WARNING] - Retrying (Retry(total=2, "
    "connect=None, read=None, redirect=None, status=None)) after connection broken by "
    "'NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f884af8d9d0>: Failed "
    "to establish a new connection: [Errno 111] Connection refused')': /api/4504800232407040/"
    "envelope/\n"
)
WANDB_SERVICE = (  # wandb/wandb#7329: wandb's service process was not up
    '    s.connect(("localhost", port))\n'
    "ConnectionRefusedError: [Errno 111] Connection refused\n"
    "wandb.sdk.wandb_manager.ManagerConnectionRefusedError: Connection to wandb service failed "
    "since the process is not available.\n"
)
HTTP_RESET = (  # requests around urllib3's ProtocolError (a download cut off)
    "requests.exceptions.ConnectionError: ('Connection aborted.', ConnectionResetError(104, "
    "'Connection reset by peer'))\n"
)
HTTP_UNREACHABLE = (  # no route to the hub from a compute node
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): "
    "Max retries exceeded with url: / (Caused by NewConnectionError('<urllib3.connection."
    "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 101] Network "
    "is unreachable'))\n"
)
TORCH_REFUSED = "RuntimeError: Connection refused\n"  # pytorch/pytorch#36096: the store's
TORCH_RESET = "[rank1]: RuntimeError: Connection reset by peer\n"  # gloo's pair


def test_an_http_clients_connection_errors_name_no_rendezvous_code() -> None:
    for text in (HTTP_REFUSED, WANDB_SERVICE, HTTP_RESET, HTTP_UNREACHABLE):
        assert codes(text) == [], text


def test_the_stores_and_the_backends_own_connection_errors_stay() -> None:
    assert codes(TORCH_REFUSED) == ["DDP206"]
    assert codes(TORCH_RESET) == ["DDP234"]
    assert codes(TORCH_REFUSED + HTTP_REFUSED) == ["DDP206"]  # the store's line is its own


# --- DDP201: another server's port, not the rendezvous' ------------------------------------
ZMQ_BIND = (  # vllm-project/vllm#7196: vLLM's ZeroMQ socket
    "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5570')\n"
)
UVICORN_BIND = (  # vllm-project/vllm#7514: the API server's uvicorn
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
    "address already in use\n"
)
STORE_BIND = (  # pytorch/pytorch#85604: the store's
    "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - "
    "Address already in use).\n"
)


def test_another_servers_bind_failure_is_not_the_rendezvous_port() -> None:
    assert codes(ZMQ_BIND) == []
    assert codes(UVICORN_BIND) == []
    assert codes(STORE_BIND) == ["DDP201"]


# --- DDP206: a refusal of the process group's own connections -------------------------------
OTHER_SERVICES_REFUSED = (  # clients of other services beside a run
    # redis-py (redis/redis-py#1466)
    "redis.exceptions.ConnectionError: Error 111 connecting to localhost:6379. Connection "
    "refused.\n",
    # a gRPC channel to Ray's GCS (secretflow/secretflow#403)
    '        details = "failed to connect to all addresses; last error: UNKNOWN: Failed to '
    'connect to remote host: Connection refused"\n',
    # httpx, e.g. a client of an Ollama or Airflow server (as those projects' notes quote it)
    "httpx.ConnectError: [Errno 111] Connection refused\n",
    # redis-py's own traceback before its error: Python's exception (redis/redis-py#2744)
    "ConnectionRefusedError: [Errno 111] Connection refused\n",
)
PROCESS_GROUP_REFUSED = (
    "[rank1]: RuntimeError: Connection refused\n",  # torch 1.x store (pytorch/pytorch#36096)
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
    "[10.0.0.1]:54921: Connection refused\n",  # gloo (pytorch/pytorch#47325)
    "node-1:1234:1300 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "10.0.0.1<45321> failed : Connection refused\n",  # NCCL src/misc/socket.cc
)


def test_another_services_refusal_is_not_the_process_groups() -> None:
    for text in OTHER_SERVICES_REFUSED:
        assert "DDP206" not in codes(text), text


def test_the_process_groups_own_refusals_are_ddp206() -> None:
    for text in PROCESS_GROUP_REFUSED:
        assert codes(text)[0] == "DDP206", text


# --- DDP234: a reset of the process group's connections, not Python's own ------------------
DATALOADER_RESET = (  # quark0/darts#95: multiprocessing's fd sharing with a DataLoader worker
    '  File "/opt/conda/lib/python3.6/multiprocessing/reduction.py", line 153, in recvfds\n'
    "    msg, ancdata, flags, addr = sock.recvmsg(1, socket.CMSG_LEN(bytes_size))\n"
    "ConnectionResetError: [Errno 104] Connection reset by peer\n"
)
GLOO_RESET = (  # facebookincubator/gloo tcp/pair.cc
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error "
    "[10.0.0.2]:5321: Connection reset by peer\n"
)


def test_pythons_own_connection_reset_is_not_a_peer_rank() -> None:
    assert "DDP234" not in codes(DATALOADER_RESET)
    assert codes(GLOO_RESET) == ["DDP234"]


# --- DDP507 after a failure: the stop is the consequence -------------------------------------
WATCHDOG_TIMEOUT = (  # torch 2.x ProcessGroupNCCL's watchdog (pytorch/pytorch ProcessGroupNCCL.cpp)
    "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600012 milliseconds before timing out.\n"
)


def test_a_time_limit_reached_after_a_timeout_follows_the_timeout() -> None:
    assert codes(WATCHDOG_TIMEOUT + TIME_LIMIT)[:2] == ["DDP302", "DDP507"]


def test_failures_after_the_stop_stay_its_consequences() -> None:
    assert codes(TIME_LIMIT + WATCHDOG_TIMEOUT)[0] == "DDP507"
    assert codes(TIME_LIMIT + AFTER_SIGTERM)[0] == "DDP507"


# --- DDP206 after a store nobody could host: the refusal is the consequence ------------------
CLIENT_REFUSED = "[rank1]: RuntimeError: Connection refused\n"  # pytorch/pytorch#36096's form
MASTER_EACCES = (  # KimMeen/Time-LLM#158: port 98 needs root, rank 0 cannot listen
    "[rank0]: [W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:98 "
    "(errno: 13 - Permission denied).\n"
)


def test_a_refusal_printed_before_the_masters_bind_failure_follows_it() -> None:
    assert codes(CLIENT_REFUSED + MASTER_EACCES) == ["DDP230", "DDP206"]
    assert codes(CLIENT_REFUSED + STORE_BIND) == ["DDP201", "DDP206"]


def test_a_bare_gaierror_claims_no_host_name() -> None:
    finding = scan_text(MASTER_GAIERROR)[0]
    assert finding.evidence["from_log_facts"]["host"] is None
    assert "the master host name" not in finding.message  # no placeholder given as a name
