"""Inside a traced rank: thin wrappers around the distributed calls the doctor judges.

Each wrapper calls torch's own function unchanged and writes what it saw to the rank's journal:
init_process_group, every collective of torch.distributed (before it runs), set_device, the
construction of DistributedDataParallel and DataParallel (and, after DDP's first backward, the
parameters that got no gradient), and SyncBatchNorm conversion. Nothing here touches CUDA
unless the script already initialised it: an early CUDA init would freeze
CUDA_VISIBLE_DEVICES before the script sets it. Imports only the stdlib (torch is handed in).
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..collectives import BY_NAME, GROUP_COLLECTIVES
from .recorder import Recorder, flight_recorder_reader
from .sites import Sites

MAX_TENSORS = 8  # shapes kept per call
_inside = threading.local()  # a collective called inside a wrapped one is torch's, not the user's


def replace_function(owner_modules: list[Any], name: str, make: Callable) -> None:
    """Replaces `name` in every module that holds the same function object."""
    original = getattr(owner_modules[0], name, None)
    if original is None:
        return
    wrapped = functools.wraps(original)(make(original))
    for module in owner_modules:
        if getattr(module, name, None) is original:
            setattr(module, name, wrapped)


def device_of(module: Any) -> str | None:
    for tensor in module.parameters():
        return str(tensor.device)
    for tensor in module.buffers():
        return str(tensor.device)
    return None


def current_cuda(torch: Any) -> dict[str, Any]:
    """The current CUDA device and its UUID, only where the script already initialised CUDA."""
    cuda = torch.cuda
    if not cuda.is_initialized():
        return {}
    index = cuda.current_device()
    found: dict[str, Any] = {"current_device": f"cuda:{index}"}
    uuid = getattr(cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        found["uuid"] = str(uuid)
    return found


class DistributedPatches:
    def __init__(self, torch: Any, recorder: Recorder, sites: Sites) -> None:
        self.torch = torch
        self.rec = recorder
        self.sites = sites
        self.wrapped_modules: weakref.WeakSet[Any] = weakref.WeakSet()  # modules inside a DDP
        self.checked: weakref.WeakSet[Any] = weakref.WeakSet()  # DDPs whose backward is seen
        self.ids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def ident(self, obj: Any) -> int:
        if obj not in self.ids:
            self.ids[obj] = len(self.ids) + 1
        return self.ids[obj]

    def apply(self) -> None:
        dist = self.torch.distributed
        if dist.is_available():
            modules = [dist, dist.distributed_c10d]
            replace_function(modules, "init_process_group", self._init)
            for name in GROUP_COLLECTIVES:  # the one table (patient/collectives.py)
                replace_function(modules, name, self._collective(name, BY_NAME[name].argument))
        replace_function([self.torch.cuda], "set_device", self._set_device)
        self._patch_ddp()
        self._patch_dataparallel()
        self._patch_syncbn()

    # -- process group ---------------------------------------------------------------------
    def _init(self, original: Callable) -> Callable:
        rec, sites, dist = self.rec, self.sites, self.torch.distributed
        names = list(inspect.signature(original).parameters)

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            given = _bind(names, args, kwargs)
            site = sites.here()
            rec.waiting({"op": "init_process_group", "seq": 0, "group": "0", "site": site})
            rec.event("init_start", site=site)
            started = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            except BaseException as error:
                rec.event("init", ok=False, error=_error(error), site=site)
                raise
            finally:
                rec.collective_done()
            rec.event(
                "init",
                ok=True,
                backend=str(dist.get_backend()),
                world_size=dist.get_world_size(),
                rank=dist.get_rank(),
                timeout_s=_seconds(given.get("timeout")),
                init_method=_text(given.get("init_method")),
                rank_given="rank" in given or "world_size" in given,
                seconds=round(time.perf_counter() - started, 6),
                site=site,
                **current_cuda(self.torch),
            )
            rec.flight_recorder = flight_recorder_reader(self.torch)
            return result

        return init_process_group

    def _collective(self, op: str, argument: str | None) -> Callable[[Callable], Callable]:
        rec, sites, dist = self.rec, self.sites, self.torch.distributed

        def make(original: Callable) -> Callable:
            names = list(inspect.signature(original).parameters)

            def collective(*args: Any, **kwargs: Any) -> Any:
                if getattr(_inside, "depth", 0):
                    return original(*args, **kwargs)
                given = _bind(names, args, kwargs)
                group = _group_name(dist, given.get("group"))
                call = {"op": op, "seq": rec.next_seq(group), "group": group}
                call.update(_shapes(self.torch, given.get(argument) if argument else None))
                call["site"] = sites.here()
                if given.get("async_op"):
                    call["async"] = True
                rec.collective_started(call)
                _inside.depth = 1
                try:
                    return original(*args, **kwargs)
                finally:
                    _inside.depth = 0
                    rec.collective_done()

            return collective

        return make

    def _set_device(self, original: Callable) -> Callable:
        def set_device(device: Any) -> Any:
            result = original(device)
            self.rec.event(
                "set_device", device=str(device), site=self.sites.here(), **current_cuda(self.torch)
            )
            return result

        return set_device

    # -- wrappers of models ----------------------------------------------------------------
    def _patch_ddp(self) -> None:
        ddp_class = self.torch.nn.parallel.DistributedDataParallel
        original_init, original_forward = ddp_class.__init__, ddp_class.forward
        names = list(inspect.signature(original_init).parameters)[1:]  # without self
        patches = self

        @functools.wraps(original_init)
        def __init__(ddp: Any, module: Any, *args: Any, **kwargs: Any) -> None:
            given = _bind(names, (module, *args), kwargs)
            ident = patches.ident(ddp)
            patches.rec.event(  # before: a DDP that raises (duplicate GPU) is still seen
                "ddp",
                ddp=ident,
                device_ids=_devices_given(given.get("device_ids")),
                output_device=_text(given.get("output_device")),
                module_device=device_of(module),
                find_unused_parameters=bool(given.get("find_unused_parameters", False)),
                static_graph=bool(given.get("static_graph", False)),
                parameters=sum(1 for p in module.parameters() if p.requires_grad),
                site=patches.sites.here(),
                **current_cuda(patches.torch),
            )
            original_init(ddp, module, *args, **kwargs)
            patches.wrapped_modules.add(module)
            patches.rec.event(
                "ddp_ready",
                ddp=ident,
                device_ids=getattr(ddp, "device_ids", None),
                output_device=getattr(ddp, "output_device", None),
                static_graph=bool(getattr(ddp, "static_graph", False)),
            )

        @functools.wraps(original_forward)
        def forward(ddp: Any, *inputs: Any, **kwargs: Any) -> Any:
            output = original_forward(ddp, *inputs, **kwargs)
            if ddp not in patches.checked and patches._after_backward(output, ddp):
                patches.checked.add(ddp)
            return output

        ddp_class.__init__, ddp_class.forward = __init__, forward

    def _after_backward(self, output: Any, ddp: Any) -> bool:
        """Hooks the first backward through this output; False when no output needs a grad."""
        tensors = [t for t in _tensors_in(self.torch, output) if t.requires_grad]
        if not tensors:
            return False
        fired: list[bool] = []
        engine = self.torch.autograd.Variable._execution_engine

        def on_grad(grad: Any) -> None:
            if not fired:
                fired.append(True)
                engine.queue_callback(lambda: self._report_unused(ddp))

        for tensor in tensors:
            tensor.register_hook(on_grad)
        return True

    def _report_unused(self, ddp: Any) -> None:
        names = [
            name for name, p in ddp.module.named_parameters() if p.requires_grad and p.grad is None
        ]
        self.rec.event(
            "ddp_backward", ddp=self.ident(ddp), unused=names[:50], unused_count=len(names)
        )

    def _patch_dataparallel(self) -> None:
        dp_class = self.torch.nn.parallel.DataParallel
        original_init, original_forward = dp_class.__init__, dp_class.forward
        patches = self
        seen: weakref.WeakSet[Any] = weakref.WeakSet()

        @functools.wraps(original_init)
        def __init__(dp: Any, module: Any, *args: Any, **kwargs: Any) -> None:
            site = patches.sites.here()
            original_init(dp, module, *args, **kwargs)
            patches.rec.event(  # DataParallel checks devices only in forward
                "dataparallel",
                dp=patches.ident(dp),
                device_ids=list(getattr(dp, "device_ids", []) or []),
                output_device=getattr(dp, "output_device", None),
                module_device=device_of(module),
                site=site,
            )

        @functools.wraps(original_forward)
        def forward(dp: Any, *inputs: Any, **kwargs: Any) -> Any:
            output = original_forward(dp, *inputs, **kwargs)
            if dp not in seen:
                seen.add(dp)
                devices = sorted({str(t.device) for t in _tensors_in(patches.torch, output)})
                patches.rec.event("dataparallel_output", dp=patches.ident(dp), devices=devices)
            return output

        dp_class.__init__, dp_class.forward = __init__, forward

    def _patch_syncbn(self) -> None:
        syncbn = self.torch.nn.SyncBatchNorm
        original = syncbn.__dict__["convert_sync_batchnorm"].__func__
        ddp_class = self.torch.nn.parallel.DistributedDataParallel
        patches = self

        @functools.wraps(original)
        def convert_sync_batchnorm(cls: Any, module: Any, process_group: Any = None) -> Any:
            if getattr(_inside, "converting", False):
                return original(cls, module, process_group)
            _inside.converting = True
            try:
                on_ddp = isinstance(module, ddp_class) or any(
                    m in patches.wrapped_modules for m in module.modules()
                )
                patches.rec.event("syncbn", on_ddp=on_ddp, site=patches.sites.here())
                return original(cls, module, process_group)
            finally:
                _inside.converting = False

        syncbn.convert_sync_batchnorm = classmethod(convert_sync_batchnorm)


def _bind(names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name (zip's strict= is not in the patient's 3.9)."""
    given = {names[i]: value for i, value in enumerate(args) if i < len(names)}
    given.update(kwargs)
    return given


def _group_name(dist: Any, group: Any) -> str:
    if group is None:
        group = dist.group.WORLD
    return str(getattr(group, "group_name", None) or "?")


def _shapes(torch: Any, value: Any) -> dict[str, Any]:
    tensors = _tensors_in(torch, value)[:MAX_TENSORS]
    return {
        "shapes": [list(t.shape) for t in tensors],
        "dtypes": [str(t.dtype).replace("torch.", "") for t in tensors],
    }


def _tensors_in(torch: Any, value: Any, depth: int = 0) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 2:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        found: list[Any] = []
        for item in value[:64]:
            found.extend(_tensors_in(torch, item, depth + 1))
        return found
    return []


def _devices_given(value: Any) -> list[str] | None:
    if value is None:
        return None
    try:
        return [str(device) for device in value]
    except TypeError:
        return [str(value)]


def _seconds(value: Any) -> float | None:
    total = getattr(value, "total_seconds", None)
    return float(total()) if callable(total) else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:2000]
