"""Which nodes take part in `run`, and how they meet: torchrun's own rendezvous, planned from
the flags torchrun takes, else from what SLURM or a Kubeflow PyTorchJob put in the environment.

Each value comes from the first place that has it: the flag, then torchrun's own variables
(PET_NNODES ... as Kubeflow sets them; MASTER_ADDR / MASTER_PORT), then SLURM (node list, node
id, a port derived from the job id). One node (no --nnodes, PET_NNODES=1, a one-node
allocation) is `None`: the single-machine job, which never joins a surrounding rendezvous.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddp_doctor.facts.cluster import C10D, STATIC, NodePlan
from ddp_doctor.readings.hostlist import HostListError, expand_hostlist

C10D_DEFAULT_PORT = 29400  # torchrun's default for an --rdzv-endpoint without a port
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 10000  # below Linux's ephemeral range
DEFAULT_RDZV_ID = "ddp-doctor"

Expand = Callable[[str], tuple[list[str], str]]  # node list -> (hosts, how it was expanded)


class PlanError(ValueError):
    """The flags and the environment do not make a plan: a usage error."""


@dataclass(frozen=True)
class LaunchFlags:
    """torchrun's launch flags, as given to `run` (None: not given)."""

    nnodes: str | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None


def expand_with_parser(nodelist: str) -> tuple[list[str], str]:
    return expand_hostlist(nodelist), "expanded by ddp-doctor"


class _Values:
    """Each value with the place it came from, first found wins."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.sources: dict[str, str] = {}

    def offer(self, key: str, value: object, source: str) -> None:
        if value is not None and key not in self.values:
            self.values[key] = value
            self.sources[key] = source

    def get(self, key: str) -> object:
        return self.values.get(key)


def plan_nodes(
    flags: LaunchFlags, environ: Mapping[str, str], expand: Expand = expand_with_parser
) -> NodePlan | None:
    values = _Values()
    values.offer("nnodes", flags.nnodes, "--nnodes")
    values.offer("node_rank", flags.node_rank, "--node-rank")
    values.offer("master_addr", flags.master_addr, "--master-addr")
    values.offer("master_port", flags.master_port, "--master-port")
    values.offer("rdzv_endpoint", flags.rdzv_endpoint, "--rdzv-endpoint")
    values.offer("rdzv_id", flags.rdzv_id, "--rdzv-id")
    _offer_torchrun_variables(values, environ)
    slurm = _offer_slurm(values, environ, expand)
    nnodes_text = values.get("nnodes")
    if nnodes_text is None:
        _refuse_orphans(flags)
        return None
    low, high = parse_nnodes(str(nnodes_text), values.sources["nnodes"])
    if high == 1:
        _refuse_orphans(flags)
        return None
    if slurm and values.sources["nnodes"].startswith("SLURM"):
        _refuse_second_task(environ)
    kind = C10D if values.get("rdzv_endpoint") else STATIC
    if kind == STATIC:
        return _static_plan(values, (low, high), environ)
    return _c10d_plan(values, (low, high), environ)


def parse_nnodes(text: str, source: str) -> tuple[int, int]:
    """'2' -> (2, 2); '1:4' -> (1, 4), as torchrun reads --nnodes."""
    parts = text.strip().split(":")
    if len(parts) > 2 or not all(part.strip().isdigit() for part in parts):
        raise PlanError(f"{source} {text!r} must be N or MIN:MAX (whole numbers)")
    low, high = int(parts[0]), int(parts[-1])
    if low < 1 or high < low:
        raise PlanError(f"{source} {text!r}: need 1 <= MIN <= MAX")
    return low, high


def _offer_torchrun_variables(values: _Values, environ: Mapping[str, str]) -> None:
    """torchrun reads PET_<OPTION> for each option; Kubeflow's PyTorchJob sets them, and
    MASTER_ADDR / MASTER_PORT, for each pod."""
    values.offer("nnodes", environ.get("PET_NNODES"), "PET_NNODES")
    values.offer("node_rank", _whole(environ, "PET_NODE_RANK"), "PET_NODE_RANK")
    backend = environ.get("PET_RDZV_BACKEND")
    if backend and backend not in (STATIC, C10D):
        raise PlanError(f"PET_RDZV_BACKEND={backend!r}: ddp-doctor rides on static and c10d")
    if backend != STATIC:
        values.offer("rdzv_endpoint", environ.get("PET_RDZV_ENDPOINT"), "PET_RDZV_ENDPOINT")
    values.offer("rdzv_id", environ.get("PET_RDZV_ID"), "PET_RDZV_ID")
    for variable in ("PET_MASTER_ADDR", "MASTER_ADDR"):
        values.offer("master_addr", environ.get(variable) or None, variable)
    for variable in ("PET_MASTER_PORT", "MASTER_PORT"):
        values.offer("master_port", _whole(environ, variable), variable)


def _offer_slurm(values: _Values, environ: Mapping[str, str], expand: Expand) -> bool:
    """Inside an allocation: nodes, this node's id, the first host as master, a port from the
    job id. The step's values (srun) come before the job's."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return False
    for variable in ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        values.offer("nnodes", environ.get(variable) or None, variable)
    values.offer("node_rank", _whole(environ, "SLURM_NODEID"), "SLURM_NODEID")
    for variable in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        nodelist = environ.get(variable)
        if nodelist:
            try:
                hosts, how = expand(nodelist)
            except HostListError as error:
                raise PlanError(f"{variable}: {error}") from None
            if hosts:
                values.offer("hosts", tuple(hosts), f"{variable} ({how})")
                values.offer("master_addr", hosts[0], f"first host of {variable}")
            break
    values.offer("master_port", slurm_port(job_id), f"derived from SLURM_JOB_ID={job_id}")
    values.offer("rdzv_id", f"{DEFAULT_RDZV_ID}-{job_id}", "SLURM_JOB_ID")
    return True


def slurm_port(job_id: str) -> int:
    """The same port on every node of one job, and a different one for most other jobs."""
    digits = "".join(ch for ch in job_id if ch.isdigit()) or "0"
    return SLURM_PORT_BASE + int(digits) % SLURM_PORT_SPAN


def _refuse_second_task(environ: Mapping[str, str]) -> None:
    local_id = environ.get("SLURM_LOCALID", "0")
    if local_id.isdigit() and int(local_id) > 0:
        raise PlanError(
            "one ddp-doctor per node, each launching that node's ranks: "
            "srun --ntasks-per-node=1 ddp-doctor run"
        )


def _refuse_orphans(flags: LaunchFlags) -> None:
    for given, flag in ((flags.node_rank, "--node-rank"), (flags.rdzv_endpoint, "--rdzv-endpoint")):
        if given is not None:
            raise PlanError(f"{flag} needs --nnodes N (more than one node)")


def _static_plan(values: _Values, nodes: tuple[int, int], environ: Mapping[str, str]) -> NodePlan:
    low, high = nodes
    if low != high:
        raise PlanError(
            f"{values.sources['nnodes']} MIN:MAX needs the c10d rendezvous: --rdzv-endpoint HOST:PORT"
        )
    node_rank = values.get("node_rank")
    if node_rank is None:
        raise PlanError("a static multi-node run needs --node-rank (0 on the master's node)")
    if not isinstance(node_rank, int) or node_rank >= high:
        raise PlanError(f"{values.sources['node_rank']} {node_rank} must be below --nnodes {high}")
    master_addr, master_port = values.get("master_addr"), values.get("master_port")
    if master_addr is None:
        raise PlanError("a multi-node run needs --master-addr: node 0's address, on every node")
    if master_port is None:
        raise PlanError("a multi-node run needs --master-port, the same on every node")
    return NodePlan(
        nnodes=high,
        min_nodes=low,
        rendezvous=STATIC,
        master_addr=str(master_addr),
        master_port=int(str(master_port)),
        node_rank=node_rank,
        rdzv_id=str(values.get("rdzv_id") or DEFAULT_RDZV_ID),
        scheduler=_scheduler(values, environ),
        hosts=tuple(values.get("hosts") or ()),  # type: ignore[arg-type]
        sources=dict(values.sources),
    )


def _c10d_plan(values: _Values, nodes: tuple[int, int], environ: Mapping[str, str]) -> NodePlan:
    for key, flag in (("master_addr", "--master-addr"), ("node_rank", "--node-rank")):
        if values.sources.get(key, "").startswith("--"):
            raise PlanError(f"{flag} is for the static rendezvous; c10d takes --rdzv-endpoint only")
    endpoint = str(values.get("rdzv_endpoint"))
    host, port = parse_endpoint(endpoint, values.sources["rdzv_endpoint"])
    sources = {k: v for k, v in values.sources.items() if k not in ("master_addr", "master_port")}
    sources.update(
        master_addr=values.sources["rdzv_endpoint"], master_port=sources["rdzv_endpoint"]
    )
    return NodePlan(
        nnodes=nodes[1],
        min_nodes=nodes[0],
        rendezvous=C10D,
        master_addr=host,
        master_port=port,
        rdzv_id=str(values.get("rdzv_id") or DEFAULT_RDZV_ID),
        scheduler=_scheduler(values, environ),
        sources=sources,
    )


def parse_endpoint(endpoint: str, source: str) -> tuple[str, int]:
    """'host:port', '[v6::addr]:port' or 'host' (port 29400, as torchrun)."""
    text = endpoint.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise PlanError(f"{source} {endpoint!r} names no host")
    if not port_text:
        return host, C10D_DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise PlanError(f"{source} {endpoint!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def _scheduler(values: _Values, environ: Mapping[str, str]) -> str | None:
    sources = " ".join(values.sources.values())
    if "SLURM" in sources:
        return "slurm"
    if environ.get("KUBERNETES_SERVICE_HOST") and ("PET_" in sources or "MASTER_" in sources):
        return "kubernetes"
    return None


def _whole(environ: Mapping[str, str], variable: str) -> int | None:
    value = environ.get(variable, "").strip()
    return int(value) if value.isdigit() else None
