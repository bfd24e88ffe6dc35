"""DDP211-DDP215: the network preflight of a multi-node run (DDP204 and DDP205 live with the
other rendezvous rules), and whether a predicted fix made the job pass."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.job import JobFacts, RankFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.readings.netfix import GLOO, NCCL, Prediction, nccl_possible, predict
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.common import visible_devices
from ddp_doctor.rules.jobreading import job_failed

VIRTUAL_KINDS = ("docker", "veth", "bridge")
OUTCOME_WORDS = {
    "refused": "connection refused: nothing listened there (node 0's ddp-doctor or torchrun "
    "was not running), or a firewall rejects the port",
    "timed-out": "connects timed out: a firewall drops the packets, or the host is down",
    "no-route": "no route to host: the address is not on any network this node reaches",
    "unreachable": "network unreachable: this node has no route to that network",
}


def predictions(facts: FactSet) -> list[Prediction]:
    """What the preflight predicted on this node, as `run` computed it before the job."""
    network = facts.network
    if network is None:
        return []
    possible = nccl_possible(visible_devices(facts).count, facts.plan.backend)
    return predict(network, facts.env.variables, possible)


def prediction_for(facts: FactSet, code: str, variable: str | None = None) -> list[Prediction]:
    return [p for p in predictions(facts) if p.code == code and variable in (None, p.variable)]


def fix_outcome(facts: FactSet, prediction: Prediction) -> tuple[str, dict[str, object]]:
    """A clause saying whether the fix was tried on the job and whether it passed."""
    fix = f"{prediction.variable}={prediction.fix_value}"
    job = facts.job
    if facts.plan.as_is:
        return f"; the job ran as-is (--as-is), without {fix}", {"fix_applied": False}
    if job is None or not job.launched or job.applied_fixes.get(prediction.variable) is None:
        return "", {"fix_applied": False}
    evidence: dict[str, object] = {"fix_applied": True, "fix": fix}
    if job_passed(job):
        return f"; verified: with {fix} every rank joined and the job passed", {
            **evidence,
            "fix_verified": True,
        }
    joined = bool(job.ranks) and all(_joined(rank) for rank in job.ranks)
    how = "every rank joined, but the job failed later" if joined else "the job still failed"
    return f"; with {fix} {how}", {**evidence, "fix_verified": False}


def _joined(rank: RankFacts) -> bool:
    record = rank.stage("init")
    return bool(record and record.ok)


def job_passed(job: JobFacts) -> bool:
    """Launched, not failed, and every rank finished its last stage well."""
    if not job.launched or job_failed(job) or not job.ranks:
        return False
    return all(r.last_started is not None and r.last_started.ok for r in job.ranks)


@rule(
    "DDP211",
    Remediation(
        "Start ddp-doctor (or training) on the master's node first, or at the same time; open "
        "the master port between the nodes (firewall, security group); check that the master "
        "address is node 0's address on the network the nodes share.",
    ),
)
def master_unreachable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: on a node that is not the master, TCP connects to the master's port that
    never succeeded while the preflight retried them (its bound is half of --timeout); refused,
    timed out and no route are told apart.
    Why it matters: torchrun on this node would wait for the rendezvous until its timeout and
    fail with "client socket has timed out ... while trying to connect to (HOST, PORT)".
    Example: a firewall that drops port 29500 between the nodes; node 1 started long before
    node 0.
    Fix: start the master first, open the port, use the right address.
    """
    network = facts.network
    port = network.port if network else None
    if network is None or port is None or port.outcome == "answered":
        return
    words = OUTCOME_WORDS.get(port.outcome, port.error or port.outcome)
    nodes = facts.plan.nodes
    host = nodes.host_of(0) if nodes else None
    master = f"node 0 ({host})" if host and host != network.master_addr else "the master"
    yield Hit(
        f"{master} at {network.master_addr}:{network.master_port} did not answer for "
        f"{port.waited_s:.0f} s ({port.attempts} tries): {words}",
        {
            "outcome": port.outcome,
            "address": network.master_address,
            "port": network.master_port,
            "waited_s": port.waited_s,
            "attempts": port.attempts,
            "error": port.error,
        },
    )


@rule(
    "DDP212",
    Remediation(
        "Map this host's name to its address on the network the nodes share (/etc/hosts or "
        "DNS), or set GLOO_SOCKET_IFNAME to the interface that reaches the master.",
        ("ip -br addr", "getent hosts $(hostname)"),
    ),
)
def hostname_on_other_interface(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with GLOO_SOCKET_IFNAME unset, gloo binds to the first local address of
    this host's name; here that address sits on another interface than the one the route to
    the master takes.
    Why it matters: gloo advertises that address to the other nodes; if they cannot reach it
    (a docker bridge, a management network) they fail with "Connection refused" or time out
    in connectFullMesh while this node waits.
    Example: a host name that resolves to the docker0 address 172.17.0.1.
    Fix: the right address for the name, or GLOO_SOCKET_IFNAME.
    """
    network = facts.network
    for prediction in prediction_for(facts, "DDP212"):
        owner = network.interface_of(prediction.picked or "") if network else None
        clause, evidence = fix_outcome(facts, prediction)
        yield Hit(
            f"host name {network.hostname if network else '?'!r} resolves to {prediction.picked}"
            f" on {owner.name if owner else '?'}, but the master is reached through "
            f"{prediction.fix_value}: gloo would advertise an address the other nodes may not "
            f"reach{clause}",
            {
                "address": prediction.picked,
                "interface": owner.name if owner else None,
                "route_interface": prediction.fix_value,
                **evidence,
            },
        )


@rule(
    "DDP213",
    Remediation(
        "Give the nodes' real network to the job: set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to "
        "the interface that carries traffic between hosts, and a master address on it; in "
        "containers use the host network (docker run --network host).",
        ("ip -br addr",),
    ),
)
def route_over_virtual_interface(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with neither *_SOCKET_IFNAME set, the route to the master leaves through
    an interface a container runtime or a virtual network made (docker*, veth*, a bridge).
    Why it matters: the master address is then a container's or a bridge's, reachable from this
    host but rarely from other hosts; NCCL and gloo may pick such an interface too.
    Example: MASTER_ADDR=172.17.0.2 (a container on node 0) given to every node.
    Fix: the hosts' own network for the master address and the *_SOCKET_IFNAME variables.
    """
    network = facts.network
    if network is None or facts.env.get(GLOO) or facts.env.get(NCCL):
        return
    interface = network.interface(network.route_interface)
    if interface is not None and interface.kind in VIRTUAL_KINDS:
        yield Hit(
            f"the master {network.master_address} is reached through {interface.name}, a "
            f"{interface.kind} interface",
            {"interface": interface.name, "kind": interface.kind, "master": network.master_address},
        )


@rule(
    "DDP214",
    Remediation(
        "Give every node the master's address on the network the nodes share (the same on "
        "every node): --master-addr <node 0's IP or host name>, never localhost or 127.0.0.1."
    ),
)
def master_addr_loopback(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a multi-node run whose master address resolves to 127.0.0.0/8 or ::1 on a
    node other than the master's.
    Why it matters: every node then looks for the master on itself; the others never meet
    node 0 and the rendezvous times out.
    Example: MASTER_ADDR=localhost copied from a single-node script into a two-node job.
    Fix: node 0's real address, the same on every node.
    """
    network = facts.network
    address = network.master_address if network else None
    if network is None or network.port is None:
        return  # on the master's node a loopback master address still reaches its own store
    if address and (address.startswith("127.") or address == "::1"):
        yield Hit(
            f"master address {network.master_addr!r} resolves to {address}, a loopback address, "
            f"in a {facts.plan.nnodes}-node run",
            {"master": network.master_addr, "address": address, "nnodes": facts.plan.nnodes},
        )


@rule(
    "DDP215",
    Remediation(
        "Set NCCL_SOCKET_IFNAME to the interface that reaches the master (`=name` for an exact "
        "match), on every node.",
        ("ip -br addr",),
    ),
)
def nccl_interface_not_route(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with NCCL_SOCKET_IFNAME unset on a GPU node, NCCL's own choice (InfiniBand
    first, then the first interface that is neither loopback nor docker) is not the interface
    the route to the master takes.
    Why it matters: NCCL bootstraps over the interface it picks; if the other nodes cannot
    reach it, init hangs or fails with "unhandled system error" / "Connection refused".
    Example: a host with a management NIC eno1 listed before the cluster NIC ens5.
    Fix: NCCL_SOCKET_IFNAME set to the interface that reaches the master.
    """
    for prediction in prediction_for(facts, "DDP215"):
        clause, evidence = fix_outcome(facts, prediction)
        yield Hit(
            f"NCCL would pick {prediction.picked}, but the master is reached through "
            f"{prediction.fix_value.lstrip('=')}{clause}",
            {"nccl_pick": prediction.picked, "route_interface": prediction.fix_value, **evidence},
        )
