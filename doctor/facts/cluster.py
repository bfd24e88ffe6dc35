"""Facts of a multi-node run: the node plan, the network preflight, and the cluster as node 0
saw it (or, on the other nodes, node 0's verdict as it came back through the job's store)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

STATIC, C10D = "static", "c10d"


@dataclass(frozen=True)
class NodePlan:
    """How this node meets the others through torchrun's rendezvous, and where each value came
    from (`sources`: "nnodes" -> "--nnodes", "SLURM_NNODES", "PET_NNODES" ...)."""

    nnodes: int  # the most nodes (MAX of MIN:MAX)
    min_nodes: int
    rendezvous: str  # STATIC or C10D
    master_addr: str  # static: node 0's address; c10d: the rendezvous endpoint's host
    master_port: int
    node_rank: int | None = None  # static only: c10d assigns node ranks at the rendezvous
    rdzv_id: str = "ddp-doctor"
    scheduler: str | None = None  # "slurm", "kubernetes"; None: plain torchrun-style flags
    hosts: tuple[str, ...] = ()  # every node's host in node-rank order, where the scheduler says
    sources: Mapping[str, str] = field(default_factory=dict)
    isolate: bool = False  # --isolate: the job tests the nodes in pairs first
    isolate_slow_below: float = 0.5  # --isolate-slow-below: of round 1's median, a slow pair

    @property
    def hosts_master(self) -> bool | None:
        """Whether this node hosts the master (static: node rank 0); None for c10d, where the
        preflight finds out whether the endpoint is an address of this machine."""
        return None if self.node_rank is None else self.node_rank == 0

    def host_of(self, node_rank: int) -> str | None:
        if 0 <= node_rank < len(self.hosts):
            return self.hosts[node_rank]
        return self.master_addr if node_rank == 0 and self.rendezvous == STATIC else None


@dataclass(frozen=True)
class Interface:
    name: str
    addresses: tuple[str, ...] = ()
    kind: str = "other"  # loopback, docker, veth, bridge or other (by flags and name)


@dataclass(frozen=True)
class PortCheck:
    """TCP connects from a node that is not the master to the master's port, retried until it
    answered or the bound passed."""

    outcome: str  # answered, refused, timed-out, no-route, unreachable, error
    attempts: int
    waited_s: float
    error: str | None = None  # the last failure, as the OS said it


@dataclass(frozen=True)
class NetworkFacts:
    """The network preflight of one node, before the job: nothing here sends more than a TCP
    connect to the master's port."""

    master_addr: str
    master_port: int
    master_address: str | None = None  # what master_addr resolved to
    resolve_error: str | None = None
    master_is_local: bool = False  # the master address is an address of this machine
    hostname: str = ""
    hostname_addresses: tuple[str, ...] = ()  # what this host's name resolves to, in order
    hostname_error: str | None = None
    # this node's address on the network the nodes share: the source of the route to the
    # master (on the master's node, towards the others), and the interface holding it
    route_address: str | None = None
    route_interface: str | None = None
    route_basis: str | None = None  # how route_address was found
    route_error: str | None = None
    interfaces: tuple[Interface, ...] = ()
    port: PortCheck | None = None  # None where this node hosts the master
    node_addresses: Mapping[str, str] = field(default_factory=dict)  # the plan's hosts, resolved

    def interface(self, name: str | None) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def interface_of(self, address: str) -> Interface | None:
        return next((i for i in self.interfaces if address in i.addresses), None)


@dataclass(frozen=True)
class NodeLink:
    """The link a node reaches the others through, at the rate the system states (nominal,
    not measured: probes/job/links.py)."""

    interface: str | None = None  # the route interface towards the other nodes
    mbps: int | None = None  # /sys/class/net/IFACE/speed; None: not stated
    fabric_gbit: float | None = None  # the fastest ACTIVE IB/RoCE port's rate; None: none


@dataclass(frozen=True)
class ClusterNode:
    """One node as node 0 saw it through the job's store."""

    node_rank: int  # torchrun's group rank
    host: str | None = None
    ranks: tuple[int, ...] = ()
    reported: bool = False  # its doctor's facts reached node 0
    applied_fixes: Mapping[str, str] = field(default_factory=dict)
    # its own probes (host, env, network ...) as `--format json` writes them; empty where
    # the node's group (ClusterFacts.groups) holds them
    probes: tuple[Mapping[str, object], ...] = ()
    digest: str | None = None  # of its own facts apart from names, addresses and timings
    link: NodeLink | None = None  # its link's stated rate; None: not reported


@dataclass(frozen=True)
class NodeGroup:
    """Nodes alike: the same own facts (apart from names, addresses, timings) and the same
    fingerprint on every rank, so the first node's facts stand for them all. `summary` is
    what a reader compares (torch, NCCL, GPUs, driver, Python); `differs` says where this group
    differs from the largest one."""

    nodes: tuple[int, ...]
    hosts: tuple[str, ...] = ()
    summary: Mapping[str, str] = field(default_factory=dict)
    differs: Mapping[str, str] = field(default_factory=dict)
    probes: tuple[Mapping[str, object], ...] = ()  # the first node's own probes


@dataclass(frozen=True)
class VerdictFinding:
    """One finding of node 0's cluster report, as the other nodes receive it."""

    code: str
    severity: str  # info, warning, error
    message: str


@dataclass(frozen=True)
class PairTest:
    """Two nodes tested together in one round of `run --isolate` (one rank of each, in a
    subgroup of the job's own process group)."""

    nodes: tuple[int, int]
    round: int
    connected: bool  # the pair's subgroup formed and a small all-reduce completed in time
    exact: bool | None = None  # the all-reduce gave the exact sum; None: not reached
    gbps: float | None = None  # point-to-point bandwidth, GB/s (1e9 bytes)
    error: str | None = None


@dataclass(frozen=True)
class PairBand:
    """What a pair's link should carry: the slower of its two nodes' stated rates."""

    nodes: tuple[int, int]
    gbps: float  # GB/s (1e9 bytes), as PairTest.gbps
    basis: str  # which rate of which node: "node 1's eth0 at 10000 Mbit/s"


@dataclass(frozen=True)
class IsolationFacts:
    """The pair rounds: every pair tested, what they found, and the nodes they settled."""

    pairs: tuple[PairTest, ...] = ()
    rounds: int = 0
    median_gbps: float | None = None  # of every connected pair
    slow_below: float = 0.5  # a pair under this share of round 1's median fails
    bad: tuple[int, ...] = ()  # failed beside nodes known good
    unsettled: tuple[int, ...] = ()  # still suspects when the rounds ran out
    # the band (its nodes' slower stated link rate) of each pair far under it
    bands: tuple[PairBand, ...] = ()
    banded_pairs: int = 0  # pairs whose band was known (both nodes stated a rate)
    band_floor: float | None = None  # a connected pair under this share of its band is far under
    under_band: tuple[tuple[int, int], ...] = ()  # pairs far under their band


@dataclass(frozen=True)
class ClusterFacts:
    nnodes: int
    node_rank: int | None = None  # this node's group rank, once the rendezvous assigned it
    whole: bool = False  # True on node 0: this report covers every node
    nodes: tuple[ClusterNode, ...] = ()  # node 0: every node that reported
    missing_ranks: tuple[int, ...] = ()  # node 0: ranks whose facts never reached it
    node0_host: str | None = None  # the other nodes: where the whole report is printed
    verdict_received: bool = False  # the other nodes: node 0's verdict came back
    verdict: tuple[VerdictFinding, ...] = ()
    groups: tuple[NodeGroup, ...] = ()  # node 0: nodes alike, the largest group first
    isolation: IsolationFacts | None = None  # node 0, with --isolate

    @property
    def hostnames(self) -> tuple[str, ...]:
        """Every node's host name, for --redact-hosts."""
        names = [node.host for node in self.nodes if node.host]
        return tuple(dict.fromkeys([*names, *([self.node0_host] if self.node0_host else [])]))

    def node(self, node_rank: int) -> ClusterNode | None:
        return next((n for n in self.nodes if n.node_rank == node_rank), None)
