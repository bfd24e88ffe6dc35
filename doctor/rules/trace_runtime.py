"""The codes of `check` and of the job that a traced run confirmed, "seen at runtime" with the
ranks and the user's line.

These codes keep their own numbers (DDP101 ... DDP127 are judged on scripts, DDP302, DDP305,
DDP307 on the doctor's job, DDP304 and DDP501 in texts), so they are not facts rules here:
engine.judge calls `runtime_findings` after the facts rules, which builds them with spec_for.
The trace's own codes (DDP6xx) are facts rules in traced_run.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.trace import DataParallelRecord, RankTrace, Site, TraceFacts
from ddp_doctor.model import Finding, Location, Remediation
from ddp_doctor.registry import Hit, spec_for
from ddp_doctor.rules.job_output import TEXT_CONCLUSIONS
from ddp_doctor.rules.jobreading import (
    TERMINATED_BY_TORCHRUN,
    describe_exit,
    is_consequence,
    rank_list,
)
from ddp_doctor.rules.trace_hang import SEEN, collective_hits


def runtime_findings(facts: FactSet, found: Sequence[Finding]) -> list[Finding]:
    trace: TraceFacts | None = facts.facts("trace")
    if trace is None:
        return []
    hits: list[tuple[str, Hit]] = [*collective_hits(trace)]
    for check in RUNTIME_CHECKS:
        hits.extend(check(trace))
    findings = [spec_for(code).finding(hit) for code, hit in hits]
    return findings + _output_findings(trace, [*found, *findings])


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
                f"seen at runtime: the shuffling DistributedSampler{at_site(site)} was iterated "
                f"{iterations} times on rank(s) {rank_list(ranks)} with epoch {epoch} every time: "
                "each epoch repeats the same order",
                {"seen": SEEN, "ranks": ranks, "iterations": iterations, "epoch": epoch},
                location=location_of(site),
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
                    f"seen at runtime: ranks {rank_list(ranks)} all wrote {target}{at_site(site, 'with torch.save')}",
                    {"seen": SEEN, "ranks": sorted(ranks), "path": target},
                    location=location_of(site),
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
                        f"{', '.join(elsewhere)}{at_site(load.site, 'with torch.load')} (no map_location)",
                        {"seen": SEEN, "rank": rank.rank, "device": own, "loaded_on": elsewhere},
                        location=location_of(load.site),
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
                        f"seen at runtime on rank {rank.rank}: DDP{at_site(ddp.site)}: {'; '.join(problems)}",
                        {
                            "seen": SEEN,
                            "rank": rank.rank,
                            "device_ids": list(ids),
                            "output_device": ddp.output_device,
                        },
                        location=location_of(ddp.site),
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
                        f"seen at runtime on rank {rank.rank}: DDP{at_site(ddp.site)} wraps a model on "
                        "the CPU in an nccl process group",
                        {"seen": SEEN, "rank": rank.rank, "backend": backend},
                        location=location_of(ddp.site),
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
                f"seen at runtime: the DataLoader{at_site(site)} fed DDP training on rank(s) "
                f"{rank_list(ranks)} with no DistributedSampler: every rank trained on all the data",
                {"seen": SEEN, "ranks": ranks},
                location=location_of(site),
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
                f"seen at runtime: convert_sync_batchnorm{at_site(site)} converted a model already "
                f"wrapped in DDP (rank(s) {rank_list(ranks)})",
                {"seen": SEEN, "ranks": ranks},
                location=location_of(site),
            ),
        )


def _data_parallel(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    for rank in trace.ranks:
        for dp in rank.dataparallel:
            yield (
                "DDP101",
                Hit(
                    f"seen at runtime: nn.DataParallel{at_site(dp.site)} over device_ids {list(dp.device_ids)}",
                    {"seen": SEEN, "rank": rank.rank, "device_ids": list(dp.device_ids)},
                    location=location_of(dp.site),
                ),
            )
            problem = _dataparallel_devices(dp)
            if problem:
                yield (
                    "DDP405",
                    Hit(
                        f"seen at runtime: DataParallel{at_site(dp.site)}: {problem}",
                        {
                            "seen": SEEN,
                            "device_ids": list(dp.device_ids),
                            "output_device": dp.output_device,
                        },
                        location=location_of(dp.site),
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
                f"{kind}{at_site(site)}: {message}",
                {"seen": SEEN, "ranks": ranks, "exception": kind},
                location=location_of(site),
                fix=EXCEPTION_FIX,
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


EXCEPTION_FIX = Remediation(
    "Fix the exception at the line named; errors of other ranks that only say a peer went away "
    "followed from it and are left out. `-v` shows the end of the run's output with the full "
    "traceback."
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
                f"seen at runtime: {count} parameter(s) of the DDP model{at_site(site, 'built')} got no "
                f"gradient in the first backward on rank(s) {rank_list(ranks)} ({shown}), and "
                "find_unused_parameters is False",
                {"seen": SEEN, "ranks": ranks, "parameters": list(names), "count": count},
                location=location_of(site),
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


def at_site(site: Site | None, verb: str = "at") -> str:
    if site is None:
        return ""
    return f" {verb} {site}" if verb == "at" else f" ({verb} at {site})"


def location_of(site: Site | None) -> Location | None:
    return Location(site.path, site.line) if site is not None else None


# Codes the trace decides from its own records; a text in the output must not repeat them.
# What the traced facts decide better than texts; the log table's conclusions about who left
# or timed out (TEXT_CONCLUSIONS) are the journals' to draw, as in the job's output.
JUDGED_FROM_TRACE = (
    frozenset({"DDP202", "DDP302", "DDP304", "DDP305", "DDP307", "DDP501"}) | TEXT_CONCLUSIONS
)
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
    from ddp_doctor.logscan import scan_text

    return [
        replace(f, evidence={**f.evidence, "source": "trace output"})
        for f in scan_text(text)
        if f.code not in known
    ]
