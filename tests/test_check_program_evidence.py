"""Multi-process evidence of an entry point reaches every module of the tree it imports: a
package's module found through a name (no `__init__.py` in view) or through a star re-export,
and a helper's CUDA use judged with its program's."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.script.analyze import load_for_context, prepare
from ddp_doctor.script.evidence import imported_closure, runs_distributed
from ddp_doctor.script.files import PYTHON
from ddp_doctor.script.program import project_of
from ddp_doctor.script.runner import CheckOptions, check_paths

ENTRY = (
    "from accelerate import Accelerator\n"
    "from .utils import setup, build\n\n\n"
    "def main(args):\n"
    "    accelerator = Accelerator()\n"
    "    setup(args)\n"
    "    model = accelerator.prepare(build(args))\n"
    "    model(1).backward()\n\n\n"
    "if __name__ == '__main__':\n"
    "    main(None)\n"
)
SEEDING = "from accelerate.utils import set_seed\n\n\ndef setup(args):\n    set_seed(args.seed)\n"
LOADING = (
    "import torch\n\n\ndef build(args):\n"
    "    model = torch.nn.Linear(2, 2)\n"
    "    model.load_state_dict(torch.load(args.path))\n"
    "    return model\n"
)


def _tree(root: Path, init: str | None, entry: str = ENTRY) -> Path:
    package = root / "proj"
    (package / "utils").mkdir(parents=True)
    (package / "main.py").write_text(entry, encoding="utf-8")
    (package / "utils" / "seeding.py").write_text(SEEDING, encoding="utf-8")
    (package / "utils" / "loading.py").write_text(LOADING, encoding="utf-8")
    if init is not None:
        (package / "utils" / "__init__.py").write_text(init, encoding="utf-8")
    return package


def _codes(path: Path) -> set[tuple[str, str]]:
    outcome = check_paths([str(path)], CheckOptions(select=("ALL",)))
    return {(Path(f.location.path).name, f.code) for f in outcome.findings if f.location}


def test_helpers_found_by_name_in_a_package_without_init(tmp_path: Path) -> None:
    """`from .utils import setup, build` with utils/__init__.py not in view (only some files
    of a repository laid out): the modules of utils/ that define the names are the
    program's, so the accelerate program's shared seed and its helper's unmapped load count."""
    found = _codes(_tree(tmp_path, None))
    assert ("seeding.py", "DDP122") in found
    assert ("loading.py", "DDP118") in found


def test_a_program_without_evidence_leaves_the_same_helpers_alone(tmp_path: Path) -> None:
    single = ENTRY.replace("from accelerate import Accelerator\n", "").replace(
        "accelerator = Accelerator()", "accelerator = None"
    )
    found = _codes(_tree(tmp_path, None, single))
    assert not {code for _, code in found} & {"DDP118", "DDP122"}


def test_a_star_reexport_brings_its_modules_into_the_closure(tmp_path: Path) -> None:
    init = "from .seeding import *\nfrom .loading import *\n"
    package = _tree(tmp_path, init)
    files = [
        prepare(str(path), path.read_text(encoding="utf-8"), PYTHON)
        for path in sorted(package.rglob("*.py"))
    ]
    project = project_of(files, roots=[str(package)], load=load_for_context)
    try:
        by_name = {Path(f.path).name: f for f in files}
        closure = {Path(f.path).name for f in imported_closure(by_name["main.py"])}
        assert {"__init__.py", "seeding.py", "loading.py"} <= closure
        assert runs_distributed(by_name["seeding.py"])
    finally:
        project.close()
