"""Where a GPU index comes from, issue 20's tuning of sets P and Q: an option declared through
a bound method (`arg = parser.add_argument`, DDP103/DDP104), the option copied into a config
attribute spelled like it (`config.LOCAL_RANK`, DDP104) and a rank getter of the tree that
returns the global rank (`rank = get_rank()`, DDP108)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.script import names
from ddp_doctor.script.analyze import prepare
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.files import PYTHON
from ddp_doctor.script.localrank import declarations, declared, option_strings
from ddp_doctor.script.runner import check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
COPIED = PROJECTS / "config_copies_local_rank"
READ = PROJECTS / "config_reads_local_rank"

BOUND = """
import argparse

def main():
    parser = argparse.ArgumentParser()
    arg = parser.add_argument
    arg("--local_rank", default=0, type=int)
    other = argparse.ArgumentParser()
    other.add_argument("--seed", type=int)
    return parser.parse_args()

def elsewhere(arg):
    arg("--not-an-option")
"""


def test_a_bound_add_argument_declares_options_of_its_parser() -> None:
    facts = prepare("train.py", BOUND, PYTHON)
    assert isinstance(facts, ScriptFacts)
    found = {
        (tuple(option_strings(d.call)), names.dotted(d.parser) if d.parser else None)
        for d in declarations(facts)
    }
    assert found == {(("--local_rank",), "parser"), (("--seed",), "other")}
    assert declared(facts) == {"--local_rank", "--seed"}


def codes_at(target: Path) -> list[tuple[str, int, str]]:
    findings = check_paths([str(target)]).findings
    return sorted(
        (Path(f.location.path).name, f.location.line, f.code)
        for f in findings
        if f.code in {"DDP103", "DDP104", "DDP108"}
    )


@pytest.mark.parametrize("target", [COPIED, COPIED / "main.py"])
def test_an_option_copied_into_the_config_pins_every_rank_alike(target: Path) -> None:
    """config.py in view stores args.local_rank as config.LOCAL_RANK: one DDP104 on main.py,
    the set_device line named as the same mistake."""
    findings = [f for f in check_paths([str(target)]).findings if f.code == "DDP104"]
    assert [(Path(f.location.path).name, f.location.line) for f in findings] == [("main.py", 21)]
    assert list(findings[0].evidence["also_lines"]) == [27]


@pytest.mark.parametrize("target", [READ, READ / "main.py", READ / "config.py"])
def test_a_config_that_reads_local_rank_first_is_silent(target: Path) -> None:
    """Swin-Transformer's newer config.py takes LOCAL_RANK from the environment first."""
    assert codes_at(target) == []


def test_a_rank_getter_of_another_module_is_the_global_rank(tmp_path: Path) -> None:
    """DETR's util/misc.get_rank (0 before the group exists, else dist.get_rank()), imported
    by the module that wraps: device_ids=[rank] is the global rank (DDP108); the local
    getter beside it is silent."""
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "util" / "misc.py").write_text(
        "import os\n"
        "import torch.distributed as dist\n\n\n"
        "def get_rank():\n"
        "    if not dist.is_available() or not dist.is_initialized():\n"
        "        return 0\n"
        "    return dist.get_rank()\n\n\n"
        "def get_local_rank():\n"
        '    return int(os.environ.get("LOCAL_RANK", 0))\n',
        encoding="utf-8",
    )
    (tmp_path / "wrap.py").write_text(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from util.misc import get_local_rank, get_rank\n\n\n"
        "def wrap(model):\n"
        "    rank = get_rank()\n"
        "    return DDP(model, device_ids=[rank])\n\n\n"
        "def wrap_local(model):\n"
        "    gpu = get_local_rank()\n"
        "    return DDP(model, device_ids=[gpu])\n",
        encoding="utf-8",
    )
    assert codes_at(tmp_path / "wrap.py") == [("wrap.py", 7, "DDP108")]
