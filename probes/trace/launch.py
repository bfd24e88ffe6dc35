"""`trace`'s run: the user's command started under the monitor, watched, bounded and stopped.

The command runs in the user's folder with the user's environment, plus: the payload first on
PYTHONPATH, DDP_DOCTOR_TRACE (the doctor's folder, where the ranks write), the watchdog's
variable, and torch's flight recorder switched on when the user has not set it. While it
runs, the doctor reads each rank's progress file; when no rank has made progress (a completed
collective, an optimizer step, a new epoch) for --hang-after seconds it collects forensics:
every rank's stack (faulthandler, on a signal), the call it waits in and its flight recorder.
If a rank waits in a collective it is a hang and the job is stopped; otherwise the ranks are
computing and the watch goes on. At the time limit forensics are collected too. Stopping is
SIGTERM to torchrun and every rank, then SIGKILL to the whole tree, including processes that
were re-parented on the way, after a short grace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.facts.trace import Forensics, TraceFacts
from ddp_doctor.patient.trace.recorder import CONFIG_FILE, TRACE_VARIABLE
from ddp_doctor.probes.job.payload import (
    PATIENT_ROOT,
    install_payload,
    patient_environment,
    process_start_time,
)
from ddp_doctor.probes.job.results import torch_exit_codes
from ddp_doctor.probes.orphans import adopt_orphans, end_orphans
from ddp_doctor.probes.runner import descendants, has_exited, kill_group, live_pids, tracked
from ddp_doctor.probes.trace.forensics import alive, collect_forensics, live_ranks
from ddp_doctor.probes.trace.journals import (
    RankProcess,
    RankReader,
    journals_by_rank,
    read_progress,
)
from ddp_doctor.probes.trace.output import OUTPUT_FOLDER, LiveOutput, Show
from ddp_doctor.trace.command import TracedCommand

Progress = Callable[[str], None]
FLIGHT_RECORDER_ENTRIES = "256"
POLL_S = 0.2
TREE_EVERY_S = 1.0
SITECUSTOMIZE = PATIENT_ROOT / "trace" / "sitecustomize.py"


@dataclass(frozen=True)
class TraceConfig:
    command: TracedCommand
    python: str
    timeout_s: float
    hang_after_s: float
    steps: int | None = None
    epochs: int | None = None
    keep: int = 32  # the first and the last K collectives per rank
    stop_grace_s: float = 3.0
    forensics_wait_s: float = 5.0

    @property
    def reserve_s(self) -> float:
        """Time kept before the limit to collect forensics and stop the job (a quarter of
        a short limit)."""
        return min(self.forensics_wait_s + self.stop_grace_s + 2.0, self.timeout_s / 4)

    @property
    def answer_wait_s(self) -> float:
        return min(self.forensics_wait_s, self.reserve_s / 3)


def run_trace(
    config: TraceConfig, progress: Progress | None = None, show: Show | None = None
) -> TraceFacts:
    """`show` gets each line of the run's own output as it comes (ranks' lines prefixed)."""
    workdir = Path(tempfile.mkdtemp(prefix="ddp-doctor-trace-"))
    adopt_orphans()  # a rank's setsid grandchild is re-parented here and ends with the job
    try:
        return TraceSession(config, workdir, progress, show).run()
    finally:
        end_orphans(keep=live_pids())
        shutil.rmtree(workdir, ignore_errors=True)


class TraceSession:
    def __init__(
        self, config: TraceConfig, workdir: Path, progress: Progress | None, show: Show | None
    ) -> None:
        self.config = config
        self.workdir = workdir
        self.progress = progress
        self.output = LiveOutput(workdir / OUTPUT_FOLDER, show)
        self.ranks_dir = workdir / "ranks"
        self.forensics_dir = workdir / "forensics"
        self.requests = 0
        self.seen: dict[int, int | None] = {}  # every process of the job seen: pid -> start
        self.flight_recorder = "off"

    def run(self) -> TraceFacts:
        self.ranks_dir.mkdir()
        self.forensics_dir.mkdir()
        (self.workdir / OUTPUT_FOLDER).mkdir()
        config = {
            "keep": self.config.keep,
            "steps": self.config.steps,
            "epochs": self.config.epochs,
            "stream_output": True,
        }
        (self.workdir / CONFIG_FILE).write_text(json.dumps(config))
        argv = self.config.command.argv(self.config.python, str(self.workdir / "torchrun"))
        started = time.monotonic()
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
            env=self._environment(),
            start_new_session=True,
        )
        assert process.stdout is not None
        self.output.read_launcher(process.stdout)
        with tracked(process, self.workdir):
            try:
                outcome, forensics = self._watch(process, started)
            finally:
                self._stop(process)
                tail = self.output.finish()
                process.stdout.close()
        return self._facts(process, outcome, forensics, time.monotonic() - started, tail)

    def _environment(self) -> dict[str, str]:
        payload = install_payload(self.workdir / "payload")
        env = patient_environment(os.environ, payload, self.workdir)  # the watchdog removes it
        env[TRACE_VARIABLE] = str(self.workdir)
        env.setdefault("PYTHONUNBUFFERED", "1")  # a line shows when printed (torchrun adds no -u)
        size = env.get("TORCH_FR_BUFFER_SIZE") or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
        if size is None:
            env["TORCH_FR_BUFFER_SIZE"] = FLIGHT_RECORDER_ENTRIES
            (self.workdir / "flight-recorder").mkdir()
            dump = str(self.workdir / "flight-recorder" / "rank_")
            env.setdefault("TORCH_FR_DUMP_TEMP_FILE", dump)  # NCCL dumps on its timeouts
            self.flight_recorder = "on (set by the doctor)"
        elif size.strip().isdigit() and int(size) > 0:
            self.flight_recorder = "on"
        if self.config.command.entry == "no-python":
            inject = self.workdir / "inject"
            inject.mkdir()
            shutil.copyfile(SITECUSTOMIZE, inject / "sitecustomize.py")
            env["PYTHONPATH"] = os.pathsep.join([str(inject), env["PYTHONPATH"]])
        return env

    # -- watching --------------------------------------------------------------------------
    def _watch(self, process: subprocess.Popen, started: float) -> tuple[str, Forensics | None]:
        config = self.config
        deadline = started + max(1.0, config.timeout_s - config.reserve_s)
        watch_from = started  # after forensics that found no hang, the quiet time counts anew
        last_tree = 0.0
        while not has_exited(process):
            self.output.look_for_ranks()
            now = time.monotonic()
            if now - last_tree >= TREE_EVERY_S:
                self._remember_tree(process)
                last_tree = now
            quiet = self._quiet_s()
            if now >= deadline:
                return "timeout", self._forensics("timeout", now - started, quiet)
            if (
                quiet is not None
                and quiet >= config.hang_after_s
                and now - watch_from >= config.hang_after_s
            ):
                taken = self._forensics("hang", now - started, quiet)
                if any(rank.waiting for rank in taken.ranks):
                    return "hang", taken
                watch_from = time.monotonic()
            if self.progress:
                self.progress(self._progress_line(now - started, quiet))
            time.sleep(POLL_S)
        return "finished", None

    def _live_ranks(self) -> list[RankProcess]:
        return live_ranks(self.ranks_dir)

    def _forensics(self, reason: str, after_s: float, quiet_s: float | None) -> Forensics:
        self.requests += 1
        times = (after_s, quiet_s or 0.0)
        return collect_forensics(
            self.workdir, str(self.requests), reason, times, self.config.answer_wait_s
        )

    def _quiet_s(self) -> float | None:
        """Seconds since the last progress of the rank that progressed last; None before any
        rank is up."""
        latest = None
        for process in self._live_ranks():
            state = read_progress(Path(process.stem + ".progress"))
            moment = float(state.get("progress_t") or time.time())
            latest = moment if latest is None else max(latest, moment)
        return None if latest is None else max(0.0, time.time() - latest)

    def _progress_line(self, elapsed: float, quiet: float | None) -> str:
        """Ranks alive, the step they are at, the collective they wait in or how many they
        completed; Progress adds the one timer."""
        states = [read_progress(Path(r.stem + ".progress")) for r in self._live_ranks()]
        parts = [f"trace: {len(states)} rank{'s' if len(states) != 1 else ''} alive"]
        steps = [int(state.get("steps") or 0) for state in states]
        if steps and max(steps):
            span = f"{min(steps)}" if min(steps) == max(steps) else f"{min(steps)}-{max(steps)}"
            parts.append(f"step {span}")
        waiting = sorted({str(s["pending"].get("op")) for s in states if _pending(s)})
        completed = [int(state.get("completed") or 0) for state in states]
        if waiting:
            parts.append(f"in {', '.join(waiting)}")
        elif completed and max(completed):
            parts.append(f"{min(completed)} collectives done")
        if quiet and quiet >= 2:
            parts.append(f"quiet {quiet:.0f} s")
        return ", ".join(parts)

    # -- stopping --------------------------------------------------------------------------
    def _remember_tree(self, process: subprocess.Popen) -> None:
        for pid in descendants(process.pid):
            if pid not in self.seen:
                self.seen[pid] = process_start_time(pid)

    def _stop(self, process: subprocess.Popen) -> None:
        """SIGTERM to the launcher and the ranks, SIGKILL to everything after the grace."""
        if not has_exited(process):
            self._remember_tree(process)
            for pid in [process.pid, *self.seen]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + min(self.config.stop_grace_s, self.config.reserve_s / 3)
            while not has_exited(process) and time.monotonic() < deadline:
                time.sleep(0.05)
            self._remember_tree(process)
        kill_group(process)
        for pid, started in self.seen.items():
            if started is not None and alive(pid, started):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        process.wait()

    # -- the facts -------------------------------------------------------------------------
    def _facts(
        self,
        process: subprocess.Popen,
        outcome: str,
        forensics: Forensics | None,
        duration_s: float,
        output_tail: str,
    ) -> TraceFacts:
        command = self.config.command
        exit_code = process.returncode if outcome == "finished" else None
        failed = torch_exit_codes(output_tail)
        ranks = []
        for rank, journals in journals_by_rank(self.ranks_dir).items():
            if command.launcher == "python":
                code = exit_code
            else:
                code = failed.get(rank, 0 if exit_code == 0 else None)
            reader = RankReader(journals[-1], len(journals) - 1)
            ranks.append(reader.trace(code, stopped=outcome != "finished"))
        return TraceFacts(
            command="",  # filled in by the caller, which knows the words as typed
            launcher=command.launcher,
            python=self.config.python,
            entry=command.entry,
            target=command.target,
            expected_ranks=command.expected_ranks,
            steps=self.config.steps,
            epochs=self.config.epochs,
            timeout_s=self.config.timeout_s,
            hang_after_s=self.config.hang_after_s,
            flight_recorder=self.flight_recorder,
            outcome=outcome,
            exit_code=exit_code,
            duration_s=round(duration_s, 3),
            ranks=tuple(ranks),
            forensics=forensics,
            output_tail=output_tail,
        )


def _pending(state: dict) -> bool:
    pending = state.get("pending")
    return isinstance(pending, dict) and pending.get("op") is not None
