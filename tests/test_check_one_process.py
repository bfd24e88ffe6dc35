"""A world of one process and a retry loop of one pass (VMamba's analyze/eval.py, set X):
one rank prints once and pads nothing (DDP114, DDP119); an out-of-memory retry loop reads the
data once (DDP113). The rules about the group itself still judge such a program."""

from __future__ import annotations

import ast
from pathlib import Path

from ddp_doctor.script.oneworld import dead_lines
from ddp_doctor.script.retryloops import one_pass
from ddp_doctor.script.runner import CheckOptions, check_paths

ONE_GPU_EVAL = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def evaluate(model, loader):
    for step, batch in enumerate(loader):
        print(step, model(batch).item())


def run(model, val_set, batch_size):
    while batch_size > 0:
        try:
            loader = DataLoader(val_set, batch_size=batch_size, sampler=DistributedSampler(val_set))
            evaluate(model, loader)
            break
        except RuntimeError:
            batch_size //= 2


if __name__ == "__main__":
    if torch.cuda.device_count() > 1:
        print("one GPU only")
        exit()
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("nccl", init_method="env://", world_size={world}, rank=0)
    run(torch.nn.Linear(2, 2), list(range(8)), 64)
"""


def _codes(tmp_path: Path, world: str) -> set[str]:
    (tmp_path / "eval.py").write_text(ONE_GPU_EVAL.replace("{world}", world), encoding="utf-8")
    outcome = check_paths([str(tmp_path)], CheckOptions(select=("ALL",)))
    return {f.code for f in outcome.findings}


def test_one_process_world_has_no_per_rank_findings(tmp_path: Path) -> None:
    codes = _codes(tmp_path, "1")
    assert not codes & {"DDP113", "DDP114", "DDP119"}
    assert "DDP121" in codes  # the group is still a group: nothing destroys it


def test_a_world_the_caller_sizes_is_several_processes(tmp_path: Path) -> None:
    codes = _codes(tmp_path, "torch.cuda.device_count()")
    assert {"DDP114", "DDP119"} <= codes
    assert "DDP113" not in codes  # the retry loop still reads the data once


def test_dead_lines_follow_an_exit_in_their_block() -> None:
    tree = ast.parse("if x:\n    exit()\n    a()\nelse:\n    b()\nc()\n")
    assert dead_lines(tree) == {3}


def test_one_pass_is_an_unconditional_break() -> None:
    retry, epochs = (
        ast.parse(text).body[0]
        for text in (
            "while n:\n    try:\n        run()\n        break\n    except E:\n        n -= 1\n",
            "while True:\n    run()\n    if done:\n        break\n",
        )
    )
    assert isinstance(retry, ast.While) and isinstance(epochs, ast.While)
    assert one_pass(retry) and not one_pass(epochs)


TRAIN_LOOP = """\
import logging

logger = logging.getLogger(__name__)


def train_one_epoch(model, loader, optimizer):
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        optimizer.step()
        logger.info(f"step {step}")
"""
ENTRY = """\
import logging

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from train_loop import train_one_epoch


def main(model, loader, optimizer):
    logging.basicConfig(level={level})
    dist.init_process_group("nccl")
    model = DistributedDataParallel(model)
    for epoch in range(3):
        train_one_epoch(model, loader, optimizer)


if __name__ == "__main__":
    main(None, None, None)
"""


def _log_findings(tmp_path: Path, level: str) -> list[tuple[str, str]]:
    (tmp_path / "train_loop.py").write_text(TRAIN_LOOP, encoding="utf-8")
    (tmp_path / "train.py").write_text(ENTRY.replace("{level}", level), encoding="utf-8")
    outcome = check_paths([str(tmp_path)], CheckOptions(select=("DDP119",)))
    return [(f.code, Path(f.location.path).name) for f in outcome.findings if f.location]


def test_a_helper_logs_on_every_rank_where_its_entry_point_configures_logging(
    tmp_path: Path,
) -> None:
    """flow_matching's examples/image: train.py's basicConfig(INFO) for every rank, the
    train loop module's logger.info per step (set W)."""
    assert _log_findings(tmp_path, "logging.INFO") == [("DDP119", "train_loop.py")]


def test_a_helper_whose_entry_point_levels_logging_by_rank_is_left_alone(tmp_path: Path) -> None:
    level = "logging.INFO if dist.get_rank() == 0 else logging.WARNING"
    assert _log_findings(tmp_path, level) == []
