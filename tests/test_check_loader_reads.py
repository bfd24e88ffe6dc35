"""How a loader is read (loaderreads.py): one batch (a loop left by an unconditional break,
`next(iter(loader))`), one iterator made outside any loop, or more; and what DDP111 and DDP113
make of it. Facts first, then codes."""

from __future__ import annotations

import textwrap

from ddp_doctor.script.analyze import analyze, prepare, script_rules
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.files import PYTHON
from ddp_doctor.script.loaderreads import Read, reads
from ddp_doctor.script.program import project_of

PRELUDE = """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
"""


def _facts(source: str) -> ScriptFacts:
    prepared = prepare("train.py", PRELUDE + textwrap.dedent(source), PYTHON)
    assert isinstance(prepared, ScriptFacts)
    project_of([prepared])
    return prepared


def _reads_of(source: str, name: str) -> list[Read]:
    facts = _facts(source)
    store = facts.assignments_by_target[name][0]
    return reads(facts, store.ctx, name)


def _codes(source: str) -> list[str]:
    text = PRELUDE + textwrap.dedent(source)
    return sorted(f.code for f in analyze("train.py", text, PYTHON, script_rules()))


def test_a_loop_left_by_an_unconditional_break_reads_one_batch() -> None:
    source = """
    loader = DataLoader(ds, shuffle=True)
    for step, batch in enumerate(loader):
        show(batch)
        break
    print(next(iter(loader)))
    """
    assert _reads_of(source, "loader") == [Read.ONE_BATCH, Read.ONE_BATCH]


def test_a_conditional_break_and_a_remade_iterator_are_more_than_one_pass() -> None:
    source = """
    def train(ds, steps):
        loader = DataLoader(ds, shuffle=True)
        for step, batch in enumerate(loader):
            if step == 100:
                break
        batches = iter(loader)
        for step in range(steps):
            try:
                batch = next(batches)
            except StopIteration:
                batches = iter(loader)
    """
    assert _reads_of(source, "loader") == [Read.OTHER, Read.ONE_ITERATOR, Read.OTHER]


def test_a_loader_handed_to_a_function_is_read_elsewhere() -> None:
    source = """
    def train(ds):
        loader = DataLoader(ds)
        run_epochs(loader)
        return loader
    """
    assert sorted(_reads_of(source, "loader"), key=str) == [Read.OTHER, Read.RETURNED]


SANITY = """
def main(model, train_set, local_rank):
    dist.init_process_group("nccl")
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    check_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    for step, batch in enumerate(check_loader):
        print(batch.shape)
        {stop}
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, sampler=sampler)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader:
            model(batch).sum().backward()
"""


def test_ddp111_leaves_a_one_batch_sanity_check_alone() -> None:
    assert "DDP111" not in _codes(SANITY.format(stop="break"))
    assert "DDP111" in _codes(SANITY.format(stop="if step > 5: break"))


STEPS = """
def make_synth_loader(ds):
    return DataLoader(ds, sampler=DistributedSampler(ds))

def train(model, ds, steps):
    dist.init_process_group("nccl")
    model = DDP(model)
    synth_loader = make_synth_loader(ds)
    synth = iter(synth_loader)
    for step in range(steps):
        {read}
        model(batch).sum().backward()
"""

REMADE = """try:
            batch = next(synth)
        except StopIteration:
            synth = iter(synth_loader)
            batch = next(synth)"""


def test_ddp113_leaves_one_iterator_made_once_alone() -> None:
    assert "DDP113" not in _codes(STEPS.format(read="batch = next(synth)"))
    assert "DDP113" in _codes(STEPS.format(read=REMADE))
