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
