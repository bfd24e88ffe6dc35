"""Running `ddp-doctor run` on simulated hosts (tests/simulated_hosts.py), one process per node, for
tests/test_multinode.py and tests/record_multinode_fixtures.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulated_hosts import SimulatedHosts, simulated_hosts

from ddp_doctor.probes.environment import EXACT_NAMES, PREFIXES

HERE = Path(__file__).resolve().parent
FAST = ["--sizes", "1K:64K:8", "--iters", "2"]
TIMEOUT_S = 40
PORT = "29517"
# The caller's own launcher and scheduler variables would change every node's plan.
DROPPED_PREFIXES = ("SLURM_", "PET_", "TORCHELASTIC_", "GLOO_", *PREFIXES)


@dataclass
class NodeRun:
    report: dict[str, Any]
    exit_code: int
    elapsed: float
    stderr: str

    def codes(self) -> list[str]:
        return [f["code"] for f in self.report["findings"]]

    def findings(self, code: str) -> list[dict[str, Any]]:
        return [f for f in self.report["findings"] if f["code"] == code]

    def facts(self, probe: str) -> Any:
        return next(p["facts"] for p in self.report["probes"] if p["probe"] == probe)


def node_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in EXACT_NAMES and not k.startswith(DROPPED_PREFIXES)
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return {**env, **(extra or {})}


def run_nodes(
    hosts: SimulatedHosts,
    arguments: Sequence[Sequence[str] | None],
    environments: Sequence[dict[str, str] | None] = (),
    faults: Sequence[str | None] = (),
    timeout: float = TIMEOUT_S,
) -> list[NodeRun | None]:
    """Starts `ddp-doctor run` on each host that has arguments (None: the node never starts),
    all at once; waits for every one within the bound."""
    started = time.monotonic()
    processes: list[subprocess.Popen | None] = []
    for node, args in enumerate(arguments):
        if args is None:
            processes.append(None)
            continue
        fault = faults[node] if node < len(faults) else None
        argv = [sys.executable, str(HERE / "doctor_with_fault.py"), fault or "-", "run"]
        argv += ["--format", "json", "--timeout", str(timeout), *FAST, *args]
        env = node_environment(environments[node] if node < len(environments) else None)
        processes.append(
            subprocess.Popen(
                hosts.command(node, argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    runs: list[NodeRun | None] = []
    for process in processes:
        if process is None:
            runs.append(None)
            continue
        try:
            out, err = process.communicate(timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        elapsed = time.monotonic() - started
        assert "Traceback" not in err, err[-3000:]
        runs.append(NodeRun(json.loads(out), process.returncode, elapsed, err))
    assert hosts.pids() == [], "a process was left behind in a namespace"
    return runs


def static(node: int, nnodes: int = 2, *extra: str) -> list[str]:
    return [
        "--nnodes", str(nnodes), "--node-rank", str(node), "--master-addr", "node0",
        "--master-port", PORT, *extra,
    ]  # fmt: skip


def throttle(hosts: SimulatedHosts, node: int, rate: str = "20mbit") -> None:
    """Host `node`'s link at `rate` both ways: a tbf qdisc on its veth's two ends (its eth1,
    and its port on the bridge)."""
    tbf = ["tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
    ends = [(hosts.namespaces[node], hosts.interface)]
    if hosts.switch is not None:
        ends.append((hosts.switch, f"p{node}"))
    for namespace, device in ends:
        argv = ["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device, "root"]
        done = subprocess.run([*argv, *tbf], capture_output=True, text=True, timeout=20)
        assert done.returncode == 0, done.stderr


def cut_off(hosts: SimulatedHosts, node: int, store_port: str = PORT) -> None:
    """Host `node`'s firewall (nft, in its namespace) drops every new TCP connection with the
    other hosts, both ways, but its own to the job's store on node 0: torchrun's rendezvous and
    the store work, every connection between ranks fails."""
    rules = (
        "add table inet ddm; "
        "add chain inet ddm input { type filter hook input priority 0; policy accept; }; "
        "add chain inet ddm output { type filter hook output priority 0; policy accept; }; "
        f'add rule inet ddm input iifname "{hosts.interface}" ct state new meta l4proto tcp drop; '
        f'add rule inet ddm output oifname "{hosts.interface}" ip daddr != {hosts.addresses[0]} '
        "ct state new meta l4proto tcp drop; "
        f'add rule inet ddm output oifname "{hosts.interface}" ip daddr {hosts.addresses[0]} '
        f"tcp dport != {store_port} ct state new drop"
    )
    done = hosts.run_in(node, ["nft", rules])
    assert done.returncode == 0, done.stderr


ISOLATE_TIMEOUT_S = 60
# Four hosts' ranks and doctors share this machine's 2 cores: healthy veth pairs measured from
# 0.49 to 6.2 GB/s in one afternoon's runs (a 10x spread), so the default threshold (half of
# round 1's median) names healthy nodes here; 20 Mbit/s is 0.0024 GB/s, far under a tenth.
SLOW_BELOW_ON_SHARED_CORES = "0.1"
ISOLATE_FAULTS = {
    "healthy": "four hosts, every link unthrottled",
    "throttled": "node2's link throttled to 20 Mbit/s both ways (tc tbf on its veth's two ends)",
    "cut-off": "node2's firewall (nft) drops every new TCP connection with the other hosts "
    "but its own to the job's store on node 0",
}


def isolate_on_four_hosts(fault: str) -> tuple[list[NodeRun], list[str]]:
    """`run --isolate` on four simulated hosts with one of ISOLATE_FAULTS on node2: each node's
    run, and the namespaces used (all removed again, whatever happened)."""
    with simulated_hosts(4) as hosts:
        if fault == "throttled":
            throttle(hosts, 2)
        elif fault == "cut-off":
            cut_off(hosts, 2)
        flags = ("--nproc", "1", "--isolate", "--isolate-slow-below", SLOW_BELOW_ON_SHARED_CORES)
        args = [static(node, 4, *flags) for node in range(4)]
        runs = run_nodes(hosts, args, timeout=ISOLATE_TIMEOUT_S)
        used = [*hosts.namespaces, *([hosts.switch] if hosts.switch else [])]
    return [run for run in runs if run is not None], used


def namespaces_left(names: Sequence[str]) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20)
    present = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    return [name for name in names if name in present]
