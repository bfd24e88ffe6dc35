"""Writes fixtures/jobs/isolate-*.json: the recorded healthy two-node report
(multinode-healthy-node0.json) grown to four nodes, with the pair rounds of `run --isolate` as
the scheduler (patient/pair_rounds.py) runs them on a model of the links (tests/test_isolation.py).
Run by hand: `python tests/make_isolation_fixtures.py`. These are modelled, not recorded: two
bad nodes at once and a failing path between two good nodes; the real runs on four simulated
hosts are recorded beside them as isolate-recorded-*.json (tests/record_isolation_fixtures.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_isolation import Model  # noqa: E402

from ddp_doctor.codec import to_jsonable  # noqa: E402
from ddp_doctor.facts.cluster import NodeLink, PairTest  # noqa: E402
from ddp_doctor.patient.pair_rounds import isolate  # noqa: E402
from ddp_doctor.run.isolation import isolation_facts  # noqa: E402

BASE = ROOT / "fixtures" / "jobs" / "multinode-healthy-node0.json"


def write(
    name: str,
    description: str,
    tests: list[PairTest],
    extra: list[str],
    mbps: int | None = None,
) -> None:
    """`mbps`: every node's route interface states that speed (eth0), else no link known."""
    document = json.loads(BASE.read_text())
    cluster = next(p for p in document["probes"] if p["probe"] == "cluster")["facts"]
    for number in (2, 3):
        cluster["nodes"].append(
            {"node_rank": number, "host": f"node{number}", "ranks": [], "reported": True,
             "applied_fixes": {}, "probes": []}
        )  # fmt: skip
    links = {n: NodeLink("eth0", mbps) for n in range(4)} if mbps else {}
    for node in cluster["nodes"]:
        node["link"] = to_jsonable(links[node["node_rank"]]) if mbps else None
    cluster["isolation"] = to_jsonable(isolation_facts(4, tests, links=links, backend="gloo"))
    document["description"] = description
    document["expect"] = sorted({*document["expect"], *extra})
    (ROOT / "fixtures" / "jobs" / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n")


def main() -> None:
    model = Model(4, slow={2}, unreachable={3})
    isolate(4, model.run_round)
    write(
        "isolate-bad-nodes-node0",
        "Four nodes, node2's link throttled to 20 Mbit/s and node3 dropping connections "
        "(modelled pair rounds): DDP219 names both with --exclude=node[2-3].",
        model.tests,
        ["DDP219"],
    )
    path = [
        PairTest((0, 1), 1, connected=False, error="Connection refused"),
        PairTest((2, 3), 1, True, True, 10.0),
        PairTest((0, 2), 2, True, True, 10.0),
        PairTest((1, 3), 2, True, True, 10.0),
    ]
    write(
        "isolate-pair-path-node0",
        "Four nodes where only the path between node0 and node1 fails (modelled): DDP220.",
        path,
        ["DDP220"],
    )
    alike = [PairTest((0, 1), 1, True, True, 0.021), PairTest((2, 3), 1, True, True, 0.019)]
    write(
        "isolate-slow-alike-node0",
        "Four nodes on 100 Gbit/s interfaces whose pairs all run at about 0.02 GB/s (modelled): "
        "every pair passes against the median, DDP222 names them against the links' band.",
        alike,
        ["DDP222"],
        mbps=100_000,
    )
    healthy = [PairTest((0, 1), 1, True, True, 2.9), PairTest((2, 3), 1, True, True, 3.1)]
    write(
        "isolate-healthy-banded-node0",
        "Four nodes on 100 Gbit/s interfaces, pairs at about 3 GB/s over gloo (modelled): "
        "within the links' band, no finding.",
        healthy,
        [],
        mbps=100_000,
    )


if __name__ == "__main__":
    main()
