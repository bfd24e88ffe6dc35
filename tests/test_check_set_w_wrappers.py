"""Set W's tuning (issue 20, check20a): DataParallel under the project's own name (ABINet's
`MyDataParallel` from its utils.py, out of view), the rank of a group started with
rank=LOCAL_RANK (MeloTTS), a module moved by its own method (RIFE's `self.device()`) and a
module-level `torch.device("cuda")` judged at its uses (RIFE's train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.script.analyze import prepare
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.files import PYTHON
from ddp_doctor.script.globalrank import holds_global_rank
from ddp_doctor.script.runner import check_paths

OWN_SUBCLASS = """
import torch
from utils import MyDataParallel

def build(model):
    if torch.cuda.device_count() > 1:
        model = {wrapper}(model)
    return model
"""


def codes(folder: Path, watched: set[str]) -> list[tuple[str, int, str]]:
    return sorted(
        (Path(f.location.path).name, f.location.line, f.code)
        for f in check_paths([str(folder)]).findings
        if f.code in watched
    )


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    ("wrapper", "expected"),
    [("MyDataParallel", [("main.py", 7, "DDP101")]), ("MyDistributedDataParallel", [])],
)
def test_an_out_of_view_subclass_is_judged_by_its_name(
    tmp_path: Path, wrapper: str, expected: list
) -> None:
    source = OWN_SUBCLASS.format(wrapper=wrapper).replace(
        "import MyDataParallel", f"import {wrapper}"
    )
    write(tmp_path, {"main.py": source})
    assert codes(tmp_path, {"DDP101"}) == expected


def test_a_subclass_in_view_is_judged_by_its_base(tmp_path: Path) -> None:
    utils = "import torch.nn as nn\n\nclass MyDataParallel(nn.Module):\n    pass\n"
    write(tmp_path, {"main.py": OWN_SUBCLASS.format(wrapper="MyDataParallel"), "utils.py": utils})
    assert codes(tmp_path, {"DDP101"}) == []
    (tmp_path / "utils.py").write_text(utils.replace("nn.Module", "nn.DataParallel"))
    assert codes(tmp_path, {"DDP101"}) == [("main.py", 7, "DDP101")]


STARTED = """
import os
import torch.distributed as dist
local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo", rank={rank})
rank = dist.get_rank()
"""


@pytest.mark.parametrize(
    ("given", "is_global"),
    [
        ("local_rank", False),
        ('int(os.environ["LOCAL_RANK"])', False),
        ('int(os.environ["RANK"])', True),
    ],
)
def test_get_rank_is_what_the_init_was_given(given: str, is_global: bool) -> None:
    facts = prepare("train.py", STARTED.format(rank=given), PYTHON)
    assert isinstance(facts, ScriptFacts)
    rank = facts.assignments_by_target["rank"][0].value
    assert holds_global_rank(facts, rank) is is_global


RIFE_LIKE = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

device = torch.device("cuda")

class Model:
    def __init__(self, local_rank):
        self.net = torch.nn.Linear(2, 2)
        self.{method}()
        self.net = DDP(self.net, device_ids=[local_rank])

    def place(self):
        self.net.to(device)

    def keep(self):
        self.net.train()

def train(model, batch):
    return model.net(batch.to(device))

if __name__ == "__main__":
    dist.init_process_group("nccl")
    torch.cuda.set_device(0 if False else dist.get_rank() % 8)
    train(Model(0), torch.zeros(2))
"""


@pytest.mark.parametrize(("method", "expected"), [("place", []), ("keep", ["DDP109"])])
def test_an_own_method_that_moves_the_module_places_it(
    tmp_path: Path, method: str, expected: list[str]
) -> None:
    write(tmp_path, {"train.py": RIFE_LIKE.format(method=method)})
    found = [code for _, _, code in codes(tmp_path, {"DDP109", "DDP127"})]
    assert found == expected


MAIN = """
import argparse
import mae_st.util.misc as misc
from torch.nn.parallel import DistributedDataParallel as DDP

def main(model):
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", default=-1, type=int)
    args = parser.parse_args()
    misc.init_distributed_mode(args)
    return DDP(model, device_ids=[args.gpu])
"""
MISC = """
import os
import torch
import torch.distributed as dist

def init_distributed_mode(args):
    args.gpu = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(args.gpu)
    dist.init_process_group("nccl")
"""


@pytest.mark.parametrize(("folder", "expected"), [("mae-st", []), ("elsewhere", ["DDP103"])])
def test_the_root_folder_is_the_package_its_imports_name(
    tmp_path: Path, folder: str, expected: list[str]
) -> None:
    root = tmp_path / folder
    (root / "util").mkdir(parents=True)
    write(root, {"main_pretrain.py": MAIN, "util/misc.py": MISC, "util/__init__.py": ""})
    assert [code for _, _, code in codes(root, {"DDP103"})] == expected
