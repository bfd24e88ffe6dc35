"""DDP601-DDP603: what only a traced run of the user's training shows. Facts rules over the
trace's facts, so `diagnose` judges a saved trace report again."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.trace import Site, TraceFacts
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.jobreading import rank_list
from ddp_doctor.rules.trace_hang import SEEN
from ddp_doctor.rules.trace_runtime import at_site, location_of


@rule(
    "DDP601",
    Remediation(
        "Run the ranks with a Python that reads PYTHONPATH (no -I or -E) and that imports torch, "
        "and for torchrun --no-python make the entry start a Python; the output at the end of "
        "the report (-v) shows why a rank did not start."
    ),
)
def monitor_not_loaded(facts: FactSet) -> Iterator[Hit]:
    """What it finds: torchrun was asked for N ranks on this node, but fewer ranks (or none)
    ever reported to the doctor: the monitor never ran in them.
    Why it matters: nothing of those ranks was seen, so their mistakes and their hang
    positions are missing from the report; often the rank did not start at all.
    Example: the script path is wrong and torchrun fails before any rank runs; `--no-python`
    with a shell script that starts Python with -I.
    Fix: make the ranks start a plain Python; read the run's output.
    """
    trace: TraceFacts | None = facts.facts("trace")
    if trace is None or not trace.launched:
        return
    expected = trace.expected_ranks or (1 if trace.launcher == "python" else None)
    seen = len(trace.ranks)
    if expected is None or seen >= expected:
        return
    last = next((line for line in reversed(trace.output_tail.splitlines()) if line.strip()), "")
    yield Hit(
        f"{seen} of {expected} ranks reported to the doctor"
        + (f"; the run's last output: {last.strip()[:200]}" if last else ""),
        {"expected_ranks": expected, "seen_ranks": seen},
    )


@rule(
    "DDP602",
    Remediation(
        "Call torch.distributed.init_process_group() (backend from the environment torchrun "
        "sets) and wrap the model in DistributedDataParallel, or run the script as one process "
        "without torchrun."
    ),
)
def no_process_group(facts: FactSet) -> Iterator[Hit]:
    """What it finds: torchrun started several ranks and they ran the script, but none called
    init_process_group.
    Why it matters: every rank trains its own model on all of the data: N times the work for
    one result, and N processes writing the same checkpoints and logs.
    Example: a single-GPU script launched with `torchrun --nproc-per-node 4`.
    Fix: init the process group and wrap the model in DDP, or run one process.
    """
    trace: TraceFacts | None = facts.facts("trace")
    if trace is None or trace.launcher != "torchrun" or len(trace.ranks) < 2:
        return
    if any(r.init is not None for r in trace.ranks):
        return
    worked = [r.rank for r in trace.ranks if r.steps]
    if worked:
        yield Hit(
            f"{len(trace.ranks)} ranks ran {trace.target}, none called init_process_group: "
            f"ranks {rank_list(worked)} trained alone",
            {"ranks": [r.rank for r in trace.ranks], "trained": worked},
        )


@rule(
    "DDP603",
    Remediation(
        "Build the DistributedSampler without num_replicas and rank (it reads them from the "
        "process group), or pass dist.get_world_size() and dist.get_rank(), never local_rank."
    ),
)
def sampler_shard_mismatch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a DistributedSampler whose num_replicas is not the process group's world
    size, or whose rank is not the rank's own (seen per rank at runtime).
    Why it matters: ranks read the same shard, or some shards are never read: training sees
    duplicated data and misses the rest, silently.
    Example: DistributedSampler(ds, num_replicas=world_size, rank=local_rank) on two nodes:
    both nodes read the shards of the first.
    Fix: let the sampler read world size and rank from the process group.
    """
    trace: TraceFacts | None = facts.facts("trace")
    if trace is None:
        return
    wrong: dict[tuple[Site | None, str], list[int]] = {}
    for rank in trace.ranks:
        init = rank.init
        if init is None or not init.ok or init.world_size is None:
            continue
        for sampler in rank.samplers:
            problems = []
            if sampler.num_replicas is not None and sampler.num_replicas != init.world_size:
                problems.append(
                    f"num_replicas {sampler.num_replicas} != world size {init.world_size}"
                )
            if sampler.rank is not None and init.rank is not None and sampler.rank != init.rank:
                problems.append(f"rank={sampler.rank}, but this is rank {init.rank}")
            if problems:
                wrong.setdefault((sampler.site, "; ".join(problems)), []).append(rank.rank)
    for (site, problem), ranks in wrong.items():
        yield Hit(
            f"seen at runtime: the DistributedSampler{at_site(site)} on rank(s) {rank_list(ranks)}: "
            f"{problem}",
            {"seen": SEEN, "ranks": ranks, "problem": problem},
            location=location_of(site),
        )
