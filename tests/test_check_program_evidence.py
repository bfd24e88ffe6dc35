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


def test_stdout_sent_to_devnull_off_rank_zero_silences_print(tmp_path: Path) -> None:
    """llama's shape: the entry point imports the builder from a package whose __init__.py is
    not in view; the builder inits the group and, off local rank 0, sends stdout to os.devnull.
    The program is distributed (DDP121 speaks), and its prints are not logs on every rank."""
    package = tmp_path / "llm"
    package.mkdir()
    (package / "generation.py").write_text(
        "import os\nimport sys\n\nimport torch.distributed as dist\n\n\n"
        "def build():\n    dist.init_process_group('gloo')\n"
        "    if int(os.environ.get('LOCAL_RANK', 0)) > 0:\n"
        "        sys.stdout = open(os.devnull, 'w')\n",
        encoding="utf-8",
    )
    entry = "from llm import build\n\n\ndef main():\n    build()\n    print('hello')\n"
    (tmp_path / "chat.py").write_text(entry + "\n\nif __name__ == '__main__':\n    main()\n")
    codes = {code for _, code in _codes(tmp_path)}
    assert "DDP121" in codes and "DDP119" not in codes


def test_only_stdout_sent_to_devnull_counts_as_silenced() -> None:
    """A tee of stdout into a log file (`sys.stdout = Logger(path)`) prints on every rank."""

    def silenced(line: str) -> bool:
        source = f"import os\nimport sys\n\n{line}\n"
        facts = prepare("x.py", source, PYTHON)
        return facts.print_overridden  # type: ignore[union-attr]

    assert silenced("sys.stdout = open(os.devnull, 'w')")
    assert not silenced("sys.stdout = Logger('log.txt')")


def test_calls_through_a_star_reexport_reach_the_helpers(tmp_path: Path) -> None:
    """nanoT5's shape: main.py calls setup() and build() that utils/__init__.py re-exports
    with `from .x import *`: the calls reach the helpers, which run in the ranks."""
    package = _tree(tmp_path, "from .seeding import *\nfrom .loading import *\n")
    found = _codes(package)
    assert ("seeding.py", "DDP122") in found
    assert ("loading.py", "DDP118") in found
    (package / "utils" / "__init__.py").write_text("", encoding="utf-8")
    assert not {code for _, code in _codes(package)} & {"DDP118", "DDP122"}
