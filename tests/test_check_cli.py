"""`ddp-doctor check` from the command line: formats, exit codes, selection, suppression,
config, and bad input. Tests assert codes and facts, not wording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ddp_doctor.cli import cli

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
LEGACY = "fixtures/scripts/realistic/legacy_launch.py"
TEXT_FILES = "fixtures/scripts/text"

BUGGY = """\
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def train(model, ds):
    dist.init_process_group("nccl")
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler)
    for epoch in range(3):
        for batch in loader:
            model(batch).backward()
    dist.destroy_process_group()
"""
SAMPLER_LINE = 8


def check(*args: str) -> Result:
    return CliRunner().invoke(cli, ["check", *args], catch_exceptions=False)


def codes(result: Result) -> list[str]:
    return [f["code"] for f in json.loads(result.stdout)["findings"]]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    return tmp_path


# formats -------------------------------------------------------------------------------------


def test_text_is_one_line_per_finding_like_ruff(project: Path) -> None:
    result = check("train.py")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(
        line.startswith(f"train.py:{SAMPLER_LINE}:15: error: DDP113 [set-epoch-missing] ")
        for line in lines
    )


def test_verbose_text_shows_the_fix(project: Path) -> None:
    lines = check("train.py", "-v").stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if " DDP113 " in line)
    assert lines[at + 1].strip().startswith("fix: ") and "set_epoch" in lines[at + 1]


def test_the_same_mistake_on_many_lines_is_one_finding(tmp_path: Path) -> None:
    script = tmp_path / "many.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def main(model, batch, target):\n"
        "    dist.init_process_group('nccl')\n"
        "    model = model.cuda()\n"
        "    batch = batch.cuda()\n"
        "    target = target.to('cuda')\n"
        "    return model(batch), target\n",
        encoding="utf-8",
    )
    document = json.loads(check(str(script), "--format", "json").stdout)
    placements = [f for f in document["findings"] if f["code"] == "DDP127"]
    assert len(placements) == 1
    assert placements[0]["location"]["line"] == 7
    assert placements[0]["evidence"]["also_lines"] == [8, 9]


def test_json_has_the_run_schema_with_locations(project: Path) -> None:
    document = json.loads(check("train.py", "--format", "json").stdout)
    assert {"schema_version", "tool_version", "created", "probes", "findings"} <= set(document)
    assert document["probes"] == []
    finding = next(f for f in document["findings"] if f["code"] == "DDP113")
    assert finding["location"] == {"path": "train.py", "line": SAMPLER_LINE, "column": 15}
    assert finding["severity"] == "error" and finding["fix"]["text"]
    assert finding["evidence"]["sampler"] == "sampler"


def test_table_lists_the_code(project: Path) -> None:
    result = check("train.py", "--format", "table")
    assert result.exit_code == 1 and "DDP113" in result.output


def test_sarif_is_2_1_0_with_rules_and_regions(project: Path) -> None:
    document = json.loads(check("train.py", "--format", "sarif").stdout)
    assert document["version"] == "2.1.0"
    run = document["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    result = next(r for r in run["results"] if r["ruleId"] == "DDP113")
    assert rule_ids[result["ruleIndex"]] == "DDP113" and result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.py"
    assert location["region"]["startLine"] == SAMPLER_LINE


def test_github_annotations(project: Path) -> None:
    lines = check("train.py", "--format", "github").stdout.splitlines()
    assert any(
        line.startswith("::error file=train.py,line=8,") and "DDP113" in line for line in lines
    )


def test_output_file(project: Path) -> None:
    result = check("train.py", "--format", "json", "--output", "report.json")
    assert result.exit_code == 1
    assert "DDP113" in codes_of_file(project / "report.json")


def codes_of_file(path: Path) -> list[str]:
    return [f["code"] for f in json.loads(path.read_text(encoding="utf-8"))["findings"]]


@pytest.mark.parametrize("fmt", ["text", "github", "sarif"])
def test_golden(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    output = check(LEGACY, TEXT_FILES, "--format", fmt).stdout
    if fmt == "sarif":
        output = output.replace(json.loads(output)["runs"][0]["tool"]["driver"]["version"], "X")
    golden = GOLDEN / f"check.{fmt}"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(output, encoding="utf-8")
    assert output == golden.read_text(encoding="utf-8")


# exit codes and selection --------------------------------------------------------------------


def test_fail_on(project: Path) -> None:
    (project / "ok.py").write_text(
        "import torch.distributed as dist\ndist.init_process_group('nccl')\n"
    )
    assert check("ok.py").exit_code == 0  # info findings only
    assert check("ok.py", "--fail-on", "info").exit_code == 1


@pytest.mark.parametrize("entry", ["DDP113", "DDP11", "set-epoch-missing"])
def test_ignore_by_code_prefix_or_name(project: Path, entry: str) -> None:
    assert "DDP113" not in codes(check("train.py", "--format", "json", "--ignore", entry))


def test_select(project: Path) -> None:
    assert set(codes(check("train.py", "--format", "json", "--select", "DDP106"))) == {"DDP106"}


def test_unknown_selector_is_a_usage_error(project: Path) -> None:
    assert check("train.py", "--select", "DDP999").exit_code == 2


# suppression and config ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "comment",
    [
        "# ddp-doctor: ignore[DDP113]",
        "# ddp-doctor: ignore",
        "# noqa: DDP113",
        "# noqa",
        "# NOQA:E501,DDP113",
    ],
)
def test_suppression_comment(project: Path, comment: str) -> None:
    lines = BUGGY.splitlines()
    lines[SAMPLER_LINE - 1] += "  " + comment
    (project / "train.py").write_text("\n".join(lines) + "\n")
    assert "DDP113" not in codes(check("train.py", "--format", "json"))


@pytest.mark.parametrize("comment", ["# ddp-doctor: ignore[DDP116]", "# noqa: E501 F401"])
def test_suppression_of_another_code_keeps_the_finding(project: Path, comment: str) -> None:
    lines = BUGGY.splitlines()
    lines[SAMPLER_LINE - 1] += "  " + comment
    (project / "train.py").write_text("\n".join(lines) + "\n")
    assert "DDP113" in codes(check("train.py", "--format", "json"))


def test_pyproject_ignore_and_select(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.ddp-doctor]\nignore = ["set-epoch-missing"]\n')
    assert "DDP113" not in codes(check("train.py", "--format", "json"))
    (project / "pyproject.toml").write_text('[tool.ddp-doctor]\nselect = ["DDP113"]\n')
    assert set(codes(check("train.py", "--format", "json"))) == {"DDP113"}


def test_pyproject_per_file_ignores_and_exclude(project: Path) -> None:
    (project / "scripts").mkdir()
    (project / "scripts" / "a.py").write_text(BUGGY)
    (project / "old").mkdir()
    (project / "old" / "b.py").write_text(BUGGY)
    (project / "pyproject.toml").write_text(
        '[tool.ddp-doctor]\nexclude = ["old/"]\n[tool.ddp-doctor.per-file-ignores]\n'
        '"scripts/*.py" = ["DDP113"]\n'
    )
    document = json.loads(check(".", "--format", "json").stdout)
    where = {(f["location"]["path"], f["code"]) for f in document["findings"]}
    assert ("train.py", "DDP113") in where
    assert not any(path.startswith(("scripts", "old")) and code == "DDP113" for path, code in where)
    assert not any(path.startswith("old") for path, _ in where)


@pytest.mark.parametrize(
    "table", ['[tool.ddp-doctor]\nselect = ["NOPE1"]\n', "[tool.ddp-doctor]\nspeed = 1\n", "[tool"]
)
def test_bad_config_is_a_usage_error(project: Path, table: str) -> None:
    (project / "pyproject.toml").write_text(table)
    result = check("train.py")
    assert result.exit_code == 2 and "pyproject.toml" in result.output


def test_exclude_option_and_gitignore(project: Path) -> None:
    for folder in ("gen", "ignored", ".venv"):
        (project / folder).mkdir()
        (project / folder / "x.py").write_text(BUGGY)
    (project / ".gitignore").write_text("ignored/\n")
    document = json.loads(check(".", "--format", "json", "--exclude", "gen/").stdout)
    paths = {f["location"]["path"] for f in document["findings"]}
    assert paths == {"train.py"}


# text files ----------------------------------------------------------------------------------


def test_launch_files_are_scanned_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    document = json.loads(check(TEXT_FILES, "--format", "json").stdout)
    where = {
        (Path(f["location"]["path"]).name, f["location"]["line"], f["code"])
        for f in document["findings"]
    }
    assert where == {
        ("train_legacy.sh", 3, "DDP124"),
        ("train_legacy.sh", 6, "DDP102"),  # and line 7: one finding per file
        ("job.yaml", 4, "DDP102"),
        ("README.md", 8, "DDP102"),  # the code block, not the prose at 4
    }
    legacy = next(f for f in document["findings"] if f["location"]["line"] == 6)
    assert legacy["evidence"]["also_lines"] == [7]


# bad input -----------------------------------------------------------------------------------


def test_syntax_error_is_reported_and_other_files_still_checked(project: Path) -> None:
    (project / "broken.py").write_text("def train(:\n    pass\n")
    document = json.loads(check("broken.py", "train.py", "--format", "json").stdout)
    broken = next(f for f in document["findings"] if f["code"] == "DDP910")
    assert broken["location"]["path"] == "broken.py" and broken["location"]["line"] == 1
    assert "DDP113" in [f["code"] for f in document["findings"]]


@pytest.mark.parametrize(
    "name, content",
    [
        ("latin1.py", "x = 'caf\xe9'\n".encode("latin-1")),
        ("binary.py", b"\x7fELF\x00\x00\x01"),
    ],
)
def test_undecodable_files_are_skipped_with_a_note(
    project: Path, name: str, content: bytes
) -> None:
    (project / name).write_bytes(content)
    result = check(name, "train.py", "--format", "json")
    found = {
        (Path(f["location"]["path"]).name, f["code"]) for f in json.loads(result.stdout)["findings"]
    }
    assert (name, "DDP911") in found and ("train.py", "DDP113") in found


def test_declared_encoding_is_honoured(project: Path) -> None:
    (project / "legacy.py").write_bytes(
        "# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n".encode("latin-1")
    )
    assert codes(check("legacy.py", "--format", "json")) == []


def test_empty_file_is_checked(project: Path) -> None:
    (project / "empty.py").write_text("")
    result = check("empty.py")
    assert result.exit_code == 0


def test_huge_file_is_skipped_quickly(project: Path) -> None:
    with open(project / "huge.py", "wb") as stream:
        stream.truncate(50 * 1024 * 1024)
    result = check("huge.py", "train.py", "--format", "json")
    found = {(f["location"]["path"], f["code"]) for f in json.loads(result.stdout)["findings"]}
    assert ("huge.py", "DDP911") in found


def test_symlink_loops(project: Path) -> None:
    (project / "sub").mkdir()
    (project / "sub" / "up").symlink_to(project, target_is_directory=True)
    (project / "a.py").symlink_to(project / "b.py")
    (project / "b.py").symlink_to(project / "a.py")
    result = check(".", "--format", "json")
    found = json.loads(result.stdout)["findings"]
    assert any(f["code"] == "DDP911" and f["location"]["path"].endswith("a.py") for f in found)
    assert sum(1 for f in found if f["code"] == "DDP113") == 1  # train.py once, not via the loop


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_file(project: Path) -> None:
    (project / "secret.py").write_text(BUGGY)
    (project / "secret.py").chmod(0)
    assert "DDP911" in codes(check("secret.py", "train.py", "--format", "json"))


def test_missing_path_alone_exits_2(project: Path) -> None:
    result = check("nope.py", "--format", "json")
    assert result.exit_code == 2 and codes(result) == ["DDP911"]


def test_missing_path_with_good_file_checks_the_rest(project: Path) -> None:
    result = check("nope.py", "train.py", "--format", "json")
    assert result.exit_code == 1 and set(codes(result)) >= {"DDP911", "DDP113"}


def test_folder_without_python_is_a_note_and_exit_0(project: Path) -> None:
    (project / "empty").mkdir()
    (project / "empty" / "weights.bin").write_bytes(b"\0" * 16)
    result = check("empty")
    assert result.exit_code == 0
    assert "note:" in result.output


def test_nothing_readable_exits_2(project: Path) -> None:
    assert check("missing_folder").exit_code == 2


def test_no_traceback_and_no_torch_import(project: Path) -> None:
    (project / "broken.py").write_bytes(b"\xff\xfe\x00garbage(")
    probe = (
        "import sys\nfrom ddp_doctor.cli import main\n"
        "try:\n    main(['check', '.', '--format', 'json'])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "sys.stderr.write('torch' if 'torch' in sys.modules else 'no-torch')\nsys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stderr.endswith("no-torch")


def test_opinions_are_out_of_the_default_selection(project: Path) -> None:
    (project / "seeded.py").write_text(
        "import torch\nimport torch.distributed as dist\n"
        "dist.init_process_group('gloo')\ntorch.manual_seed(0)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1, 1))\n"
        "for step in range(3):\n    print(step)\n"
        "    model(torch.zeros(1)).sum().backward()\n"
        "dist.destroy_process_group()\n"
    )
    assert not {"DDP119", "DDP122"} & set(codes(check("seeded.py", "--format", "json")))
    everything = set(codes(check("seeded.py", "--format", "json", "--select", "ALL")))
    assert {"DDP119", "DDP122"} <= everything
    assert "DDP122" in codes(check("seeded.py", "--format", "json", "--select", "DDP122"))
