"""Name resolution: what a dotted expression in the user's script means, through its imports.

`import torch.nn as nn` makes `nn.DataParallel` mean `torch.nn.DataParallel`;
`from torch.nn.parallel import DistributedDataParallel as DDP` makes `DDP` mean
`torch.nn.parallel.DistributedDataParallel`. Private module paths (`torch.nn.parallel.distributed`)
are folded onto the public name, so rules compare against one spelling.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ddp_doctor.patient.collectives import GROUP_COLLECTIVES

# The public spellings the rules compare against.
DDP = "torch.nn.parallel.DistributedDataParallel"
DATA_PARALLEL = "torch.nn.DataParallel"
ACCELERATOR = "accelerate.Accelerator"
# accelerate's process-state objects: each starts the process's share of a launched job too
# (PartialState inits the process group and pins the device, as Accelerator does).
ACCELERATE_STATES = ("accelerate.PartialState", "accelerate.state.PartialState")
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
DATA_LOADER = "torch.utils.data.DataLoader"
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
DESTROY_PROCESS_GROUP = "torch.distributed.destroy_process_group"
SET_DEVICE = "torch.cuda.set_device"
TORCH_SAVE = "torch.save"
TORCH_LOAD = "torch.load"
TORCH_DEVICE = "torch.device"
# Library launch helpers of the detectron2 family: `launch(main, num_gpus, ...)` starts one
# process per GPU with torch.multiprocessing.start_processes and runs main in each
# (detectron2/engine/launch.py, yolox/core/launch.py), as mp.spawn does.
LIBRARY_LAUNCHERS = frozenset(
    {
        "detectron2.engine.launch",
        "detectron2.engine.defaults.launch",
        "detectron2.engine.launch.launch",
        "yolox.core.launch",
        "yolox.core.launch.launch",
        "fastreid.engine.launch",
        "fastreid.engine.launch.launch",
    }
)
SPAWN = frozenset(
    {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", *LIBRARY_LAUNCHERS}
)
CHECKPOINT = frozenset(
    {"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"}
)
# Every collective of a process group, from the one table the trace's wrappers also use.
COLLECTIVES = frozenset("torch.distributed." + name for name in GROUP_COLLECTIVES)
SEEDERS = frozenset(
    {
        "torch.manual_seed",
        "torch.cuda.manual_seed",
        "torch.cuda.manual_seed_all",
        "random.seed",
        "numpy.random.seed",
        "transformers.set_seed",
        "lightning.seed_everything",
        "pytorch_lightning.seed_everything",
        "lightning.pytorch.seed_everything",
        "accelerate.utils.set_seed",
    }
)

# Private module paths folded onto the public names above (longest prefix first).
_FOLDS = (
    ("torch.distributed.distributed_c10d.", "torch.distributed."),
    ("torch.nn.parallel.distributed.", "torch.nn.parallel."),
    ("torch.nn.parallel.data_parallel.DataParallel", DATA_PARALLEL),
    ("torch.nn.parallel.DataParallel", DATA_PARALLEL),
    ("torch.nn.DistributedDataParallel", DDP),
    ("torch.utils.data.distributed.DistributedSampler", DISTRIBUTED_SAMPLER),
    ("torch.utils.data.dataloader.DataLoader", DATA_LOADER),
    ("torch.nn.modules.batchnorm.SyncBatchNorm", "torch.nn.SyncBatchNorm"),
    ("torch.multiprocessing.spawn.", "torch.multiprocessing."),
    ("torch.cuda.random.", "torch.cuda."),
    ("torch.random.manual_seed", "torch.manual_seed"),
    ("np.random.", "numpy.random."),
    ("accelerate.accelerator.Accelerator", ACCELERATOR),
    ("accelerate.state.PartialState", "accelerate.PartialState"),
    ("lightning_fabric.utilities.seed.", "lightning."),
    ("pytorch_lightning.utilities.seed.", "pytorch_lightning."),
)

# Modules whose import loads torch (and so may have started CUDA's driver state).
TORCH_LOADING_ROOTS = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "timm",
        "transformers",
        "lightning",
        "pytorch_lightning",
        "accelerate",
        "deepspeed",
        "apex",
        "fairscale",
        "torchmetrics",
    }
)


_FOLDED_PREFIXES = tuple(private for private, _ in _FOLDS)


def fold(qualname: str) -> str:
    if not qualname.startswith(_FOLDED_PREFIXES):  # nearly every name: one test, in C
        return qualname
    for private, public in _FOLDS:
        if qualname.startswith(private):
            return public + qualname[len(private) :]
    return qualname


def dotted(node: ast.AST) -> str | None:
    """`self.train_data.sampler` for an attribute chain over a name, else None."""
    kind = type(node)
    if kind is _NAME:  # the commonest cases, asked tens of thousands of times: `x`, `a.b`
        return node.id  # type: ignore[attr-defined]
    if kind is _ATTRIBUTE and type(node.value) is _NAME:  # type: ignore[attr-defined]
        return f"{node.value.id}.{node.attr}"  # type: ignore[attr-defined]
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def access_path(node: ast.AST) -> str | None:
    """`dotted`, plus items with a literal key: `cfg['model']`, `self.state['epoch']`."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and type(key.value) in (str, int):
            base = access_path(node.value)
            return f"{base}[{key.value!r}]" if base is not None else None
        return None
    if isinstance(node, ast.Attribute):
        base = access_path(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return node.id if isinstance(node, ast.Name) else None


def member_chain(value: ast.expr) -> list[str]:
    """The names of an attribute chain, root first, items skipped and a leading `self`
    dropped: ["cfg", "train"] for `self.cfg["x"].train`, ["opt"] for `opt["path"]`; empty when
    the root is no name (a call)."""
    chain: list[str] = []
    while isinstance(value, ast.Attribute | ast.Subscript):
        if isinstance(value, ast.Attribute):
            chain.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name):
        return []
    chain.append(value.id)
    chain.reverse()
    return chain[1:] if chain[0] == "self" else chain


def last_identifier(node: ast.AST) -> str | None:
    """The rightmost name of a dotted expression or call: `is_main_process` in `u.is_main_process()`."""
    if isinstance(node, _CALL):  # the node types as module names: asked ~60,000 times
        node = node.func
    if isinstance(node, _ATTRIBUTE):
        return node.attr
    if isinstance(node, _NAME):
        return node.id
    return None


_NAME, _ATTRIBUTE, _CALL = ast.Name, ast.Attribute, ast.Call


@dataclass(frozen=True)
class ImportRef:
    """What a local name was imported as, for finding the user's own modules: `from .dist
    import setup` is ImportRef("dist", "setup", 1); `import utils.dist as d` is
    ImportRef("utils.dist", None, 0)."""

    module: str
    name: str | None
    level: int


@dataclass
class ImportTable:
    """Every import of the file, flow-insensitively: local name -> qualified name."""

    names: dict[str, str] = field(default_factory=dict)
    star_modules: list[str] = field(default_factory=list)
    refs: dict[str, ImportRef] = field(default_factory=dict)  # relative imports included

    def add_import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.names[alias.asname] = alias.name
                self.refs[alias.asname] = ImportRef(alias.name, None, 0)
            else:
                root = alias.name.split(".", 1)[0]
                self.names.setdefault(root, root)
                self.refs.setdefault(root, ImportRef(root, None, 0))

    def add_import_from(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self.refs[alias.asname or alias.name] = ImportRef(
                    node.module or "", alias.name, node.level
                )
        if node.level or not node.module:
            return  # a relative import names the user's own modules
        for alias in node.names:
            if alias.name == "*":
                self.star_modules.append(node.module)
            else:
                self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def add_alias(self, local: str, qualname: str) -> None:
        """`DDP = torch.nn.parallel.DistributedDataParallel` at module level."""
        self.names.setdefault(local, qualname)

    def resolve(self, node: ast.AST) -> str | None:
        """The folded qualified name of a dotted expression, or None if it is not imported."""
        text = dotted(node)
        if text is None:
            return None
        root, _, rest = text.partition(".")
        qualified = self.names.get(root)
        if qualified is None:
            qualified = self._from_star(root)
            if qualified is None:
                return None
        return fold(f"{qualified}.{rest}" if rest else qualified)

    def _from_star(self, name: str) -> str | None:
        for module in self.star_modules:
            candidate = fold(f"{module}.{name}")
            if candidate in _KNOWN_STAR_NAMES:
                return candidate
        return None

    def imports_torch(self) -> bool:
        return any(q.split(".", 1)[0] in TORCH_LOADING_ROOTS for q in self.names.values())


_KNOWN_STAR_NAMES = frozenset(
    {DDP, DATA_PARALLEL, DISTRIBUTED_SAMPLER, DATA_LOADER, INIT_PROCESS_GROUP, *COLLECTIVES}
)
