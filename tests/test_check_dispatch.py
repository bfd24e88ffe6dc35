"""Calls of a module's function picked by name (`getattr(common_utils, 'init_dist_%s' %
args.launcher)(...)`, OpenPCDet's shape): the call graph follows them, so a pin made in the
helper counts before the caller's `.cuda()` (DDP127 silent) and the --local_rank handed to it
is reported on the entry point's call (DDP104)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddp_doctor.script.dispatch import name_pattern
from ddp_doctor.script.runner import check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
FIRING = PROJECTS / "local_rank_dispatched_helper"
SILENT = PROJECTS / "local_rank_env_dispatched_helper"


@pytest.mark.parametrize(
    ("expression", "matches", "misses"),
    [
        ("'init_dist_%s' % args.launcher", ["init_dist_pytorch", "init_dist_slurm"], ["init"]),
        ("f'init_dist_{launcher}'", ["init_dist_pytorch"], ["setup_pytorch"]),
        ("'init_dist_' + launcher", ["init_dist_slurm"], ["dist_slurm"]),
        ("'init_{}_dist'.format(kind)", ["init_env_dist"], ["init_env"]),
        ("'init_dist_pytorch'", ["init_dist_pytorch"], ["init_dist_slurm"]),
    ],
)
def test_name_pattern_spells_the_names_a_string_can_build(
    expression: str, matches: list[str], misses: list[str]
) -> None:
    pattern = name_pattern(ast.parse(expression, mode="eval").body)
    assert pattern is not None
    assert all(pattern.fullmatch(name) for name in matches)
    assert not any(pattern.fullmatch(name) for name in misses)


@pytest.mark.parametrize("expression", ["name", "'%s' % name", "f'{a}{b}'", "prefix + name"])
def test_a_name_with_no_constant_part_picks_nothing(expression: str) -> None:
    assert name_pattern(ast.parse(expression, mode="eval").body) is None


@pytest.mark.parametrize("target", [FIRING, FIRING / "train.py"])
def test_local_rank_handed_to_a_dispatched_helper_is_reported_on_the_call(target: Path) -> None:
    """Folder or train.py alone: one DDP104 on train.py's call, the helper's set_device named
    as a related place; no DDP127 for the `.cuda()` after the helper pinned the GPU."""
    findings = check_paths([str(target)]).findings
    assert [(Path(f.location.path).name, f.location.line, f.code) for f in findings] == [
        ("train.py", 23, "DDP104")
    ]
    [placed] = findings[0].evidence["related"]
    assert (Path(str(placed["path"])).name, placed["line"]) == ("common.py", 10)
    assert placed["role"] == "placement"  # the cause is the entry point's option


@pytest.mark.parametrize("target", [SILENT, SILENT / "train.py", SILENT / "utils" / "common.py"])
def test_local_rank_read_from_the_environment_first_is_silent(target: Path) -> None:
    assert [f.code for f in check_paths([str(target)]).findings] == []


def test_a_helper_that_reads_local_rank_itself_is_not_blamed_on_the_caller(tmp_path: Path) -> None:
    """The helper takes the option only as a fallback to LOCAL_RANK: torchrun's value wins."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("", encoding="utf-8")
    helper = (FIRING / "utils" / "common.py").read_text(encoding="utf-8")
    helper = helper.replace(
        "    num_gpus = torch.cuda.device_count()\n",
        '    if "LOCAL_RANK" in os.environ:\n'
        '        local_rank = int(os.environ["LOCAL_RANK"])\n'
        "    num_gpus = torch.cuda.device_count()\n",
        1,
    )
    assert "LOCAL_RANK" in helper
    (tmp_path / "utils" / "common.py").write_text(helper, encoding="utf-8")
    train = (FIRING / "train.py").read_text(encoding="utf-8")
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    assert "DDP104" not in {f.code for f in check_paths([str(tmp_path)]).findings}


def test_sarif_names_the_helpers_placement_as_a_related_location(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 20 item 2: the helper line travels as a related location in SARIF."""
    import json

    from click.testing import CliRunner

    from ddp_doctor.cli import cli

    monkeypatch.chdir(FIRING)
    result = CliRunner().invoke(cli, ["check", "--format", "sarif", "train.py"])
    [finding] = json.loads(result.stdout)["runs"][0]["results"]
    assert finding["ruleId"] == "DDP104"
    [place] = finding["relatedLocations"]
    location = place["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("common.py")
    assert location["region"]["startLine"] == 10
