"""The model `check`'s rules ask: branch arms and launch conditions on contexts, where values
come from (values.py), what a call reaches (callgraph.py), and imports of the tree's own
modules (project.py). Asserts facts, not findings."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from ddp_doctor.script.analyze import analyze, load_for_context, prepare, script_rules
from ddp_doctor.script.callgraph import DEPTH
from ddp_doctor.script.facts import DISTRIBUTED, SINGLE, ScriptFacts
from ddp_doctor.script.files import PYTHON
from ddp_doctor.script.origins import CONSTANT, ENV, OPTION, SPAWN_INDEX
from ddp_doctor.script.program import new_project, project_of


def facts_of(source: str, path: str = "train.py") -> ScriptFacts:
    prepared = prepare(path, textwrap.dedent(source), PYTHON)
    assert isinstance(prepared, ScriptFacts)
    project_of([prepared])
    return prepared


def tree_of(root: Path, files: dict[str, str]) -> dict[str, ScriptFacts]:
    found = {}
    project = new_project([str(root)], load=load_for_context)
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        prepared = prepare(str(path), path.read_text(encoding="utf-8"), PYTHON)
        assert isinstance(prepared, ScriptFacts)
        project.add(prepared)
        found[name] = prepared
    return found


def call(facts: ScriptFacts, text: str):  # type: ignore[no-untyped-def]
    """The one call whose source starts with `text`."""
    found = [c for c in facts.calls if ast.unparse(c.node).startswith(text)]
    assert len(found) == 1, [ast.unparse(c.node) for c in found]
    return found[0]


def origins_of_argument(facts: ScriptFacts, text: str, position: int = 0) -> set[tuple[str, str]]:
    site = call(facts, text)
    found = facts.project.values.origins(facts, site.node.args[position], site.ctx)
    return {(o.kind, o.name or (ast.unparse(o.node) if o.node is not None else "")) for o in found}


# branches and launch conditions ----------------------------------------------------------------


def test_the_arms_of_a_condition_exclude_each_other() -> None:
    facts = facts_of(
        """
        def main(args, model):
            if args.gpu is not None:
                set_device(args.gpu)
            else:
                model.cuda()
            model.half()
        """
    )
    pin, cuda, half = (
        call(facts, "set_device"),
        call(facts, "model.cuda"),
        call(facts, "model.half"),
    )
    assert pin.ctx.excludes(cuda.ctx) and cuda.ctx.excludes(pin.ctx)
    assert not pin.ctx.excludes(half.ctx) and not half.ctx.branches
    assert pin.ctx.within(half.ctx) and not half.ctx.within(pin.ctx)


@pytest.mark.parametrize(
    ("test", "body", "orelse"),
    [
        ("args.distributed", DISTRIBUTED, SINGLE),
        ("not args.distributed", SINGLE, DISTRIBUTED),
        ("world_size > 1", DISTRIBUTED, SINGLE),
        ("args.local_rank == -1", SINGLE, DISTRIBUTED),
        ("'LOCAL_RANK' in os.environ", DISTRIBUTED, SINGLE),
        ("dist.is_available() and dist.is_initialized()", DISTRIBUTED, SINGLE),
        ("torch.cuda.device_count() > 1", None, None),
    ],
)
def test_launch_conditions(test: str, body: str | None, orelse: str | None) -> None:
    facts = facts_of(f"if {test}:\n    inside()\nelse:\n    outside()\n")
    assert call(facts, "inside").ctx.launch == body
    assert call(facts, "outside").ctx.launch == orelse


def test_an_early_exit_is_a_branch_for_what_follows() -> None:
    facts = facts_of(
        """
        def main(args):
            if not args.distributed:
                return single()
            init()
        """
    )
    assert call(facts, "init").ctx.launch == DISTRIBUTED
    assert call(facts, "single").ctx.launch == SINGLE


# values ------------------------------------------------------------------------------------


def test_only_the_assignments_that_reach_a_use_count() -> None:
    facts = facts_of(
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        def main(local_rank, wrap):
            model = torch.nn.Linear(2, 2)
            use(model)
            model = DDP(model, device_ids=[local_rank])
            use_wrapped(model)
            if wrap:
                model = model.module
            use_either(model)
        """
    )
    assert origins_of_argument(facts, "use(") == {("call", "torch.nn.Linear(2, 2)")}
    assert origins_of_argument(facts, "use_wrapped(") == {
        ("call", "DDP(model, device_ids=[local_rank])")
    }
    either = origins_of_argument(facts, "use_either(")
    assert ("call", "DDP(model, device_ids=[local_rank])") in either
    assert ("call", "torch.nn.Linear(2, 2)") in either  # model.module: the wrapped model


def test_values_follow_parameters_returns_self_and_items() -> None:
    facts = facts_of(
        """
        import os
        import argparse

        def parse():
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=0)
            return parser.parse_args()

        class Config:
            def __init__(self, args):
                self.gpu = args.local_rank
                self.table = {"rank": int(os.environ["RANK"])}

        def setup(gpu, config):
            pin(gpu)
            pin_rank(config.table["rank"])

        def main():
            config = Config(parse())
            setup(config.gpu, config)
        """
    )
    assert origins_of_argument(facts, "pin(") == {(OPTION, "local_rank")}
    assert origins_of_argument(facts, "pin_rank(") == {(ENV, "RANK")}


def test_mp_spawn_passes_the_process_index_first() -> None:
    facts = facts_of(
        """
        import torch.multiprocessing as mp

        def worker(gpu, world_size):
            pin(gpu)
            size(world_size)

        if __name__ == "__main__":
            mp.spawn(worker, args=(4,), nprocs=4)
        """
    )
    assert origins_of_argument(facts, "pin(") == {
        (SPAWN_INDEX, "mp.spawn(worker, args=(4,), nprocs=4)")
    }
    assert origins_of_argument(facts, "size(") == {(CONSTANT, "4")}


def test_cycles_terminate() -> None:
    facts = facts_of(
        """
        def ping(x):
            return pong(x)

        def pong(x):
            return ping(x)

        def main():
            value = ping(1)
            value = value + value
            use(value)
        """
    )
    assert origins_of_argument(facts, "use(")  # an answer, not a recursion error


# the call graph --------------------------------------------------------------------------------


def test_effects_reach_only_a_few_calls_up() -> None:
    chain = "\n".join(f"def f{i}():\n    f{i + 1}()\n" for i in range(DEPTH + 2))
    facts = facts_of(chain + f"def f{DEPTH + 2}():\n    target()\n")
    graph = facts.project.graph
    reach = graph.reaching("target", lambda f, site: site.key == "target")
    depths = {unit.name: depth for unit, depth in reach.items()}
    assert depths[f"f{DEPTH + 2}"] == 0
    assert depths[f"f{DEPTH + 2 - DEPTH}"] == DEPTH
    assert f"f{DEPTH + 2 - DEPTH - 1}" not in depths


def test_methods_resolve_through_the_receivers_class() -> None:
    facts = facts_of(
        """
        class Meter:
            def display(self):
                print("x")

        class Other:
            def display(self):
                pass

        def train(loader):
            meter = Meter()
            for batch in loader:
                meter.display()
        """
    )
    graph = facts.project.graph
    targets = graph.targets(facts, call(facts, "meter.display"))
    assert [t.qualname for t in targets] == ["Meter.display"]
    assert graph.called_in_loop(targets[0])


# the tree ----------------------------------------------------------------------------------


def test_imports_of_the_trees_own_modules_resolve(tmp_path: Path) -> None:
    files = tree_of(
        tmp_path,
        {
            "utils/__init__.py": "from .dist import setup as setup\n",
            "utils/dist.py": "def setup(gpu):\n    pin(gpu)\n",
            "pkg/__init__.py": "",
            "pkg/helpers.py": "from ..utils import dist\n\ndef run():\n    dist.setup(1)\n",
            "train.py": (
                "import utils.dist\nfrom utils import setup\nimport utils.dist as d\n\n"
                "utils.dist.setup(0)\nsetup(2)\nd.setup(3)\n"
            ),
        },
    )
    train, dist = files["train.py"], files["utils/dist.py"]
    graph = train.project.graph
    setup = dist.functions_by_qualname["setup"]
    for text in ("utils.dist.setup(0)", "setup(2)", "d.setup(3)"):
        assert graph.targets(train, call(train, text)) == (setup,)
    callers = {ast.unparse(edge.site.node) for edge in graph.callers(setup)}
    assert callers == {"utils.dist.setup(0)", "setup(2)", "d.setup(3)", "dist.setup(1)"}


def test_a_module_not_given_is_read_for_context(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("def pin(rank):\n    set_device(rank)\n")
    files = tree_of(tmp_path, {"train.py": "from helpers import pin\n\npin(0)\n"})
    train = files["train.py"]
    targets = train.project.graph.targets(train, call(train, "pin(0)"))
    assert [t.qualname for t in targets] == ["pin"]
    assert str(tmp_path / "helpers.py") in train.project.context_only


def test_a_very_long_chain_of_names_is_unknown_not_a_crash() -> None:
    chain = "\n".join(f"    x{i} = x{i - 1}" for i in range(1, 2000))
    source = (
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        f"def main(m):\n    x0 = DDP(m)\n{chain}\n    torch.save(x1999.state_dict(), 'a.pt')\n"
    )
    findings = analyze("chain.py", source, PYTHON, script_rules())
    assert "DDP903" not in {f.code for f in findings}
