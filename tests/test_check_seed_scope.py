"""DDP122 judged over the program, not one file: a module's seeding at import runs in every
process of the program that imports it, another file's seed with the rank decides for the
program, and a seed drawn fresh in each process (torch.seed()) differs per rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"


def seed_findings(*paths: Path) -> list[tuple[str, int, str]]:
    outcome = check_paths([str(p) for p in paths], CheckOptions(select=("ALL",)))
    return sorted(
        (Path(f.location.path).name, f.location.line, str(f.evidence.get("seed")))
        for f in outcome.findings
        if f.code == "DDP122"
    )


def test_a_dataset_module_seeding_at_import_is_reported_on_its_line() -> None:
    """StyleTTS2's meldataset.py shape: np.random.seed(1) at module level, the module imported
    by an accelerate program; the `__main__` block's own seed is not the finding."""
    assert seed_findings(PROJECTS / "seed_at_dataset_import") == [("dataset.py", 10, "1")]


def test_the_entry_point_seeding_with_the_process_index_decides_for_the_program() -> None:
    assert seed_findings(PROJECTS / "seed_at_dataset_import_with_rank") == []


def test_a_per_epoch_seed_beside_the_entry_point_s_rank_seed_is_silent() -> None:
    """AutoFormer's shape: engine.py's random.seed(epoch) picks the sub-network every rank
    must share; train.py seeds torch and numpy with seed + rank."""
    assert seed_findings(PROJECTS / "seed_per_epoch_beside_rank_seed") == []


def test_without_the_program_rule_the_per_epoch_seed_would_be_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The silent project above is silent for the program-wide reason, not another one."""
    from ddp_doctor.script.rules import seeds

    monkeypatch.setattr(seeds, "program_seeds_apart", lambda facts: False)
    assert [name for name, _, _ in seed_findings(PROJECTS / "seed_per_epoch_beside_rank_seed")] == [
        "engine.py"
    ]


def test_an_uncalled_seeding_helper_of_another_file_gives_the_program_no_rank_term() -> None:
    """Oscar's shape: utils/misc.py's set_seed(seed, n_gpu) is called by nothing of the tree;
    the entry point seeds inline with args.seed, reported at its first seeding call."""
    assert seed_findings(PROJECTS / "seed_inline_beside_unused_helper") == [
        ("train.py", 20, "args.seed")
    ]


def test_the_same_helper_called_with_the_rank_decides_for_the_program() -> None:
    assert seed_findings(PROJECTS / "seed_inline_beside_called_helper") == []


def test_a_module_imported_by_a_single_process_script_is_not_reported(tmp_path: Path) -> None:
    (tmp_path / "data.py").write_text("import numpy as np\n\nnp.random.seed(1)\n", encoding="utf-8")
    (tmp_path / "train.py").write_text(
        "import torch\nimport data\n\n\ndef main():\n    model = torch.nn.Linear(2, 2)\n"
        "    model(torch.zeros(2)).sum().backward()\n\n\nif __name__ == '__main__':\n"
        "    main()\n",
        encoding="utf-8",
    )
    assert seed_findings(tmp_path) == []


@pytest.mark.parametrize(
    ("expression", "fresh"),
    [
        ("torch.seed() % 10**9", True),
        ("torch.random.seed()", True),
        ("int.from_bytes(os.urandom(4), 'little')", True),
        ("secrets.randbits(32)", True),
        ("int(time.time())", False),
        ("args.seed", False),
    ],
)
def test_fresh_seed_sources(tmp_path: Path, expression: str, fresh: bool) -> None:
    """Through a name too: `seed = torch.seed() % 10**9; np.random.seed(seed)`."""
    script = tmp_path / "train.py"
    script.write_text(
        "import os\nimport secrets\nimport time\n\nimport numpy as np\nimport torch\n"
        "import torch.distributed as dist\n\n\ndef main(args):\n"
        "    dist.init_process_group('nccl')\n"
        f"    seed = {expression}\n    np.random.seed(seed)\n"
        "    model = torch.nn.parallel.DistributedDataParallel(args.model)\n    model.train()\n",
        encoding="utf-8",
    )
    assert seed_findings(script) == ([] if fresh else [("train.py", 13, "seed")])
