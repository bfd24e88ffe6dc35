"""The user's command after `--`, read and rewritten so every rank starts through the monitor.

`torchrun [OPTIONS] train.py ARGS` (or `python -m torch.distributed.run ...`) keeps torchrun's
options and arguments; only the entry changes: torchrun starts `-m ddp_doctor_patient.trace.boot
script train.py ARGS` (or `module NAME ARGS` for `-m NAME`), which installs the monitor and runs
the script with runpy. With --no-python torchrun still runs the user's executable itself; the
monitor then comes in through a sitecustomize shim (patient/trace/sitecustomize.py) on PYTHONPATH.
`python [FLAGS] train.py ARGS` (a single process, DataParallel) is rewritten the same way.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

BOOT_MODULE = "ddp_doctor_patient.trace.boot"
TORCHRUN_MODULES = ("torch.distributed.run",)
PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
# torchrun's options that take no value (torch 2.x run.py, check_env actions); every other
# option takes one, as `--opt VALUE` or `--opt=VALUE`.
TORCHRUN_FLAGS = frozenset(
    {
        "--standalone",
        "-m",
        "--module",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
    }
)
# Launchers that start their ranks their own way (why, and the option giving the rank count).
REFUSED_LAUNCHERS = {
    "accelerate": (
        "accelerate launch starts torchrun itself, with its config in ACCELERATE_* variables "
        "the doctor cannot pass through; export the ones you rely on (ACCELERATE_MIXED_PRECISION"
        "=bf16 ...) and let torchrun start the same ranks (Accelerator reads its variables)",
        ("--num_processes", "--num-processes"),
    ),
    "deepspeed": (
        "deepspeed starts the ranks through its own launcher (pdsh across nodes); "
        "deepspeed.init_distributed() reads torchrun's variables just as well, and "
        "--local_rank is then LOCAL_RANK",
        ("--num_gpus", "--num-gpus"),
    ),
    "srun": (
        "srun starts the tasks itself, on other nodes, where the doctor is not; put the doctor "
        "inside srun, one trace per node (srun ... ddp-doctor trace -- torchrun ...)",
        ("--ntasks-per-node",),
    ),
    "mpirun": (
        "mpirun starts the ranks itself, where the doctor is not; put the doctor inside it or "
        "start the ranks with torchrun",
        ("-np", "-n"),
    ),
}
REFUSED_LAUNCHERS["mpiexec"] = REFUSED_LAUNCHERS["mpirun"]
OUTER_LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec"})  # they start the doctor's command
LAUNCHER_MODULES = {
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
}
# Scripts that start their ranks themselves: the monitor follows only ranks torchrun starts.
SPAWNS_RANKS = re.compile(
    r"\b(?:mp|multiprocessing|torch\.multiprocessing)\.(?:spawn|start_processes)\s*\("
    r"|^\s*from\s+torch\.multiprocessing\s+import\s+[^\n]*\b(?:spawn|start_processes)\b",
    re.M,
)
SCRIPT_SCAN_BYTES = 1024 * 1024
MODULE_FLAGS = frozenset({"-m", "--module"})
NO_PYTHON_FLAGS = frozenset({"--no-python", "--no_python"})
RUN_PATH_FLAGS = frozenset({"--run-path", "--run_path"})
LOG_DIR_OPTIONS = ("--log-dir", "--log_dir")
NPROC_OPTIONS = ("--nproc-per-node", "--nproc_per_node")
# Python's own flags before the script that the trace keeps; -I and -E would drop PYTHONPATH,
# which carries the monitor.
PYTHON_FLAGS = frozenset({"-u", "-O", "-OO", "-B", "-s", "-S", "-q", "-b", "-bb", "-d", "-v"})
PYTHON_VALUE_FLAGS = frozenset({"-W", "-X"})


class CommandError(ValueError):
    """The command cannot be traced; the message says why, in one line."""


@dataclass(frozen=True)
class TracedCommand:
    launcher: str  # torchrun or python
    entry: str  # script, module, or no-python (torchrun runs an executable of the user's)
    target: str  # the script, the module, or the executable
    args: tuple[str, ...] = ()
    launcher_options: tuple[str, ...] = ()  # torchrun's options, or Python's flags
    interpreter: str | None = None  # the Python the command itself names (python, a path)
    expected_ranks: int | None = None  # --nproc-per-node, when it is a number

    def argv(self, python: str, torchrun_log_dir: str) -> list[str]:
        """The command the doctor starts: the patient's Python runs torchrun (or the script)."""
        if self.launcher == "python":
            return [python, "-u", *self.launcher_options, "-m", BOOT_MODULE, *self._boot_args()]
        options = list(self.launcher_options)
        if not any(o.split("=")[0] in LOG_DIR_OPTIONS for o in options):
            options += [
                "--log-dir",
                torchrun_log_dir,
            ]  # torchrun's files stay in the doctor's folder
        if self.entry == "no-python":
            run = [python, "-m", "torch.distributed.run", *options]
            return [*run, "--no-python", self.target, *self.args]
        return [
            python,
            "-m",
            "torch.distributed.run",
            *options,
            "-m",
            BOOT_MODULE,
            *self._boot_args(),
        ]

    def _boot_args(self) -> list[str]:
        kind = "module" if self.entry == "module" else "script"
        return [kind, self.target, *self.args]


def parse_command(words: Sequence[str]) -> TracedCommand:
    if not words:
        raise CommandError("give the command to trace after --, e.g. -- torchrun ... train.py")
    program, rest = words[0], list(words[1:])
    name = os.path.basename(program)
    if name == "torchrun":
        return _torchrun(rest, interpreter=None)
    if PYTHON_NAME.match(name):
        interpreter = program
        flags, rest = _python_flags(rest)
        if len(rest) >= 2 and rest[0] == "-m" and rest[1] in TORCHRUN_MODULES:
            return _torchrun(rest[2:], interpreter)
        if len(rest) >= 2 and rest[0] == "-m" and rest[1] in LAUNCHER_MODULES:
            _refuse(LAUNCHER_MODULES[rest[1]], rest[2:])
        return _python(flags, rest, interpreter)
    if name in REFUSED_LAUNCHERS:
        words_after = rest[1:] if name == "accelerate" and rest[:1] == ["launch"] else rest
        _refuse(name, words_after)
    raise CommandError(
        f"cannot trace {program!r}: the command must start with torchrun, python -m "
        "torch.distributed.run or python (e.g. -- torchrun --nproc-per-node 2 train.py)"
    )


def _refuse(launcher: str, words: list[str]) -> None:
    """A launcher that starts its ranks its own way: why the trace cannot follow it, and the
    torchrun command that would start the same ranks."""
    why, count_options = REFUSED_LAUNCHERS[launcher]
    inner = next((i for i, w in enumerate(words) if _starts_ranks(w)), None)
    if launcher in OUTER_LAUNCHERS and inner is not None:
        outer = shlex.join([launcher, *words[:inner], "ddp-doctor", "trace", "--", *words[inner:]])
        raise CommandError(f"cannot trace {launcher}: {why}; instead: {outer}")
    count = _option_value(words, count_options) or "N"
    script = next((w for w in words if w.endswith(".py")), "train.py")
    after = words[words.index(script) + 1 :] if script in words else []
    torchrun = shlex.join(["torchrun", "--nproc-per-node", count, script, *after])
    raise CommandError(f"cannot trace {launcher}: {why}; trace instead: -- {torchrun}")


def _starts_ranks(word: str) -> bool:
    name = os.path.basename(word)
    return name == "torchrun" or bool(PYTHON_NAME.match(name))


def _option_value(words: list[str], names: tuple[str, ...]) -> str | None:
    for index, word in enumerate(words):
        key, _, value = word.partition("=")
        if key in names:
            value = value or (words[index + 1] if index + 1 < len(words) else "")
            return value if value.isdigit() else None
    return None


def _torchrun(words: list[str], interpreter: str | None) -> TracedCommand:
    options: list[str] = []
    module = no_python = False
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "--":
        word = words[index]
        key = word.split("=", 1)[0]
        if key in MODULE_FLAGS:
            module = True
        elif key in NO_PYTHON_FLAGS:
            no_python = True
        elif key in RUN_PATH_FLAGS:
            pass  # the monitor runs the script with runpy itself
        elif key in TORCHRUN_FLAGS or "=" in word or _attached_short(word):
            options.append(word)
        else:
            if index + 1 >= len(words):
                raise CommandError(f"torchrun option {word} needs a value")
            options += [word, words[index + 1]]
            index += 1
        index += 1
    if index < len(words) and words[index] == "--":
        index += 1
    if index >= len(words):
        raise CommandError("torchrun needs the training script (or -m MODULE) to run")
    if module and no_python:
        raise CommandError("torchrun does not take --no-python together with -m")
    entry = "module" if module else "no-python" if no_python else "script"
    return TracedCommand(
        launcher="torchrun",
        entry=entry,
        target=words[index],
        args=tuple(words[index + 1 :]),
        launcher_options=tuple(options),
        interpreter=interpreter,
        expected_ranks=_nproc(options),
    )


def _attached_short(word: str) -> bool:
    """`-r3`, `-t3`: a short option with its value attached."""
    return not word.startswith("--") and len(word) > 2


def _nproc(options: list[str]) -> int | None:
    """--nproc-per-node as a number; torchrun's default is 1; None for gpu, cpu or auto."""
    for index, option in enumerate(options):
        key, _, value = option.partition("=")
        if key in NPROC_OPTIONS:
            if not value and index + 1 < len(options):
                value = options[index + 1]
            return int(value) if value.isdigit() else None
    return 1


def _python_flags(words: list[str]) -> tuple[list[str], list[str]]:
    flags: list[str] = []
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "-m":
        word = words[index]
        if word in ("-I", "-E", "-P") or word.startswith(("-I", "-E")):
            raise CommandError(
                f"python {word} ignores PYTHONPATH, which carries the trace's monitor; "
                "run the script without it"
            )
        if word == "-c":
            raise CommandError("python -c cannot be traced; put the code in a script")
        if word in PYTHON_VALUE_FLAGS:
            flags += words[index : index + 2]
            index += 2
            continue
        if word not in PYTHON_FLAGS and not word.startswith(("-W", "-X")):
            raise CommandError(f"python option {word} is not supported by trace")
        if word != "-u":  # the doctor adds -u itself, as torchrun does
            flags.append(word)
        index += 1
    return flags, words[index:]


def _python(flags: list[str], words: list[str], interpreter: str | None) -> TracedCommand:
    if not words:
        raise CommandError("python needs a script (or -m MODULE) to trace")
    if words[0] == "-m":
        if len(words) < 2:
            raise CommandError("python -m needs a module name")
        entry, target, args = "module", words[1], words[2:]
    else:
        entry, target, args = "script", words[0], words[1:]
    return TracedCommand("python", entry, target, tuple(args), tuple(flags), interpreter, 1)


def interpreter_of(command: TracedCommand) -> str | None:
    """The Python the user's command would run: the one it names, or torchrun's shebang."""
    if command.interpreter:
        found = shutil.which(command.interpreter) or command.interpreter
        return os.path.abspath(found) if os.sep in found else found  # the run's folder differs
    if command.launcher != "torchrun":
        return None
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        return None
    try:
        with open(torchrun, "rb") as handle:
            first = handle.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and os.path.basename(parts[0]) == "env" and len(parts) > 1:
        parts = [shutil.which(parts[1]) or parts[1]]
    if parts and PYTHON_NAME.match(os.path.basename(parts[0])) and os.path.isfile(parts[0]):
        return parts[0]
    return None  # a wrapper (a pyenv shim, a shell script): no Python to read off it


def spawn_refusal(script: str) -> str | None:
    """Why a script that starts its own ranks (mp.spawn, start_processes) cannot be traced, or
    None. Reads at most SCRIPT_SCAN_BYTES of it."""
    try:
        with open(script, "rb") as handle:
            text = handle.read(SCRIPT_SCAN_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    if not SPAWNS_RANKS.search(text):
        return None
    return (
        f"{script} starts its ranks itself (mp.spawn): the trace follows the ranks torchrun "
        "starts; start them with torchrun (the worker's rank from RANK and LOCAL_RANK), or "
        f"read the script with `ddp-doctor check {script}`"
    )
