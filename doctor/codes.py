"""The code table: every code ddp-doctor can report, once, with its name and severity, where
it is judged, and the module that documents it (and holds its check, for facts and script).

This table is the single source of codes: `rules`, the README's rule table, --select/--ignore
and the registry's lazy loading read it; `explain` imports only the one module it names.
Judged:
  facts       a check function over the probes' facts (`run`, `diagnose`)
  script      a check function over a parsed script (`check`)
  log         found only in texts by the log pattern table (`logs`, the job's own output)
  job-output  decided from the job's output after the facts rules (`run`, `diagnose`)
  doctor      raised by the doctor's own machinery (a rule that crashed, a file it cannot read)
A new code goes here first, in the free numbers of its block (the catalogue's blocks: DDP0xx
install and devices, DDP1xx scripts, DDP2xx rendezvous and network, DDP3xx collectives,
DDP4xx wrapping and memory, DDP5xx log texts, DDP6xx the user's run, as traced, DDP7xx: a
running job, as attached, DDP9xx the doctor itself).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.model import Severity

JUDGED = ("facts", "script", "log", "job-output", "doctor")
ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


@dataclass(frozen=True)
class Code:
    code: str
    name: str  # describes the problem, not the fix
    severity: Severity  # the default; a finding may raise or lower it
    judged: str  # one of JUDGED
    module: str  # below ddp_doctor: documents the code (and holds its check)
    summary: str  # one line: what it finds


# fmt: off
CODES: tuple[Code, ...] = (
    Code("DDP001", "torch-unusable", ERROR, "facts", "rules.install", "torch is missing or fails to import in the Python that launches training."),
    Code("DDP002", "cpu-only-torch-on-gpu-host", ERROR, "facts", "rules.install", "A CPU-only torch is installed on a machine with NVIDIA GPUs."),
    Code("DDP003", "driver-too-old", ERROR, "facts", "rules.install", "The NVIDIA driver is older than the CUDA runtime torch was built with."),
    Code("DDP004", "gpu-arch-unsupported", ERROR, "facts", "rules.install", "The GPU's compute capability is not in the torch build's architecture list."),
    Code("DDP005", "nccl-unavailable", ERROR, "facts", "rules.install", "This torch build has no NCCL, so the nccl backend cannot be used."),
    Code("DDP006", "windows-libuv-store", WARNING, "facts", "rules.install", "On Windows, torch 2.4+ asks for a libuv TCPStore that Windows wheels may lack."),
    Code("DDP007", "windows-gloo-limits", INFO, "facts", "rules.install", "Windows has only gloo, which lacks several collectives and GPU transports."),
    Code("DDP008", "dev-shm-too-small", WARNING, "facts", "rules.install", "/dev/shm is smaller than 1 GiB."),
    Code("DDP009", "deprecated-nccl-env", WARNING, "facts", "rules.install", "An NCCL_* variable is set that torch has renamed to TORCH_NCCL_*."),
    Code("DDP010", "jupyter-launch", WARNING, "facts", "rules.install", "Distributed training started from a Jupyter notebook kernel."),
    Code("DDP011", "launch-env-invalid", WARNING, "facts", "rules.environment", "RANK, WORLD_SIZE, LOCAL_RANK or MASTER_PORT in the environment are malformed."),
    Code("DDP012", "python-unusable", ERROR, "facts", "rules.environment", "The Python that trains does not run, hangs, or is too old for the doctor's job."),
    Code("DDP020", "cuda-visible-devices-invalid", ERROR, "facts", "rules.devices", "CUDA_VISIBLE_DEVICES is malformed or names a GPU that does not exist."),
    Code("DDP021", "device-count-mismatch", ERROR, "facts", "rules.devices", "NVML, CUDA_VISIBLE_DEVICES and torch.cuda.device_count() disagree."),
    Code("DDP022", "device-order-not-pci", WARNING, "facts", "rules.devices", "Different GPU models on one machine, and CUDA_DEVICE_ORDER is not PCI_BUS_ID."),
    Code("DDP023", "mig-devices", WARNING, "facts", "rules.devices", "MIG is enabled, or CUDA_VISIBLE_DEVICES names MIG slices."),
    Code("DDP024", "exclusive-compute-mode", WARNING, "facts", "rules.devices", "A GPU is in exclusive-process or prohibited compute mode."),
    Code("DDP025", "ecc-errors", ERROR, "facts", "rules.devices", "A GPU reports uncorrectable ECC errors since the driver loaded."),
    Code("DDP026", "gpu-memory-taken", WARNING, "facts", "rules.devices", "Other processes already hold much of a GPU's memory."),
    Code("DDP027", "more-ranks-than-gpus", ERROR, "facts", "rules.devices", "More ranks per node are asked for than GPUs are visible."),
    Code("DDP028", "gpu-required-missing", ERROR, "facts", "rules.devices", "--require-gpu was given and no usable GPU was found."),
    Code("DDP029", "container-without-gpus", WARNING, "facts", "rules.container", "A container with a CUDA build of torch was started without the host's GPUs."),
    Code("DDP101", "data-parallel-used", WARNING, "script", "script.rules.wrapping", "nn.DataParallel is used: one process drives every GPU and GPU 0 gathers everything."),
    Code("DDP102", "launch-module-deprecated", WARNING, "script", "script.rules.launch", "The deprecated `python -m torch.distributed.launch` starts the job."),
    Code("DDP103", "local-rank-argparse-only", WARNING, "script", "script.rules.launch", "Only `--local_rank` is declared: newer launchers pass `--local-rank` and argparse fails."),
    Code("DDP104", "local-rank-not-from-env", ERROR, "script", "script.rules.launch", "The GPU index comes from an argparse --local_rank that torchrun never passes."),
    Code("DDP105", "hardcoded-rank-or-world-size", ERROR, "script", "script.rules.process_group", "init_process_group gets a literal rank= or world_size=."),
    Code("DDP106", "nccl-without-fallback", INFO, "script", "script.rules.process_group", "backend=\"nccl\" is hard-coded with no check that NCCL is available."),
    Code("DDP107", "set-device-missing", WARNING, "script", "script.rules.devices", "No torch.cuda.set_device(local_rank) before init_process_group in a CUDA script."),
    Code("DDP108", "ddp-device-ids-wrong", ERROR, "script", "script.rules.wrapping", "device_ids is hard-coded, lists several GPUs, or disagrees with output_device."),
    Code("DDP109", "model-not-on-device", ERROR, "script", "script.rules.wrapping", "The model is wrapped in DDP, or run by DataParallel, while its parameters are still on the CPU."),
    Code("DDP110", "visible-devices-set-late", WARNING, "script", "script.rules.devices", "os.environ[\"CUDA_VISIBLE_DEVICES\"] is assigned after torch is imported or CUDA is used."),
    Code("DDP111", "distributed-sampler-missing", ERROR, "script", "script.rules.data", "A DDP script's training DataLoader has no sampler: every rank trains on all the data."),
    Code("DDP112", "sampler-shuffle-conflict", ERROR, "script", "script.rules.data", "DataLoader gets both shuffle=True and a sampler: it raises at construction."),
    Code("DDP113", "set-epoch-missing", ERROR, "script", "script.rules.data", "A shuffling DistributedSampler never gets set_epoch(epoch): same order every epoch."),
    Code("DDP114", "distributed-sampler-for-eval", WARNING, "script", "script.rules.data", "A DistributedSampler feeds evaluation: padded or dropped samples skew the metrics."),
    Code("DDP115", "syncbn-after-ddp", ERROR, "script", "script.rules.wrapping", "convert_sync_batchnorm runs after the DDP wrap."),
    Code("DDP116", "save-on-every-rank", ERROR, "script", "script.rules.ranks", "torch.save runs on every rank: all ranks write the same checkpoint file at once."),
    Code("DDP117", "state-dict-module-prefix", WARNING, "script", "script.rules.ranks", "The DDP wrapper's state_dict() is saved: every key starts with \"module.\"."),
    Code("DDP118", "load-without-map-location", WARNING, "script", "script.rules.loading", "torch.load without map_location in a multi-GPU script: every rank loads onto cuda:0."),
    Code("DDP119", "log-on-every-rank", INFO, "script", "script.rules.ranks", "Printing, logging, progress bars or experiment tracking run on every rank."),
    Code("DDP120", "collective-under-rank-guard", ERROR, "script", "script.rules.ranks", "A collective runs inside `if rank == 0:` (or another rank guard): the job hangs."),
    Code("DDP121", "destroy-process-group-missing", INFO, "script", "script.rules.process_group", "init_process_group is never matched by destroy_process_group."),
    Code("DDP122", "same-seed-every-rank", INFO, "script", "script.rules.seeds", "Every rank seeds its random generators with the same constant."),
    Code("DDP123", "spawn-without-main-guard", ERROR, "script", "script.rules.launch", "mp.spawn runs from module-level code with no `if __name__ == \"__main__\":` guard."),
    Code("DDP124", "deprecated-nccl-env-in-code", WARNING, "script", "script.rules.nccl_env", "Code (or a launch script) sets an NCCL_* variable that torch renamed to TORCH_NCCL_*."),
    Code("DDP125", "dataparallel-loss-not-reduced", WARNING, "script", "script.rules.training", "A loss computed inside a DataParallel model's forward is back-propagated unreduced."),
    Code("DDP126", "reentrant-checkpoint-with-ddp", WARNING, "script", "script.rules.training", "Activation checkpointing uses the reentrant variant under DDP."),
    Code("DDP127", "indexless-cuda-placement", ERROR, "script", "script.rules.devices", ".cuda() or \"cuda\" with no index (or a literal cuda:0) in a one-process-per-GPU script."),
    Code("DDP128", "dataparallel-input-off-first-device", ERROR, "script", "script.rules.training", "In a DataParallel script, inputs or targets are moved to a GPU other than device_ids[0]."),
    Code("DDP129", "optimizer-before-fsdp-wrap", ERROR, "script", "script.rules.fsdp", "The optimizer is built over the model's parameters before FSDP or fully_shard replaces them."),
    Code("DDP130", "fsdp-module-on-cpu-without-device-id", ERROR, "script", "script.rules.fsdp", "FSDP1 wraps a CPU module with no device_id and no set_device: every rank initialises on cuda:0."),
    Code("DDP131", "rank0-weights-not-broadcast", ERROR, "script", "script.rules.fsdp", "Weights are loaded on rank 0 only, and FSDP neither syncs module states nor broadcasts them."),
    Code("DDP201", "master-port-in-use", ERROR, "facts", "rules.rendezvous", "The master port is already taken by another listener."),
    Code("DDP202", "rendezvous-timeout", ERROR, "facts", "rules.rendezvous", "A rank never joined the process group, so the others timed out waiting."),
    Code("DDP203", "master-addr-unresolvable", ERROR, "facts", "rules.rendezvous", "The master address does not resolve to an IP address."),
    Code("DDP204", "hostname-is-loopback", WARNING, "facts", "rules.rendezvous", "This host's name resolves to a loopback address, and the run is multi-node."),
    Code("DDP205", "wrong-network-interface", ERROR, "facts", "rules.rendezvous", "NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME names no interface of this host."),
    Code("DDP206", "connection-refused", ERROR, "log", "rules.rendezvous", "Ranks could not connect: \"Connection refused\" from the store or the backend."),
    Code("DDP207", "world-size-mismatch", ERROR, "facts", "rules.rendezvous", "The ranks disagree about the world size, or it is not nnodes x nproc-per-node."),
    Code("DDP208", "master-addr-not-local", ERROR, "facts", "rules.rendezvous", "The master address is not an address of this machine, so the job cannot listen on it."),
    Code("DDP209", "no-interface-up", ERROR, "facts", "rules.network", "No network interface is up, not even loopback: no two processes can connect."),
    Code("DDP210", "network-unreachable", ERROR, "facts", "rules.network", "There is no route to the master address: connecting fails with \"Network is unreachable\"."),
    Code("DDP211", "master-unreachable", ERROR, "facts", "rules.preflight", "Another node could not connect to the master's port: refused, timed out or no route."),
    Code("DDP212", "hostname-on-other-interface", WARNING, "facts", "rules.preflight", "This host's name resolves to an address on another interface than the one that reaches the master."),
    Code("DDP213", "route-over-virtual-interface", WARNING, "facts", "rules.preflight", "The master is reached through a docker, veth or bridge interface, and no *_SOCKET_IFNAME is set."),
    Code("DDP214", "master-addr-loopback", ERROR, "facts", "rules.preflight", "The master address is a loopback address in a multi-node run."),
    Code("DDP215", "nccl-interface-not-route", WARNING, "facts", "rules.preflight", "NCCL would pick another interface than the one that reaches the master."),
    Code("DDP216", "cluster-verdict-missing", ERROR, "facts", "rules.cluster", "This node's ranks ran, but node 0's verdict on the cluster never came back."),
    Code("DDP217", "cluster-problems", WARNING, "facts", "rules.cluster", "Node 0's report on the whole cluster has findings; this node's report shows only its own part."),
    Code("DDP218", "node-facts-missing", WARNING, "facts", "rules.cluster", "Facts of some nodes never reached node 0, so its cluster report lacks them."),
    Code("DDP219", "bad-nodes-isolated", ERROR, "facts", "rules.isolation", "Pair tests of --isolate found nodes that fail beside nodes known good: cannot connect, wrong result or slow."),
    Code("DDP220", "nodes-unsettled", WARNING, "facts", "rules.isolation", "Pair tests of --isolate left suspects that no round could tell apart, or a pair that could not connect or summed wrong though both nodes passed elsewhere."),
    Code("DDP221", "inter-node-rung-failed", WARNING, "facts", "rules.ladder", "On the ladder of layers between nodes, a NCCL rung failed: sockets instead of the fabric, no GPUDirect RDMA, or no NVLS in an NVSwitch fabric."),
    Code("DDP222", "pairs-under-link-band", WARNING, "facts", "rules.isolation", "Pair tests of --isolate ran far under the band their nodes' links state (interface speed, IB/RoCE rate), even where the median is as low."),
    Code("DDP230", "master-port-privileged", ERROR, "facts", "rules.rendezvous", "The master port is below 1024, so binding it needs root and was refused."),
    Code("DDP231", "store-connect-timeout", ERROR, "log", "logscan.codes_network", "A rank's connection to the rendezvous store timed out (nothing answered, unlike a refusal)."),
    Code("DDP232", "rank0-work-outlasts-timeout", ERROR, "log", "logscan.codes_network", "Rank 0 did long work alone while the other ranks waited for it past their timeout."),
    Code("DDP233", "same-rank-on-every-process", ERROR, "log", "logscan.codes_network", "Every process was given the same rank, so each tried to host the rendezvous store."),
    Code("DDP234", "peer-exited-early", ERROR, "log", "logscan.codes_network", "A rank exited while its peers still expected it in a collective."),
    Code("DDP235", "master-port-reserved", ERROR, "log", "logscan.codes_network", "Windows refused the master port (error 10013): it lies in a range the system reserves."),
    Code("DDP236", "gpu-xid-fault", ERROR, "log", "logscan.codes_gpu", "The NVIDIA driver logged an Xid of a GPU hardware or driver fault: fallen off the bus, ECC, row remapping, GSP, NVLink."),
    Code("DDP301", "allreduce-wrong-result", ERROR, "facts", "rules.collectives", "A collective returned wrong values: elements differ from the exact expected result."),
    Code("DDP302", "collective-hang", ERROR, "facts", "rules.collectives", "A collective never completed: ranks waited in it until the timeout."),
    Code("DDP303", "low-bus-bandwidth", WARNING, "facts", "rules.bandwidth", "Bus bandwidth at the largest size is under what this topology should reach, or under --min-busbw."),
    Code("DDP304", "mismatched-collectives", ERROR, "log", "rules.collectives", "Ranks called different collectives (or shapes) at the same point."),
    Code("DDP305", "duplicate-gpu", ERROR, "facts", "rules.collectives", "Two or more ranks use the same GPU."),
    Code("DDP306", "version-skew", ERROR, "facts", "rules.collectives", "Ranks run different torch, CUDA, NCCL or driver versions."),
    Code("DDP307", "rank-crashed", ERROR, "facts", "rules.collectives", "A rank died: an exception of its own, an exit code, or a signal."),
    Code("DDP308", "job-failed", ERROR, "job-output", "rules.job_output", "The doctor's job failed in a way no other rule explains."),
    Code("DDP309", "env-differs-between-nodes", WARNING, "facts", "rules.cluster", "NCCL_*, TORCH_NCCL_*, GLOO_* or CUDA_* variables differ between nodes."),
    Code("DDP310", "nccl-library-loaded-twice", ERROR, "facts", "rules.cluster", "Two different libnccl files are mapped into one rank's process."),
    Code("DDP311", "mixed-gpu-models", WARNING, "facts", "rules.cluster", "The job's ranks run on different GPU models."),
    Code("DDP320", "pcie-link-degraded", WARNING, "facts", "rules.topology", "A GPU's PCIe link ran below its maximum generation or width under load."),
    Code("DDP321", "nvlink-down", WARNING, "facts", "rules.topology", "An NVLink is down, or a GPU has fewer active NVLinks than the others of its model."),
    Code("DDP322", "p2p-blocked-behind-switch", WARNING, "facts", "rules.topology", "GPUs under one PCIe switch cannot use P2P: ACS, the IOMMU or a VM is in the way."),
    Code("DDP323", "rank-cpu-far-from-gpu", WARNING, "facts", "rules.topology", "A rank is bound to CPUs far from its GPU (another NUMA node or socket)."),
    Code("DDP324", "transport-disabled-by-env", WARNING, "facts", "rules.bandwidth", "An NCCL variable that turns a transport, algorithm or protocol off is set."),
    Code("DDP325", "nvswitch-fabric-not-ready", ERROR, "facts", "rules.topology", "A GPU has not joined the NVSwitch fabric: Fabric Manager is not running or failed."),
    Code("DDP401", "dataparallel-gpu0-imbalance", WARNING, "facts", "rules.dataparallel", "nn.DataParallel loads the first GPU far more than a healthy run does."),
    Code("DDP402", "ddp-gradients-not-synced", ERROR, "facts", "rules.memory", "After DDP's backward, gradients or parameters differ between ranks."),
    Code("DDP403", "stray-context-on-gpu0", ERROR, "facts", "rules.memory", "Ranks other than rank 0 hold memory on rank 0's GPU."),
    Code("DDP404", "per-rank-memory-imbalance", WARNING, "facts", "rules.memory", "One rank's peak GPU memory is far above the others'."),
    Code("DDP405", "dp-output-device-mismatch", ERROR, "facts", "rules.dataparallel", "DataParallel's output or model is not on the device the wrapper was told."),
    Code("DDP406", "dataparallel-gpu-unused", WARNING, "facts", "rules.dataparallel", "A visible GPU took no part in nn.DataParallel's steps."),
    Code("DDP501", "ddp-unused-parameters", ERROR, "log", "logscan.codes", "Some parameters got no gradient in an iteration, and DDP was not told to expect that."),
    Code("DDP502", "param-marked-ready-twice", ERROR, "log", "logscan.codes", "A parameter's gradient hook fired twice in one backward pass."),
    Code("DDP503", "nccl-warning", WARNING, "log", "logscan.codes", "NCCL printed WARN lines that no more specific pattern explains."),
    Code("DDP504", "host-out-of-memory", ERROR, "log", "logscan.codes", "The host ran out of RAM and the kernel (or the SLURM cgroup) killed a process."),
    Code("DDP505", "cuda-out-of-memory", ERROR, "log", "logscan.codes", "A GPU ran out of memory."),
    Code("DDP506", "cuda-device-assert", ERROR, "log", "logscan.codes", "A CUDA kernel's assertion failed on the device."),
    Code("DDP507", "job-cancelled", ERROR, "log", "logscan.codes", "The job was stopped from outside: a scheduler time limit, a preemption, a cancel."),
    Code("DDP508", "nccl-system-error", ERROR, "log", "logscan.codes", "NCCL failed a system call (\"unhandled system error\") and the log does not say which."),
    Code("DDP509", "tensors-on-different-devices", ERROR, "log", "logscan.codes", "One operation got tensors on different devices: a model, an input or a target was not moved."),
    Code("DDP510", "dataparallel-replica-error", ERROR, "log", "logscan.codes", "A nn.DataParallel replica raised an error; the replica's own error is the cause."),
    Code("DDP511", "flight-recorder-unreadable", WARNING, "log", "flightrec.codes", "A flight-recorder dump could not be read, so its rank is missing from the comparison."),
    Code("DDP512", "cuda-fault-on-rank", ERROR, "log", "logscan.codes_fabric", "A CUDA kernel faulted on a rank (illegal memory access, launch failure); NCCL's errors follow from it."),
    Code("DDP513", "watchdog-stuck", ERROR, "log", "logscan.codes_fabric", "ProcessGroupNCCL's heartbeat monitor found its watchdog stuck in a NCCL/CUDA call and killed the rank."),
    Code("DDP514", "ib-transport-error", ERROR, "log", "logscan.codes_fabric", "InfiniBand/RoCE transport errors: failed work completions, a queue pair that would not connect, memory registration."),
    Code("DDP515", "efa-libfabric-error", ERROR, "log", "logscan.codes_fabric", "AWS EFA / libfabric (aws-ofi-nccl) errors: no provider, endpoints or address vectors that fail, failed requests."),
    Code("DDP601", "monitor-not-loaded", WARNING, "facts", "rules.traced_run", "Ranks of the traced run never loaded the trace monitor, so nothing of them was seen."),
    Code("DDP602", "no-process-group", WARNING, "facts", "rules.traced_run", "torchrun started several ranks, but none called init_process_group: each trained alone."),
    Code("DDP603", "sampler-shard-mismatch", ERROR, "facts", "rules.traced_run", "A DistributedSampler's num_replicas or rank differs from the process group's at runtime."),
    Code("DDP701", "stacks-unreadable", WARNING, "facts", "rules.attach", "py-spy could not read some ranks' stacks (ptrace refused, or py-spy missing): only /proc's view of them is given."),
    Code("DDP702", "stuck-outside-collectives", ERROR, "facts", "rules.attach", "No rank moved between the samples and none waits in a collective: the job is stuck in its own code, its data or the kernel."),
    Code("DDP703", "dataloader-worker-dead", ERROR, "facts", "rules.attach", "A rank's DataLoader worker (a child process of the rank) is dead or a zombie."),
    Code("DDP704", "ranks-wait-for-one", WARNING, "facts", "rules.attach", "The other ranks wait in collectives while one rank works or sleeps outside them: a straggler or a long rank-only task."),
    Code("DDP705", "nccl-ras-ranks-behind", ERROR, "facts", "rules.attach_sources", "NCCL's RAS reports ranks of a communicator missing (unresponsive or dead) or behind the others in collectives."),
    Code("DDP706", "job-progressing", INFO, "facts", "rules.attach", "The ranks moved between the samples and none is stuck: the job progresses, at the step rate shown where a step counter of its loop is visible."),
    Code("DDP901", "probe-crashed", WARNING, "facts", "rules.doctor_self", "A probe raised an unexpected error, so what it measures is missing from the report."),
    Code("DDP902", "probe-timed-out", WARNING, "facts", "rules.doctor_self", "A probe did not answer within its time limit and was abandoned."),
    Code("DDP903", "rule-crashed", WARNING, "doctor", "rules.doctor_self", "A rule raised an error while judging the facts, so its problem was not checked."),
    Code("DDP904", "probe-failed", WARNING, "facts", "rules.doctor_self", "A probe ran but could not measure, so the checks that need it were skipped."),
    Code("DDP905", "job-launch-failed", ERROR, "facts", "rules.doctor_self", "The doctor could not start its job: no usable temporary folder, or no process could be spawned."),
    Code("DDP906", "job-cut-by-timeout", ERROR, "facts", "rules.doctor_self", "--timeout ended the job while its ranks were still within their own time limits."),
    Code("DDP907", "log-over-limit", WARNING, "doctor", "rules.doctor_self", "The log (or folder) is bigger than `logs` reads (4 GiB of a file, 256 MiB of stdin, 10,000 files): only part of it was diagnosed."),
    Code("DDP908", "trace-run-unfinished", ERROR, "job-output", "rules.trace_outcome", "The traced run was stopped at its time limit, or failed, and no other finding names why."),
    Code("DDP910", "script-syntax-error", ERROR, "doctor", "script.rules.doctor", "A Python file does not parse, so no rule could check it."),
    Code("DDP911", "file-unreadable", WARNING, "doctor", "script.rules.doctor", "A path given to `check` could not be read as text, so it was skipped."),
)
# fmt: on

BY_CODE: dict[str, Code] = {entry.code: entry for entry in CODES}
BY_NAME: dict[str, Code] = {entry.name: entry for entry in CODES}
