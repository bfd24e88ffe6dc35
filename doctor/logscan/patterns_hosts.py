"""Log texts of the hosts and schedulers around a job, after patterns_cluster.py in the table:
NCCL's own words for known causes (DDP505, DDP304, DDP004), the memory killers of SLURM, the
kubelet, Ray, PBS and LSF (DDP504), a container killed with SIGKILL (DDP307), the kubelet's disk
evictions (DDP507) and busybox's resolver (DDP203).

Each wording was checked against its source (issue threads in the comments, owner/repo#number).
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern
from ddp_doctor.model import Remediation

HOST_PATTERNS: tuple[Pattern, ...] = (
    # NCCL's own words for a GPU allocation that failed: "include/alloc.h:48 NCCL WARN Cuda
    #   failure 'out of memory'" (NVIDIA/nccl#844), "enqueue.cc:43 NCCL WARN Cuda failure 'out of
    #   memory'" (NVIDIA/TensorRT-LLM#1670). With memory free it is NCCL's cuMem/NVLS buffers
    #   that failed (pytorch/pytorch#152302; THUDM/slime#669), hence the fix.
    Pattern(
        "DDP505",
        "cuda-out-of-memory",
        ("Cuda failure 'out of memory'",),
        "NCCL could not allocate GPU memory for its buffers ('Cuda failure out of memory')",
        fix=Remediation(
            "Leave NCCL room on each GPU: a smaller batch or model shard, no other process on "
            "the GPU (nvidia-smi), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
            "fragmentation. If the GPU had memory free, NCCL's own allocation path failed: "
            "retry with NCCL_CUMEM_ENABLE=0 (and NCCL_NVLS_ENABLE=0 on NVSwitch systems).",
            ("nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv",),
        ),
    ),
    # NCCL 2.4 - 2.6 (init.cc): "NCCL WARN Mismatched collective detected, please check your
    #   collective calls at and around rank 11" (NVIDIA/nccl#214, #296)
    Pattern(
        "DDP304",
        "mismatched-collectives",
        # NCCL 2.4's hang warning: "Your program may be hanging, this may be caused by a
        #   collective mismatch around rank 3." (enqueue.cc)
        ("Mismatched collective detected", "caused by a collective mismatch around rank"),
        "NCCL found ranks calling different collectives[ (at and around rank {rank})]",
        fields={"rank": (r"around rank (\d+)",)},
    ),
    # NCCL >= 2.24's RAS client (ncclras) report: "#0-0 (fa93daea854b060b) MISMATCH /
    #   Communicator ranks have different AllGather operation counts / 30 ranks have launched
    #   up to operation 640 / 2 ranks have launched up to operation 641" (NVIDIA/nccl#1911)
    Pattern(
        "DDP304",
        "mismatched-collectives",
        ("operation counts",),
        "NCCL's RAS report: the communicator's ranks launched different numbers of[ {op_type}] "
        "collectives",
        fields={"op_type": (r"ranks have different (\w+) operation counts",)},
        confirm=r"ranks have different \w+ operation counts",
    ),
    # NCCL enqueue.cc: "NCCL WARN Cuda failure 'named symbol not found'" when its kernels were
    #   not built for the GPU (NVCC_GENCODE without the GPU's sm_XX; NVIDIA/nccl#1372)
    Pattern(
        "DDP004",
        "gpu-arch-unsupported",
        ("named symbol not found",),
        "NCCL's kernels are missing for this GPU ('named symbol not found'): NCCL, or the "
        "library calling it, was built without the GPU's architecture",
        confirm=r"Cuda failure|cudaErrorSymbolNotFound|CUDA error",
    ),
    # SLURM >= 21.08: "Detected 1 oom_kill event in StepId=11300781.0. Some of the step tasks
    #   have been OOM Killed." (older: "oom-kill event(s)", patterns_training.py); the kubelet:
    #   "The node was low on resource: memory." (kubeflow/kubeflow#1261), "Reason: OOMKilled";
    #   Ray's memory monitor: "N Workers (tasks / actors) killed due to memory pressure (OOM)"
    #   (ray-project/ray#34695), and the advice that ends every one of its kill messages,
    #   "(raylet) Refer to the documentation on how to address the out of memory issue:
    #   https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html" (alone where
    #   the headline was cut: ray-project/ray#44574); Ray >= 2.2's "Memory on the node (IP: ...)
    #   where the task (...) was running was 21.91GB / 33.28GB (0.658192), which exceeds the
    #   memory usage threshold of 0.65. Ray killed this worker" (ray-project/ray#30312); Ray
    #   2.0 - 2.1's "(raylet) node_manager.cc:2966: System memory low at node with IP
    #   172.31.66.10. Used memory (54.90GB) / total capacity (57.60GB) (0.95307) exceeds
    #   threshold 0.95, killing latest task" (ray-project/ray#28774)
    Pattern(
        "DDP504",
        "host-out-of-memory",
        (
            "oom_kill event in StepId",
            "oom_kill events in StepId",
            "OOMKilled",
            "low on resource: memory",
            "condition: [MemoryPressure]",
            "killed due to memory pressure",
            "Task was killed due to the node running low on memory",
            "address the out of memory issue",
            "exceeds the memory usage threshold",
            "System memory low at node",
            "was OOM-killed",  # runc: "container init was OOM-killed (memory limit too low?)"
            # the kubelet's node events: "System OOM encountered, victim process: python, pid:
            #   4242" (pkg/kubelet/oom); node-problem-detector's reason "OOMKilling"
            "System OOM encountered",
            "OOMKilling",
            # slurmstepd's second sentence, often wrapped onto a line of its own: "Some of
            #   your processes may have been killed by the cgroup out-of-memory handler."
            #   (arttumiettinen/pi2#12); >= 21.08: "Some of the step tasks have been OOM
            #   Killed." (nextflow-io/nextflow#5932)
            "cgroup out-of-memory handler",
            "have been OOM Killed",
            # Ray's memory monitor (raylet node_manager.cc): "... which exceeds the memory
            #   usage threshold of 0.95. Ray killed this worker" (ray-project/ray#32730); its
            #   advice line alone: "Refer to the documentation on how to address the out of
            #   memory issue: https://docs.ray.io/..." (flwrlabs/flower#2157)
            "exceeds the memory usage threshold",
            "how to address the out of memory issue",
            # PBS's MOM: "=>> PBS: job killed: mem 132000000kb exceeded limit 131072000kb";
            #   LSF: "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit."
            "PBS: job killed: mem",
            "PBS: job killed: vmem",
            "PBS: job killed: pmem",
            "TERM_MEMLIMIT",
        ),
        "the host or container ran out of memory and was killed by {killer}",
        fields={
            "killer": (
                r"(slurmstepd|cgroup out-of-memory handler|have been OOM Killed)",
                r"(OOMKilled|OOMKilling|System OOM|low on resource: memory|MemoryPressure)",
                r"(runc|crun|containerd)\b",
                r"(raylet|memory pressure|running low on memory|Ray killed this worker|"
                r"out of memory issue)",
                r"(PBS|LSF)",
            )
        },
    ),
    # srun's words for a task the cgroup's OOM killer took: "srun: error: sdumont6156: task 0:
    #   Out Of Memory" (nextflow-io/nextflow#5932, beside slurmstepd's oom_kill line;
    #   FoNDUE-HTR/Documentation#5 alone)
    Pattern(
        "DDP504",
        "host-out-of-memory",
        ("srun: error: ",),
        "the host or container ran out of memory and was killed by slurmstepd (SLURM task "
        "{slurm_task}[ on {host}])",
        fields={"slurm_task": (r"task (\d+): ",), "host": (r"srun: error: ([\w.-]+): task",)},
        confirm=r"task \d+: Out Of Memory[\s|'\"`]*$",
    ),
    # A container or task runner reporting 128 + 9: "terminated with exit code (137)" (flyte),
    #   "Exit Code: 137" (kubectl describe), "exited with code 137" (docker): SIGKILL. It stays
    #   DDP307 unless the log holds memory evidence (DDP504; inference.py).
    Pattern(
        "DDP307",
        "rank-crashed",
        ("exit code (137)", "Exit Code:    137", "Exit Code: 137", "exited with code 137"),
        "a container or task was killed with SIGKILL (exit code 137)",
        fields={"exitcode": (r"(137)",)},
    ),
    # The kubelet evicting a pod for disk: "The node was low on resource: ephemeral-storage"
    #   (kubernetes/kubernetes#91600), "The node had condition: [DiskPressure]".
    Pattern(
        "DDP507",
        "job-cancelled",
        ("low on resource: ephemeral-storage", "condition: [DiskPressure]"),
        "the pod was evicted from outside (the node's disk ran low)",
    ),
    # busybox / musl resolvers: "nslookup: can't resolve 'master-0': Name does not resolve"
    #   (modelscope/ms-swift#6368); glibc's words are in patterns_network.py.
    Pattern(
        "DDP203",
        "master-addr-unresolvable",
        ("Name does not resolve",),
        "a host name does not resolve[: {host}]",
        fields={"host": (r"resolve '([^']+)'",)},
        unless=("'(null)'",),
    ),
)
