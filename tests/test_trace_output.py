"""`trace` shows the run's own output live on stderr, each rank's lines prefixed, keeps a
bounded tail for the report (nothing on disk), escapes control characters, and in CI says
every HEARTBEAT_S that it is alive; in a terminal one status line with one timer."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddp_doctor.patient.trace.output import route_output
from ddp_doctor.probes.trace.output import LiveOutput, OutputTail, shown
from ddp_doctor.progress import Progress

ROOT = Path(__file__).resolve().parent.parent


def test_the_tail_is_a_ring_of_the_last_bytes() -> None:
    tail = OutputTail(limit=1000)
    for number in range(10_000):
        tail.add([f"line {number:05d} " + "x" * 40])
    text = tail.text()
    assert len(text.encode()) <= 1000 and text.rstrip().endswith("line 09999 " + "x" * 40)
    assert tail.total > 100 * tail.limit  # everything passed through, only the end is kept


def test_control_characters_never_reach_a_terminal() -> None:
    assert shown(b"\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert shown(b" 10%|#\r 50%|#####\r") == " 50%|#####"  # what the terminal showed last
    assert shown(b"caf\xc3\xa9 \xff") == "café \ufffd"


def test_rank_output_arrives_prefixed_while_the_rank_still_runs(tmp_path: Path) -> None:
    """A child standing in for a rank routes fds 1 and 2 into its FIFO, prints, and waits;
    its lines must arrive before it ends, its stderr (a C library's, fd 2) too."""
    folder = tmp_path / "output"
    folder.mkdir()
    lines: list[tuple[float, str]] = []
    live = LiveOutput(folder, lambda line: lines.append((time.monotonic(), line)))
    code = (
        "import os, sys, time; from pathlib import Path\n"
        "from ddp_doctor.patient.trace.output import route_output\n"
        f"assert route_output(Path({str(tmp_path)!r}), 3)\n"
        "print('at once'); os.write(2, b'from fd 2\\n'); time.sleep(3); print('at the end')\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    started = time.monotonic()
    try:
        while child.poll() is None and not any("at once" in text for _, text in lines):
            live.look_for_ranks()
            time.sleep(0.05)
        assert child.poll() is None, "the line came only after the rank ended"
        assert time.monotonic() - started < 3
    finally:
        child.wait(timeout=30)
    tail = live.finish()
    texts = [line for _, text in lines for line in text.splitlines()]
    assert texts == ["[rank3]: at once", "[rank3]: from fd 2", "[rank3]: at the end"]
    assert tail.splitlines() == texts


def test_a_rank_without_a_doctor_keeps_its_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "output").mkdir()
    monkeypatch.setattr("ddp_doctor.patient.trace.output.OPEN_WAIT_S", 0.1)
    assert route_output(tmp_path, 0) is False
    assert list((tmp_path / "output").iterdir()) == []  # its FIFO removed again


def test_a_fifo_nobody_opened_does_not_hold_the_end(tmp_path: Path) -> None:
    folder = tmp_path / "output"
    folder.mkdir()
    os.mkfifo(folder / "rank0.1.fifo")
    live = LiveOutput(folder, None)
    live.look_for_ranks()
    finished = threading.Event()
    threading.Thread(target=lambda: (live.finish(), finished.set()), daemon=True).start()
    assert finished.wait(10)


def test_without_a_terminal_a_heartbeat_every_period_and_the_lines() -> None:
    stream = io.StringIO()
    progress = Progress(None, stream, heartbeat_s=30)
    progress.say("trace: 2 ranks alive")
    progress.say("trace: 2 ranks alive, step 3")  # within 30 s: not repeated
    progress.line("[rank0]: hello")
    progress.started -= 31
    progress.last_beat = (progress.last_beat or 0) - 31
    progress.say("trace: 2 ranks alive, step 9")
    lines = stream.getvalue().splitlines()
    assert [line.split("  [")[0] for line in lines] == [
        "trace: 2 ranks alive",
        "[rank0]: hello",
        "trace: 2 ranks alive, step 9",
    ]
    assert "\r" not in stream.getvalue()


def test_in_a_terminal_one_status_line_with_one_timer() -> None:
    terminal = io.StringIO()
    progress = Progress(terminal, terminal)
    progress.say("trace: 2 ranks alive")
    progress.line("[rank1]: hello")
    drawn = terminal.getvalue().split("\r")[-1]
    assert drawn.count(" s]") == 1 and "(" not in drawn
    assert "[rank1]: hello\n" in terminal.getvalue()


@pytest.mark.slow
def test_trace_shows_a_line_at_once_without_a_terminal(tmp_path: Path) -> None:
    """The issue's acceptance: stderr a pipe, the script prints, then works on; the line is
    on the doctor's stderr within seconds, while the run still goes on."""
    script = tmp_path / "slow_start.py"
    script.write_text("import time\nprint('first line', flush=False)\ntime.sleep(20)\n")
    doctor = subprocess.Popen(
        [sys.executable, "-m", "ddp_doctor", "trace", "--timeout", "60", "--format", "json", "--",
         sys.executable, str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, text=True,
    )  # fmt: skip
    started = time.monotonic()
    try:
        assert doctor.stderr is not None
        for line in doctor.stderr:
            if "first line" in line:
                break
        seen_after = time.monotonic() - started
        assert line.strip() == "[rank0]: first line"
        assert doctor.poll() is None and seen_after < 15, seen_after
    finally:
        doctor.terminate()  # the doctor stops the run it started, as on any SIGTERM
        doctor.wait(timeout=30)


def test_torch_and_toolchain_after_the_run_stay_within_the_time_limit() -> None:
    """A run that used all of --timeout gets torch's build skipped, with why, not overrun."""
    from ddp_doctor.judge import judge
    from ddp_doctor.model import ProbeStatus
    from ddp_doctor.run.checkup import Budget
    from ddp_doctor.trace.operation import after_the_run

    used_up = Budget(0.0)
    results = after_the_run(sys.executable, used_up, 20.0, Progress(None))
    assert {r.probe: r.status for r in results} == {
        "torch": ProbeStatus.SKIPPED,
        "collect_env": ProbeStatus.SKIPPED,
    }
    assert all("--timeout 20" in (r.error or "") for r in results)
    assert not {f.code for f in judge(results)} & {"DDP001", "DDP902", "DDP904"}


def test_a_probe_cut_by_what_the_run_left_is_skipped_not_slow() -> None:
    from ddp_doctor.model import ProbeResult, ProbeStatus
    from ddp_doctor.trace.operation import _cut_short

    cut = _cut_short(ProbeResult("torch", ProbeStatus.TIMED_OUT, None, 5.4), "no time left")
    assert cut.status is ProbeStatus.SKIPPED and cut.error == "no time left"
    done = ProbeResult("torch", ProbeStatus.OK, None, 1.0)
    assert _cut_short(done, "x") is done
