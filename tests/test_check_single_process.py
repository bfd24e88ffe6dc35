"""Rank rules speak only where several processes run (issue 20, item 1): single-process and
DataParallel-only code gets no rank finding; evidence of a distributed program (its own
calls, a module it imports, a program that imports it, a launch file that starts it) brings
the rules back."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from ddp_doctor.script.evidence import NEEDS_DISTRIBUTED, launched_names
from ddp_doctor.script.runner import CheckOptions, check_paths

SINGLE = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "single_process"
SELECT_ALL = CheckOptions(select=("DDP1",))

SAVE_EVERY_EPOCH = """
    import torch

    model = torch.nn.Linear(10, 10).cuda()
    for epoch in range(10):
        torch.save(model.state_dict(), "model.pt")
"""


def codes(paths: list[Path]) -> set[tuple[str, str]]:
    outcome = check_paths([str(p) for p in paths], SELECT_ALL)
    return {(Path(f.location.path).name, f.code) for f in outcome.findings if f.location}


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.mark.parametrize("script", sorted(SINGLE.glob("*.py")), ids=lambda p: p.stem)
def test_single_process_script_has_no_rank_finding(script: Path) -> None:
    found = {code for _, code in codes([script])}
    assert not found & NEEDS_DISTRIBUTED


def test_same_save_fires_in_a_process_group(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "train.py": "import torch.distributed as dist\n"
            + textwrap.dedent(SAVE_EVERY_EPOCH)
            + "dist.init_process_group('nccl')\n"
        },
    )
    assert ("train.py", "DDP116") in codes([tmp_path])


def test_launch_file_in_the_tree_is_evidence(tmp_path: Path) -> None:
    write(
        tmp_path, {"train.py": SAVE_EVERY_EPOCH, "run.sh": "torchrun --nproc-per-node 4 train.py\n"}
    )
    assert ("train.py", "DDP116") in codes([tmp_path])
    (tmp_path / "run.sh").write_text("python train.py --epochs 3\n", encoding="utf-8")
    assert ("train.py", "DDP116") not in codes([tmp_path])


def test_helper_judged_with_the_programs_that_import_it(tmp_path: Path) -> None:
    helper = """
        import torch

        def save(model):
            torch.save(model.state_dict(), "model.pt")
    """
    write(tmp_path, {"ckpt.py": helper, "single.py": "import ckpt\nckpt.save(None)\n"})
    assert ("ckpt.py", "DDP116") not in codes([tmp_path])
    write(
        tmp_path,
        {
            "ddp.py": "import torch.distributed as dist\nimport ckpt\n"
            "dist.init_process_group('nccl')\nckpt.save(None)\n"
        },
    )
    assert ("ckpt.py", "DDP116") in codes([tmp_path])


def test_unrelated_program_lends_no_evidence(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "single.py": SAVE_EVERY_EPOCH,
            "ddp.py": "import torch.distributed as dist\ndist.init_process_group('nccl')\n",
        },
    )
    assert ("single.py", "DDP116") not in codes([tmp_path])


def test_predicates_and_set_device_are_not_evidence(tmp_path: Path) -> None:
    source = (
        "import torch.distributed as dist\nimport torch\n"
        "if dist.is_available() and dist.is_initialized():\n    pass\n"
        "torch.cuda.set_device(0)\n" + textwrap.dedent(SAVE_EVERY_EPOCH)
    )
    write(tmp_path, {"train.py": source})
    assert ("train.py", "DDP116") not in codes([tmp_path])


def test_launcher_variables_are_evidence(tmp_path: Path) -> None:
    source = "import os\nlocal_rank = int(os.environ['LOCAL_RANK'])\n" + textwrap.dedent(
        SAVE_EVERY_EPOCH
    )
    write(tmp_path, {"train.py": source})
    assert ("train.py", "DDP116") in codes([tmp_path])


def test_launched_names_reads_launch_lines_only() -> None:
    lines = [
        "# torchrun commented.py",
        "torchrun --nproc_per_node=8 tools/train.py --cfg a.yaml",
        "python -m torch.distributed.launch --nproc_per_node 2 dist_train.py",
        "accelerate launch finetune.py",
        "python evaluate.py",
    ]
    assert launched_names(lines) == {"train.py", "dist_train.py", "finetune.py"}


def test_corpus_copy_keeps_fixture_silent(tmp_path: Path) -> None:
    shutil.copytree(SINGLE, tmp_path / "single")
    found = {code for _, code in codes([tmp_path / "single"])}
    assert not found & NEEDS_DISTRIBUTED


SAMPLER_SCRIPT = """
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("nccl")
    sampler = DistributedSampler(range(100))
    loader = DataLoader(range(100), sampler=sampler)
    for epoch in range(10):
        for batch in loader:
            pass
"""


def test_unrelated_program_does_not_silence_set_epoch(tmp_path: Path) -> None:
    other = SAMPLER_SCRIPT.replace("    for epoch", "    for epoch").replace(
        "        for batch in loader:",
        "        make_loader().sampler.set_epoch(epoch)\n        for batch in loader:",
    )
    write(tmp_path, {"train_a.py": SAMPLER_SCRIPT, "train_b.py": other})
    assert ("train_a.py", "DDP113") in codes([tmp_path])


def test_helper_module_set_epoch_counts_for_its_program(tmp_path: Path) -> None:
    helper = "def start(loader, epoch):\n    loader.sampler.set_epoch(epoch)\n"
    script = SAMPLER_SCRIPT.replace(
        "        for batch in loader:",
        "        hooks.start(loader, epoch)\n        for batch in loader:",
    )
    write(tmp_path, {"hooks.py": helper, "train.py": "import hooks\n" + textwrap.dedent(script)})
    assert ("train.py", "DDP113") not in codes([tmp_path])


def test_legacy_launcher_of_the_tree_makes_local_rank_fail(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    script = (
        "import argparse, os\nimport torch.distributed as dist\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--local_rank', type=int)\n"
        "args = parser.parse_args()\nos.environ.setdefault('LOCAL_RANK', str(args.local_rank))\n"
        "dist.init_process_group('nccl')\n"
    )
    write(tmp_path / "tools", {"train.py": script})
    assert ("train.py", "DDP103") not in codes([tmp_path])
    launch = 'python -m torch.distributed.launch \\\n    --nproc_per_node=8 \\\n    $(dirname "$0")/train.py\n'
    write(tmp_path / "tools", {"dist_train.sh": launch})
    assert ("train.py", "DDP103") in codes([tmp_path])


def test_launch_line_names_only_related_scripts(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write(tmp_path / folder, {"train.py": SAVE_EVERY_EPOCH})
    write(tmp_path / "a", {"run.sh": "torchrun --nproc-per-node 2 train.py\n"})
    found = codes([tmp_path])
    outcome = check_paths([str(tmp_path)], SELECT_ALL)
    places = {(f.location.path, f.code) for f in outcome.findings if f.location}
    assert (str(tmp_path / "a" / "train.py"), "DDP116") in places
    assert (str(tmp_path / "b" / "train.py"), "DDP116") not in places
    assert found
