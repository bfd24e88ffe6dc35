"""Rules about how the script is launched and learns its local rank."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, ScriptFacts, position, text_of
from ddp_doctor.script.handedrank import handed_to_helpers, option_owners, placement_place
from ddp_doctor.script.hits import ScriptHit, hit, location, spelled_like
from ddp_doctor.script.launchfiles import legacy_launch_file
from ddp_doctor.script.localrank import (
    LOCAL_RANK_OPTIONS,
    declarations,
    declared,
    declared_in_tree,
    local_rank_from_env,
    never_runs,
    option_strings,
    placements_from_option,
    reported_by_parser,
)
from ddp_doctor.script.textscan import (
    code_lines,
    is_launcher_path,
    launch_in_string,
    launch_mentions,
)
from ddp_doctor.script.values import Values

_TEXT_COMMENTS = (".sh", ".bash", ".yaml", ".yml", ".slurm", ".sbatch", "Makefile", ".mk")


@rule(
    "DDP102",
    Remediation(
        "Launch with torchrun and read the local rank from os.environ['LOCAL_RANK'].",
        ("torchrun --nproc-per-node=NUM_GPUS train.py",),
    ),
)
def launch_module_deprecated(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        `-m torch.distributed.launch` or its file path torch/distributed/launch.py in shell,
        YAML and Makefile files, in the code blocks of Markdown and RST documents (not their
        prose), and in Python strings (also built as
        os.path.join(torch_dir, "distributed", "launch.py") or torch_dir +
        "/distributed/launch.py"), and imports of the module. A line of a Python string that
        names torchrun or calls the launcher deprecated is advice, not a use. One finding
        per file, the other lines listed.
    Why it matters:
        torch.distributed.launch is deprecated in favour of torchrun. Since torch 2.0 it passes
        `--local-rank=N` (with a hyphen), which scripts that declare only `--local_rank`
        reject ("unrecognized arguments"), and it does not set up elastic restarts.
    Example:
        python -m torch.distributed.launch --nproc_per_node=8 train.py
    Fix:
        torchrun --nproc-per-node=8 train.py
    """
    if not facts.is_python:
        skip_comments = facts.path.endswith(_TEXT_COMMENTS)
        lines = code_lines(facts.path, facts.lines)
        for line, column, text in launch_mentions(lines, skip_comments=skip_comments):
            yield _launch_hit(facts, text, location(facts, line=line, column=column))
        return
    for constant in facts.strings:
        if not isinstance(constant.value, str):
            continue
        for text, offset in launch_in_string(constant.value):
            if _points_away(constant.value, offset):
                continue
            before = constant.value[:offset]
            line = constant.lineno + before.count("\n")
            column = constant.col_offset if "\n" not in before else len(before.rsplit("\n", 1)[1])
            yield _launch_hit(facts, text, location(facts, line=line, column=column))
    for join in facts.calls_by_key.get("join", []) + facts.calls_by_key.get("joinpath", []):
        parts = [a.value for a in join.node.args if isinstance(a, ast.Constant)]
        if all(isinstance(p, str) for p in parts) and is_launcher_path(parts):  # type: ignore[arg-type]
            yield _launch_hit(facts, text_of(join.node), location(facts, join.node))
    for imported in facts.torch_imports:
        node = imported.node
        modules = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [f"{node.module}.{a.name}" for a in node.names]
        )
        if any(
            m == "torch.distributed.launch" or m.startswith("torch.distributed.launch.")
            for m in modules
        ):
            yield _launch_hit(facts, "torch.distributed.launch", location(facts, node))


def _points_away(text: str, offset: int) -> bool:
    """The string's line with the mention names torchrun or calls the launcher deprecated:
    `help="use torchrun (python -m torch.distributed.launch is deprecated)"` is advice."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    line = text[start : end if end >= 0 else len(text)].lower()
    return "torchrun" in line or "deprecat" in line


def _launch_hit(facts: ScriptFacts, text: str, where: object) -> Hit:
    return ScriptHit(
        f"'{text}' uses the deprecated launcher; use torchrun",
        {"launcher": text},
        location=where,  # type: ignore[arg-type]
        cause="launcher",
    )


@rule(
    "DDP103",
    Remediation(
        "Read int(os.environ['LOCAL_RANK']); if the argument must stay, declare both spellings: "
        "parser.add_argument('--local-rank', '--local_rank', type=int, default=0)."
    ),
)
def local_rank_argparse_only(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        parser.add_argument("--local_rank", ...) (also through the bound method held in a
        name, `arg = parser.add_argument` then `arg("--local_rank", ...)`) with no
        "--local-rank" spelling, no
        parse_known_args on that parser (a config parser's parse_known_args before the
        declaring parser's strict parse_args(remaining) does not count), and no read of the
        LOCAL_RANK environment variable anywhere in the program (the script and the modules of
        the tree it imports or that import it; setting it, `os.environ["LOCAL_RANK"] = ...`,
        is no read); or, whatever the script reads, when a launch file starts it with
        torch.distributed.launch (which passes `--local-rank=N`, so argparse exits first). A
        launch file is a shell or SLURM script, YAML file or Makefile of the tree, and for a
        file checked on its own the small shell and SLURM scripts that name it in its folder
        and in a `scripts` folder beside it, three levels down at most (VideoMAE's
        scripts/<dataset>/<run>/pretrain.sh: the tree a folder check would read). A launch
        line may name the script through a shell variable the launch file assigns a literal
        once (`method='unimatch'` ... `$method.py`); a Markdown or RST code block is an example of use, not a launch file (DDP102 reports
        the launcher there). A DeepSpeed program (deepspeed.initialize, init_distributed or
        add_config_arguments) is left alone: the `deepspeed` launcher passes
        `--local_rank=N` itself.
    Why it matters:
        Since torch 2.0, torch.distributed.launch passes `--local-rank=0`; a parser that knows
        only `--local_rank` exits with "unrecognized arguments: --local-rank=0" on every rank.
        Under torchrun nothing is passed at all and the default is used.
    Example:
        parser.add_argument("--local_rank", type=int, default=0)
    Fix:
        local_rank = int(os.environ["LOCAL_RANK"])
    """
    if "--local-rank" in declared(facts) or _started_by_deepspeed(facts):
        return
    reads_env = any(local_rank_from_env(f) for f in program_files(facts) if f.is_python)
    launch_file = legacy_launch_file(facts)
    if reads_env and launch_file is None:
        return
    if _parsed_leniently(facts):
        return
    started = f" ({launch_file} starts it with torch.distributed.launch)" if launch_file else ""
    evidence = {"option": "--local_rank", **({"launch_file": launch_file} if launch_file else {})}
    for declaration in declarations(facts):
        if "--local_rank" in option_strings(declaration.call):
            yield hit(
                facts,
                declaration.call.node,
                "only --local_rank is declared: 'unrecognized arguments: --local-rank=0' under "
                f"torch >= 2.0 launchers{started}",
                evidence,
            )


def _parsed_leniently(facts: ScriptFacts) -> bool:
    """parse_known_args on the parser that declares --local_rank, or on one the file cannot
    tell apart from it. A config parser's `config_parser.parse_known_args()` followed by
    `parser.parse_args(remaining)` on the parser that declares the option (timm's train.py)
    leaves the strict parse to the second parser: `--local-rank=0` still exits there."""
    lenient = [_receiver(call) for call in facts.methods_called("parse_known_args")]
    if not lenient:
        return False
    declaring = {
        names.dotted(d.parser) if d.parser is not None else None
        for d in declarations(facts)
        if "--local_rank" in option_strings(d.call)
    }
    strict = {_receiver(call) for call in facts.methods_called("parse_args")}
    if None in declaring or not declaring & strict:
        return True
    return any(receiver is None or receiver in declaring for receiver in lenient)


def _receiver(call: CallSite) -> str | None:
    """The parser a method is called on, as written (`parser`, `self.parser`), when a name."""
    return names.dotted(call.receiver) if call.receiver is not None else None


@rule(
    "DDP104",
    Remediation("local_rank = int(os.environ['LOCAL_RANK']) (torchrun sets it per process)."),
)
def local_rank_not_from_env(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        The GPU picked (set_device, torch.device, .cuda(), .to(), DDP device_ids) from an
        argparse --local_rank/--local-rank option, followed through assignments, attributes,
        arithmetic held in a name (`args.gpu = args.local_rank % torch.cuda.device_count()`)
        and function parameters (`setup(args.local_rank)` then `set_device(gpu)` inside; a
        parameter's attribute that only some arms of a condition set keeps the option's value
        on the others: XLM's `if slurm: params.local_rank = SLURM_LOCALID elif
        params.local_rank != -1: ... else: params.local_rank = 0`, where torchrun's -1 sends
        every rank to GPU 0), in a
        script that never reads the LOCAL_RANK environment variable and is no DeepSpeed
        program (the `deepspeed` launcher fills --local_rank). An option that a helper adds to
        the parser it is handed (`add_gpu_params(parser)`) counts, and so does one declared
        through a bound method (`arg = parser.add_argument`). The option copied into a
        config attribute spelled like it counts in a program that reads LOCAL_RANK nowhere:
        `config.LOCAL_RANK` where a builder of the tree stores `config.LOCAL_RANK =
        args.local_rank`, or where the config comes from a call handed the parsed namespace
        (`config = get_config(args)`, the builder out of view: Swin Transformer's family,
        SimMIM, RepVGG, InternImage). One finding per option, the
        other lines listed; a helper's uses of another file's option are reported only when
        that file places nothing with it itself, an entry point's always (eval.py running
        `from train import parse_args` is a program of its own). A placement in a helper
        module's function that nothing of the tree calls or names (CodeT5's configs.set_dist)
        is not reported when an entry point of its program places from the option itself:
        that copy never runs, the entry point's line is the one the user runs. An entry point
        that places nothing itself but hands the option to another file's helper that pins
        with it (OpenPCDet's `getattr(common_utils, 'init_dist_%s' % args.launcher)(port,
        args.local_rank)`, whose init_dist_pytorch runs `set_device(local_rank % num_gpus)`)
        is reported on its call, the helper's line named.
    Why it matters:
        torchrun sets LOCAL_RANK in the environment and passes no --local-rank argument. The
        argparse default (usually 0) is then every rank's GPU: all processes share GPU 0,
        run out of memory there, or NCCL reports "Duplicate GPU detected".
    Example:
        parser.add_argument("--local_rank", type=int, default=0)
        torch.cuda.set_device(args.local_rank)
    Fix:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
    """
    if local_rank_from_env(facts) or not declared_in_tree(facts) or _started_by_deepspeed(facts):
        return
    declares_here = bool(declared(facts) & set(LOCAL_RANK_OPTIONS))
    values = facts.project.values
    placements = placements_from_option(facts, values, declares_here)
    for call, source in placements:
        if reported_by_parser(facts, source, values):
            continue  # one finding per option: the file that parses it reports it
        if never_runs(facts, call, values) or _reported_where_handed(facts, call, values):
            continue
        yield hit(
            facts,
            call.node,
            f"{text_of(call.node)} takes the GPU from argparse's --local_rank{source.where}; "
            "torchrun passes none, so every rank gets the default",
            {"call": text_of(call.node)},
            cause="local_rank",
        )
    if declares_here and not placements:
        yield from _handed_hits(facts, values)


def _handed_hits(facts: ScriptFacts, values: Values) -> Iterator[Hit]:
    """The option handed to another file's helper that pins the GPU with it (OpenPCDet's
    `init_dist_pytorch(tcp_port, local_rank)`): reported on this file's call."""
    for handed in handed_to_helpers(facts, values):
        where = spelled_like(handed.helper.path, facts.path)
        placed = text_of(handed.placement.node)
        yield hit(
            facts,
            handed.call.node,
            f"argparse's --local_rank is handed to {placed} (in {where}:"
            f"{handed.placement.node.lineno}); torchrun passes none, so every rank gets the "
            "default",
            {"call": placed, "related": [placement_place(handed, where)]},
            cause="local_rank",
        )


def _reported_where_handed(facts: ScriptFacts, call: CallSite, values: Values) -> bool:
    """A helper's placement whose GPU is only ever an entry point's option handed to it:
    each of those files reports it on its own call (_handed_hits)."""
    owners = option_owners(facts, values, call)
    return bool(owners) and all(
        bool(declared(owner) & set(LOCAL_RANK_OPTIONS))
        and not local_rank_from_env(owner)
        and not _started_by_deepspeed(owner)
        and not placements_from_option(owner, values, True)
        and any(h.placement is call for h in handed_to_helpers(owner, values))
        for owner in owners
    )


def _started_by_deepspeed(facts: ScriptFacts) -> bool:
    """A DeepSpeed program (deepspeed.initialize, init_distributed, add_config_arguments in
    the program) that no launch file of the tree starts with torch.distributed.launch: the
    `deepspeed` launcher passes `--local_rank=N` to each process (deepspeed/launcher/
    launch.py), so the underscore option is the one it fills."""
    if legacy_launch_file(facts) is not None:
        return False
    return any(
        (f.resolve(site) or "").startswith("deepspeed.")
        for f in program_files(facts)
        if f.is_python and "deepspeed" in f.source
        for key in _DEEPSPEED_KEYS
        for site in f.calls_by_key.get(key, ())
    )


_DEEPSPEED_KEYS = ("initialize", "init_distributed", "add_config_arguments")


@rule("DDP123", Remediation('Start processes only under `if __name__ == "__main__":`.'))
def spawn_without_main_guard(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        torch.multiprocessing.spawn / start_processes called at module level, or in a function
        that module-level code calls, outside an `if __name__ == "__main__":` block.
    Why it matters:
        spawn starts fresh interpreters that import the main module again. Without the guard
        each child runs the module-level code again and tries to spawn its own children:
        "An attempt has been made to start a new process before the current process has
        finished its bootstrapping phase".
    Example:
        mp.spawn(train, args=(world_size,), nprocs=world_size)
    Fix:
        if __name__ == "__main__":
            mp.spawn(train, args=(world_size,), nprocs=world_size)
    """
    entries = _module_level_entries(facts)
    for spawn in facts.calls_to(*names.SPAWN):
        if spawn.ctx.main_guard:
            continue
        if spawn.ctx.module_level:
            yield hit(facts, spawn.node, f"{text_of(spawn.node.func)}() runs at import time")
            continue
        entry = entries.get(spawn.ctx.function.qualname) if spawn.ctx.function else None
        if entry is not None:
            yield hit(
                facts,
                entry.node,
                f"{text_of(entry.node.func)}() at module level reaches "
                f"{text_of(spawn.node.func)}() (line {spawn.node.lineno}) at import time",
            )


def _module_level_entries(facts: ScriptFacts) -> dict[str, CallSite]:
    """Functions run at import time, each with the unguarded module-level call that starts it."""
    graph = facts.project.graph
    reached: dict[str, CallSite] = {}
    changed = True
    while changed:
        changed = False
        for function in facts.functions:
            if function.qualname in reached:
                continue
            here = [e.site for e in graph.callers(function) if e.facts is facts and not e.handed]
            for site in sorted(here, key=position):
                ctx = site.ctx
                if ctx.module_level and not ctx.main_guard:
                    reached[function.qualname] = site
                elif ctx.function is not None and ctx.function.qualname in reached:
                    reached[function.qualname] = reached[ctx.function.qualname]
                else:
                    continue
                changed = True
                break
    return reached
