"""The cluster preflight at scale: node 0's verdict, memory and report sizes for N simulated
nodes x R ranks, through the real exchange (patient/cluster_share.py over a real TCPStore),
the real doctor's side (probes/job/exchange.py answering rank 0's cluster.json) and the real
judging, rendering and `diagnose`.

No torch job runs: a child process hosts the store (as torchrun's agent does on node 0) and
plays every rank in threads, each posting the journal a rank writes (stages, identity with its
fingerprint) through `cluster_share.post`, every node's first rank its node's facts; rank 0
gathers with `cluster_share.gather` and hands the verdict back. Node 0's doctor is this
process's child without torch, so its peak RSS is the doctor's own. The nodes are alike but
one (node 417 where there are that many, else the last): it loads NCCL 2.21.5.

Ranks share a pool of store connections (--clients): in this sandbox about one loopback
connect in 25 stalls 5 s, so 8,192 connections would measure the sandbox, not the doctor.

`python bench/bench_scale.py --nodes 1024 --ranks-per-node 8` prints the growth table from
16 nodes up, then as its last line:
`scale: N nodes, R ranks: verdict S s, node 0 peak RSS M MiB, markdown C chars, json B bytes,
diagnose D s`. Goals: verdict within 10 s of the last node's arrival, node 0 under 1 GiB,
Markdown under 65,536 characters, diagnose under 2 s.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "fixtures" / "jobs" / "multinode-healthy-node0.json"
GROWTH = (16, 64, 256, 1024)
TORCH, NCCL, ODD_NCCL = "2.13.0+cu130", "2.28.9", "2.21.5"


# -- what every simulated rank and node sends -------------------------------------------------
@functools.cache
def _template_text() -> str:
    return TEMPLATE.read_text()


def _template() -> dict[str, Any]:
    return json.loads(_template_text())


def odd_node(nodes: int) -> int:
    return 417 if nodes > 417 else nodes - 1


def host_of(node: int) -> str:
    return f"node-{node:04d}"


def rank_records(rank: int, node: int, local: int, nodes: int, per_node: int) -> list[Any]:
    job = next(p for p in _template()["probes"] if p["probe"] == "job")["facts"]
    stages = copy.deepcopy(job["ranks"][1]["stages"])
    placement = {
        "rank": rank, "world_size": nodes * per_node, "local_rank": local,
        "local_world_size": per_node, "group_rank": node, "group_world_size": nodes,
        "host": host_of(node),
    }  # fmt: skip
    records: list[Any] = [{"event": "placement", **placement}]
    for stage in stages:
        data = dict(stage["data"])
        if stage["stage"] == "identity":
            data = {"identity": identity(rank, node, local, nodes, per_node), "identities": []}
        if stage["stage"] == "init":
            data["device"] = f"cuda:{local}"
        records.append({"event": "start", "stage": stage["stage"], "time": 0.0})
        records.append(
            {"event": "end", "stage": stage["stage"], "ok": True, "seconds": stage["seconds"],
             "data": data}
        )  # fmt: skip
    return records


def identity(rank: int, node: int, local: int, nodes: int, per_node: int) -> dict[str, Any]:
    return {
        "rank": rank, "world_size": nodes * per_node, "local_rank": local,
        "host": host_of(node), "pid": 10000 + rank, "device": f"cuda:{local}",
        "pci_bus_id": f"00000000:{0x18 + 16 * local:02X}:00.0",
        "torch_version": TORCH, "torch_git_version": "cf30153c4c131c8164ee7798e5022d810682e2cb",
        "cuda_version": "13.0", "nccl_version": ODD_NCCL if node == odd_node(nodes) else NCCL,
        "driver_version": "580.95.05", "python_version": "3.11.7", "gpu_name": "NVIDIA H200",
        "cpu_affinity": f"{local * 14}-{local * 14 + 13}",
        "nccl_libraries": ["/usr/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"],
        "variables": {"NCCL_IB_HCA": "mlx5", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
        "group_rank": node,
    }  # fmt: skip


def node_probes(node: int) -> list[Any]:
    """The template node's own probes, renamed for this node."""
    probes = [p for p in _template()["probes"] if p["probe"] not in ("job", "cluster")]
    for probe in probes:
        facts = probe.get("facts") or {}
        if probe["probe"] == "host":  # a bare-metal GPU node
            facts.update(hostname=host_of(node), container=None)
        if probe["probe"] == "network":
            facts.update(master_addr=host_of(0), hostname=host_of(node))
        if probe["probe"] == "torch":  # a CUDA wheel, as the ranks report
            facts.update(version=TORCH, cuda_version="13.0", nccl_available=True,
                         nccl_version=NCCL)  # fmt: skip
    return probes


def node_document(node: int) -> dict[str, Any]:
    from ddp_doctor.run.node_groups import node_digest

    probes = node_probes(node)
    return {"node_rank": node, "host": host_of(node), "applied_fixes": {},
            "digest": node_digest(probes), "probes": probes}  # fmt: skip


# -- the job: the store and every rank, in threads (imports torch) ----------------------------
def play_job(folder: Path, nodes: int, per_node: int, clients: int, wait_s: float) -> None:
    from datetime import timedelta

    import torch

    from ddp_doctor.patient import cluster_share

    store = torch.distributed.TCPStore(
        "127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=wait_s), wait_for_workers=False
    )
    pool = [
        torch.distributed.TCPStore("127.0.0.1", store.port, is_master=False,
                                   timeout=timedelta(seconds=wait_s), wait_for_workers=False)
        for _ in range(clients)
    ]  # fmt: skip
    texts = {n: json.dumps(node_document(n)) for n in range(nodes)}
    world = nodes * per_node
    template = {local: rank_records(local, 0, local, nodes, per_node) for local in range(per_node)}
    print(json.dumps({"ready": time.time()}), flush=True)
    started = time.time()

    def post_ranks(client: Any, ranks: range) -> None:
        for rank in ranks:
            if rank == 0:
                continue
            node, local = divmod(rank, per_node)
            records = _renumbered(template[local], rank, node, nodes, per_node)
            placement = records[0] | {}
            placement.pop("event")
            cluster_share.post(client, placement, records, texts[node] if local == 0 else None)

    threads = [
        threading.Thread(target=post_ranks, args=(pool[i], range(i, world, clients)))
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    arrived = time.time()
    node0 = folder / "node0"
    placement0 = rank_records(0, 0, 0, nodes, per_node)[0] | {}
    placement0.pop("event")
    cluster_share.post(pool[0], placement0, rank_records(0, 0, 0, nodes, per_node),
                       (node0 / "node.json").read_text())  # fmt: skip
    cluster_share.gather(pool[0], placement0, node0, wait_s)
    cluster_share._hand_back(pool[0], node0, wait_s)
    last = pool[-1]
    last.wait([cluster_share.VERDICT], timedelta(seconds=wait_s))
    received = time.time()
    print(json.dumps({"started": started, "arrived": arrived, "verdict": received}), flush=True)


def _renumbered(records: list[Any], rank: int, node: int, nodes: int, per_node: int) -> list[Any]:
    out = []
    for record in records:
        record = dict(record)
        if record.get("event") == "placement":
            record.update(rank=rank, group_rank=node, host=host_of(node))
        elif record.get("stage") == "identity" and record.get("event") == "end":
            record["data"] = {
                "identity": identity(rank, node, rank % per_node, nodes, per_node),
                "identities": [],
            }
        out.append(record)
    return out


# -- node 0's doctor (no torch) ----------------------------------------------------------------
def node0_doctor(nodes: int, per_node: int, clients: int) -> dict[str, Any]:
    from ddp_doctor.model import make_report
    from ddp_doctor.probes.job.exchange import ClusterExchange
    from ddp_doctor.render import render
    from ddp_doctor.report_io import load_report, probe_from_json
    from ddp_doctor.run.cluster import judge_cluster

    results = [probe_from_json(p) for p in _planned(node_document(0)["probes"], nodes)]
    job_entry = next(p for p in _template()["probes"] if p["probe"] == "job")
    snapshot = dataclasses.replace(
        probe_from_json(job_entry).facts, nnodes=nodes, nproc=per_node, ranks=()
    )
    judged: dict[str, Any] = {}

    def decide(document: Any) -> dict[str, Any]:
        from ddp_doctor.run.cluster_view import verdict_document

        judged["probes"], judged["findings"] = judge_cluster(results, snapshot, document)
        judged["at"] = time.time()
        return verdict_document(judged["findings"], host_of(0))

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        exchange = ClusterExchange(node_document(0), decide)
        exchange.prepare(Path(tmp) / "node0")
        argv = [
            sys.executable,
            __file__,
            "--play-job",
            tmp,
            str(nodes),
            str(per_node),
            str(clients),
        ]
        job = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=_answer, args=(exchange, job), daemon=True).start()
        assert job.stdout is not None
        lines = [json.loads(line) for line in job.stdout]
        if job.wait(timeout=600) != 0 or "verdict" not in lines[-1]:
            sys.exit(f"the simulated job failed ({job.returncode})")
        times = lines[-1]
        report = make_report(judged["probes"], judged["findings"])
        markdown = render(report, "markdown")
        as_json = render(report, "json")
        path = Path(tmp) / "report.json"
        path.write_text(as_json)
        diagnose, diagnose_cpu = _timed_diagnose(path)
        load_report(path)  # the saved report reads back within the doctor's own limit
    return {
        "nodes": nodes,
        "ranks": nodes * per_node,
        "verdict_s": times["verdict"] - times["arrived"],
        "arrivals_s": times["arrived"] - times["started"],
        "judge_s": judged["at"] - times["arrived"],
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "markdown_chars": len(markdown),
        "json_bytes": len(as_json.encode()),
        "diagnose_s": diagnose,
        "diagnose_cpu_s": diagnose_cpu,
        "codes": sorted({f.code for f in judged["findings"]}),
    }


def _planned(probes: list[Any], nodes: int) -> list[Any]:
    """Node 0's plan for this many nodes."""
    for probe in probes:
        planned = (probe.get("facts") or {}).get("nodes") if probe["probe"] == "plan" else None
        if planned:
            planned.update(nnodes=nodes, min_nodes=nodes, hosts=[host_of(n) for n in range(nodes)])
    return probes


def _answer(exchange: Any, job: subprocess.Popen[str]) -> None:
    while job.poll() is None and exchange.cluster_document is None:
        exchange.poll()
        time.sleep(0.02)


def _timed_diagnose(path: Path) -> tuple[float, float]:
    """`ddp-doctor diagnose REPORT --format markdown` as a user runs it: (wall s, CPU s). On
    shared cores the CPU seconds are the steadier figure."""
    argv = [sys.executable, "-m", "ddp_doctor", "diagnose", str(path), "--format", "markdown"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        sys.exit(f"diagnose failed ({done.returncode}): {done.stderr[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def measured(nodes: int, per_node: int, clients: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--node0", str(nodes), str(per_node), str(clients)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"{nodes} nodes: {done.stderr[-800:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--clients", type=int, default=64, help="store connections, shared")
    parser.add_argument("--play-job", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--node0", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.play_job:
        folder, nodes, per_node, clients = args.play_job
        play_job(Path(folder), int(nodes), int(per_node), int(clients), wait_s=300)
        return
    if args.node0:
        print(json.dumps(node0_doctor(*args.node0)))
        return
    sizes = [n for n in GROWTH if n < args.nodes] + [args.nodes]
    rows = [measured(n, args.ranks_per_node, args.clients) for n in sizes]
    print(f"{'nodes':>6} {'ranks':>6} {'arrive s':>8} {'verdict s':>9} {'RSS MiB':>8} "
          f"{'md chars':>9} {'json B':>9} {'diagnose s':>10} {'(CPU s)':>7}  codes")  # fmt: skip
    for r in rows:
        print(
            f"{r['nodes']:>6} {r['ranks']:>6} {r['arrivals_s']:>8.2f} {r['verdict_s']:>9.2f} "
            f"{r['rss_mib']:>8.0f} {r['markdown_chars']:>9} {r['json_bytes']:>9} "
            f"{r['diagnose_s']:>10.2f} {r['diagnose_cpu_s']:>7.2f}  {','.join(r['codes'])}"
        )
    last = rows[-1]
    print(f"load average while measured: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"scale: {last['nodes']} nodes, {last['ranks']} ranks: verdict {last['verdict_s']:.2f} s, "
        f"node 0 peak RSS {last['rss_mib']:.0f} MiB, markdown {last['markdown_chars']} chars, "
        f"json {last['json_bytes']} bytes, diagnose {last['diagnose_s']:.2f} s"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
