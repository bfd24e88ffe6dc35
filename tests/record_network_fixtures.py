"""Records the doctor's run on broken networks as fixtures/jobs/*.json, like
record_job_fixtures.py: each run happens inside a fresh network namespace (tests/netns.py).

Run by hand as root: `python tests/record_network_fixtures.py [NAME...]`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import netns
from record_job_fixtures import OUT

# Broken networks, recorded by running the doctor inside a network namespace (as root):
# name -> (commands run in the namespace first, extra arguments, expected codes, description)
NETWORK_SCENARIOS = {
    "no-interface-up": (
        (),
        (),
        ["DDP209"],
        "a network namespace whose only interface, lo, is down",
    ),
    "master-unroutable": (
        (("ip", "link", "set", "lo", "up"),),
        ("--master-addr", "10.8.0.1"),
        ["DDP204", "DDP208", "DDP210"],
        "a namespace with only loopback up; --master-addr in a subnet it has no route to",
    ),
}


def record_in_namespace(
    name: str, setup: tuple, extra: tuple, expect: list[str], description: str
) -> None:
    args = ["run", "--format", "json", "--timeout", "20", "--sizes", "1K:64K:8", "--iters", "2"]
    with netns.namespace(setup) as namespace:
        done = subprocess.run(
            netns.in_namespace(namespace, [sys.executable, "-m", "ddp_doctor", *args, *extra]),
            capture_output=True,
            text=True,
            timeout=60,
        )
    report = json.loads(_without_local_paths(done.stdout))
    report["description"] = description + " (recorded in a network namespace)"
    report["expect"] = expect
    (OUT / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(name, [f["code"] for f in report["findings"]])


def _without_local_paths(text: str) -> str:
    return text.replace(sys.prefix, "~/venv").replace(str(OUT.parent.parent), "~/ddp-doctor")


def main() -> None:
    for name in sys.argv[1:] or list(NETWORK_SCENARIOS):
        record_in_namespace(name, *NETWORK_SCENARIOS[name])


if __name__ == "__main__":
    main()
