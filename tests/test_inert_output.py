"""Nothing from an input reaches a terminal as a control sequence, and Markdown pasted into
GitHub stays inert (issue 19): report facts under `diagnose -v`, file names (newlines too), a
pickle's global name and log lines (C1 CSI/OSC, BEL, private CSI forms); fences no job output
can close, table cells escaped for |, HTML, @, backticks and line breaks."""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_doctor import cli
from ddp_doctor.render.markdown import fence_for, render_markdown
from ddp_doctor.trust.inert import inert

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"
HOSTILE = (
    "\x1b[2J\x1b]0;pwned\x07\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
    "\x9b31m\x9d0;title\x9c\x1b[?1049h\x1bP+q\x1b\\\x07\r\x08\u202egnp.exe\u2066x\u2069"
)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def hostile_report(tmp_path: Path) -> Path:
    report = json.loads(HEALTHY.read_text())
    for probe in report["probes"]:
        if probe["probe"] == "job":
            probe["facts"]["exit_code"] = 1
            probe["facts"]["output_tail"] = f"RuntimeError: {HOSTILE}\n````\n</details>\n@octocat"
        if probe["probe"] == "host":
            probe["facts"]["hostname"] = f"node{HOSTILE}"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_report_facts_reach_no_terminal_as_controls(fmt: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.cli, ["diagnose", "-v", "--format", fmt, str(hostile_report(tmp_path))]
    )
    assert result.exit_code == 1
    assert not RAW.search(result.stdout), RAW.findall(result.stdout)[:5]
    assert "\\x1b" in result.stdout  # shown, as text


def test_json_keeps_the_values_and_escapes_them(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.cli, ["diagnose", "--format", "json", str(hostile_report(tmp_path))]
    )
    assert not RAW.search(result.stdout)
    host = next(p for p in json.loads(result.stdout)["probes"] if p["probe"] == "host")
    assert host["facts"]["hostname"] == f"node{HOSTILE}"  # the same value, once decoded


def test_a_file_name_with_a_newline_and_escapes_is_one_escaped_line(tmp_path: Path) -> None:
    name = "evil\n\x1b[2Jtrain.py"
    (tmp_path / name).write_text("import torch\nmodel = torch.nn.DataParallel(model)\n")
    result = CliRunner().invoke(cli.cli, ["check", str(tmp_path / name)])
    finding_lines = [line for line in result.stdout.splitlines() if "DDP101" in line]
    assert finding_lines and "evil\\n\\x1b[2Jtrain.py" in finding_lines[0]
    assert not RAW.search(result.stdout)


def test_a_non_utf8_file_name_is_shown_escaped(tmp_path: Path) -> None:
    name = os.fsdecode(b"train-\xff.py")
    (tmp_path / name).write_text("import torch\nmodel = torch.nn.DataParallel(model)\n")
    result = CliRunner().invoke(cli.cli, ["check", str(tmp_path)])
    assert result.exit_code in (0, 1) and "train-\\udcff.py" in result.stdout


def test_a_pickle_global_name_is_shown_inert(tmp_path: Path) -> None:
    data = pickle.dumps({"entries": []}, protocol=2).replace(
        b"}", b"c" + b"os\x1b[2J\nsystem\n" + b"}", 1
    )
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(data)
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps({"entries": []}, protocol=2))
    result = CliRunner().invoke(cli.cli, ["logs", "-v", str(tmp_path)])
    assert not RAW.search(result.stdout + (result.stderr or ""))


def test_log_lines_with_c1_and_private_csi_reach_no_terminal(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(
        "[rank0]: RuntimeError: boom \x9b?25l\x1b[?1049h\x9d0;t\x07 \x1bP+q\x1b\\\n"
        "node:1:1 [0] NCCL WARN odd \x1b]52;c;aGk=\x07 \u202eexe.txt\n".encode()
    )
    result = CliRunner().invoke(cli.cli, ["logs", "-v", str(log)])
    assert not RAW.search(result.stdout), RAW.findall(result.stdout)


def test_the_fold_has_a_fence_no_body_can_close(tmp_path: Path) -> None:
    body = "out\n````\n`````\nmore"
    fence = fence_for(body)
    assert len(fence) == 6 and not any(line.startswith(fence) for line in body.splitlines())
    result = CliRunner().invoke(
        cli.cli, ["diagnose", "--format", "markdown", str(hostile_report(tmp_path))]
    )
    text = result.stdout
    fold = text[text.index("<summary>job output") :]
    opening = fold.splitlines()[2]
    assert opening.startswith("`````")  # longer than the output's own four backticks
    assert text.count("<details>") == text.count("</details>") - 1  # one is the output's, fenced


def test_table_cells_are_inert() -> None:
    message = "a | b <img src=x onerror=alert(1)> </details> @octocat `code` line\nbreak"
    document = {
        "probes": [],
        "findings": [
            {
                "severity": "error",
                "code": "DDP307",
                "name": "rank-crashed",
                "location": None,
                "message": message,
                "evidence": {},
                "fix": {"text": "fix <b>it</b>", "commands": ["echo `x` | y"]},
            }
        ],
    }
    row = next(line for line in render_markdown(document).splitlines() if "DDP307" in line)
    cells = re.split(r"(?<!\\)\|", row)
    assert len(cells) == 9  # 7 columns between 8 bars: the message's "|" did not add one
    assert "<img" not in row and "</details>" not in row and "@octocat" not in row
    assert "line break" in row and "\\`code\\`" in row


def test_inert_keeps_the_doctors_own_colour_only() -> None:
    own = "\x1b[31m\x1b[1mERROR (2)\x1b[0m"
    assert inert(f"{own}\n  DDP307 x: \x1b[31mred\x1b[0m", "table") == (
        f"{own}\n  DDP307 x: \\x1b[31mred\\x1b[0m"
    )


@pytest.mark.parametrize("fmt", ["sarif", "json"])
def test_a_non_utf8_file_name_in_json_formats_stays_json(fmt: str, tmp_path: Path) -> None:
    name = os.fsdecode(b"train-\xff.py")
    (tmp_path / name).write_text("import torch\nmodel = torch.nn.DataParallel(model)\n")
    result = CliRunner().invoke(cli.cli, ["check", "--format", fmt, str(tmp_path)])
    assert result.exit_code == 0, result.output  # DDP101 is a warning
    json.loads(result.stdout)
    assert ("train-%FF.py" if fmt == "sarif" else "train-\\udcff.py") in result.stdout
