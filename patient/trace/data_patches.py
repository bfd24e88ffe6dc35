"""Inside a traced rank: wrappers around data loading, checkpoints and optimizer steps, and the
trace's bounds (--steps counts optimizer steps, --epochs DataLoader iterations).

DistributedSampler: its settings, and its epoch at each __iter__ (set_epoch or not).
DataLoader: its sampler's kind, each __iter__, and the optimizer steps taken while it was the
loader last iterated (so a training loader is told apart from an evaluation one).
torch.save and torch.load: the target, map_location, and the devices of what was loaded.
Imports only the stdlib (torch is handed in).
"""

from __future__ import annotations

import functools
import importlib
import os
import weakref
from collections.abc import Callable
from typing import Any

from .patches import current_cuda, replace_function
from .recorder import Recorder, TraceBound
from .sites import Sites

MAX_LOADED_TENSORS = 2000


class DataPatches:
    def __init__(self, torch: Any, recorder: Recorder, sites: Sites) -> None:
        self.torch = torch
        self.rec = recorder
        self.sites = sites
        self.ids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.iterations: dict[int, int] = {}  # loader ident -> __iter__ calls
        self.steps_in: dict[int, int] = {}  # loader ident -> optimizer steps while it was last
        self.current_loader: int | None = None
        self.max_steps: int | None = recorder.config.get("steps")
        self.max_epochs: int | None = recorder.config.get("epochs")

    def ident(self, obj: Any) -> int:
        if obj not in self.ids:
            self.ids[obj] = len(self.ids) + 1
        return self.ids[obj]

    def apply(self) -> None:
        self._patch_sampler()
        self._patch_loader()
        replace_function([self.torch, self.torch.serialization], "save", self._save)
        replace_function([self.torch, self.torch.serialization], "load", self._load)
        optimizer = importlib.import_module("torch.optim.optimizer")
        optimizer.register_optimizer_step_post_hook(self._after_step)

    # -- samplers and loaders --------------------------------------------------------------
    def _patch_sampler(self) -> None:
        sampler_class = self.torch.utils.data.distributed.DistributedSampler
        original_init, original_iter = sampler_class.__init__, sampler_class.__iter__
        patches = self

        @functools.wraps(original_init)
        def __init__(sampler: Any, *args: Any, **kwargs: Any) -> None:
            site = patches.sites.here()
            original_init(sampler, *args, **kwargs)
            patches.rec.event(
                "sampler",
                sampler=patches.ident(sampler),
                shuffle=bool(getattr(sampler, "shuffle", False)),
                num_replicas=getattr(sampler, "num_replicas", None),
                rank=getattr(sampler, "rank", None),
                drop_last=bool(getattr(sampler, "drop_last", False)),
                dataset_size=_length(getattr(sampler, "dataset", None)),
                site=site,
            )

        @functools.wraps(original_iter)
        def __iter__(sampler: Any) -> Any:
            patches.rec.event(
                "sampler_iter",
                sampler=patches.ident(sampler),
                epoch=getattr(sampler, "epoch", None),
            )
            patches.rec.progressed()
            return original_iter(sampler)

        sampler_class.__init__, sampler_class.__iter__ = __init__, __iter__

    def _patch_loader(self) -> None:
        loader_class = self.torch.utils.data.DataLoader
        original_init, original_iter = loader_class.__init__, loader_class.__iter__
        patches = self

        @functools.wraps(original_init)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            site = patches.sites.here()
            original_init(loader, *args, **kwargs)
            sampler = getattr(loader, "sampler", None)
            patches.rec.event(
                "loader",
                loader=patches.ident(loader),
                sampler_kind=type(sampler).__name__,
                sampler=patches.ids.get(sampler) if sampler is not None else None,
                dataset_size=_length(getattr(loader, "dataset", None)),
                batch_size=getattr(loader, "batch_size", None),
                num_workers=getattr(loader, "num_workers", None),
                site=site,
            )

        @functools.wraps(original_iter)
        def __iter__(loader: Any) -> Any:
            ident = patches.ident(loader)
            count = patches.iterations.get(ident, 0) + 1
            if patches.max_epochs is not None and count > patches.max_epochs:
                patches._stop(f"epochs {patches.max_epochs}")
            patches.iterations[ident] = count
            patches.current_loader = ident
            patches.rec.epochs = max(patches.rec.epochs, count)
            patches.rec.event(
                "loader_iter", loader=ident, iteration=count, site=patches.sites.here()
            )
            patches.rec.progressed()
            return original_iter(loader)

        loader_class.__init__, loader_class.__iter__ = __init__, __iter__

    # -- optimizer steps and the bounds ----------------------------------------------------
    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        rec = self.rec
        rec.steps += 1
        rec.progressed()
        if self.current_loader is not None:
            key = self.current_loader
            self.steps_in[key] = self.steps_in.get(key, 0) + 1
            if self.steps_in[key] == 1:
                rec.event("loader_steps", loader=key, iteration=self.iterations.get(key))
        if rec.steps == 1:
            rec.event("first_step", site=self.sites.here())
        if self.max_steps is not None and rec.steps >= self.max_steps:
            self._stop(f"steps {self.max_steps}")

    def _stop(self, reason: str) -> None:
        self.rec.event("bound", reason=reason, steps=self.rec.steps, site=self.sites.here())
        raise TraceBound(reason)

    # -- checkpoints -----------------------------------------------------------------------
    def _save(self, original: Callable) -> Callable:
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            target, is_path = _target(f)
            self.rec.event("save", target=target, is_path=is_path, site=self.sites.here())
            return original(obj, f, *args, **kwargs)

        return save

    def _load(self, original: Callable) -> Callable:
        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            site = self.sites.here()
            result = original(f, *args, **kwargs)
            location = kwargs["map_location"] if "map_location" in kwargs else _first(args)
            target, _ = _target(f)
            self.rec.event(
                "load",
                target=target,
                map_location=None if location is None else _describe(location),
                devices=self._devices(result),
                site=site,
                **current_cuda(self.torch),
            )
            return result

        return load

    def _devices(self, loaded: Any) -> list[str]:
        devices: set = set()
        pending, seen = [loaded], 0
        while pending and seen < MAX_LOADED_TENSORS:
            item = pending.pop()
            seen += 1
            if isinstance(item, self.torch.Tensor):
                devices.add(str(item.device))
            elif isinstance(item, dict):
                pending.extend(item.values())
            elif isinstance(item, (list, tuple)):
                pending.extend(item)
        return sorted(devices)


def _target(f: Any) -> tuple[str, bool]:
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.path.abspath(os.fsdecode(f)), True
    return type(f).__name__, False


def _first(args: Any) -> Any:
    return args[0] if args else None


def _describe(location: Any) -> str:
    if isinstance(location, (str, dict)) or type(location).__name__ == "device":
        return str(location)
    return type(location).__name__


def _length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except Exception:  # an IterableDataset, or a __len__ of the user's that fails
        return None
