"""DDP216-DDP218 and DDP309-DDP311: a multi-node run as a whole: node 0's verdict, the nodes
whose facts it lacks, and the ranks' fingerprints compared across nodes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ddp_doctor.facts.job import Identity
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation, Severity
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.jobreading import rank_list

# Variables that rightly differ from node to node: GPUs the scheduler gave, NIC names.
PER_NODE_VARIABLES = frozenset(
    {"CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA"}
)


@rule(
    "DDP216",
    Remediation(
        "Read node 0's own report (it judged the cluster, or says why it could not); check that "
        "node 0's ddp-doctor was still running and could reach the job's store.",
    ),
)
def cluster_verdict_missing(facts: FactSet) -> Iterator[Hit]:
    """What it finds: on a node other than node 0, ranks that ran while node 0's verdict on the
    whole cluster never came back through the job's store before they exited.
    Why it matters: this node's report covers only itself; whether the cluster as a whole is
    healthy is not known here, so the node fails the run rather than pass it unseen.
    Example: node 0's doctor killed mid-run; rank 0 stuck in a collective until the bound.
    Fix: node 0's report; rerun with a longer --timeout if node 0 ran out of time.
    """
    cluster, job = facts.cluster, facts.job
    if cluster is None or cluster.whole or cluster.verdict_received or job is None:
        return
    if any(rank.stages for rank in job.ranks):
        yield Hit(
            f"node {cluster.node_rank}'s ranks ran, but node 0's verdict on the "
            f"{cluster.nnodes}-node cluster never came back",
            {"node_rank": cluster.node_rank, "nnodes": cluster.nnodes},
        )


@rule(
    "DDP217",
    Remediation("Read node 0's report: it names every node and rank involved, with fixes."),
)
def cluster_problems(facts: FactSet) -> Iterator[Hit]:
    """What it finds: findings in node 0's report on the whole cluster, as its verdict came back
    to this node; the severity is the worst of them, so this node's exit code follows the
    cluster's (`srun ddp-doctor run` fails the step when any node has an error).
    Why it matters: a problem seen only from node 0 (another node's torch, a rank that never
    joined) still breaks training on this node.
    Example: node 1's torch differs from node 0's; node 1 prints this, node 0 prints DDP306.
    Fix: node 0's report.
    """
    cluster = facts.cluster
    if cluster is None or cluster.whole or not cluster.verdict:
        return
    worst = max(Severity.from_word(f.severity) for f in cluster.verdict if _known(f.severity))
    codes = ", ".join(dict.fromkeys(f.code for f in cluster.verdict))
    where = f" ({cluster.node0_host})" if cluster.node0_host else ""
    yield Hit(
        f"node 0{where} reports {len(cluster.verdict)} finding(s) for the cluster: {codes}; "
        "its report has them all",
        {
            "codes": list(dict.fromkeys(f.code for f in cluster.verdict)),
            "node0": cluster.node0_host,
        },
        severity=worst,
    )


def _known(word: str) -> bool:
    return word in {s.word for s in Severity}


@rule(
    "DDP218",
    Remediation(
        "Run ddp-doctor with a longer --timeout; read the named nodes' own reports, which they "
        "print themselves.",
    ),
)
def node_facts_missing(facts: FactSet) -> Iterator[Hit]:
    """What it finds: on node 0, nodes of the job whose doctor's facts never reached rank 0
    through the job's store (their ranks did join), or no other node's facts at all.
    Why it matters: node 0's cluster report then cannot judge those nodes' setup (their
    drivers, variables, network); their own reports still do.
    Example: a node whose ranks crashed before the exchange at the end of the job.
    Fix: the named nodes' own reports; a longer --timeout.
    """
    cluster = facts.cluster
    if cluster is None or not cluster.whole or cluster.nnodes < 2:
        return
    missing = [node.node_rank for node in cluster.nodes if not node.reported]
    if not cluster.nodes:
        yield Hit(
            "no node's facts reached node 0 through the job's store",
            {"nodes": [], "nnodes": cluster.nnodes},
        )
    elif missing:
        yield Hit(
            f"the facts of node(s) {rank_list(missing)} never reached node 0",
            {"nodes": missing, "nnodes": cluster.nnodes},
        )


@rule(
    "DDP309",
    Remediation(
        "Set the same NCCL_*, TORCH_NCCL_*, GLOO_* and CUDA_* variables on every node (one job "
        "script, one image), unless a difference is meant."
    ),
)
def env_differs_between_nodes(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NCCL_*, TORCH_NCCL_*, GLOO_* and CUDA_* variables, as each rank saw them,
    that differ between nodes (set on some, unset or another value on others);
    CUDA_VISIBLE_DEVICES and the interface names (*_SOCKET_IFNAME, NCCL_IB_HCA) are left out,
    as they rightly differ per node.
    Why it matters: NCCL settings that differ between nodes (NCCL_P2P_DISABLE, NCCL_ALGO,
    NCCL_PROTO, timeouts) make ranks disagree on transports or give up at different times:
    hangs and "unhandled system error" that only appear across nodes.
    Example: NCCL_IB_DISABLE=1 exported in one node's .bashrc.
    Fix: one environment for every node.
    """
    by_host = _variables_by_host(facts)
    if len(by_host) < 2:
        return
    names = sorted({name for variables in by_host.values() for name in variables})
    for name in names:
        if name in PER_NODE_VARIABLES:
            continue
        values = {host: variables.get(name) for host, variables in by_host.items()}
        if len(set(values.values())) > 1:
            yield Hit(
                f"{name} differs between nodes ({_by_value(values)})", _evidence(name, values)
            )


FEW_HOSTS = 32  # up to this many hosts, the evidence names each one's value


def _by_value(values: Mapping[str, str | None]) -> str:
    """ "h0: 1, h1: unset" for a few hosts; by value with compact host lists for many."""
    if len(values) <= 3:
        return ", ".join(f"{h}: {v if v is not None else 'unset'}" for h, v in values.items())
    sides = []
    for value, hosts in _hosts_by_value(values).items():
        sides.append(f"{value if value is not None else 'unset'} on {_host_text(hosts)}")
    return "; ".join(sides)


def _hosts_by_value(values: Mapping[str, str | None]) -> dict[str | None, list[str]]:
    grouped: dict[str | None, list[str]] = {}
    for host, value in values.items():
        grouped.setdefault(value, []).append(host)
    return dict(sorted(grouped.items(), key=lambda item: len(item[1])))


def _host_text(hosts: list[str]) -> str:
    from ddp_doctor.facts.runs import host_list

    many = f"{len(hosts):,} nodes: " if len(hosts) > 3 else ""
    return many + host_list(hosts)


def _evidence(name: str, values: Mapping[str, str | None]) -> dict[str, object]:
    from ddp_doctor.facts.runs import host_list

    evidence: dict[str, object] = {"variable": name}
    if len(values) <= FEW_HOSTS:
        evidence["per_host"] = dict(values)
    else:
        evidence["per_value"] = {
            str(v): host_list(hosts) for v, hosts in _hosts_by_value(values).items()
        }
    return evidence


def _variables_by_host(facts: FactSet) -> dict[str, Mapping[str, str]]:
    job = facts.job
    found: dict[str, Mapping[str, str]] = {}
    for identity in job.identities if job else ():
        found.setdefault(identity.host, identity.variables)
    return found


@rule(
    "DDP310",
    Remediation(
        "Keep one NCCL in the environment: uninstall the extra nvidia-nccl-cu* wheel, or remove "
        "the other libnccl from LD_LIBRARY_PATH / LD_PRELOAD, so torch's own NCCL is the only "
        "one loaded.",
        ("pip list 2>/dev/null | grep -i nccl", "echo $LD_LIBRARY_PATH $LD_PRELOAD"),
    ),
)
def nccl_library_loaded_twice(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a rank whose process maps two or more different libnccl files (read from
    /proc/self/maps inside the rank).
    Why it matters: the two copies share symbol names; whichever NCCL a call lands in may not
    be the one torch initialised, giving "unhandled system error", version mismatch errors or
    hangs that depend on the import order.
    Example: a second nvidia-nccl-cu12 wheel pulled in by another library, plus LD_PRELOAD of
    a system libnccl.so.2.
    Fix: one libnccl in the process.
    """
    job = facts.job
    for identity in job.identities if job else ():
        files = list(dict.fromkeys(identity.nccl_libraries))
        if len(files) > 1:
            yield Hit(
                f"rank {identity.rank} on {identity.host} has {len(files)} libnccl files mapped: "
                f"{', '.join(files)}",
                {"rank": identity.rank, "host": identity.host, "libraries": files},
            )


@rule(
    "DDP311",
    Remediation(
        "Run a job on one GPU model, or expect the slowest model to pace every step (set batch "
        "sizes per model if the mix is meant)."
    ),
)
def mixed_gpu_models(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the GPU model each rank reported at the identity stage, compared across
    the job's ranks.
    Why it matters: DDP waits for the slowest rank at every all-reduce, so a mixed job runs at
    the slowest GPU's speed, and memory limits differ per rank.
    Example: a job scheduled on one A100 node and one V100 node.
    Fix: one GPU model per job.
    """
    job = facts.job
    models = _ranks_by(job.identities if job else (), "gpu_name")
    if len(models) > 1:
        shown = "; ".join(f"{m} on ranks {rank_list(r)}" for m, r in models.items())
        yield Hit(
            f"ranks run on different GPU models: {shown}",
            {"models": {m: r for m, r in models.items()}},
        )


def _ranks_by(identities: tuple[Identity, ...], field: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for identity in identities:
        value = getattr(identity, field)
        if value:
            found.setdefault(str(value), []).append(identity.rank)
    return found
