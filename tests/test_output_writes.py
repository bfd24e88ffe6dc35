"""The doctor writes only what it should (issue 19): -o never follows a symbolic link, never
writes onto one of its inputs, and replaces a report through a temporary file and a rename, so
a failed write leaves the previous report whole; a cut at a line start never reads a giant
line whole; closed or full standard streams and `| head` give one line and a documented code."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_doctor import cli
from ddp_doctor.logscan.reader import skip_to_line_start
from ddp_doctor.trust import output

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "fixtures" / "logs" / "barrier_rank_missing_torch2.log"


def logs(*args: str) -> CliRunner:
    return CliRunner().invoke(cli.cli, ["logs", *args])


def test_output_through_a_symlink_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "report.md").symlink_to(target)
    result = logs(str(LOG), "-o", str(tmp_path / "report.md"))
    assert result.exit_code == 2 and "symbolic link" in result.output
    assert target.read_text() == "keep me"


def test_output_onto_the_input_log_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(LOG.read_bytes())
    result = logs(str(log), "-o", str(log))
    assert result.exit_code == 2 and "inputs" in result.output
    assert log.read_bytes() == LOG.read_bytes()


def test_a_failed_write_leaves_the_previous_report_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "report.md"
    report.write_text("the previous report\n")

    def full_disk(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    result = logs(str(LOG), "-o", str(report))
    assert result.exit_code == 2 and "No space left" in result.output
    assert report.read_text() == "the previous report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temporary file left


def test_a_report_replaces_the_old_one_with_its_mode(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text("old")
    report.chmod(0o600)
    assert logs(str(LOG), "--format", "json", "-o", str(report)).exit_code == 1
    assert report.read_text().startswith("{") and (report.stat().st_mode & 0o777) == 0o600


def test_a_non_utf8_file_name_is_written_and_shown_escaped(tmp_path: Path) -> None:
    name = os.fsdecode(b"report-\xff\x1b[2J.md")
    output.emit("text", tmp_path / name, "markdown")
    assert (tmp_path / name).read_text() == "text\n"
    assert "\x1b" not in output.escape_name(tmp_path / name)


def test_the_cut_moves_to_a_line_start_without_reading_the_line_whole() -> None:
    stream = io.BytesIO(b"x" * (8 << 20) + b"\nnext line\n")
    stream.seek(10)
    skip_to_line_start(stream, limit=16 << 20)
    assert stream.read() == b"next line\n"
    stream.seek(10)
    skip_to_line_start(stream, limit=1 << 20)  # past the limit: mid-line, as the scanner reads
    assert stream.tell() == 10 + (1 << 20)


@pytest.mark.slow  # CLI subprocesses
def test_a_reader_that_goes_away_ends_the_output_with_exit_0() -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ddp_doctor", "rules", "--format", "json"],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == b""


@pytest.mark.slow  # CLI subprocesses
def test_a_full_stdout_is_one_line_and_exit_2() -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [sys.executable, "-m", "ddp_doctor", "logs", str(LOG)],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    assert done.returncode == 2
    assert done.stderr.decode().strip().count("\n") == 0 and b"No space" in done.stderr


@pytest.mark.slow  # CLI subprocesses
def test_closed_standard_streams_give_one_line_and_the_report_code() -> None:
    program = "import os, sys, runpy; os.close({fd}); sys.argv = ['ddp-doctor', 'logs', {log!r}]; runpy.run_module('ddp_doctor', run_name='__main__')"
    no_stdout = subprocess.run(
        [sys.executable, "-c", program.format(fd=1, log=str(LOG))],
        stderr=subprocess.PIPE,
        timeout=60,
    )
    assert no_stdout.returncode == 2 and b"standard output is closed" in no_stdout.stderr
    no_stderr = subprocess.run(
        [sys.executable, "-c", program.format(fd=2, log=str(LOG))],
        capture_output=False,
        stdout=subprocess.PIPE,
        timeout=60,
    )
    assert no_stderr.returncode == 1 and b"DDP" in no_stderr.stdout


def test_logs_dir_reports_what_its_limits_left_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddp_doctor.logscan import inputs

    monkeypatch.setattr(inputs, "MAX_FILES", 3)
    monkeypatch.setattr(inputs, "MAX_DEPTH", 2)
    for index in range(5):
        (tmp_path / f"rank{index}.log").write_bytes(LOG.read_bytes())
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "rank9.log").write_bytes(LOG.read_bytes())
    result = CliRunner().invoke(cli.cli, ["logs", "--format", "json", str(tmp_path)])
    import json

    (note,) = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "DDP907"]
    assert note["evidence"]["files_past_limit"] == 2
    assert note["evidence"]["folders_too_deep"] == 1
