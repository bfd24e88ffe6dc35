"""torchrun's rendezvous flags for the doctor's job: one node alone, or one node of several.

Static: `--nnodes N --node-rank I --master-addr HOST --master-port P`, node 0's agent hosting the
store, `timeout` bounding the wait for the others. c10d: `--rdzv-endpoint HOST:PORT`, with what
torch cannot guess across network namespaces or multi-homed hosts set explicitly (lab notes):
`is_host` (1 where the endpoint is an address of this machine) and `--local-addr` (this node's
address towards the endpoint); `join_timeout` and `read_timeout` bound the wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.facts.cluster import C10D

# With --nnodes MIN:MAX, how long c10d waits for more nodes once MIN came: long enough for
# nodes started together (a node that comes later makes the others restart their ranks).
C10D_LAST_CALL_S = (3, 10)  # at least, at most; else a third of the wait


@dataclass(frozen=True)
class Rendezvous:
    kind: str  # static or c10d
    nnodes: int
    min_nodes: int
    host: str  # static: the master's address; c10d: the endpoint's host
    port: int
    run_id: str
    wait_s: float  # how long this node's torchrun may wait for the others
    node_rank: int | None = None  # static
    is_host: bool = False  # this node hosts the store (static: node 0)
    local_addr: str | None = None  # c10d: this node's address towards the endpoint


def _last_call(wait_s: float) -> int:
    low, high = C10D_LAST_CALL_S
    return int(min(high, max(low, wait_s / 3)))


def single_node_args(master_addr: str, port: int, init_timeout_s: float) -> list[str]:
    return [
        "--nnodes", "1", "--node-rank", "0", "--rdzv-backend", "static",
        "--master-addr", master_addr, "--master-port", str(port),
        "--rdzv-conf", f"timeout={int(init_timeout_s)}",
    ]  # fmt: skip


def rendezvous_args(plan: Rendezvous) -> list[str]:
    wait = str(max(1, int(plan.wait_s)))
    if plan.kind == C10D:
        host = f"[{plan.host}]" if ":" in plan.host else plan.host
        conf = [
            f"is_host={int(plan.is_host)}",
            f"join_timeout={wait}",
            f"read_timeout={wait}",
            f"last_call_timeout={_last_call(plan.wait_s)}",
        ]
        argv = [
            "--nnodes", f"{plan.min_nodes}:{plan.nnodes}", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{host}:{plan.port}", "--rdzv-id", plan.run_id,
            "--rdzv-conf", ",".join(conf),
        ]  # fmt: skip
        return argv + (["--local-addr", plan.local_addr] if plan.local_addr else [])
    return [
        "--nnodes", str(plan.nnodes), "--node-rank", str(plan.node_rank), "--rdzv-backend", "static",
        "--master-addr", plan.host, "--master-port", str(plan.port), "--rdzv-id", plan.run_id,
        "--rdzv-conf", f"timeout={wait}",
    ]  # fmt: skip
