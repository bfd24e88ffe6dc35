"""Rules about which GPU each rank uses: set_device, indexless placement, CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation, Severity
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.defaults import with_defaults
from ddp_doctor.script.deviceuses import judged_at_uses, made_plain_cuda
from ddp_doctor.script.facts import (
    SINGLE,
    Assignment,
    CallSite,
    EnvAccess,
    ScriptFacts,
    TorchImport,
    position,
    text_of,
)
from ddp_doctor.script.flow import candidates, flow_of
from ddp_doctor.script.hits import hit, spelled_like
from ddp_doctor.script.latepins import is_gloo, judged, late_pin_hits, late_pins_in_callers
from ddp_doctor.script.origins import CONSTANT, OPTION
from ddp_doctor.script.placement import is_hard_coded_index
from ddp_doctor.script.torchimporters import project_torch_imports


@rule(
    "DDP107",
    Remediation(
        "Call torch.cuda.set_device(local_rank) before init_process_group "
        "(local_rank = int(os.environ['LOCAL_RANK']))."
    ),
)
def set_device_missing(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        init_process_group in a CUDA script with no torch.cuda.set_device (nor
        init_process_group(device_id=...), a helper or class that calls it, a per-rank
        CUDA_VISIBLE_DEVICES) on its path: in its function, in the functions that call it, or
        in what those call, through the modules of the checked tree; or set_device only after
        init_process_group on that path (reported as info), also when the two sit in
        different functions or modules (`setup()` inits, the caller pins afterwards: reported
        on the caller's late pin after its call of the helper, where the two meet, as in
        efficientvit's `setup_dist_env`: `dist_init()`, then set_device; the other way
        round, the init's function calling after its init one that pins, BYOL's `run_task`:
        init, then `BYOLTrainer(config)` whose constructor pins, is reported on the init,
        where the two meet). Placement by
        index (`model.to(rank)`, `batch.to(rank)`, `device_ids=[rank]`) pins nothing: the
        current device stays cuda:0 for `torch.cuda.synchronize()`, `.cuda()` and NCCL's
        barrier. An init followed by a call of a function the caller handed in
        (`dispatch(fn)`) is judged through that function when every call in view names it
        (the tutorial's `Process(target=init_processes, args=(rank, size, run))`, a direct
        call, `mp.spawn(helper, args=(...))`): a pin in it counts; a caller out of view or
        one handing in something else leaves the init unjudged (that function may pin),
        unless the parameter was rebound first (`model = DistributedDataParallel(
        model.to(rank))`, then `model(x)`).
    Why it matters:
        Until set_device runs, every rank's current device is cuda:0. NCCL's barrier and
        anything placed with "cuda" or .cuda() then creates contexts on GPU 0 for every rank:
        memory piles up there, and collectives can pair the wrong devices or hang.
    Example:
        dist.init_process_group("nccl")
        model = Net().cuda()
    Fix:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
    """
    yield from late_pin_hits(facts)
    flow = flow_of(facts)
    if not judged(flow):
        return
    for init in flow.init_calls:
        if is_gloo(init) or init.ctx.launch == SINGLE:
            continue
        if late_pins_in_callers(facts, flow, init):
            continue  # the helper inits, its caller pins afterwards: reported at that pin
        pins = flow.pins_on_path(init.ctx, init.node)
        if not pins and flow.calls_a_callback(init.ctx, init.node):
            continue  # dispatch(fn): init, then the caller's function, which may pin
        if not pins:
            yield hit(
                facts,
                init.node,
                "init_process_group runs with no torch.cuda.set_device(local_rank) on its path: "
                "every rank starts on cuda:0",
                cause="no set_device",
            )
        elif not any(before for _, _, before in pins):
            owner, late, _ = min(pins, key=lambda pin: (pin[0] is not facts, position(pin[1])))
            where = f"line {late.node.lineno}" + (
                f" of {spelled_like(owner.path, facts.path)}" if owner is not facts else ""
            )
            yield hit(
                facts,
                init.node,
                f"{text_of(late.node)} ({where}) runs only after init_process_group",
                severity=Severity.INFO,
            )


@rule(
    "DDP127",
    Remediation(
        "Place on the rank's own GPU: device = torch.device('cuda', local_rank), "
        "or call torch.cuda.set_device(local_rank) first."
    ),
)
def indexless_cuda_placement(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        .cuda(), .to("cuda"), torch.device("cuda") (also as the GPU arm of a conditional,
        `torch.device("cuda" if torch.cuda.is_available() else "cpu")`; or a name or argparse
        option that only
        ever holds "cuda": `--device` defaulting to it; a module-level `device =
        torch.device("cuda")` that the file moves things to is judged at its `.to(device)`
        uses, not where it is made) in code that runs in a process group or
        under DDP, where no set_device ran before it on the way there: not earlier in its
        function outside the other arms of a condition, not in a caller before the call, not
        in a helper, constructor or library set-up called first (a DeviceMesh of a GPU type
        counts: it sets the device from LOCAL_RANK; so does a set-up helper of the project's
        own package whose module is not in the checked tree, `setup_and_build_model(args)`
        from vision/eval/setup.py: what it sets up is out of view; a helper picked by name,
        `getattr(common_utils, 'init_dist_%s' % args.launcher)(...)`, is each function of the
        module the name can spell). And literal "cuda:0" /
        .cuda(0) there, except in code only rank 0 runs, also held in a name or a namespace
        attribute whose every GPU value is one (`args.device = torch.device("cuda:0" if
        torch.cuda.is_available() else "cpu")` in the parent, `model.to(args.device)` in
        every spawned rank). Branches taken only without a
        launcher (a DataParallel fallback), code shared with one when the process group is
        only started under `if args.distributed:`, and RPC scripts are left alone; a
        per-rank CUDA_VISIBLE_DEVICES (the rank, LOCAL_RANK, SLURM_LOCALID) silences it. One finding per kind, the other lines
        listed.
    Why it matters:
        "cuda" means the current device, which is cuda:0 until set_device runs. Every rank
        then puts its model and batches on GPU 0: out of memory, "Duplicate GPU detected", or
        all ranks sharing one GPU while the others idle.
    Example:
        dist.init_process_group("nccl")
        model = Net().cuda()
    Fix:
        device = torch.device("cuda", local_rank)
        model = Net().to(device)
    """
    flow = flow_of(facts)
    if not (flow.init_calls or flow.ddp_wraps) or flow.pins_device_by_environment or flow.is_rpc:
        return
    defaults = _default_values(facts) | judged_at_uses(facts)
    for site in _placements(facts):
        if not flow.in_distributed_region(site.ctx) or id(site.node) in defaults:
            continue
        if site.ctx.launch is None and not flow.distributed_everywhere:
            continue  # shared by a single-process path: "cuda" is right there
        device = _device_argument(site)
        if device is None and site.key == "cuda" and not site.node.args:
            if not flow.pinned_before(site.ctx, site.node):
                yield _indexless(
                    facts, site, f"{text_of(site.node)} places on cuda:0 on every rank"
                )
            continue
        if device is None:
            continue
        literal = _literal_index(site, device)
        if literal is not None:
            if not flow.runs_on_rank_zero_only(site.ctx):
                yield hit(
                    facts,
                    literal,
                    f"{text_of(site.node)} puts every rank on the same GPU",
                    cause=f"literal {text_of(literal)}",
                )
        elif (held := _held_literal_index(facts, device, site)) is not None:
            if not flow.runs_on_rank_zero_only(site.ctx):
                yield hit(
                    facts,
                    site.node,
                    f"{text_of(site.node)} puts every rank on the same GPU ({text_of(held)})",
                    cause=f"literal {text_of(held)}",
                )
        elif site.key == "device" and len(site.node.args) > 1:
            continue  # torch.device("cuda", local_rank)
        elif any(_is_plain_cuda(c) for c in candidates(device)) and not flow.pinned_before(
            site.ctx, site.node
        ):
            yield _indexless(facts, site, f"{text_of(site.node)} means cuda:0 on every rank")
        elif _always_plain_cuda(facts, device, site) and not flow.pinned_before(
            site.ctx, site.node
        ):
            yield _indexless(
                facts, site, f"{text_of(site.node)} means cuda:0 on every rank ({text_of(device)})"
            )


def _indexless(facts: ScriptFacts, site: CallSite, message: str) -> Hit:
    return hit(facts, site.node, message, cause="indexless")


def _literal_index(site: CallSite, device: ast.expr) -> ast.expr | None:
    if site.key == "device":
        return site.node if is_hard_coded_index(site.node) else None
    if isinstance(device, ast.Constant) and is_hard_coded_index(device):
        return device
    return None


def _default_values(facts: ScriptFacts) -> set[int]:
    """Nodes inside parameter defaults (`device=torch.device("cuda")`): a device value for
    later, not a placement."""
    found: set[int] = set()
    for function in facts.functions:
        arguments = function.node.args
        for default in [*arguments.defaults, *arguments.kw_defaults]:
            if default is not None:
                found.update(id(node) for node in ast.walk(default))
    return found


def _placements(facts: ScriptFacts) -> list[CallSite]:
    found = facts.methods_called("cuda") + facts.methods_called("to")
    found += facts.calls_to(names.TORCH_DEVICE)
    return sorted(found, key=position)


def _device_argument(site: CallSite) -> ast.expr | None:
    if site.key == "device":
        return site.node.args[0] if site.node.args else None
    return site.argument(0, "device")


def _is_plain_cuda(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def _held_literal_index(facts: ScriptFacts, device: ast.expr, site: CallSite) -> ast.expr | None:
    """A name or namespace attribute whose every GPU value is a literal index, the others
    "cpu": `args.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")`
    in the parent, then `model.to(args.device)` in every spawned rank (SimCLR's main.py).
    The literal found, or None where any value is unknown or none names a GPU."""
    if not isinstance(device, (ast.Name, ast.Attribute)):
        return None
    values: list[ast.AST] = []
    for origin in with_defaults(facts.project.values, facts, device, site.ctx, parameters=False):
        if origin.kind == OPTION and origin.facts is not None:
            assigned = _namespace_assignments(origin.facts, origin.name)
            if not assigned:
                return None
            for assignment in assigned:
                found = facts.project.values.origins(origin.facts, assignment.value, assignment.ctx)
                values.extend(o.node for o in found if o.node is not None)
                if any(o.node is None for o in found):
                    return None
        elif origin.node is not None:
            values.append(origin.node)
        else:
            return None
    literal: ast.expr | None = None
    for value in values:
        for candidate in _device_values(value):
            if _is_cpu(candidate):
                continue
            if not (isinstance(candidate, ast.expr) and _is_literal_gpu(candidate)):
                return None
            literal = literal or candidate
    return literal


def _namespace_assignments(facts: ScriptFacts, attr: str) -> list[Assignment]:
    """`args.<attr> = ...` on a namespace the file parses (`args = parser.parse_args()`),
    beside the options argparse declares."""
    found: list[Assignment] = []
    for method in ("parse_args", "parse_known_args"):
        for parse in facts.methods_called(method):
            namespace = facts.assigned_to(parse.node)
            if namespace is not None:
                found += facts.assignments_by_target.get(f"{namespace}.{attr}", ())
    return found


def _device_values(value: ast.AST) -> Iterator[ast.AST]:
    """The arms of a conditional, and those of torch.device's one argument when it is a
    conditional (a plain `torch.device("cuda:0")` stays whole: the finding at the call
    itself then names this use as the same cause)."""
    for candidate in candidates(value):
        if (
            isinstance(candidate, ast.Call)
            and names.last_identifier(candidate.func) == "device"
            and len(candidate.args) == 1
            and not candidate.keywords
            and not isinstance(candidate.args[0], ast.Constant)
        ):
            yield from candidates(candidate.args[0])
        else:
            yield candidate


def _is_cpu(node: ast.AST) -> bool:
    """`"cpu"`, `torch.device("cpu")`."""
    if isinstance(node, ast.Call) and names.last_identifier(node.func) == "device":
        node = node.args[0] if len(node.args) == 1 else node
    return isinstance(node, ast.Constant) and node.value == "cpu"


def _is_literal_gpu(node: ast.expr) -> bool:
    """`"cuda:0"`, `torch.device("cuda", 0)`; a bare int is not taken (it may be a default
    that the program overwrites per rank)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and is_hard_coded_index(node)
    return isinstance(node, ast.Call) and is_hard_coded_index(node)


def _always_plain_cuda(facts: ScriptFacts, device: ast.expr, site: CallSite) -> bool:
    """A name or option that only ever holds "cuda": `--device` defaulting to "cuda"
    (`parser.add_argument('--device', default='cuda')`, then `model.to(args.device)`). An
    uncalled function's parameter default is not followed: who calls it is not in view."""
    if not isinstance(device, (ast.Name, ast.Attribute)):
        return False
    origins = with_defaults(facts.project.values, facts, device, site.ctx, parameters=False)
    return bool(origins) and all(
        (o.kind == CONSTANT and o.node is not None and _is_plain_cuda(o.node)) or made_plain_cuda(o)
        for o in origins
    )


@rule(
    "DDP110",
    Remediation(
        "Set CUDA_VISIBLE_DEVICES in the shell (CUDA_VISIBLE_DEVICES=0,1 torchrun ...) or "
        "before any import of torch."
    ),
)
def visible_devices_set_late(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        Assignments to CUDA_VISIBLE_DEVICES (os.environ[...] =, setdefault, putenv) that run
        after `import torch` (or a library that imports it, or a module of the checked tree
        that does: `from src.utils.distributed import init_distributed` at the top of a
        script whose spawned function sets the variable): an error when a torch.cuda call
        already ran before it in the same scope, info when it is inside a function (it works
        there only as long as nothing has touched CUDA yet).
    Why it matters:
        The CUDA driver reads the variable once, when it initialises. Once anything has touched
        CUDA the assignment is silently ignored and the process sees every GPU; after a bare
        import it works only as long as no imported library initialises CUDA first.
    Example:
        import torch
        os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus
    Fix:
        CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node=2 train.py
    """
    writes = [e for e in facts.env if e.writes and e.name == "CUDA_VISIBLE_DEVICES"]
    torch_imports = facts.torch_imports or project_torch_imports(facts) if writes else []
    if not torch_imports:
        return
    cuda_calls = [
        c
        for c in facts.calls
        if c.key in ("device_count", "is_available", "set_device", "cuda", "current_device")
        and (facts.qualname(c.node.func) or "").startswith("torch.cuda.")
    ]
    for write in writes:
        early_cuda = [
            c
            for c in cuda_calls
            if c.ctx.function is write.ctx.function and position(c) < position(write.node)
        ]
        if early_cuda:
            yield hit(
                facts,
                write.node,
                f"CUDA_VISIBLE_DEVICES is set after {text_of(early_cuda[0].node)} (line "
                f"{early_cuda[0].node.lineno}) initialised CUDA: it is ignored",
                severity=Severity.ERROR,
            )
            continue
        imported = [t for t in torch_imports if _imported_before(t, write)]
        if not imported:
            continue
        inside = write.ctx.function
        yield hit(
            facts,
            write.node,
            f"CUDA_VISIBLE_DEVICES is set after torch is imported (line "
            f"{imported[0].node.lineno}{_through(facts, imported[0])})"
            + (
                f", in {inside.qualname}(): it works only if nothing touched CUDA yet"
                if inside
                else ""
            ),
            severity=Severity.INFO if inside else None,
        )


def _through(facts: ScriptFacts, imported: TorchImport) -> str:
    """`, through src.utils.distributed` when torch comes with a module of the tree."""
    if imported in facts.torch_imports:
        return ""
    node = imported.node
    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
    return f", through {module}" if module else ""


def _imported_before(imported: TorchImport, write: EnvAccess) -> bool:
    if imported.ctx.module_level and not write.ctx.module_level:
        return True  # module-level imports run before any function
    same_scope = imported.ctx.function is write.ctx.function
    return same_scope and position(imported.node) < position(write.node)
