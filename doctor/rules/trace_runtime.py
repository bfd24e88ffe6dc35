"""DDP601-DDP603: the user's run, as traced; and the codes of `check` and of the job that the
traced run confirmed, "seen at runtime" with the ranks and the user's line.

The DDP6xx checks are facts rules over the trace's facts. The confirmed codes keep their own
numbers (DDP101 ... DDP127 are judged on scripts, DDP302, DDP305, DDP307 on the doctor's job,
DDP304 and DDP501 in texts), so they are not facts rules here: engine.judge calls
`runtime_findings` after the facts rules, and it builds them with spec_for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ddp_doctor.facts import FactSet
from ddp_doctor.model import Finding, Location, Remediation
from ddp_doctor.registry import Hit, rule, spec_for
from ddp_doctor.trace.facts import DataParallelRecord, RankTrace, Site, TraceFacts

from .jobreading import TERMINATED_BY_TORCHRUN, describe_exit, is_consequence, rank_list
from .trace_hang import SEEN, collective_hits


def runtime_findings(facts: FactSet, found: Sequence[Finding]) -> list[Finding]:
    trace: TraceFacts | None = facts.facts("trace")
    if trace is None:
        return []
    hits: list[tuple[str, Hit]] = [*collective_hits(trace)]
    for check in RUNTIME_CHECKS:
        hits.extend(check(trace))
    findings = [spec_for(code).finding(hit) for code, hit in hits]
    return findings + _output_findings(trace, [*found, *findings])


# -- DDP6xx ----------------------------------------------------------------------------------
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
    worked = [r.rank for r in trace.ranks if r.steps or r.end in ("returned", "bound")]
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
            f"seen at runtime: the DistributedSampler{_at(site)} on rank(s) {rank_list(ranks)}: "
            f"{problem}",
            {"seen": SEEN, "ranks": ranks, "problem": problem},
            location=_location(site),
        )


# -- codes of `check` and of the job, confirmed at runtime -----------------------------------
def _set_epoch_missing(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    same: dict[Site | None, list[tuple[int, int, object]]] = {}
    for rank in trace.ranks:
        for sampler in rank.samplers:
            if sampler.shuffle and len(sampler.epochs) >= 2 and len(set(sampler.epochs)) == 1:
                same.setdefault(sampler.site, []).append(
                    (rank.rank, len(sampler.epochs), sampler.epochs[0])
                )
    for site, seen in same.items():
        ranks = [r for r, _, _ in seen]
        iterations, epoch = seen[0][1], seen[0][2]
        yield (
            "DDP113",
            Hit(
                f"seen at runtime: the shuffling DistributedSampler{_at(site)} was iterated "
                f"{iterations} times on rank(s) {rank_list(ranks)} with epoch {epoch} every time: "
                "each epoch repeats the same order",
                {"seen": SEEN, "ranks": ranks, "iterations": iterations, "epoch": epoch},
                location=_location(site),
            ),
        )


def _save_on_every_rank(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    writers: dict[str, dict[int, Site | None]] = {}
    for rank in trace.ranks:
        for save in rank.saves:
            if save.is_path:
                writers.setdefault(save.target, {}).setdefault(rank.rank, save.site)
    for target, ranks in writers.items():
        if len(ranks) > 1:
            site = next(iter(ranks.values()))
            yield (
                "DDP116",
                Hit(
                    f"seen at runtime: ranks {rank_list(ranks)} all wrote {target}{_at(site, 'with torch.save')}",
                    {"seen": SEEN, "ranks": sorted(ranks), "path": target},
                    location=_location(site),
                ),
            )


def _load_onto_other_gpu(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    for rank in trace.ranks:
        own = _own_device(rank)
        for load in rank.loads:
            if load.map_location is not None or own is None:
                continue
            elsewhere = [d for d in load.devices if d.startswith("cuda") and d != own]
            if elsewhere:
                yield (
                    "DDP118",
                    Hit(
                        f"seen at runtime: rank {rank.rank} (on {own}) loaded {load.target} onto "
                        f"{', '.join(elsewhere)}{_at(load.site, 'with torch.load')} (no map_location)",
                        {"seen": SEEN, "rank": rank.rank, "device": own, "loaded_on": elsewhere},
                        location=_location(load.site),
                    ),
                )


def _ddp_device_ids(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    for rank in trace.ranks:
        for ddp in rank.ddp:
            ids = ddp.device_ids or ()
            problems = []
            if len(ids) > 1:
                problems.append(f"device_ids lists {len(ids)} GPUs {list(ids)}")
            if ids and ddp.output_device is not None and ddp.output_device != ids[0]:
                problems.append(f"output_device {ddp.output_device} != device_ids[0] {ids[0]}")
            if ids and ddp.module_device and ddp.module_device != f"cuda:{ids[0]}":
                problems.append(f"the module is on {ddp.module_device}, device_ids[0] is {ids[0]}")
            if problems:
                yield (
                    "DDP108",
                    Hit(
                        f"seen at runtime on rank {rank.rank}: DDP{_at(ddp.site)}: {'; '.join(problems)}",
                        {
                            "seen": SEEN,
                            "rank": rank.rank,
                            "device_ids": list(ids),
                            "output_device": ddp.output_device,
                        },
                        location=_location(ddp.site),
                    ),
                )


def _model_on_cpu(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    for rank in trace.ranks:
        backend = rank.init.backend if rank.init else None
        for ddp in rank.ddp:
            if ddp.module_device == "cpu" and backend == "nccl":
                yield (
                    "DDP109",
                    Hit(
                        f"seen at runtime on rank {rank.rank}: DDP{_at(ddp.site)} wraps a model on "
                        "the CPU in an nccl process group",
                        {"seen": SEEN, "rank": rank.rank, "backend": backend},
                        location=_location(ddp.site),
                    ),
                )


def _sampler_missing(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    plain: dict[Site | None, list[int]] = {}
    for rank in trace.ranks:
        if not rank.ddp or not rank.init or (rank.init.world_size or 0) < 2:
            continue
        for loader in rank.loaders:
            if loader.trained and loader.sampler_kind in ("RandomSampler", "SequentialSampler"):
                plain.setdefault(loader.site, []).append(rank.rank)
    for site, ranks in plain.items():
        yield (
            "DDP111",
            Hit(
                f"seen at runtime: the DataLoader{_at(site)} fed DDP training on rank(s) "
                f"{rank_list(ranks)} with no DistributedSampler: every rank trained on all the data",
                {"seen": SEEN, "ranks": ranks},
                location=_location(site),
            ),
        )


def _syncbn_after_ddp(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    sites: dict[Site | None, list[int]] = {}
    for rank in trace.ranks:
        for conversion in rank.syncbn:
            if conversion.on_ddp:
                sites.setdefault(conversion.site, []).append(rank.rank)
    for site, ranks in sites.items():
        yield (
            "DDP115",
            Hit(
                f"seen at runtime: convert_sync_batchnorm{_at(site)} converted a model already "
                f"wrapped in DDP (rank(s) {rank_list(ranks)})",
                {"seen": SEEN, "ranks": ranks},
                location=_location(site),
            ),
        )


def _data_parallel(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    for rank in trace.ranks:
        for dp in rank.dataparallel:
            yield (
                "DDP101",
                Hit(
                    f"seen at runtime: nn.DataParallel{_at(dp.site)} over device_ids {list(dp.device_ids)}",
                    {"seen": SEEN, "rank": rank.rank, "device_ids": list(dp.device_ids)},
                    location=_location(dp.site),
                ),
            )
            problem = _dataparallel_devices(dp)
            if problem:
                yield (
                    "DDP405",
                    Hit(
                        f"seen at runtime: DataParallel{_at(dp.site)}: {problem}",
                        {
                            "seen": SEEN,
                            "device_ids": list(dp.device_ids),
                            "output_device": dp.output_device,
                        },
                        location=_location(dp.site),
                    ),
                )


def _dataparallel_devices(dp: DataParallelRecord) -> str | None:
    first = f"cuda:{dp.device_ids[0]}" if dp.device_ids else None
    if first and dp.module_device and dp.module_device != first:
        return f"the module is on {dp.module_device}, but device_ids[0] is {first}"
    wanted = f"cuda:{dp.output_device}" if dp.output_device is not None and first else None
    elsewhere = [d for d in dp.output_devices if wanted and d != wanted]
    if elsewhere:
        return f"its output landed on {', '.join(elsewhere)}, not on output_device {wanted}"
    return None


def _duplicate_gpu(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    by_gpu: dict[tuple[str, str], list[int]] = {}
    for rank in trace.ranks:
        gpu = _gpu_of(rank)
        if gpu is not None:
            by_gpu.setdefault((rank.host, gpu), []).append(rank.rank)
    for (host, gpu), ranks in by_gpu.items():
        if len(ranks) > 1:
            yield (
                "DDP305",
                Hit(
                    f"seen at runtime: ranks {rank_list(ranks)} all use GPU {gpu} on {host}",
                    {"seen": SEEN, "ranks": ranks, "gpu": gpu, "host": host},
                ),
            )


def _rank_failed(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    """Ranks that ended by an exception, sys.exit(non-zero) or a signal of their own. A rank
    whose exception only says a peer went away ("Connection closed by peer") is a bystander
    when another rank failed by itself; ranks failing alike at one line make one finding."""
    killed = [r for r in trace.ranks if r.end == "unknown" and _own_signal(r.exit_code)]
    raised = [r for r in trace.ranks if r.end == "exception" and r.exception is not None]
    causes = [r for r in raised if r.exception and not is_consequence(r.exception.message)]
    if causes or killed:
        raised = causes
    alike: dict[tuple[str, Site | None, str], list[int]] = {}
    for rank in raised:
        assert rank.exception is not None
        key = (rank.exception.type, rank.exception.site, rank.exception.message[:300])
        alike.setdefault(key, []).append(rank.rank)
    for (kind, site, message), ranks in alike.items():
        yield (
            "DDP307",
            Hit(
                f"seen at runtime: rank{'s' if len(ranks) > 1 else ''} {rank_list(ranks)} raised "
                f"{kind}{_at(site)}: {message}",
                {"seen": SEEN, "ranks": ranks, "exception": kind},
                location=_location(site),
            ),
        )
    for rank in trace.ranks:
        if rank.end == "exit" and rank.end_detail not in (None, "0", "None"):
            yield (
                "DDP307",
                Hit(
                    f"seen at runtime: rank {rank.rank} called sys.exit({rank.end_detail})",
                    {"seen": SEEN, "ranks": [rank.rank], "exit": rank.end_detail},
                ),
            )
    for rank in killed:
        assert rank.exit_code is not None
        yield (
            "DDP307",
            Hit(
                f"rank {rank.rank} {describe_exit(rank.exit_code)} without a Python exception "
                f"(after {rank.collectives} collectives, {rank.steps} steps)",
                {"ranks": [rank.rank], "exit_code": rank.exit_code},
            ),
        )


def _own_signal(exit_code: int | None) -> bool:
    return exit_code not in (None, 0, TERMINATED_BY_TORCHRUN)


def _unused_parameters(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    unused: dict[Site | None, tuple[list[int], tuple[str, ...], int]] = {}
    for rank in trace.ranks:
        for ddp in rank.ddp:
            if ddp.unused and not ddp.find_unused_parameters and not ddp.static_graph:
                ranks, _, _ = unused.setdefault(ddp.site, ([], ddp.unused, ddp.unused_count))
                ranks.append(rank.rank)
    for site, (ranks, names, count) in unused.items():
        shown = ", ".join(names[:6]) + (", ..." if count > 6 else "")
        yield (
            "DDP501",
            Hit(
                f"seen at runtime: {count} parameter(s) of the DDP model{_at(site, 'built')} got no "
                f"gradient in the first backward on rank(s) {rank_list(ranks)} ({shown}), and "
                "find_unused_parameters is False",
                {"seen": SEEN, "ranks": ranks, "parameters": list(names), "count": count},
                location=_location(site),
            ),
        )


RUNTIME_CHECKS = (
    _data_parallel,
    _ddp_device_ids,
    _model_on_cpu,
    _sampler_missing,
    _set_epoch_missing,
    _syncbn_after_ddp,
    _save_on_every_rank,
    _load_onto_other_gpu,
    _duplicate_gpu,
    _rank_failed,
    _unused_parameters,
)


# -- helpers ---------------------------------------------------------------------------------
def _own_device(rank: RankTrace) -> str | None:
    for record in reversed(rank.set_devices):
        if record.current_device:
            return record.current_device
    for ddp in rank.ddp:
        if ddp.current_device:
            return ddp.current_device
    if rank.init and rank.init.current_device:
        return rank.init.current_device
    return None


def _gpu_of(rank: RankTrace) -> str | None:
    """The GPU a rank trains on, by UUID where known: DDP's device, else set_device's."""
    for ddp in rank.ddp:
        if ddp.module_device and ddp.module_device.startswith("cuda"):
            return ddp.uuid or ddp.current_device or ddp.module_device
    for record in reversed(rank.set_devices):
        if record.current_device:
            return record.uuid or record.current_device
    return None


def _at(site: Site | None, verb: str = "at") -> str:
    if site is None:
        return ""
    return f" {verb} {site}" if verb == "at" else f" ({verb} at {site})"


def _location(site: Site | None) -> Location | None:
    return Location(site.path, site.line) if site is not None else None


# Codes the trace decides from its own records; a text in the output must not repeat them.
JUDGED_FROM_TRACE = frozenset({"DDP202", "DDP302", "DDP304", "DDP305", "DDP307", "DDP501"})
STOPPED_FROM_OUTSIDE = "DDP507"


def _output_findings(trace: TraceFacts, found: Iterable[Finding]) -> list[Finding]:
    """The run's output and the ranks' exception texts through the shared log patterns."""
    from dataclasses import replace

    known = {f.code for f in found} | JUDGED_FROM_TRACE
    if trace.outcome != "finished":
        known.add(STOPPED_FROM_OUTSIDE)  # the doctor stopped it: not the user's scheduler
    texts = [trace.output_tail]
    texts += [
        f"[rank{r.rank}]: {r.exception.type}: {r.exception.message}"
        for r in trace.ranks
        if r.exception
    ]
    text = "\n".join(t for t in texts if t)
    if not text:
        return []
    try:
        from ddp_doctor.logscan import scan_text
    except ImportError:  # the log patterns are optional
        return []
    return [
        replace(f, evidence={**f.evidence, "source": "trace output"})
        for f in scan_text(text)
        if f.code not in known
    ]
