"""Where DDP122 looks beyond one file's seeding calls: seeds drawn fresh in each process, the
rank term given by another file of the program, and module-level seeding in a module that an
entry point of several processes imports (it runs in every one of them)."""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.callsources import comes_from_call
from ddp_doctor.script.closure import imported_closure
from ddp_doctor.script.evidence import is_entry_point, program_files
from ddp_doctor.script.facts import CallSite, ScriptFacts
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.seeding import has_rank_term, seeding_calls

# Sources of a seed that differs from process to process with no rank in it: torch.seed()
# "sets the seed for generating random numbers to a non-deterministic random number" and
# returns it (pytorch docs, torch.seed); the operating system's entropy. Not the clock: ranks
# started together read the same second.
_FRESH_SOURCES = frozenset(
    {
        "torch.seed",
        "torch.random.seed",
        "os.urandom",
        "secrets.randbits",
        "secrets.randbelow",
        "secrets.token_bytes",
        "secrets.token_hex",
        "uuid.uuid4",
        "random.SystemRandom",
        "numpy.random.SeedSequence",
    }
)
_NAME_HOPS = 2


def draws_a_fresh_seed(facts: ScriptFacts, site: CallSite) -> bool:
    """`set_seed(torch.seed() % 10**9)` (diamond's Trainer), `seed = int.from_bytes(
    os.urandom(4), "little"); torch.manual_seed(seed)`: the seed is drawn anew in each
    process, so the ranks differ without a rank term (also through a name, two hops)."""
    values = [*site.node.args, *(kw.value for kw in site.node.keywords)]
    return any(comes_from_call(facts, value, _NAME_HOPS, _is_fresh_source) for value in values)


def _is_fresh_source(facts: ScriptFacts, call: ast.Call) -> bool:
    qualified = facts.qualname(call.func) or names.dotted(call.func) or ""
    if qualified.startswith("np."):
        qualified = "numpy." + qualified[3:]
    return qualified in _FRESH_SOURCES


def seeds_apart(facts: ScriptFacts, site: CallSite, callers_decide: bool = True) -> bool:
    """The seed differs per rank: a rank term, or a seed drawn fresh in each process."""
    return has_rank_term(facts, site, callers_decide) or draws_a_fresh_seed(facts, site)


def program_seeds_apart(facts: ScriptFacts) -> bool:
    """Another file of the program seeds with the rank (or a fresh seed): AutoFormer's
    supernet_train.py seeds torch and numpy with `args.seed + utils.get_rank()`, so the
    `random.seed(epoch)` of its supernet_engine.py is the program's shared stream on
    purpose (every rank samples the same sub-network), not its only seed. A seeding helper
    of another file that nothing of the tree calls (Oscar's utils/misc.py `set_seed(seed,
    n_gpu)`, while the entry point seeds inline) seeds nothing here: it is no rank term."""
    return any(
        seeds_apart(mate, site, callers_decide=False)
        for mate in program_files(facts)
        if mate is not facts and mate.is_python
        for site in seeding_calls(mate)
        if site.node.args or site.node.keywords
    )


def imported_into_ranks(facts: ScriptFacts, site: CallSite) -> bool:
    """Module-level seeding (outside a `__main__` guard) of a module that an entry point of
    several processes imports, directly or through others (StyleTTS2's meldataset.py seeds
    numpy and random at import, under train_first.py's accelerate program): every process
    imports it, so every rank runs the seed."""
    if not site.ctx.module_level or site.ctx.main_guard:
        return False
    return any(
        mate is not facts
        and is_entry_point(mate)
        and flow_of(mate).is_multiprocess
        and any(imported is facts for imported in imported_closure(mate))
        for mate in program_files(facts)
    )
