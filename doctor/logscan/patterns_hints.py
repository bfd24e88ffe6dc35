"""Lines that are not problems by themselves but change what another finding means.

A hint is read on every line that carries one (also a line that matched a pattern: tqdm's
carriage returns put a progress bar and the watchdog's error on one line) and reported only
through inference.py.
"""

from __future__ import annotations

from ddp_doctor.logscan.hostnames import HTTP_CLIENT_WORDS
from ddp_doctor.logscan.pattern import Pattern, Role

RANK0_WORK = "rank0-work"
SAME_LOCAL_RANK_ARGUMENT = "same-local-rank-argument"
DATAPARALLEL = "dataparallel"
NON_SCALAR_BACKWARD = "non-scalar-backward"
BARRIER_COMPLETED = "barrier-completed"
SHM_NOT_WRITABLE = "shm-not-writable"
HTTP_CLIENT = "http-client"

HINT_PATTERNS: tuple[Pattern, ...] = (
    # Work one rank does alone while the others wait in a barrier or their first collective:
    # Hugging Face examples' "Running tokenizer on dataset" and "Grouping texts in chunks of
    # 1024", datasets' "Map (num_proc=8):", axolotl's "Tokenizing Prompts (num_proc=64)", trl's
    # main_process_first tokenisation
    # (huggingface/trl#1519, hiyouga/LlamaFactory#2424), a checkpoint save, and wandb's login
    # prompt waiting for input on rank 0 (its "(1) Create a W&B account" menu).
    Pattern(
        "",
        RANK0_WORK,
        (
            "tokenizer on dataset",
            "Tokenizing",
            "texts in chunks",
            "(num_proc=",
            "Generating train split",
            "Preprocessing",
            "Saving model checkpoint",
            "Create a W&B account",
            "wandb: Enter your choice",
        ),
        "",
        fields={
            "work": (r"([A-Z][\w &()=#,.-]{2,60}?)(?::\s+\d+%|:?\s*\d+%\|)", r"(wandb: .{0,60})"),
            "elapsed": (r"\|\s*[\d.]+[kMG]?/[\d.]+[kMG]?\s*\[(\d+(?::\d\d){1,2})<",),
        },
        role=Role.HINT,
    ),
    # A launch command that gives every process the same rank (pytorch/pytorch#85604):
    #   torchrun --standalone --nnodes=1 --nproc_per_node=2 train.py --local_rank 0
    # or several processes started by hand (a shell trace: "+ python train.py --local_rank 0").
    # torch.distributed.launch's own "--local_rank=0" for rank 0 comes before the script name.
    Pattern(
        "",
        SAME_LOCAL_RANK_ARGUMENT,
        ("--local_rank 0", "--local_rank=0", "--local-rank 0", "--local-rank=0"),
        "",
        fields={
            "launcher": (r"(torchrun|torch\.distributed\.(?:launch|run)|nproc[_-]per[_-]node)",)
        },
        confirm=r"\.py\b.*--local[_-]rank[ =]0\b",
        role=Role.HINT,
    ),
    # A traceback through nn.DataParallel: its device errors have a DataParallel fix.
    Pattern(
        "",
        DATAPARALLEL,
        ("parallel/data_parallel.py", "parallel\\data_parallel.py", "parallel_apply.py"),
        "",
        role=Role.HINT,
    ),
    # backward() on the vector DataParallel gathered (DDP125 then failed the run):
    #   RuntimeError: grad can be implicitly created only for scalar outputs
    Pattern(
        "",
        NON_SCALAR_BACKWARD,
        ("grad can be implicitly created only for scalar outputs",),
        "",
        role=Role.HINT,
    ),
    # The store barrier's late ranks arrived after all (1.12 - 1.13, INFO):
    #   Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 8 nodes.
    Pattern("", BARRIER_COMPLETED, ("Completed store-based barrier",), "", role=Role.HINT),
    # /dev/shm exists but is not writable (pytorch/pytorch#37004): NCCL's "Error while creating
    # shared memory segment" that follows is then not about its size (DDP008).
    #   include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied
    Pattern(
        "",
        SHM_NOT_WRITABLE,
        ("shm_open failed",),
        "",
        confirm=r"Permission denied|Read-only file system",
        role=Role.HINT,
    ),
    # An HTTP client's (or wandb's service socket's) failed connection: a download or a web
    # service, not the process group (inference.py's _an_http_clients_errors; hostnames.py)
    Pattern("", HTTP_CLIENT, HTTP_CLIENT_WORDS, "", role=Role.HINT),
)
