"""Records `run --isolate` on four simulated hosts (tests/multinode_runs.py) as
fixtures/jobs/isolate-recorded-*-nodeN.json: each node's own JSON report, with "description"
and "expect" (the DDP2xx-DDP4xx codes it must give when judged again; tests/test_job_rules.py
checks them). These are real runs; the isolate-bad-nodes and isolate-pair-path fixtures beside
them are modelled (tests/make_isolation_fixtures.py), for what four namespaces cannot show.

Run by hand as root: `python tests/record_isolation_fixtures.py [healthy|throttled|cut-off]`.
A recording whose codes differ from the expectation is reported, not written.
"""

from __future__ import annotations

import sys

from multinode_runs import ISOLATE_FAULTS, isolate_on_four_hosts
from record_multinode_fixtures import write

# per case: the nodes whose reports are kept, and the codes each must give
EXPECT = {
    "healthy": {0: []},
    "throttled": {0: ["DDP219"], 1: ["DDP217"]},
    "cut-off": {0: ["DDP219"]},
}


def record(fault: str) -> None:
    runs, _ = isolate_on_four_hosts(fault)
    description = f"run --isolate on four simulated hosts (recorded): {ISOLATE_FAULTS[fault]}"
    for node, expect in EXPECT[fault].items():
        report = dict(runs[node].report, description=description, expect=expect)
        write(f"isolate-recorded-{fault}-node{node}", report)


def main() -> None:
    for fault in sys.argv[1:] or list(EXPECT):
        record(fault)


if __name__ == "__main__":
    main()
