"""The log scanner's contract: the prefilter misses nothing, streaming in any pieces gives the
same answer, memory stays bounded, repeats collapse, and the root cause comes first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from log_scans import codes
from wordings_table import read_table

from ddp_doctor import registry
from ddp_doctor.logscan import LogScanner, scan_lines, scan_text
from ddp_doctor.logscan.lines import EVIDENCE_CHARS, read_line
from ddp_doctor.logscan.pattern import Pattern
from ddp_doctor.logscan.patterns import HINTS, PATTERNS, all_anchors
from ddp_doctor.logscan.scanner import PREFILTER, first_pattern

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
WATCHDOG = (
    "[rank{rank}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out."
)
OOM = "[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
ROOT_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : h
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 10)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""


# --- the table and the prefilter ----------------------------------------------------------
@pytest.mark.parametrize("anchor", sorted(set(all_anchors())))
def test_prefilter_finds_every_anchor_inside_any_line(anchor: str) -> None:
    line = f"2026-01-01 noise before {anchor} and noise after\n".encode()
    assert PREFILTER.candidates(line), anchor


def test_every_pattern_and_hint_fires_on_some_fixture() -> None:
    """Which row each fixture line belongs to, the way the scanner decides it (the fixture
    logs, and the wordings table of fixtures/logs/wordings)."""
    used: set[int] = set()
    texts = [log.read_bytes() for log in FIXTURES.glob("*.log")]
    texts += [wording.text.encode() for wording in read_table()]
    for text in texts:
        for number, raw in enumerate(text.splitlines(), 1):
            body = read_line(raw, number).body
            row = first_pattern(body)
            used.update(id(hint) for hint in HINTS if hint.matches(body))
            if row is not None:
                used.add(id(row))
    rows = (*PATTERNS, *HINTS)
    unused = [f"{p.code or p.name} {p.anchors[0]!r}" for p in rows if id(p) not in used]
    assert not unused


def test_table_names_agree_with_the_registry() -> None:
    for pattern in PATTERNS:
        spec = registry.RULES.get(pattern.code)
        if spec is not None:
            assert spec.name == pattern.name, pattern.code


def test_log_codes_are_registered_on_import_with_four_part_docs() -> None:
    log_specs = [spec for spec in registry.all_rules() if spec.code.startswith("DDP5")]
    for spec in log_specs:
        assert spec.judged == "log"
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", spec.name), spec.name
        assert spec.summary and not spec.summary.startswith(("What", " "))
        for part in ("What it finds:", "Why it matters:", "Example:", "Fix:"):
            assert part in spec.doc, f"{spec.code} lacks {part}"


def test_importing_logscan_does_not_import_torch() -> None:
    probe = "import sys, ddp_doctor.logscan; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


# --- streaming ------------------------------------------------------------------------------
@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_any_chunking_gives_the_same_findings(piece: int) -> None:
    data = (FIXTURES / "cuda_oom_two_nodes_slurm.log").read_bytes()
    scanner = LogScanner()
    for start in range(0, len(data), piece):
        scanner.feed(data[start : start + piece])
    assert scanner.findings() == scan_text(data.decode())


def test_scan_lines_accepts_lines_with_and_without_endings() -> None:
    text = (FIXTURES / "duplicate_gpu.log").read_text()
    expected = scan_text(text)
    assert scan_lines(text.splitlines()) == expected
    assert scan_lines(text.splitlines(keepends=True)) == expected


def test_a_last_line_without_newline_is_scanned() -> None:
    assert codes("ok\nRuntimeError: CUDA error: invalid device ordinal") == ["DDP027"]


def test_an_endless_line_is_scanned_in_pieces() -> None:
    scanner = LogScanner()
    scanner.feed(b"x" * (3 << 20) + b" RuntimeError: CUDA error: invalid device ordinal")
    scanner.feed(b"\nnext line\n")
    [finding] = scanner.findings()
    assert finding.code == "DDP027" and finding.evidence["line"] == 1
    assert len(str(finding.evidence["text"])) <= EVIDENCE_CHARS + 6
    assert scanner.stats.lines == 2


def test_line_numbers_count_every_line() -> None:
    text = "a\r\nb\r\n\r\nRuntimeError: Distributed package doesn't have NCCL built in\r\n"
    [finding] = scan_text(text)
    assert finding.evidence["line"] == 4
    assert finding.evidence["text"].endswith("built in")


def test_repeats_collapse_into_one_finding_with_a_count() -> None:
    text = "\n".join(WATCHDOG.format(rank=n % 8) for n in range(5000))
    [finding] = scan_text(text)
    assert finding.code == "DDP302"
    assert finding.evidence["count"] == 5000
    assert finding.evidence["line"] == 1
    assert finding.evidence["ranks"] == list(range(8))
    assert (finding.evidence["op_type"], finding.evidence["seq"]) == ("ALLREDUCE", 12)
    assert finding.evidence["timeout_ms"] == 600000


def test_ansi_codes_and_progress_bars_stay_out_of_the_evidence() -> None:
    bar = " 12%|█▏        | 120/1000 [00:31<03:40,  4.0it/s]\r 13%|█▎        | 130/1000"
    line = f"\x1b[1m[rank3]:\x1b[0m {bar}\r\x1b[31mRuntimeError\x1b[0m: CUDA error: invalid device ordinal"
    [finding] = scan_text(line)
    assert finding.evidence["rank"] == 3
    assert finding.evidence["text"] == "RuntimeError: CUDA error: invalid device ordinal"


def test_a_distinct_speaker_does_not_lend_its_facts() -> None:
    text = "\n".join(
        [
            "[rank0]: torch.OutOfMemoryError: CUDA out of memory.",
            OOM.format(rank=1),
        ]
    )
    [finding] = scan_text(text)
    assert finding.evidence["rank"] == 0 and "requested" not in finding.evidence


def test_a_following_line_of_the_same_error_completes_it() -> None:
    text = (
        "RuntimeError: Expected to have finished reduction in the prior iteration before "
        "starting a new one.\nParameter indices which did not receive grad for rank 3: 7 8\n"
    )
    [finding] = scan_text(text)
    assert (finding.evidence["rank"], finding.evidence["param_indices"]) == (3, "7 8")


# --- root cause first -------------------------------------------------------------------
def test_a_cause_comes_before_the_symptoms_printed_before_it() -> None:
    text = "\n".join([WATCHDOG.format(rank=0), OOM.format(rank=1)])
    assert codes(text) == ["DDP505", "DDP302"]


def test_torchruns_root_cause_rank_comes_before_an_earlier_rank() -> None:
    text = "\n".join(
        [
            "[rank0]: RuntimeError: CUDA error: invalid device ordinal",
            "[rank2]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
            ROOT_SUMMARY,
        ]
    )
    assert codes(text) == ["DDP025", "DDP027", "DDP307"]


def test_local_rank_prefixes_count_as_the_root_causes_rank() -> None:
    """torch 1.9 - 2.1 with `torchrun --tee 3` prefixes lines with "[defaultN]:" only."""
    summary = ROOT_SUMMARY.replace("rank      : 2 (local_rank: 2)", "rank      : 1 (local_rank: 1)")
    text = "\n".join(
        [
            "[default0]:RuntimeError: CUDA error: invalid device ordinal",
            "[default1]:RuntimeError: CUDA error: uncorrectable ECC error encountered",
            summary,
        ]
    )
    assert codes(text) == ["DDP025", "DDP027", "DDP307"]
    assert scan_text(text)[0].evidence["local_rank"] == 1


def test_a_mention_of_childfailederror_is_not_a_summary() -> None:
    mention = "we catch ChildFailedError and retry\n" + "step\n" * 300
    assert codes(mention + "RuntimeError: CUDA error: invalid device ordinal\n") == ["DDP027"]


def test_a_rank_killed_by_sigkill_is_a_cause_with_the_signals_fix() -> None:
    text = (FIXTURES / "store_wait_after_kill.log").read_text()
    first = scan_text(text)[0]
    assert (first.code, first.evidence["signal"]) == ("DDP307", "SIGKILL")
    assert first.fix is not None and first.fix != registry.spec_for("DDP307").fix


# --- no invention -----------------------------------------------------------------------
def test_every_pattern_names_a_registered_code_by_its_name() -> None:
    """Findings are built from the registered spec (its name and fix), never from the row."""
    for pattern in PATTERNS:
        spec = registry.spec_for(pattern.code)
        assert (spec.code, spec.name) == (pattern.code, pattern.name)
        assert spec.fix.text
    [finding] = scan_text("RuntimeError: CUDA error: invalid device ordinal")
    assert (finding.code, finding.name) == ("DDP027", "more-ranks-than-gpus")
    assert finding.fix is not None


def test_every_pattern_has_anchors() -> None:
    assert all(isinstance(p, Pattern) and p.anchors for p in PATTERNS)
