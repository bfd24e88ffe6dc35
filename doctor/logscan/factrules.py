"""The probes' own rules judge what a log says.

logfacts.py turns lines into facts (the interfaces NCCL chose, variables it reports, NCCL
versions per host, addresses connected to). Here those facts become the same frozen facts the
probes produce (HostFacts, PlanFacts, JobFacts) and the registered check functions judge them:
DDP203 (master_addr_unresolvable), DDP204 (hostname_is_loopback) and DDP306 (version_skew)
are the live run's functions, not a second pattern table. DDP215 and DDP205, whose live checks
need what a log only partly has (the route to the master, the host's interface list), are
judged by the pure functions those checks call (readings/interface_reach.py) over what the log
shows: the interfaces NCCL used, the variable's value, whether the run spans hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ddp_doctor.logscan.logfacts import Connection, LogFacts
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus, Severity
from ddp_doctor.registry import Hit, spec_for

# judged by the registered (live) check function (factrules_ranks.py has the per-rank ones)
SHARED_CODES = ("DDP203", "DDP204", "DDP207", "DDP210", "DDP214", "DDP306", "DDP307", "DDP309")
FAILED = ("refused", "timed-out", "aborted", "unreachable")
UNNAMED_HOST = "the advertising node's"
UNNAMED_LOOKUP = "the master host name"  # a lookup whose line names no host (a bare gaierror)  # a log rarely names the host that advertised loopback
MESH_ERROR_LINES = 2  # gloo's connectFullMesh error, wrapped: the peer and local address lines


def shared_rule(code: str) -> Callable:
    """The check function a live run uses for `code`: the one that judges log facts too."""
    check = spec_for(code).check
    assert check is not None, code
    return check


def findings_from_facts(
    facts: LogFacts, table_codes: Iterable[str] = ()
) -> list[tuple[Finding, int]]:
    """Findings, each with the log line its main fact came from; `table_codes` are the
    pattern table's codes on the same log (some judges weigh what the log showed failing)."""
    from ddp_doctor.logscan.factrules_ranks import rank_findings

    found: list[tuple[Finding, int]] = []
    judges = (
        _unresolvable,
        _loopback_host,
        _own_name_unusable,
        _interface_not_routable,
        _no_address,
        _no_route,
    )
    for judge in judges:
        found.extend(judge(facts))
    found.extend(rank_findings(facts, table_codes))
    return found


def _facts(**probes: object):  # -> FactSet; imported here: only logs with such facts pay it
    from ddp_doctor.facts.machine import FactSet

    results = [ProbeResult(name, ProbeStatus.OK, value, 0.0) for name, value in probes.items()]
    return FactSet.of(results)


def _run(code: str, facts: object, line: int, read: dict[str, object]) -> Iterator:
    spec = spec_for(code)
    for finding in spec.run(facts):
        evidence = {**finding.evidence, "line": line, "from_log_facts": read}
        yield _with(finding, evidence=evidence), line


def _with(finding: Finding, **changes: object) -> Finding:
    from dataclasses import replace

    return replace(finding, **changes)


# --- DDP203: a host name that does not resolve ----------------------------------------------
def _unresolvable(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    failed = facts.unresolvable()
    if failed is None:
        return
    from ddp_doctor.facts.job import JobFacts, Preflight

    host, error, line = failed
    preflight = Preflight(master_addr=host or UNNAMED_LOOKUP, resolve_error=error)
    job = JobFacts(launched=False, preflight=preflight)
    read = {"host": host, "error": error, "line": line}
    for finding, at in _run("DDP203", _facts(job=job), line, read):
        if host is None:  # a bare gaierror: the line names no host, so claim none
            message = (
                f"a host name lookup failed ({error}), and the line does not say for which host: "
                "in a rendezvous, the master address (MASTER_ADDR)"
            )
            finding = _with(finding, message=message)
        yield finding, at


# --- DDP210: no route to the address connected to ---------------------------------------------
def _no_route(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    """The live network_unreachable reads the job's output for "Network is unreachable" / "No
    route to host"; the log's first such line is that output."""
    if facts.unreachable is None:
        return
    from ddp_doctor.facts.job import JobFacts, Preflight

    text, line = facts.unreachable
    master = facts.remote_store[0] if facts.remote_store else ""
    job = JobFacts(launched=True, preflight=Preflight(master_addr=master), output_tail=text)
    read = {"line": line, "master": master}
    for finding, at in _run("DDP210", _facts(job=job), line, read):
        yield _with(finding, evidence={**finding.evidence, "text": text}), at


# --- DDP204: a peer advertised a loopback address -------------------------------------------
def _loopback_host(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    """127.0.1.1 is Debian's /etc/hosts entry for the host name: a rank that connects to it
    was given another node's host name resolved to loopback. 127.0.0.1 counts when gloo said
    it fell back to loopback and a connection to it then failed (on one host it would not)."""
    debian = [c for c in facts.connections if c.address == "127.0.1.1"]
    fallback = facts.gloo_loopback_fallback
    failed = [c for c in facts.connections if c.address.startswith("127.") and c.outcome]
    chosen = debian[0] if debian else (failed[0] if fallback is not None and failed else None)
    cluster = facts.addresses or facts.gloo_mesh_failed is not None  # one host never fails it
    if chosen is None and fallback is not None and cluster:
        chosen = Connection("127.0.0.1", 0, None, fallback)  # gloo's own word, on a cluster
    named = facts.hostname_loopback  # the user's pasted lookup: this host's name on loopback
    if chosen is None and named is not None and (failed or facts.gloo_mesh_failed is not None):
        chosen = Connection(named[0], 0, None, named[2])
    if chosen is None:
        chosen = _mesh_refused_at_loopback(facts, failed)
    if chosen is None:
        return
    from ddp_doctor.facts.machine import HostFacts, PlanFacts

    master = next(iter(facts.addresses), "on another node")
    name = named[1] if named is not None and chosen.line == named[2] else UNNAMED_HOST
    host = HostFacts("Linux", "", "", name, hostname_address=chosen.address)
    read = {"advertised_address": chosen.address, "line": chosen.line, "master": master}
    judged = _run(
        "DDP204", _facts(host=host, plan=PlanFacts(master_addr=master)), chosen.line, read
    )
    for finding, at in judged:  # a warning live (predicted); an error where it made a peer fail
        failed_here = chosen.outcome in FAILED
        message = finding.message
        if name == UNNAMED_HOST:  # "host name \"the advertising node's\"" reads badly
            message = message.replace(f"host name {name!r}", f"{name} host name", 1)
        changes = {"message": message, **({"severity": Severity.ERROR} if failed_here else {})}
        yield _with(finding, **changes), at


# --- DDP204: gloo found no address of this host's own name ----------------------------------
def _own_name_unusable(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    """gloo's "Unable to find address for: NAME" about a host name (readings/interface_reach
    says which of its two lookups failed): with GLOO_SOCKET_IFNAME unset gloo binds where this
    host's own name resolves, and it resolved to no address of this host, the case DDP204's
    live rule judges from the address the preflight predicts gloo binds. Where the line is
    about an interface, the table's DDP205 stands."""
    from ddp_doctor.readings import interface_reach

    if facts.gloo_no_address is None:
        return
    condition, name, line = facts.gloo_no_address
    ifname = facts.env.get(interface_reach.GLOO, (None, 0))[0]
    subject = interface_reach.gloo_lookup_subject(condition, name, ifname)
    if subject != interface_reach.HOST_NAME or interface_reach.own_name_problem(None) is None:
        return
    message = (
        f"gloo found no address of this host for the host name {name!r} (it does not resolve, "
        "or not to an address of this host), so it could not create its device (with "
        "GLOO_SOCKET_IFNAME unset gloo binds where this host's name resolves)"
    )
    read = {"host_name": name, "line": line, "gloo_condition": condition or "not shown"}
    if condition is None:  # the table read the same line as an interface (DDP205)
        read["instead_of"] = "DDP205"
    yield _hit("DDP204", message, line, read, Severity.ERROR)


def _mesh_refused_at_loopback(facts: LogFacts, failed: list[Connection]) -> Connection | None:
    """gloo's full mesh failing at a peer's loopback address (on the error's own lines), in a
    run that spans hosts: the store's client connects to a routable master, or this rank's
    own pair address is loopback too (gloo bound where its host name led it). On one host the
    peer listens on that loopback address and the connection succeeds; a failure says the
    peer advertised loopback from another host (aws-samples/aws-do-eks#69, hostNetwork pods)."""
    mesh = facts.gloo_mesh_failed
    if mesh is None:
        return None
    peers = [c for c in failed if mesh <= c.line <= mesh + MESH_ERROR_LINES]
    routable = facts.remote_store is not None
    if peers and (routable or facts.gloo_local_loopback is not None):
        return peers[0]
    return None


# --- DDP215 / DDP205: the interfaces NCCL bootstraps over ----------------------------------
# judged by readings/interface_reach.py, the functions the live preflight uses (netfix's DDP215
# prediction, DDP205's wrong_network_interface): a log shows the interfaces NCCL used and the
# variable's value, never the route to the master, so the route is passed as unknown
def _interface_not_routable(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    from ddp_doctor.readings import interface_reach
    from ddp_doctor.readings.interface_reach import NCCL

    seen = _seen(facts)
    failing = any(c.outcome in FAILED for c in facts.connections) or facts.connect_failures
    several = _several_nodes(facts)
    peer = _link_local_peer(facts)
    named = facts.env.get("NCCL_SOCKET_IFNAME")
    problem = None
    if named is not None and seen:
        reach = bool(failing or several)
        problem = interface_reach.socket_ifname_problem(NCCL, named[0], seen, other_hosts=reach)
    if peer is not None:
        message = (
            f"NCCL connected to a peer's IPv6 link-local address {peer.address} "
            f"({peer.outcome}): a link-local address is not routed between hosts"
        )
        line, read = peer.line, {"peer": peer.address, "outcome": peer.outcome}
    elif problem == interface_reach.ONLY_UNROUTABLE:
        yield from _variable_picks_unreachable(facts, failing)
        return
    else:
        other_hosts = several or len(seen) > 1  # beside the host's own interface
        bad = interface_reach.nccl_choice_unreachable(seen, None, other_hosts=other_hosts)
        if not bad:
            return
        names = ", ".join(f"{i.name} ({i.addresses[0]})" for i in bad)
        message = (
            f"NCCL bootstraps over {names} beside the host's own interface: other nodes cannot "
            "reach a loopback, container-bridge or IPv6 link-local address"
            + (", and connections fail" if failing else "")
        )
        line = facts.interfaces[bad[0].name].line
        read = {"interfaces": {i.name: i.address for i in facts.interfaces.values()}}
    yield _hit("DDP215", message, line, read, Severity.ERROR if failing or peer else None)


def _seen(facts: LogFacts) -> list:  # -> list[facts.cluster.Interface]
    from ddp_doctor.facts.cluster import Interface

    return [Interface(i.name, (i.address,)) for i in facts.interfaces.values()]


def _link_local_peer(facts: LogFacts) -> Connection | None:
    """A failed connection to a peer's IPv6 link-local address (interface_reach's own test):
    the peer bootstraps over an interface no other host reaches."""
    from ddp_doctor.readings import interface_reach

    failed = (c for c in facts.connections if c.outcome)
    return next((c for c in failed if interface_reach.link_local(c.address)), None)


def _variable_picks_unreachable(facts: LogFacts, failing: object):
    named, line = facts.env["NCCL_SOCKET_IFNAME"]
    bad = list(facts.interfaces.values())
    names = ", ".join(f"{i.name} ({i.address})" for i in bad)
    message = (
        f"NCCL_SOCKET_IFNAME={named!r} leaves NCCL only {names}: "
        "other nodes cannot reach a loopback, container-bridge or link-local address"
        + (", and connections fail" if failing else "")
    )
    read = {"NCCL_SOCKET_IFNAME": named, "line": line, "interfaces": [i.name for i in bad]}
    yield _hit("DDP205", message, bad[0].line, read, Severity.ERROR)


def _several_nodes(facts: LogFacts) -> bool:
    """The log is of a multi-node run: NCCL on several hosts, or a launch of several nodes."""
    nnodes = facts.run.most("nnodes")
    group = facts.rendezvous.get("group_world_size", ("1", 0))[0]
    hosts = set(facts.nccl_versions) | set(facts.driver_cuda) | set(facts.run.host_env)
    return len(hosts) > 1 or (nnodes is not None and nnodes[0] > 1) or group not in ("0", "1")


# --- DDP205: NCCL_SOCKET_IFNAME names an interface NCCL found no address on ------------------
def _no_address(facts: LogFacts) -> Iterator[tuple[Finding, int]]:
    """NCCL listed no interface and then tried an address of no family: of the interfaces it
    saw, the variable selected none (the live rule's NO_MATCH, over an empty list)."""
    from ddp_doctor.readings import interface_reach

    named = facts.env.get(interface_reach.NCCL)
    if named is None or facts.no_family_address is None or facts.interfaces:
        return
    problem = interface_reach.socket_ifname_problem(
        interface_reach.NCCL, named[0], (), other_hosts=False
    )
    if problem != interface_reach.NO_MATCH:
        return
    message = (
        f"NCCL_SOCKET_IFNAME={named[0]!r} names no interface NCCL found an address on: NCCL "
        "listed no interface and then tried an address of no family"
    )
    read = {"NCCL_SOCKET_IFNAME": named[0], "line": named[1]}
    yield _hit("DDP205", message, facts.no_family_address, read, None)


def _hit(code: str, message: str, line: int, read: dict, severity: Severity | None):
    hit = Hit(message, {"line": line, "from_log_facts": read}, severity=severity)
    return spec_for(code).finding(hit), line
