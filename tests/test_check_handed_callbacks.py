"""Issue 20: a function handed to an init helper is judged when every caller names it
(callbacks.py, DDP107), and a transformers device map on a GPU index makes a CUDA script
(devicemaps.py, DDP118)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddp_doctor.script.devicemaps import places_by_device_map
from ddp_doctor.script.runner import check_paths
from ddp_doctor.script.walker import build_facts

TUTORIAL = """\
import torch
import torch.distributed as dist
from torch.multiprocessing import Process


def run(rank, size):
{body}


def init_processes(rank, size, fn, backend="nccl"):
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    for rank in range(2):
        Process(target=init_processes, args=(rank, 2, {handed})).start()
"""
PLAIN = "    t = torch.zeros(1).cuda()\n    dist.all_reduce(t)"
PINNED = "    torch.cuda.set_device(rank)\n    t = torch.zeros(1).cuda()\n    dist.all_reduce(t)"


def _codes(tmp_path: Path, source: str) -> set[tuple[int, str]]:
    script = tmp_path / "tutorial.py"
    script.write_text(source, encoding="utf-8")
    return {(f.location.line, f.code) for f in check_paths([str(script)]).findings}


def test_a_handed_function_that_never_pins_leaves_the_init_unpinned(tmp_path: Path) -> None:
    found = _codes(tmp_path, TUTORIAL.format(body=PLAIN, handed="run"))
    assert (12, "DDP107") in found
    assert (7, "DDP127") in found


def test_a_handed_function_that_pins_is_silent(tmp_path: Path) -> None:
    found = _codes(tmp_path, TUTORIAL.format(body=PINNED, handed="run"))
    assert not {code for _, code in found} & {"DDP107", "DDP127"}


def test_a_callback_out_of_view_stays_unjudged(tmp_path: Path) -> None:
    source = TUTORIAL.format(body=PLAIN, handed="run").replace(
        "args=(rank, 2, run)", "args=(rank, 2, user_fn)"
    )
    source = source.replace("import torch\n", "import torch\nfrom lib import user_fn\n", 1)
    assert "DDP107" not in {code for _, code in _codes(tmp_path, source)}


def test_handed_functions_names_what_each_call_binds(tmp_path: Path) -> None:
    from ddp_doctor.script.callbacks import handed_functions
    from ddp_doctor.script.program import project_of

    script = tmp_path / "tutorial.py"
    script.write_text(TUTORIAL.format(body=PLAIN, handed="run"), encoding="utf-8")
    source = script.read_text(encoding="utf-8")
    facts = build_facts(str(script), source, ast.parse(source))
    project = project_of([facts])
    try:
        init = facts.functions_by_name["init_processes"][0]
        handed = handed_functions(project.graph, init, "fn")
        assert [f.name for f in handed or []] == ["run"]
        assert handed_functions(project.graph, init, "backend") is None  # left to its default
    finally:
        project.close()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('m = M.from_pretrained("b", device_map={"": int(os.environ["LOCAL_RANK"])})', True),
        ('device_map = {"": 0}\nm = M.from_pretrained("b", device_map=device_map)', True),
        ('m = M.from_pretrained("b", device_map={"": f"cuda:{rank}"})', True),
        ('m = M.from_pretrained("b", device_map="auto")', False),
        ('m = M.from_pretrained("b", device_map={"": "cpu"})', False),
        ('m = M.from_pretrained("b", device_map={"": True})', False),
    ],
)
def test_a_device_map_on_a_gpu_index_places_on_gpus(line: str, expected: bool) -> None:
    source = f"import os\n{line}\n"
    facts = build_facts("finetune.py", source, ast.parse(source))
    assert places_by_device_map(facts) is expected
