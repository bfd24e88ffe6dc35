"""Helpers for tests that trace real gloo jobs: run `ddp-doctor trace` in-process with its
temporary folder inside the test's own tmp_path (so the job's processes carry that path in
their environment), read `# expect:` markers, and find processes left behind."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ddp_doctor import cli

ROOT = Path(__file__).resolve().parent.parent
TRACE_FIXTURES = ROOT / "fixtures" / "trace"
EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


@dataclass(frozen=True)
class Traced:
    document: dict[str, Any]
    exit_code: int
    seconds: float
    output: str

    @property
    def findings(self) -> list[dict[str, Any]]:
        """What the trace judged; the machine's own codes (DDP0xx, from the env, NVML and
        torch facts a trace report carries as `run`'s does) depend on the machine running the
        tests, and the run tests cover them."""
        return [f for f in self.document["findings"] if not f["code"].startswith("DDP0")]

    @property
    def codes(self) -> set[str]:
        return {f["code"] for f in self.findings}

    @property
    def trace(self) -> dict[str, Any]:
        return next(p for p in self.document["probes"] if p["probe"] == "trace")["facts"]

    def at_lines(self, script: Path) -> Counter[tuple[int, str]]:
        found: Counter[tuple[int, str]] = Counter()
        for finding in self.findings:
            location = finding["location"]
            if location and Path(location["path"]).name == script.name:
                found[(location["line"], finding["code"])] += 1
        return found

    def without_location(self) -> set[str]:
        return {f["code"] for f in self.findings if not f["location"]}


def trace(
    tmp_path: Path,
    command: list[str],
    *options: str,
    env: dict[str, str] | None = None,
) -> Traced:
    """`ddp-doctor trace --format json OPTIONS -- COMMAND`, the doctor's folder in tmp_path."""
    doctor_tmp = tmp_path / "doctor"
    doctor_tmp.mkdir(exist_ok=True)
    args = ["trace", "--format", "json", "--python", sys.executable, *options, "--", *command]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(doctor_tmp))
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        started = time.monotonic()
        result = CliRunner().invoke(cli.cli, args, catch_exceptions=False)
        seconds = time.monotonic() - started
    try:
        document = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(
            f"not JSON (exit {result.exit_code}): {result.output[-2000:]}"
        ) from None
    return Traced(document, result.exit_code, seconds, result.output)


def expected_markers(script: Path) -> Counter[tuple[int, str]]:
    found: Counter[tuple[int, str]] = Counter()
    for number, line in enumerate(script.read_text().splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            for code in match.group(1).split(","):
                if code.strip():
                    found[(number, code.strip())] += 1
    return found


def processes_marked(marker: str) -> list[int]:
    """Processes whose environment or command line holds `marker` (this test's tmp_path);
    other helpers' jobs on the machine never match."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").glob("[0-9]*"):
        if int(entry.name) == os.getpid():
            continue
        try:
            data = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in data:
            found.append(int(entry.name))
    return found


def assert_nothing_left(marker: Path, wait_s: float = 5.0) -> None:
    deadline = time.monotonic() + wait_s
    left = processes_marked(str(marker))
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_marked(str(marker))
    assert left == [], f"processes of the job left behind: {left}"
