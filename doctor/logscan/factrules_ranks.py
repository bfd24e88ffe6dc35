"""The probes' own rules judge what a log tells per rank and node (rankfacts.py).

Each judge turns the log's facts into the frozen facts a live run produces and runs the
registered check function of its code: DDP306 (version_skew) on the versions each rank or host
printed, DDP207 (world_size_mismatch) on the world sizes they reported, DDP214
(master_addr_loopback) on a loopback master address in a multi-node launch, DDP309
(env_differs_between_nodes) on the NCCL variables each host reported, DDP307 (rank_crashed)
on the exit codes and signals of torchrun's failure summary. DDP230 (a master port below 1024)
is judged by the live rule's privileged_port_refused, over the launch line's port and whether
the store was reached (a log shows no bind of its own where the rank only connects).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Iterator

from ddp_doctor.logscan.logfacts import LogFacts
from ddp_doctor.logscan.rankfacts import RunFacts, is_loopback
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus
from ddp_doctor.registry import Hit, spec_for

SHARED_CODES = ("DDP207", "DDP214", "DDP306", "DDP307", "DDP309")
IN_PLACE = ("DDP307",)  # the table's finding keeps its place and role; the rule adds evidence
STORE_FAILED = ("DDP202", "DDP206", "DDP231", "DDP233")  # no store reached on the port
WATCHDOG_TIMEOUT_CODE = "DDP302"
_RANK_OF = re.compile(r"rank (\d+)$")
_RANKS_TEXT = re.compile(r" \(ranks? [\d, -]+\)")


def _facts(**probes: object):  # -> FactSet; imported here: only logs with such facts pay it
    from ddp_doctor.facts.machine import FactSet

    results = [ProbeResult(name, ProbeStatus.OK, value, 0.0) for name, value in probes.items()]
    return FactSet.of(results)


def _run(code: str, facts: object, line: int, read: dict[str, object]) -> Iterator:
    from dataclasses import replace

    for finding in spec_for(code).run(facts):
        evidence = {**finding.evidence, "line": line, "from_log_facts": read}
        yield replace(finding, evidence=evidence), line


def rank_findings(facts: LogFacts, table_codes: Iterable[str]) -> list[tuple[Finding, int]]:
    """Findings on the per-rank facts, each with the log line its main fact came from."""
    run, codes = facts.run, frozenset(table_codes)
    found: list[tuple[Finding, int]] = []
    found.extend(_versions_differ(run))
    found.extend(_world_sizes_differ(facts))
    found.extend(_master_loopback(facts))
    found.extend(_port_below_1024(facts, codes))
    found.extend(_env_differs(run))
    found.extend(_ranks_crashed(run, codes))
    return found


# --- DDP306: ranks or hosts printed different torch, CUDA or NCCL versions ------------------
def _versions_differ(run: RunFacts) -> Iterator[tuple[Finding, int]]:
    if len(run.versions) < 2:
        return
    from ddp_doctor.facts.job import Identity, JobFacts, Preflight

    identities = []
    for index, (who, fields) in enumerate(run.versions.items()):
        rank = _RANK_OF.search(who)
        identities.append(
            Identity(
                int(rank.group(1)) if rank else index,
                0,
                0,
                run.hosts.get(who, who),
                0,
                "cuda",
                torch_version=_value(fields.get("torch")),
                cuda_version=_value(fields.get("cuda")),  # torch's build, not NCCL's
                nccl_version=_value(fields.get("nccl")),
            )
        )
    job = JobFacts(launched=True, preflight=Preflight(master_addr=""), identities=tuple(identities))
    line = min(line for fields in run.versions.values() for _, line in fields.values())
    read = {who: {k: v for k, (v, _) in fields.items()} for who, fields in run.versions.items()}
    by_rank = all(_RANK_OF.search(who) for who in run.versions)
    for finding, at in _run("DDP306", _facts(job=job), line, {"versions": read}):
        message = finding.message if by_rank else _RANKS_TEXT.sub("", finding.message)
        yield _with(finding, message=message + " (as each rank or host printed it)"), at


def _value(entry: tuple[str, int] | None) -> str | None:
    return entry[0] if entry else None


# --- DDP207: ranks or nodes reported different world sizes ----------------------------------
def _world_sizes_differ(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    sizes = {f"node {i}": (int(size), line) for i, (size, line) in enumerate(_node_sizes(facts))}
    sizes.update(facts.run.world_size_by)
    if len({size for size, _ in sizes.values()}) < 2:
        return
    from ddp_doctor.facts.job import Identity, JobFacts, Preflight

    identities = tuple(
        Identity(index, size, 0, who, 0, "cuda")
        for index, (who, (size, _)) in enumerate(sizes.items())
    )
    job = JobFacts(launched=True, preflight=Preflight(master_addr=""), identities=identities)
    line = min(line for _, line in sizes.values())
    read = {who: size for who, (size, _) in sizes.items()}
    yield from _run("DDP207", _facts(job=job), line, {"world_sizes": read})


def _node_sizes(facts: LogFacts) -> list[tuple[str, int]]:
    return [(size, line) for size, line in facts.world_sizes.items() if size.isdigit()]


# --- DDP214: a loopback master address in a multi-node launch, on a node other than 0 -------
def _master_loopback(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    run = facts.run
    master, nnodes = run.loopback_master(), _nnodes(facts)
    if master is None or nnodes is None or nnodes[0] < 2:
        return
    node_rank = run.most("node_rank")
    failed = [c for c in facts.connections if is_loopback(c.address) and c.outcome]
    if not failed and (node_rank is None or node_rank[0] < 1):
        return  # node 0 reaches its own store on loopback; only the others cannot
    from ddp_doctor.facts.cluster import NetworkFacts, NodePlan, PortCheck
    from ddp_doctor.facts.machine import PlanFacts

    address, line = master
    port = run.low_port() or _first_port(run) or (0, line)
    resolved = "::1" if ":" in address else ("127.0.0.1" if not address[0].isdigit() else address)
    check = PortCheck(failed[0].outcome if failed else "unknown", 1, 0.0)
    network = NetworkFacts(address, port[0], master_address=resolved, port=check)
    plan_nodes = NodePlan(nnodes[0], nnodes[0], "static", address, port[0])
    plan = PlanFacts(master_addr=address, nodes=plan_nodes)
    read = {"master_addr": address, "line": line, "nnodes": nnodes[0], "nnodes_line": nnodes[1]}
    if node_rank is not None:
        read["node_rank"] = node_rank[0]
    yield from _run("DDP214", _facts(network=network, plan=plan), line, read)


def _nnodes(facts: LogFacts) -> tuple[int, int] | None:
    given = facts.run.most("nnodes")
    group = facts.rendezvous.get("group_world_size")
    if group and group[0].isdigit() and (given is None or int(group[0]) > given[0]):
        return int(group[0]), group[1]
    return given


def _first_port(run: RunFacts) -> tuple[int, int] | None:
    ports = [(int(v), n) for v, n in run.launch.get("master_port", ()) if v.isdigit()]
    return ports[0] if ports else None


# --- DDP230: a master port below 1024, and the store was not reached -------------------------
def _port_below_1024(facts: LogFacts, codes: frozenset[str]) -> Iterator[tuple[Finding, int]]:
    if facts.run.low_port() is None or "DDP230" in codes:
        return  # the table's bind error already says it, with its own line
    from ddp_doctor.rules import rendezvous  # the live rule's judgement; only such logs pay it

    def refused(port: int) -> bool:
        store = codes & set(STORE_FAILED)
        return bool(store) or any(c.port == port and c.outcome for c in facts.connections)

    ports = [(int(v), n) for v, n in facts.run.launch.get("master_port", ()) if v.isdigit()]
    judged = (p for p in ports if rendezvous.privileged_port_refused(p[0], None, refused(p[0])))
    port, line = next(judged, (0, 0))
    if not port:
        return
    message = (
        f"the master port is {port}, below 1024: binding it needs root, so the store most "
        "likely never started, and the ranks could not reach it"
    )
    read = {"master_port": port, "line": line}
    hit = Hit(message, {"port": port, "line": line, "from_log_facts": read})
    yield spec_for("DDP230").finding(hit), line


# --- DDP309: NCCL variables that differ between hosts -----------------------------------------
def _env_differs(run: RunFacts) -> Iterator[tuple[Finding, int]]:
    if len(run.host_env) < 2:
        return
    from ddp_doctor.facts.job import Identity, JobFacts, Preflight

    identities = tuple(
        Identity(index, 0, 0, host, 0, "cuda", variables={k: v for k, (v, _) in env.items()})
        for index, (host, env) in enumerate(run.host_env.items())
    )
    job = JobFacts(launched=True, preflight=Preflight(master_addr=""), identities=identities)
    for finding, _ in _run("DDP309", _facts(job=job), 0, {}):
        name = finding.evidence.get("variable")
        lines = [env[name][1] for env in run.host_env.values() if name in env]
        line = min(lines, default=0)
        read = {"variable": name, "line": line}
        yield (
            _with(finding, evidence={**finding.evidence, "line": line, "from_log_facts": read}),
            line,
        )


# --- DDP307: the ranks torchrun's failure summary names, judged by the live rule -------------
def _ranks_crashed(run: RunFacts, codes: frozenset[str]) -> Iterator[tuple[Finding, int]]:
    if not run.exits:
        return
    from ddp_doctor.facts.job import JobFacts, Preflight, RankFacts
    from ddp_doctor.rules.jobreading import WATCHDOG_TIMEOUT

    ranks = tuple(
        RankFacts(failure.rank, exit_code=_exit_code(failure.exit_code, failure.signal))
        for failure in sorted(run.exits.values(), key=lambda f: f.rank)
    )
    tail = WATCHDOG_TIMEOUT if WATCHDOG_TIMEOUT_CODE in codes else ""
    job = JobFacts(
        launched=True, preflight=Preflight(master_addr=""), ranks=ranks, output_tail=tail
    )
    first = next((f for f in run.exits.values() if f.first), None)
    died = list(spec_for("DDP307").run(_facts(job=job)))
    line = first.line if first else min(f.line for f in run.exits.values())
    read = {
        "ranks": {str(f.rank): f.signal or f.exit_code for f in run.exits.values()},
        "first_failed_rank": first.rank if first else None,
        "died_by_themselves": [finding.evidence["rank"] for finding in died],
        "line": line,
    }
    if not died:
        return  # every rank was stopped by torchrun or aborted by the watchdog
    chosen = next((f for f in died if first and f.evidence["rank"] == first.rank), died[0])
    message = chosen.message.replace(" at stage 'startup'", "")
    yield _with(chosen, message=message, evidence={**chosen.evidence, "from_log_facts": read}), line


def _exit_code(code: int | None, name: str | None) -> int | None:
    if code is not None or not name:
        return code
    try:
        return -int(signal.Signals[name])
    except KeyError:
        return None


def _with(finding: Finding, **changes: object) -> Finding:
    from dataclasses import replace

    return replace(finding, **changes)
