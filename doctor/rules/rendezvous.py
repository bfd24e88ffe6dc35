"""DDP201-DDP208: getting the ranks to meet: master address and port, interfaces, joins."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.cluster import Interface
from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import FactSet, HostFacts
from ddp_doctor.model import Remediation
from ddp_doctor.readings import interface_reach
from ddp_doctor.readings.netfix import Prediction
from ddp_doctor.registry import Hit, describe, rule
from ddp_doctor.rules.common import env_count
from ddp_doctor.rules.jobreading import rank_list, stuck_ranks, waited_ranks
from ddp_doctor.rules.nodereading import MissingNodes, missing_nodes, node_label, nodes_of_ranks
from ddp_doctor.rules.preflight import fix_outcome, prediction_for

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
PRIVILEGED_BELOW = 1024  # Linux's net.ipv4.ip_unprivileged_port_start by default


@rule(
    "DDP201",
    Remediation(
        "Pick a free port (--master-port / MASTER_PORT), or stop what holds this one, often a "
        "stale job: `ss -ltnp` shows the owner.",
        ("ss -ltnp",),
    ),
)
def master_port_in_use(facts: FactSet) -> Iterator[Hit]:
    """What it finds: bind() on the master address and port failing with EADDRINUSE before
    launch.
    Why it matters: rank 0 fails with "EADDRINUSE" / "Address already in use" within a
    second, and the other ranks hang inside the TCPStore forever, ignoring their timeout.
    Example: a crashed run's rank 0 still holding port 29500.
    Fix: a free port, or stop the stale job.
    """
    job = facts.job
    if job and job.preflight.port_error and "EADDRINUSE" in job.preflight.port_error:
        yield Hit(
            f"port {job.preflight.master_port} on {job.preflight.master_addr} is taken",
            {"port": job.preflight.master_port, "address": job.preflight.master_addr},
        )


@rule(
    "DDP202",
    Remediation(
        "Check that every rank is started (nnodes x nproc-per-node == WORLD_SIZE), can reach "
        "MASTER_ADDR:MASTER_PORT, and is not stuck before init_process_group (data loading, "
        "a debugger, an input() call)."
    ),
)
def rendezvous_timeout(facts: FactSet) -> Iterator[Hit]:
    """What it finds: ranks that never finished process-group init while the job failed or ran
    past its time; the ranks that did arrive and waited are named too. In a multi-node run,
    nodes that never reached torchrun's rendezvous, by node rank and, where the plan knows it,
    host (torchrun's store counts the nodes that came: with more than two nodes the missing
    one is named among the candidates).
    Why it matters: the ranks that came wait until their timeout ("Timed out after N seconds
    waiting for clients. 1/2 clients joined", "client socket has timed out"), then the job
    dies with no word about the missing rank.
    Example: a node whose torchrun was never started; a rank blocked before init.
    Fix: start every rank, make the master reachable, move slow work after init.
    """
    job = facts.job
    if not job:
        return
    absent = missing_nodes(facts)
    if absent is not None:
        yield _nodes_never_arrived(facts, absent)
        return
    missing = [s.rank for s in stuck_ranks(job) if s.stage == "init"]
    if not missing:
        return
    waited = [r.rank for r in waited_ranks(job, "init")]
    arrived = f"; ranks {rank_list(waited)} waited and timed out" if waited else ""
    nodes = nodes_of_ranks(facts, missing) if facts.plan.nodes else []
    where = f" on {', '.join(node_label(facts, n) for n in nodes)}" if nodes else ""
    world = max(len(job.ranks), job.nnodes * job.nproc)
    yield Hit(
        f"rank(s) {rank_list(missing)}{where} of {world} never joined the process group{arrived}",
        {
            "missing_ranks": missing,
            "waiting_ranks": waited,
            "missing_nodes": nodes,
            "init_timeout_s": job.init_timeout_s,
            "job_timed_out": job.timed_out,
        },
    )


def _nodes_never_arrived(facts: FactSet, absent: MissingNodes) -> Hit:
    nodes = facts.plan.nodes
    assert nodes is not None
    labels = ", ".join(node_label(facts, n) for n in absent.candidates)
    if absent.exact:
        what = f"{labels} never arrived"
    elif absent.count and labels:
        what = f"{absent.count} of {nodes.nnodes} nodes never arrived (one of {labels})"
    elif absent.count:
        what = f"{absent.count} of {nodes.nnodes} nodes never arrived"
    else:
        what = "not every node arrived" + (f" (this node waited for {labels})" if labels else "")
    kind = "c10d " if nodes.rendezvous == "c10d" else ""
    who = "connections to its endpoint show" if kind else "torchrun counted"
    counted = f"; {who} {absent.joined} of {nodes.nnodes}" if absent.joined else ""
    if absent.arrived_from:
        counted += f" (others from {', '.join(absent.arrived_from)})"
    waited = f"waited {facts.job.duration_s:.0f} s" if facts.job else "waited"
    return Hit(
        f"{what}: torchrun's {kind}rendezvous at {nodes.master_addr}:{nodes.master_port} "
        f"{waited}{counted}, and no rank of this node started",
        {
            "missing_nodes": list(absent.candidates) if absent.exact else [],
            "candidate_nodes": list(absent.candidates),
            "missing_count": absent.count,
            "hosts": [nodes.host_of(n) for n in absent.candidates],
            "arrived_from": list(absent.arrived_from),
            "nnodes": nodes.nnodes,
        },
        fix=NODES_NEVER_ARRIVED,
    )


NODES_NEVER_ARRIVED = Remediation(
    "Start ddp-doctor (as torchrun) on every node at about the same time, with the same "
    "--nnodes, master address and port (under SLURM: `srun --ntasks-per-node=1 ddp-doctor "
    "run`, not from the batch script alone); check on the missing node that it reaches the "
    "master's port (its own report says, DDP211); give slow starters a longer --timeout.",
)


@rule(
    "DDP203",
    Remediation("Use an IP address for MASTER_ADDR (--master-addr), or fix DNS / /etc/hosts."),
)
def master_addr_unresolvable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: getaddrinfo failing for --master-addr (MASTER_ADDR) before launch.
    Why it matters: init retries until its timeout, and torchrun's rendezvous for 600 s,
    before failing with "host not found" / gaierror.
    Example: MASTER_ADDR=node-01 on a cluster whose DNS does not know node-01.
    Fix: an IP address, or a working name.
    """
    job = facts.job
    if job and job.preflight.resolve_error:
        yield Hit(
            f"master address {job.preflight.master_addr!r} does not resolve: "
            f"{job.preflight.resolve_error}",
            {"address": job.preflight.master_addr, "error": job.preflight.resolve_error},
        )


@rule(
    "DDP204",
    Remediation(
        "Give other nodes a routable address: MASTER_ADDR=<this node's IP>, and fix /etc/hosts "
        "so the host name maps to that IP (or set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)."
    ),
)
def hostname_is_loopback(facts: FactSet) -> Iterator[Hit]:
    """What it finds: gethostbyname(gethostname()) in 127.0.0.0/8 while the master address is
    not a loopback one; in a multi-node run with GLOO_SOCKET_IFNAME unset, also a host name
    that does not resolve (gloo then binds to loopback). There the job runs with
    GLOO_SOCKET_IFNAME set to the interface that reaches the master (unless --as-is), and the
    finding says whether that made every rank join. In a log: the connection refused at
    127.0.1.1, gloo's fallback to loopback, and gloo's "rp != nullptr. Unable to find address
    for: HOST" (no address of this host's name could be bound; older gloo stops there).
    Why it matters: gloo and the store advertise 127.x to the other nodes, which then fail
    with "Connection refused, remote=[127.0.0.1]:PORT" while this node hangs.
    Example: a cloud image whose /etc/hosts maps the host name to 127.0.1.1.
    Fix: a routable address for the host name, or the *_SOCKET_IFNAME variables.
    """
    if facts.network is not None:
        yield from _loopback_in_cluster(facts)
        return
    host, job = facts.host, facts.job
    master = job.preflight.master_address if job else facts.plan.master_addr
    if not host or not host.hostname_address or not master:
        return
    if master in LOOPBACK_NAMES or master.startswith("127."):
        return
    if interface_reach.own_name_problem(host.hostname_address) == interface_reach.OWN_NAME_LOOPBACK:
        yield Hit(
            f"host name {host.hostname!r} resolves to {host.hostname_address}, but the master "
            f"is {master}",
            {"hostname": host.hostname, "address": host.hostname_address, "master": master},
        )


def _loopback_in_cluster(facts: FactSet) -> Iterator[Hit]:
    network = facts.network
    assert network is not None
    for prediction in prediction_for(facts, "DDP204"):
        picked = prediction.picked
        what = f"resolves to {picked}" if picked else "does not resolve, so gloo binds to loopback"
        clause, evidence = fix_outcome(facts, prediction)
        yield Hit(
            f"host name {network.hostname!r} {what} in a {facts.plan.nnodes}-node run: gloo "
            f"would advertise it to the other nodes{clause}",
            {
                "hostname": network.hostname,
                "address": picked,
                "master": network.master_address,
                "route_interface": prediction.fix_value,
                **evidence,
            },
        )


@rule(
    "DDP205",
    Remediation(
        "Set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to the interface that carries traffic "
        "between nodes (`ip -br addr` lists them), or unset them.",
        ("ip -br addr",),
    ),
)
def wrong_network_interface(facts: FactSet) -> Iterator[Hit]:
    """What it finds: an interface list in either variable that matches none of this host's
    interfaces (NCCL reads prefixes, `^` to exclude and `=` for exact names); in a multi-node
    run also one that leaves out the interface that reaches the master. There the job runs with
    the variable set to that interface (unless --as-is), and the finding says whether that made
    every rank join.
    Why it matters: NCCL fails with "no socket interface found" or "unhandled system error";
    gloo with "unable to find address for" the interface.
    Example: NCCL_SOCKET_IFNAME=eth0 in an image moved to hosts whose NIC is ens5.
    Fix: name the right interface, or unset the variable.
    """
    predicted = {p.variable: p for p in prediction_for(facts, "DDP205")}
    host = facts.host
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = facts.env.get(variable)
        if variable in predicted:
            yield _interface_left_out(facts, predicted[variable])
        elif host and host.interfaces and value and _matches_none(variable, value, host):
            yield Hit(
                f"{variable}={value!r} matches none of this host's interfaces "
                f"({', '.join(host.interfaces)})",
                {"variable": variable, "value": value, "interfaces": list(host.interfaces)},
            )


def _interface_left_out(facts: FactSet, prediction: Prediction) -> Hit:
    network = facts.network
    names = [i.name for i in network.interfaces] if network else []
    route = prediction.fix_value.lstrip("=")
    if prediction.picked:
        what = f"takes {prediction.picked}, not {route}, the interface that reaches the master"
    else:
        what = f"matches none of this host's interfaces ({', '.join(names)})"
    clause, evidence = fix_outcome(facts, prediction)
    return Hit(
        f"{prediction.variable}={prediction.current!r} {what}{clause}",
        {
            "variable": prediction.variable,
            "value": prediction.current,
            "interfaces": names,
            "route_interface": route,
            **evidence,
        },
    )


def _matches_none(variable: str, value: str, host: HostFacts) -> bool:
    """Judged by the function `logs` uses too, over this host's own interface list (across
    hosts the route to the master decides, through the preflight's prediction above)."""
    seen = [Interface(name) for name in host.interfaces]
    problem = interface_reach.socket_ifname_problem(variable, value, seen, other_hosts=False)
    return problem == interface_reach.NO_MATCH


describe(
    "DDP206",
    Remediation(
        "Open the master port and the ephemeral port range between the nodes (firewall, "
        "security group), and check that rank 0 is running on MASTER_ADDR."
    ),
    """What it finds: "Connection refused" in the job's output (through the log patterns).
    Why it matters: nothing listens where the rank connects (rank 0 not started yet or dead,
    a firewall rejecting, a wrong address); init fails or retries until its timeout.
    Example: a firewall between nodes that allows 29500 but not gloo's data ports.
    Fix: open the ports, start rank 0 first, check the address.
    """,
)


@rule(
    "DDP207",
    Remediation(
        "Make WORLD_SIZE equal nnodes x nproc-per-node on every node (torchrun sets it itself "
        "when you do not export it)."
    ),
)
def world_size_mismatch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: ranks of the job reporting different world sizes; WORLD_SIZE in the
    environment that is not a multiple of LOCAL_WORLD_SIZE; in a multi-node run, WORLD_SIZE
    that is not nnodes x nproc-per-node (except Kubeflow's per-pod WORLD_SIZE, which counts
    nodes).
    Why it matters: ranks wait for peers that will never come (a hang until the timeout), or
    two jobs' ranks meet in one group.
    Example: WORLD_SIZE=16 exported for two nodes, but --nproc-per-node 4 on each.
    Fix: consistent sizes, or let torchrun set them.
    """
    job = facts.job
    sizes = sorted({identity.world_size for identity in job.identities}) if job else []
    if len(sizes) > 1:
        yield Hit(f"ranks report world sizes {sizes}", {"world_sizes": sizes})
    world, local = (
        env_count(facts.env.get("WORLD_SIZE")),
        env_count(facts.env.get("LOCAL_WORLD_SIZE")),
    )
    if world and local and world % local:
        yield Hit(
            f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local}",
            {"world_size": world, "local_world_size": local},
        )
    yield from _world_size_against_plan(facts, world)


def _world_size_against_plan(facts: FactSet, world: int | None) -> Iterator[Hit]:
    nodes = facts.plan.nodes
    nproc = facts.job.nproc if facts.job and facts.job.nproc else facts.plan.nproc
    if nodes is None or world is None or not nproc:
        return
    if nodes.scheduler == "kubernetes" and world == nodes.nnodes:
        return  # a PyTorchJob's WORLD_SIZE counts pods (nodes), not ranks
    if world != nodes.nnodes * nproc:
        yield Hit(
            f"WORLD_SIZE={world}, but this run is {nodes.nnodes} nodes x {nproc} ranks = "
            f"{nodes.nnodes * nproc}",
            {"world_size": world, "nnodes": nodes.nnodes, "nproc_per_node": nproc},
        )


@rule(
    "DDP208",
    Remediation(
        "Give --master-addr an address of this machine (127.0.0.1, or one `ip -br addr` "
        "shows): the doctor's job runs its master here."
    ),
)
def master_addr_not_local(facts: FactSet) -> Iterator[Hit]:
    """What it finds: bind() on the master address failing with anything but EADDRINUSE
    (EADDRNOTAVAIL: the address belongs to another host) or, on a port below 1024, EACCES
    (DDP230).
    Why it matters: rank 0 hosts the store on MASTER_ADDR; on the wrong host it cannot.
    Example: --master-addr 10.0.0.5 run on 10.0.0.6.
    Fix: run the doctor on the master node, or give a local address.
    """
    job = facts.job
    error = job.preflight.port_error if job else None
    if job and error and "EADDRINUSE" not in error and not _needs_root(job):
        yield Hit(
            f"cannot listen on {job.preflight.master_addr}: {error}",
            {"address": job.preflight.master_addr, "error": error},
        )


@rule(
    "DDP230",
    Remediation(
        "Use a port of 1024 or above that nothing else listens on (e.g. MASTER_PORT=29500, or "
        "torchrun --master-port 29500): ports below 1024 need root. A script that draws the "
        "port at random ($RANDOM) must add 1024 or more.",
        ("torchrun --master-port 29500 --nproc-per-node=N train.py",),
    ),
)
def master_port_privileged(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a master port below 1024 whose bind was refused: the preflight's own
    bind() failing with EACCES; in a log, the store's bind refused with "(errno: 13 -
    Permission denied)" or libuv's "name: EACCES" (also retyped as "Permission denied: The
    server socket has failed to bind"), or a launch line's port below 1024 beside a store that
    no rank reached (judged by the same privileged_port_refused).
    Why it matters: the store never starts, so no rank can join; a port number of 1024 or
    above is the whole fix, and it is not "port in use" (DDP201), which needs the other
    listener found.
    Example: `--main_process_port 98` (KimMeen/Time-LLM#158); a launch script using $RANDOM
    as the port, which lands below 1024 one time in 32 (zlin0/wedefense#47).
    Fix: a port of 1024 or above.
    """
    job = facts.job
    if job is not None and _needs_root(job):
        port, error = job.preflight.master_port, job.preflight.port_error
        yield Hit(
            f"the master port {port} is below 1024: binding it needs root ({error})",
            {"port": port, "error": error},
        )


def _needs_root(job: JobFacts) -> bool:
    preflight = job.preflight
    return privileged_port_refused(preflight.master_port, preflight.port_error, False)


def privileged_port_refused(
    port: int | None, bind_error: str | None, store_unreached: bool
) -> bool:
    """A master port below 1024 explains the failure: its bind was refused with EACCES (the
    preflight's own bind), or, where a log shows no bind (a rank that only connects), no rank
    reached the store on it. The one judgement of DDP230, for the live run and for `logs`."""
    if port is None or not 0 < port < PRIVILEGED_BELOW:
        return False
    return bool(bind_error and "EACCES" in bind_error) or store_unreached
