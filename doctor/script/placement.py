"""Where a model lives before it is wrapped: built fresh on the CPU, moved to a GPU, or unknown.

A small data flow over one function: the assignments to the model's name and the
`.to()`/`.cuda()` calls on it, in source order, up to the wrap.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ddp_doctor.script import names
from ddp_doctor.script.facts import (
    MODULE,
    CallSite,
    ClassInfo,
    Context,
    Function,
    ScriptFacts,
    position,
)

if TYPE_CHECKING:
    from ddp_doctor.script.origins import Origin
    from ddp_doctor.script.values import Values

FRESH = "fresh"  # built here, still on the CPU
MOVED = "moved"
UNKNOWN = "unknown"

_MOVES = frozenset({"to", "cuda", "to_empty"})
_PLACING_KEYWORDS = frozenset({"device", "device_map"})
_LIBRARY_BUILDERS = ("torchvision.", "timm.", "transformers.", "torch.nn.")


def device_state_before(facts: ScriptFacts, module: ast.expr, wrap: CallSite) -> str:
    """FRESH, MOVED or UNKNOWN for the module expression passed to a DDP wrap."""
    if isinstance(module, ast.Call):
        return _state_of_value(facts, module, None)
    text = names.dotted(module)
    if text is None:
        return UNKNOWN
    events: list[tuple[tuple[int, int], str]] = []
    for assignment in facts.assignments_by_target.get(text, ()):
        if assignment.element:
            continue
        if assignment.ctx.function is wrap.ctx.function and _ends_before(
            assignment.node, wrap.node
        ):
            events.append((position(assignment), _state_of_value(facts, assignment.value, text)))
    for name in _MOVES:
        for call in facts.methods_called(name):
            same_place = call.ctx.function is wrap.ctx.function
            if same_place and position(call) < position(wrap) and _moves(call, text):
                events.append((position(call), MOVED))
    events.extend((position(call), MOVED) for call in _own_methods_moving(facts, text, wrap))
    state = UNKNOWN
    for _, event in sorted(events):
        if event != "keep":
            state = event
    return state


def assembled_from_placed(facts: ScriptFacts, module: ast.expr, wrap: CallSite) -> bool:
    """`heads[name] = head.cuda()` (or `head = head.cuda(); heads[name] = head`), then
    `model = AllHeads(heads)`: a module built, in the wrap's function, around a container
    whose members were placed one by one (dinov2's linear probes), or around modules each
    placed first (`G_D(G, D)`). Its parameters are on the GPU already."""
    function = wrap.ctx.function
    text = names.dotted(module)
    if function is None or text is None:
        return False
    parts = {
        names.dotted(arg)
        for assignment in facts.assignments_by_target.get(text, ())
        if assignment.ctx.function is function
        and isinstance(assignment.value, ast.Call)
        and _ends_before(assignment.node, wrap.node)
        for arg in [*assignment.value.args, *(kw.value for kw in assignment.value.keywords)]
    } - {None, text}
    if not parts:
        return False
    if _all_placed_modules(facts, parts, function):
        return True
    return any(_stores_placed(facts, node, parts, function) for node in ast.walk(function.node))


def _all_placed_modules(facts: ScriptFacts, parts: set[str | None], function: Function) -> bool:
    """`G = Generator().to(device)`, `D = Discriminator().to(device)`, then `GD = G_D(G, D)`:
    a module built around modules that were each placed first (BigGAN's G_D). Every
    argument the function builds as a module (placed or fresh) must be placed."""
    states = [
        _state_of_value(facts, assignment.value, part)
        for part in parts
        for assignment in facts.assignments_by_target.get(part or "", ())
        if assignment.ctx.function is function and not assignment.element
    ]
    modules = [state for state in states if state in (MOVED, FRESH)]
    return bool(modules) and all(state == MOVED for state in modules)


def _stores_placed(
    facts: ScriptFacts, node: ast.AST, parts: set[str | None], function: Function
) -> bool:
    """`parts_container[key] = member` (or `.append(member)`) with the member placed."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Subscript) and names.dotted(target.value) in parts:
            return _placed(facts, node.value, function)
    func = node.func if isinstance(node, ast.Call) else None
    if not isinstance(func, ast.Attribute) or func.attr not in ("append", "add_module"):
        return False
    args = node.args  # type: ignore[attr-defined]
    return names.dotted(func.value) in parts and bool(args) and _placed(facts, args[-1], function)


def _placed(facts: ScriptFacts, value: ast.expr, function: Function) -> bool:
    if isinstance(value, ast.Call):
        return _state_of_value(facts, value, None) == MOVED
    text = names.dotted(value)
    return text is not None and any(
        assignment.ctx.function is function
        and _state_of_value(facts, assignment.value, text) == MOVED
        for assignment in facts.assignments_by_target.get(text, ())
    )


def _ends_before(node: ast.AST, later: ast.AST) -> bool:
    end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
    return end <= (later.lineno, later.col_offset)  # type: ignore[attr-defined,operator]


def _own_methods_moving(facts: ScriptFacts, text: str, wrap: CallSite) -> list[CallSite]:
    """`self.device()` called before the wrap, where the class's own `device` method runs
    `self.flownet.to(device)` (RIFE's Model.__init__): the module is moved through a method
    of the same object. One level deep; the calls returned are those of the wrap's function."""
    function = wrap.ctx.function
    if function is None or function.class_name is None or not text.startswith("self."):
        return []
    info = facts.classes.get(function.class_name)
    if info is None:
        return []
    found = []
    for call in facts.calls:
        func = call.node.func
        if call.ctx.function is not function or position(call) >= position(wrap):
            continue
        if not (isinstance(func, ast.Attribute) and names.dotted(func.value) == "self"):
            continue
        method = info.methods.get(func.attr)
        if method is not None and method is not function and _method_moves(facts, method, text):
            found.append(call)
    return found


def _method_moves(facts: ScriptFacts, method: Function, text: str) -> bool:
    return any(
        call.ctx.function is method and _moves(call, text)
        for name in _MOVES
        for call in facts.methods_called(name)
    )


def _moves(call: CallSite, text: str) -> bool:
    receiver = call.receiver
    return receiver is not None and names.dotted(receiver) == text and is_device_move(call.node)


def _state_of_value(facts: ScriptFacts, value: ast.expr, own_name: str | None) -> str:
    """What an assignment's value says: a move, a fresh build, a pass-through, or unknown."""
    if not isinstance(value, ast.Call):
        return UNKNOWN
    node: ast.expr = value
    while isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _MOVES and is_device_move(node):
            return MOVED
        if any(kw.arg in _PLACING_KEYWORDS for kw in node.keywords):
            return MOVED
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            node = func.value  # Net().eval() -> look at Net()
            continue
        break
    call = node if isinstance(node, ast.Call) else value
    passed = [*call.args, *(kw.value for kw in call.keywords)]
    if own_name is not None and any(names.dotted(a) == own_name for a in passed):
        return "keep"  # convert_sync_batchnorm(model), torch.compile(model)
    return FRESH if _builds_on_cpu(facts, call) else UNKNOWN


def _builds_on_cpu(facts: ScriptFacts, call: ast.Call) -> bool:
    """A library model, or a class or builder of the tree that places nothing itself (a model
    whose layers are put on devices in __init__ is model parallel: it is already placed)."""
    qualified = facts.qualname(call.func)
    if qualified is not None:
        return qualified.startswith(_LIBRARY_BUILDERS)
    project = facts.project
    defined = project.definition(facts, call.func, MODULE)
    if isinstance(defined, ClassInfo):
        methods = list(defined.methods.values())
        return not any(_function_moves(project.owner(m), m.node) for m in methods)
    if isinstance(defined, Function):
        return not _function_moves(project.owner(defined), defined.node)
    name = names.last_identifier(call.func)
    return name is not None and name[0].isupper() and defined is None


def _function_moves(facts: ScriptFacts, node: ast.AST) -> bool:
    start, end = node.lineno, getattr(node, "end_lineno", node.lineno)  # type: ignore[attr-defined]
    return any(
        start <= call.node.lineno <= end for name in _MOVES for call in facts.methods_called(name)
    )


def is_device_move(call: ast.Call) -> bool:
    """`.to(device)`, `.cuda()`; not `.to(memory_format=...)` alone."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "to":
        return bool(call.args) or any(kw.arg == "device" for kw in call.keywords)
    return True


def is_hard_coded_index(node: ast.expr) -> bool:
    """A literal GPU index: `0`, `"cuda:1"`, `torch.device("cuda:0")`."""
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) is int:
            return True
        return isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit()
    if isinstance(node, ast.Call) and names.last_identifier(node.func) == "device" and node.args:
        args = node.args
        if len(args) == 1:
            return isinstance(args[0], ast.Constant) and is_hard_coded_index(args[0])
        return (
            isinstance(args[0], ast.Constant)
            and args[0].value == "cuda"
            and isinstance(args[1], ast.Constant)
            and type(args[1].value) is int
        )
    return False


def device_index(facts: ScriptFacts, expr: ast.expr, ctx: object) -> int | None:
    """The GPU index a device expression names for sure: `1`, `"cuda:1"`,
    `torch.device("cuda:1")`, `torch.device("cuda", 1)`, or a name that always holds one."""
    from ddp_doctor.script.origins import CALL, CONSTANT

    found: set[int | None] = set()
    for origin in facts.project.values.origins(facts, expr, ctx):
        if origin.kind == CONSTANT and isinstance(origin.node, ast.Constant):
            found.add(_index_of_constant(origin.node.value))
        elif origin.kind == CALL and origin.call is not None:
            found.add(_index_of_device_call(origin.call))
        else:
            found.add(None)
    return found.pop() if len(found) == 1 else None


def _index_of_constant(value: object) -> int | None:
    if type(value) is int:
        return value
    if isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit():
        return int(value[5:])
    return None


def _index_of_device_call(call: ast.Call) -> int | None:
    if names.last_identifier(call.func) != "device" or not call.args:
        return None
    args = call.args
    if len(args) == 1 and isinstance(args[0], ast.Constant):
        return _index_of_constant(args[0].value)
    if len(args) == 2 and isinstance(args[0], ast.Constant) and args[0].value == "cuda":
        second = args[1]
        return (
            second.value if isinstance(second, ast.Constant) and type(second.value) is int else None
        )
    return None


_DEVICE_BUILDERS = frozenset({"device", "format", "join"})


def device_sources(
    facts: ScriptFacts, values: Values, expr: ast.expr, ctx: Context, depth: int = 3
) -> set[Origin]:
    """The origins of every value a device expression is computed from: `args.local_rank` in
    `f"cuda:{args.local_rank}"`, `torch.device("cuda", gpu)`, `gpu % n`, or in a name that
    holds such a device."""
    from ddp_doctor.script.origins import CALL
    from ddp_doctor.script.values import CONVERSIONS

    found: set[Origin] = set()
    stack: list[ast.AST] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            for origin in values.origins(facts, node, ctx):
                found.add(origin)
                call = origin.call
                if (
                    depth > 0
                    and origin.kind == CALL
                    and call is not None
                    and call is not node
                    and origin.facts is not None
                    and names.last_identifier(call.func) in _DEVICE_BUILDERS
                ):
                    site = origin.facts.site_of.get(id(call))
                    if site is not None:
                        found |= device_sources(origin.facts, values, call, site.ctx, depth - 1)
                found |= _through_arithmetic(values, origin, depth)
            if not isinstance(node, ast.Call):
                continue
            if names.last_identifier(node.func) not in _DEVICE_BUILDERS | CONVERSIONS:
                continue
            stack.extend([*node.args, *(kw.value for kw in node.keywords)])
            continue
        stack.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
    return found


def _through_arithmetic(values: Values, origin: Origin, depth: int) -> set[Origin]:
    """A name that holds arithmetic (`args.gpu = args.local_rank % torch.cuda.device_count()`):
    the origins of its operands, where it was assigned."""
    from ddp_doctor.script.origins import OTHER

    if depth <= 0 or origin.kind != OTHER or not isinstance(origin.node, ast.BinOp):
        return set()
    held = origin.facts.assignment_of_value.get(id(origin.node)) if origin.facts else None
    if held is None:
        return set()
    return device_sources(origin.facts, values, origin.node, held.ctx, depth - 1)  # type: ignore[arg-type]
