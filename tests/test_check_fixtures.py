"""Every script rule against its fixture: fires on the `# Errors` part, silent on `# OK`.

A fixture is fixtures/scripts/<CODE>_<name>.py: a prelude (docstring, imports), then
`# Errors` and `# OK`, each holding cases separated by `# ---`. Each case is checked on its
own (the prelude plus that case; other lines blanked so line numbers stay true), because
several rules judge a whole file. `# expect: CODE[, CODE]` marks the line a finding must be on;
`# also: CODE` a line that a finding on an earlier line names as the same mistake again (one
finding per cause).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from ddp_doctor.model import Severity
from ddp_doctor.script.analyze import analyze, script_rules
from ddp_doctor.script.files import PYTHON
from ddp_doctor.script.runner import CheckOptions, check_paths

SCRIPTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts"
REALISTIC = SCRIPTS / "realistic"
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")
_ALSO = re.compile(r"#\s*also:\s*([A-Z0-9, ]+)")


@dataclass(frozen=True)
class Case:
    fixture: Path
    part: str  # "Errors" or "OK"
    first_line: int
    source: str
    expected: Counter[tuple[int, str]]
    also: Counter[tuple[int, str]]


def expectations(lines: list[str], marker: re.Pattern[str] = _EXPECT) -> Counter[tuple[int, str]]:
    found: Counter[tuple[int, str]] = Counter()
    for number, line in enumerate(lines, start=1):
        match = marker.search(line)
        if match:
            for code in match.group(1).split(","):
                if code.strip():
                    found[(number, code.strip())] += 1
    return found


def split_cases(fixture: Path) -> list[Case]:
    lines = fixture.read_text(encoding="utf-8").splitlines()
    markers = {
        i: line.strip()[2:] for i, line in enumerate(lines) if line.strip() in ("# Errors", "# OK")
    }
    assert sorted(markers.values()) == ["Errors", "OK"], f"{fixture.name}: needs # Errors and # OK"
    prelude_end = min(markers)
    cases: list[Case] = []
    starts = [*sorted(markers), len(lines)]
    for start, end in pairwise(starts):
        part = markers[start]
        chunk_start = start + 1
        for index in range(start + 1, end + 1):
            if index == end or lines[index].strip() == "# ---":
                kept = set(range(prelude_end)) | set(range(chunk_start, index))
                text = [line if i in kept else "" for i, line in enumerate(lines)]
                expected = expectations(text)
                also = expectations(text, _ALSO)
                source = "\n".join(text) + "\n"
                cases.append(Case(fixture, part, chunk_start + 1, source, expected, also))
                chunk_start = index + 1
    return cases


def fixture_code(fixture: Path) -> str:
    return fixture.name.split("_", 1)[0]


FIXTURES = sorted(SCRIPTS.glob("DDP1*.py"))
CASES = [case for fixture in FIXTURES for case in split_cases(fixture)]


def findings_for(case: Case) -> list:
    return analyze(str(case.fixture), case.source, PYTHON, script_rules())


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.fixture.stem[:6]}-{c.part}-L{c.first_line}" for c in CASES]
)
def test_rule_fixture(case: Case) -> None:
    code = fixture_code(case.fixture)
    watched = {code} | {c for _, c in case.expected}
    findings = [f for f in findings_for(case) if f.code in watched]
    found = Counter((f.location.line, f.code) for f in findings)
    if case.part == "OK":
        assert not case.expected, "an OK case must not expect findings"
        assert not found, f"{code} fired on an OK case: {sorted(found)}"
    else:
        assert case.expected, "an Errors case must expect at least one finding"
        assert found == case.expected
        assert also_lines(findings) == case.also


def also_lines(findings: list) -> Counter[tuple[int, str]]:
    return Counter((line, f.code) for f in findings for line in f.evidence.get("also_lines", ()))


def test_every_errors_part_expects_its_own_code() -> None:
    for fixture in FIXTURES:
        code = fixture_code(fixture)
        expected = {c for case in split_cases(fixture) for _, c in case.expected}
        assert code in expected, f"{fixture.name} never expects {code}"


REALISTIC_SCRIPTS = sorted(REALISTIC.glob("*.py"))


@pytest.mark.parametrize("script", REALISTIC_SCRIPTS, ids=[p.stem for p in REALISTIC_SCRIPTS])
def test_realistic_script(script: Path) -> None:
    """Whole training scripts: findings at warning or above are exactly the marked ones."""
    outcome = check_paths([str(script)])
    assert outcome.checked == 1
    found = Counter(
        (f.location.line, f.code) for f in outcome.findings if f.severity >= Severity.WARNING
    )
    lines = script.read_text(encoding="utf-8").splitlines()
    assert found == expectations(lines)
    kept = [f for f in outcome.findings if f.severity >= Severity.WARNING]
    assert also_lines(kept) == expectations(lines, _ALSO)


AUDITED = sorted(REALISTIC.glob("audit_*.py"))


@pytest.mark.parametrize("script", AUDITED, ids=[p.stem for p in AUDITED])
def test_an_audited_correct_program_gets_no_finding_at_all(script: Path) -> None:
    """The precision audit's correct programs of today's idioms (torch.accelerator, FSDP2,
    DeviceMesh, spawn, Fabric...): silent with every rule selected, infos included."""
    outcome = check_paths([str(script)], CheckOptions(select=("ALL",)))
    assert outcome.checked == 1
    assert [(f.location.line, f.code) for f in outcome.findings] == []


def test_correct_realistic_scripts_exist() -> None:
    correct = [p for p in REALISTIC_SCRIPTS if "# expect:" not in p.read_text(encoding="utf-8")]
    assert len(correct) >= 4


PROJECTS = sorted(p for p in (SCRIPTS / "projects").iterdir() if p.is_dir())


def marked(root: Path, marker: re.Pattern[str] = _EXPECT) -> Counter[tuple[Path, int, str]]:
    found: Counter[tuple[Path, int, str]] = Counter()
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for (line, code), count in expectations(lines, marker).items():
            found[(path.resolve(), line, code)] += count
    return found


@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_project(project: Path) -> None:
    """Several modules checked as one tree: a helper in another module counts."""
    outcome = check_paths([str(project)])
    kept = [f for f in outcome.findings if f.severity >= Severity.WARNING]
    found = Counter((Path(f.location.path).resolve(), f.location.line, f.code) for f in kept)
    assert found == marked(project)
    also = Counter(
        (Path(f.location.path).resolve(), line, f.code)
        for f in kept
        for line in f.evidence.get("also_lines", ())
    )
    assert also == marked(project, _ALSO)


def test_a_file_checked_alone_reads_the_modules_it_imports() -> None:
    """utils/dist.py is read for context (its set_device counts); a mistake in it is reported
    on train.py's call that reaches it, with the helper's line as related location."""
    pinned = check_paths([str(SCRIPTS / "projects" / "pinned_in_helper" / "train.py")])
    assert pinned.checked == 1 and not pinned.findings
    unpinned = check_paths([str(SCRIPTS / "projects" / "unpinned_helper" / "train.py")])
    assert {(Path(f.location.path).name, f.code) for f in unpinned.findings} == {
        ("train.py", "DDP127"),
        ("train.py", "DDP107"),
    }
    (helper_finding,) = [f for f in unpinned.findings if f.code == "DDP107"]
    related = helper_finding.evidence["related"][0]
    assert (Path(str(related["path"])).name, related["line"]) == ("dist.py", 8)


def test_an_entry_point_ends_the_group_a_config_built_trainer_starts() -> None:
    """torchtitan's shape: train.py builds the trainer from its configuration (a call the
    graph cannot follow), the package's helper inits the group, train.py destroys it. The
    package is named torchkit: the project's own, though its name starts with "torch"."""
    ended = check_paths([str(SCRIPTS / "projects" / "config_built_trainer")])
    assert "DDP121" not in {f.code for f in ended.findings}
    left_open = check_paths([str(SCRIPTS / "projects" / "config_built_trainer_no_destroy")])
    assert [(Path(f.location.path).name, f.code) for f in left_open.findings] == [
        ("dist_utils.py", "DDP121")
    ]


@pytest.mark.parametrize(
    ("project", "codes"),
    [("config_built_trainer", set()), ("config_built_trainer_no_destroy", {"DDP121"})],
)
def test_a_helper_alone_reaches_the_entry_point_through_an_importer(
    project: str, codes: set[str]
) -> None:
    """torchkit/dist_utils.py named alone: trainer.py imports it, train.py imports trainer.py
    and destroys the group (two hops of importers.py), so it is judged as in the folder."""
    helper = SCRIPTS / "projects" / project / "torchkit" / "dist_utils.py"
    alone = check_paths([str(helper)], CheckOptions(select=("ALL",)))
    assert {f.code for f in alone.findings} == codes


def test_an_init_helper_that_nothing_calls_is_not_judged(tmp_path: Path) -> None:
    """SlowFast's shape: utils/dist.py defines init_process_group(backend="nccl") with no
    destroy, and the program that imports the module never calls it but starts its group
    itself. Checked alone it brings that importer (importers.py) and is judged as in the
    folder. Called, the only init of the tree (a module out of view may call it), or the
    helper alone with no importer in view (an API), it is judged."""
    codes = {"DDP106", "DDP121"}

    def helper_codes(target: Path) -> set[str]:
        findings = check_paths([str(target)]).findings
        return {f.code for f in findings if Path(f.location.path).name == "dist.py"} & codes

    unused = SCRIPTS / "projects" / "unused_init_helper"
    assert helper_codes(unused) == set()
    assert helper_codes(unused / "utils" / "dist.py") == set()
    lone = tmp_path / "dist.py"
    lone.write_text((unused / "utils" / "dist.py").read_text(encoding="utf-8"), encoding="utf-8")
    assert helper_codes(lone) == codes
    assert helper_codes(SCRIPTS / "projects" / "called_init_helper") == codes
    assert helper_codes(SCRIPTS / "projects" / "init_helper_called_out_of_view") == codes


def test_a_file_named_from_the_repository_root_reads_its_package_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ddp-doctor check vision/eval/probe.py` from the repository (a pre-commit hook names
    changed files): `from vision.common import pin` is found from the working folder, so the
    helper's set_device counts; from elsewhere the file's folder is all there is."""
    (tmp_path / "vision" / "eval").mkdir(parents=True)
    (tmp_path / "vision" / "common.py").write_text(
        "import os\nimport torch\n\n\ndef pin():\n"
        "    torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n",
        encoding="utf-8",
    )
    (tmp_path / "vision" / "eval" / "probe.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom vision.common import pin\n\n\n"
        "def main():\n    pin()\n    dist.init_process_group('nccl')\n"
        "    model = torch.nn.Linear(2, 2).cuda()\n    dist.destroy_process_group()\n"
        "    return model\n\n\nif __name__ == '__main__':\n    main()\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    from_root = check_paths(["vision/eval/probe.py"])
    assert not {"DDP107", "DDP127"} & {f.code for f in from_root.findings}
    monkeypatch.chdir(tmp_path / "vision" / "eval")
    from_inside = check_paths(["probe.py"])
    assert {"DDP107", "DDP127"} <= {f.code for f in from_inside.findings}


def test_print_set_up_by_a_file_that_imports_the_helper() -> None:
    """DDP119 in a helper that no entry point of the tree reaches (the entry point's import
    names a path the tree does not hold, as SlowFast's run_net.py does): the files that import
    the helper are its program, so trainer.py's setup that replaces print off rank 0 counts."""

    def log_findings(name: str) -> list[str]:
        outcome = check_paths([str(SCRIPTS / "projects" / name)], CheckOptions(select=("ALL",)))
        return [Path(f.location.path).name for f in outcome.findings if f.code == "DDP119"]

    assert log_findings("print_set_up_by_importer") == []
    assert log_findings("print_not_set_up_by_importer") == ["loader.py"]


def test_a_helper_checked_alone_is_judged_with_the_files_that_import_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LlamaGen's shape: utils/distributed.py named alone (a pre-commit hook) reads
    autoregressive/train/train.py, which imports it, for context: that caller requires a GPU
    and destroys the group, so neither DDP106 nor DDP121 is the helper's. The same caller
    without those two lines leaves both on the helper."""
    project = SCRIPTS / "projects" / "helper_caller_requires_gpus"
    helper = project / "utils" / "distributed.py"
    codes = {"DDP106", "DDP121"}
    alone = check_paths([str(helper)], CheckOptions(select=("ALL",)))
    assert alone.checked == 1
    assert not codes & {f.code for f in alone.findings}
    copy = tmp_path / "repo"
    for source in project.rglob("*.py"):
        target = copy / source.relative_to(project)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = source.read_text(encoding="utf-8")
        for line in ("    assert torch.cuda.is_available()", "    dist.destroy_process_group()"):
            text = "\n".join(t for t in text.splitlines() if not t.startswith(line)) + "\n"
        target.write_text(text, encoding="utf-8")
    monkeypatch.chdir(copy)  # from the repository root, as a pre-commit hook runs it
    bare = check_paths(["utils/distributed.py"], CheckOptions(select=("ALL",)))
    assert codes <= {f.code for f in bare.findings if f.location.path.endswith("distributed.py")}
    assert bare.checked == 1
