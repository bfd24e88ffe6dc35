"""DDP122 through a project's seeding helper: judged at the helper's calls, where the rank
term belongs, and silenced by a DataLoader worker_init_fn of the program that seeds per rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.script.runner import CheckOptions, check_paths
from ddp_doctor.script.unseenseeders import seeding_name

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"


def seed_findings(*paths: Path) -> list[tuple[str, int]]:
    outcome = check_paths([str(p) for p in paths], CheckOptions(select=("ALL",)))
    return sorted(
        (Path(f.location.path).name, f.location.line)
        for f in outcome.findings
        if f.code == "DDP122"
    )


def test_constant_through_a_helper_is_reported_at_the_call() -> None:
    project = PROJECTS / "seed_helper_constant"
    assert seed_findings(project) == [("train.py", 20)]


@pytest.mark.parametrize("target", ["train.py", "common/util.py"])
def test_constant_through_a_helper_checked_file_by_file(target: str) -> None:
    """The entry point alone reads the helper it imports; the helper alone has no caller in
    view, so its callers decide, and it is silent."""
    project = PROJECTS / "seed_helper_constant"
    expected = [("train.py", 20)] if target == "train.py" else []
    assert seed_findings(project / target) == expected


@pytest.mark.parametrize("name", ["seed_helper_with_rank", "seed_helper_rank_worker_init"])
def test_helper_seeds_that_differ_per_rank_are_silent(name: str) -> None:
    assert seed_findings(PROJECTS / name) == []


def test_a_helper_seed_passed_by_its_own_keyword_is_the_finding_s_seed(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import random\n\nimport torch\nimport torch.distributed as dist\n\n\n"
        "def fix_random(random_seed):\n    random.seed(random_seed)\n"
        "    torch.manual_seed(random_seed)\n\n\n"
        "def main(cfg):\n    dist.init_process_group('nccl')\n"
        "    fix_random(random_seed=cfg.seed)\n"
        "    model = torch.nn.parallel.DistributedDataParallel(cfg.model)\n    model.train()\n",
        encoding="utf-8",
    )
    outcome = check_paths([str(script)], CheckOptions(select=("DDP122",)))
    assert [(f.location.line, f.evidence.get("seed")) for f in outcome.findings] == [
        (14, "cfg.seed")
    ]


def test_a_helper_out_of_view_is_judged_at_its_call() -> None:
    """PixArt-alpha's shape: `set_random_seed(seed)` from the project's own package, whose
    module is not in the checked tree: taken by its name for a seeding helper (a statement,
    its result dropped), reported at the call; `seed = init_random_seed(...)` is no seeding."""
    assert seed_findings(PROJECTS / "seed_helper_out_of_view") == [("train.py", 19)]


def test_a_helper_out_of_view_given_the_process_index_is_silent() -> None:
    assert seed_findings(PROJECTS / "seed_helper_out_of_view_with_rank") == []


@pytest.mark.parametrize(
    ("name", "seeds"),
    [
        ("set_seed", True),
        ("set_random_seed", True),
        ("setup_seed", True),
        ("seed_everything", True),
        ("init_seeds", False),
        ("init_random_seed", False),
        ("fix_seed", True),
        ("seed_worker", False),
        ("get_seed", False),
        ("seed", False),
        ("init_random_generator", False),
    ],
)
def test_seeding_names(name: str, seeds: bool) -> None:
    assert seeding_name(name) is seeds
