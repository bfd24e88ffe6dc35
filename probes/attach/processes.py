"""The distributed jobs on this host, found in /proc (through psutil) without touching them:
torchrun / torch.distributed.run agents and their workers, accelerate and deepspeed launchers,
mp.spawn children, SLURM tasks, and plain processes with RANK and WORLD_SIZE set."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psutil

# The variables kept of a rank's environment (the report redacts secrets among them).
DIST_PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_", "GLOO_", "SLURM_", "CUDA_VISIBLE_DEVICES")
DIST_NAMES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "OMP_NUM_THREADS",
    }
)
AGENT_MARKERS = {
    "torchrun": ("torch.distributed.run", "/torchrun", "torch.distributed.launch"),
    "accelerate": ("accelerate launch", "accelerate.commands.launch", "/accelerate launch"),
    "deepspeed": ("deepspeed.launcher.runner", "deepspeed.launcher.launch", "/deepspeed "),
}
SPAWN_MARKER = "multiprocessing.spawn import spawn_main"
WORKER_NAMES = ("pt_data_worker",)  # torch 2.13's name (comm) for a DataLoader worker


@dataclass(frozen=True)
class Candidate:
    pid: int
    ppid: int
    cmdline: str
    user: str
    env: Mapping[str, str] = field(default_factory=dict)
    env_readable: bool = True
    zombie: bool = False  # exited, not yet reaped by its parent: no command line nor environment
    name: str = ""  # the kernel's name of it (comm): torch renames its DataLoader workers


@dataclass(frozen=True)
class FoundRank:
    process: Candidate
    rank: int | None
    rank_from: str


@dataclass(frozen=True)
class FoundJob:
    job_id: str
    launcher: str
    agent: Candidate | None
    ranks: tuple[FoundRank, ...]


def scan() -> dict[int, Candidate]:
    """Every process of this host that can be read, by pid (the doctor itself left out)."""
    found = {}
    me = os.getpid()
    for process in psutil.process_iter(["pid", "ppid", "cmdline", "username", "status", "name"]):
        info = process.info
        if info["pid"] == me:
            continue
        if info.get("status") == psutil.STATUS_ZOMBIE:
            found[info["pid"]] = _zombie(info)
            continue
        if not info.get("cmdline"):
            continue
        env, readable = _environ(process)
        found[info["pid"]] = Candidate(
            pid=info["pid"],
            ppid=info["ppid"] or 0,
            cmdline=" ".join(info["cmdline"]),
            user=info.get("username") or "",
            env=env,
            env_readable=readable,
            name=str(info.get("name") or ""),
        )
    return found


def _zombie(info: Mapping) -> Candidate:
    """A process that exited and waits for its parent to reap it: /proc keeps its name (comm),
    parent and owner, not its command line nor its environment."""
    name = str(info.get("name") or "")
    return Candidate(
        info["pid"],
        info["ppid"] or 0,
        f"[{name}]",
        info.get("username") or "",
        {},
        False,
        True,
        name,
    )


def _environ(process: psutil.Process) -> tuple[dict[str, str], bool]:
    try:
        environ = process.environ()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return {}, False
    except (psutil.NoSuchProcess, OSError):
        return {}, True
    kept = {k: v for k, v in environ.items() if k in DIST_NAMES or k.startswith(DIST_PREFIXES)}
    return kept, True


def launcher_of(candidate: Candidate) -> str | None:
    """The launcher a Python process runs (`timeout 60 torchrun ...` is not an agent: its
    torchrun child is)."""
    if candidate.zombie or not is_python(candidate):
        return None
    words = " " + candidate.cmdline
    for launcher, markers in AGENT_MARKERS.items():
        if any(marker in words for marker in markers):
            return launcher
    return None


def is_python(candidate: Candidate) -> bool:
    if candidate.zombie:
        return "python" in candidate.cmdline or candidate.cmdline.startswith("[pt_")
    first = candidate.cmdline.split(" ", 1)[0]
    return "python" in os.path.basename(first) or SPAWN_MARKER in candidate.cmdline


def find_jobs(processes: Mapping[int, Candidate]) -> list[FoundJob]:
    """The jobs among the processes, each with its ranks; a rank's own children (DataLoader
    workers, which inherit its environment) are not ranks. Ranks under different agents are
    different jobs even with one run id (two nodes of a job simulated on one host)."""
    agents = {pid: p for pid, p in processes.items() if launcher_of(p)}
    ranks = [p for p in processes.values() if _is_rank(p, processes, agents)]
    jobs: dict[tuple[str, int | None], list[FoundRank]] = {}
    launchers: dict[tuple[str, int | None], tuple[str, Candidate | None]] = {}
    for job_id, launcher, agent, found in _ranked(ranks, processes, agents):
        key = (job_id, agent.pid if agent else None)
        jobs.setdefault(key, []).append(found)
        launchers.setdefault(key, (launcher, agent))
    for pid, agent in agents.items():  # an agent whose workers are not (yet) seen
        if any(key[1] == pid for key in jobs) or _under_agent(agent, agents):
            continue
        key = (agent.env.get("TORCHELASTIC_RUN_ID") or f"pid {pid}", pid)
        jobs[key], launchers[key] = [], (launcher_of(agent) or "", agent)
    shared = Counter(job_id for job_id, _ in jobs)
    return [
        FoundJob(
            job_id if shared[job_id] == 1 else f"{job_id}@{agent_pid}",
            launchers[(job_id, agent_pid)][0],
            launchers[(job_id, agent_pid)][1],
            _ordered([*found, *dead_ranks(found, launchers[(job_id, agent_pid)][1], processes)]),
        )
        for (job_id, agent_pid), found in jobs.items()
    ]


def dead_ranks(
    found: list[FoundRank], agent: Candidate | None, processes: Mapping[int, Candidate]
) -> list[FoundRank]:
    """The job's ranks that exited and that their launcher has not reaped: zombie Python
    children of the agent, or of the process that started the job's plain ranks (init, which
    reaps, excepted). A zombie keeps no environment, so its rank is known only where one
    rank of the world is missing and one zombie is found."""
    parents = {agent.pid} if agent else {f.process.ppid for f in found}
    parents.discard(1)
    zombies = [p for p in processes.values() if p.zombie and p.ppid in parents and is_python(p)]
    sizes = {_int(f.process.env.get("WORLD_SIZE")) for f in found} - {None}
    seen = {f.rank for f in found}
    missing = [r for r in range(sizes.pop()) if r not in seen] if len(sizes) == 1 else []
    if len(zombies) == 1 and len(missing) == 1:
        return [FoundRank(zombies[0], missing[0], "the one rank of the world not running")]
    return [FoundRank(z, None, "zombie") for z in sorted(zombies, key=lambda z: z.pid)]


def _under_agent(candidate: Candidate, agents: Mapping[int, Candidate]) -> bool:
    return candidate.ppid in agents


def _is_rank(
    candidate: Candidate, processes: Mapping[int, Candidate], agents: Mapping[int, Candidate]
) -> bool:
    if candidate.pid in agents or candidate.zombie or not is_python(candidate):
        return False  # a zombie is a dead rank of a job only beside its ranks (dead_ranks)
    if candidate.name.startswith(WORKER_NAMES):
        return False  # a DataLoader worker whose rank died: reparented, it keeps RANK
    parent = processes.get(candidate.ppid)
    if parent is not None and _rank_like(parent) and parent.pid not in agents:
        return False  # a rank's own child: a DataLoader worker
    return _rank_like(candidate) or (candidate.ppid in agents and not candidate.env_readable)


def _rank_like(candidate: Candidate) -> bool:
    env = candidate.env
    if "RANK" in env and "WORLD_SIZE" in env:
        return True
    if "SLURM_PROCID" in env and is_python(candidate) and "SLURM_STEP_ID" in env:
        return True
    return SPAWN_MARKER in candidate.cmdline


def _ranked(
    ranks: Iterable[Candidate], processes: Mapping[int, Candidate], agents: Mapping[int, Candidate]
) -> Iterable[tuple[str, str, Candidate | None, FoundRank]]:
    spawned: dict[int, list[Candidate]] = {}
    for candidate in ranks:
        agent = _agent_above(candidate, processes, agents)
        env = candidate.env
        if "RANK" in env:
            launcher = (
                launcher_of(agent) if agent else ("slurm" if "SLURM_JOB_ID" in env else "env")
            )
            yield _job_id(candidate, agent), launcher or "env", agent, _numbered(candidate)
        elif "SLURM_PROCID" in env:
            found = FoundRank(candidate, _int(env["SLURM_PROCID"]), "SLURM_PROCID")
            yield f"slurm {env.get('SLURM_JOB_ID', '?')}", "slurm", agent, found
        elif SPAWN_MARKER in candidate.cmdline:
            spawned.setdefault(candidate.ppid, []).append(candidate)
        else:  # under an agent, environment unreadable: rank unknown
            yield (
                _job_id(candidate, agent),
                launcher_of(agent) if agent else "env",
                agent,
                (FoundRank(candidate, None, "unreadable")),
            )
    for parent_pid, children in spawned.items():
        parent = processes.get(parent_pid)
        for index, child in enumerate(sorted(children, key=lambda c: c.pid)):
            yield f"pid {parent_pid}", "mp.spawn", parent, FoundRank(child, index, "spawn order")


def _numbered(candidate: Candidate) -> FoundRank:
    return FoundRank(candidate, _int(candidate.env.get("RANK")), "RANK")


def _job_id(candidate: Candidate, agent: Candidate | None) -> str:
    env = candidate.env
    if env.get("TORCHELASTIC_RUN_ID"):
        return env["TORCHELASTIC_RUN_ID"]
    if env.get("SLURM_JOB_ID"):
        return f"slurm {env['SLURM_JOB_ID']}"
    if agent is not None:
        return f"pid {agent.pid}"
    return f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"


def _agent_above(
    candidate: Candidate, processes: Mapping[int, Candidate], agents: Mapping[int, Candidate]
) -> Candidate | None:
    pid, seen = candidate.ppid, 0
    while pid and seen < 8:
        if pid in agents:
            return agents[pid]
        parent = processes.get(pid)
        pid, seen = (parent.ppid if parent else 0), seen + 1
    return None


def _ordered(found: list[FoundRank]) -> tuple[FoundRank, ...]:
    return tuple(sorted(found, key=lambda f: (f.rank is None, f.rank or 0, f.process.pid)))


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def children_of(pid: int, processes: Mapping[int, Candidate]) -> list[Candidate]:
    return [p for p in processes.values() if p.ppid == pid]


def job_for(jobs: list[FoundJob], wanted: str) -> FoundJob | None:
    """The job named by --job (its id) or by a pid (its agent's, or any rank's)."""
    slurm = wanted[len("slurm ") :] if wanted.startswith("slurm ") else None
    for job in jobs:
        if job.job_id == wanted or (job.agent is not None and str(job.agent.pid) == wanted):
            return job
        if slurm and any(r.process.env.get("SLURM_JOB_ID") == slurm for r in job.ranks):
            return job
        if any(str(r.process.pid) == wanted for r in job.ranks):
            return job
        if job.agent is None and any(str(r.process.ppid) == wanted for r in job.ranks):
            return job  # the process that started a job's plain ranks (a script, a shell)
    return None


def job_below(
    jobs: list[FoundJob], wanted: str, processes: Mapping[int, Candidate]
) -> FoundJob | None:
    """The one job whose launcher or ranks run below the process `wanted` names (a `timeout`,
    `setsid`, `nohup` or shell around torchrun): `pgrep -f torchrun` finds the wrapper too."""
    if not wanted.isdigit():
        return None
    pid = int(wanted)
    below = [j for j in jobs if any(_descends(p, pid, processes) for p in _members(j))]
    return below[0] if len(below) == 1 else None


def _members(job: FoundJob) -> list[Candidate]:
    return ([job.agent] if job.agent else []) + [r.process for r in job.ranks]


def _descends(candidate: Candidate, ancestor: int, processes: Mapping[int, Candidate]) -> bool:
    pid, steps = candidate.ppid, 0
    while pid and steps < 8:
        if pid == ancestor:
            return True
        parent = processes.get(pid)
        pid, steps = (parent.ppid if parent else 0), steps + 1
    return False
