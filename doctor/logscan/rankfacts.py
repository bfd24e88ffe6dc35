"""What a log tells per rank and node: the torch, NCCL and CUDA versions each rank or host
printed, each failed rank's exit code or signal (torchrun's failure summary), the launch's
master address and port, the node count and this node's rank, and the NCCL variables each
host reported. Each value keeps its line; memory is bounded (MAX_VALUES per kind).

LogFacts.read hands every line with the speaker its launcher prefix names ("rank 3",
"task 1", a folder's per-rank file); factrules_ranks.py has the probes' own rules judge them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_VALUES = 64
LOOPBACK = ("localhost", "::1", "ip6-localhost")

# Lines worth reading only for these facts (fact-only anchors: the table never sees them
# unless one of its own anchors is there too). Each must keep the prefilter's few passes: an
# anchor whose every 7-character suffix starts at a character not scanned for already costs a
# pass over every byte (pattern.py), so short or upper-case words ("nnodes", "NODE_RANK",
# "WORLD_SIZE=", "tcp://") are no anchors; they are read on the launch line or environment dump
# that names the master (MASTER_ADDR=..., --master_addr ...), and a per-rank WORLD_SIZE= there.
RANK_FACT_ANCHORS: tuple[str, ...] = (
    "MASTER_ADDR",
    "master_addr",
    "master-addr",
    "MASTER_PORT",
    "master_port",
    "master-port",
    "main_process_port",
    "num_nodes",
    "distributed_init_method",  # vLLM / verl: distributed_init_method=tcp://10.0.0.7:34773
    "orch version",  # "torch version: 2.1.0", "Torch version", "PyTorch version"
)
_LAUNCH_WORDS = (*RANK_FACT_ANCHORS[:9], "nnodes", "node_rank", "node-rank", "tcp://")
_VALUE = r"[\"']?(?:\s*[=:]\s*|\s+)[\"']?"
_LAUNCH = (
    ("master_addr", re.compile(r"(?:MASTER_ADDR|master[_-]addr)" + _VALUE + r"(\[?[\w.:%-]+)")),
    (
        "master_port",
        re.compile(r"(?:MASTER_PORT|master[_-]port|main_process_port)" + _VALUE + r"(\d{1,5})\b"),
    ),
    ("nnodes", re.compile(r"(?:NNODES|nnodes?|num_nodes)" + _VALUE + r"(?:\d{1,5}:)?(\d{1,5})\b")),
    ("node_rank", re.compile(r"(?:NODE_RANK|node[_-]rank)" + _VALUE + r"(\d{1,5})\b")),
)
_INIT_METHOD = re.compile(r"tcp://\[?([\w.:%-]+?)\]?:(\d{1,5})\b")
_TORCH = re.compile(r"(?:[Pp]y)?[Tt]orch version\s*[:=]?\s*v?(\d+\.\d+[\w.+-]*)")
_CUDA_BUILD = re.compile(r"CUDA used to build PyTorch: (\d+\.\d+)")
_WORLD_SIZE = re.compile(r"\b(?:WORLD_SIZE|world_size)=(\d{1,6})\b")
_HOST_ENV = re.compile(r"\b((?:NCCL|GLOO|TORCH_NCCL|CUDA)_\w+) set by environment to (\S+)")


SHOWN = 16
_FIELD_NAMES = {
    "torch": "torch",
    "cuda": "torch built for CUDA",
    "nccl": "NCCL",
    "nccl_cuda": "NCCL built for CUDA",
}


@dataclass(frozen=True)
class RankExit:
    """One failed rank of torchrun's failure summary."""

    rank: int
    exit_code: int | None
    signal: str | None
    host: str | None
    line: int
    first: bool  # torchrun's root cause (the first observed failure)


@dataclass
class RunFacts:
    # who ("rank 3", "task 1", a host) -> field (torch, nccl, cuda) -> (value, line)
    versions: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    world_size_by: dict[str, tuple[int, int]] = field(default_factory=dict)  # who -> size
    exits: dict[int, RankExit] = field(default_factory=dict)  # rank -> its failure
    launch: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # name -> values
    host_env: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)  # who ("rank 3") -> NCCL's host name

    def read(self, body: str, number: int, who: str | None, host: str | None) -> None:
        """One line's facts; `who` is its launcher prefix's speaker, `host` NCCL's prefix."""
        if "orch version" in body or "build PyTorch" in body:
            self._torch(body, number, who)
        if who is not None and ("orld_size=" in body or "WORLD_SIZE=" in body):
            self._world_size(body, number, who)
        if "set by environment to" in body and host is not None:
            for name, value in _HOST_ENV.findall(body):
                _put(self.host_env.setdefault(host, {}), name, (value.rstrip("."), number))
        if any(word in body for word in _LAUNCH_WORDS):
            self._launch(body, number)

    def nccl_version(
        self, version: str, cuda: str | None, number: int, who: str, host: str | None = None
    ) -> None:
        if host and host != who:
            _put(self.hosts, who, host)
        self._version(who, "nccl", version, number)
        if cuda:
            self._version(who, "nccl_cuda", cuda, number)

    def exited(self, failure: dict[str, object], line: int, first: bool) -> None:
        rank = failure.get("rank")
        if not isinstance(rank, int) or rank in self.exits or len(self.exits) >= MAX_VALUES:
            return
        code = failure.get("exitcode")
        signal, host = failure.get("signal"), failure.get("host")
        self.exits[rank] = RankExit(
            rank,
            code if isinstance(code, int) else None,
            str(signal) if signal else None,
            str(host) if host else None,
            line,
            first,
        )

    def _torch(self, body: str, number: int, who: str | None) -> None:
        if who is None:
            return  # one unlabelled version says nothing about which rank printed it
        torch = _TORCH.search(body)
        if torch:
            self._version(who, "torch", torch.group(1), number)
        cuda = _CUDA_BUILD.search(body)
        if cuda:
            self._version(who, "cuda", cuda.group(1), number)

    def _world_size(self, body: str, number: int, who: str | None) -> None:
        size = _WORLD_SIZE.search(body)
        if size and who is not None:
            _put(self.world_size_by, who, (int(size.group(1)), number))

    def _launch(self, body: str, number: int) -> None:
        for name, regex in _LAUNCH:
            for value in regex.findall(body):
                self._add_launch(name, value.strip("[]"), number)
        for address, port in _INIT_METHOD.findall(body):
            self._add_launch("master_addr", address, number)
            self._add_launch("master_port", port, number)

    def _add_launch(self, name: str, value: str, number: int) -> None:
        values = self.launch.setdefault(name, [])
        if len(values) < MAX_VALUES and all(v != value for v, _ in values):
            values.append((value, number))

    def _version(self, who: str, name: str, value: str, number: int) -> None:
        if who in self.versions or len(self.versions) < MAX_VALUES:
            self.versions.setdefault(who, {}).setdefault(name, (value, number))

    # --- what the launch lines say ------------------------------------------------------
    def most(self, name: str) -> tuple[int, int] | None:
        """The largest number given for `name` (nnodes, node_rank), with its line."""
        numbers = [(int(v), n) for v, n in self.launch.get(name, ()) if v.isdigit()]
        return max(numbers, default=None)

    def loopback_master(self) -> tuple[str, int] | None:
        return next(((v, n) for v, n in self.launch.get("master_addr", ()) if is_loopback(v)), None)

    def low_port(self) -> tuple[int, int] | None:
        ports = [(int(v), n) for v, n in self.launch.get("master_port", ()) if v.isdigit()]
        return next(((p, n) for p, n in ports if 0 < p < 1024), None)

    def shown(self, hosts_shown: set[str]) -> dict[str, int]:
        """Which fact came from which line, for -v (bounded: SHOWN per kind)."""
        shown: dict[str, int] = {}
        for who, fields in list(self.versions.items())[:SHOWN]:
            for name, (value, line) in fields.items():
                if not (name.startswith("nccl") and who in hosts_shown):
                    shown[f"{_FIELD_NAMES[name]} {value} on {who}"] = line
        for who, (size, line) in list(self.world_size_by.items())[:SHOWN]:
            shown[f"world size {size} on {who}"] = line
        for rank, failure in sorted(self.exits.items())[:SHOWN]:
            how = failure.signal or f"exit code {failure.exit_code}"
            first = " (first to fail)" if failure.first else ""
            shown[f"rank {rank} ended with {how}{first}"] = failure.line
        for name, values in self.launch.items():
            for value, line in values[:4]:
                shown[f"launch {name}={value}"] = line
        return shown

    def worth_judging(self) -> bool:
        return bool(
            len(self.versions) > 1
            or len(self.world_size_by) > 1
            or self.exits
            or len(self.host_env) > 1
            or self.loopback_master()
            or self.low_port()
        )


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address.lower() in LOOPBACK


def _put(table: dict, key: str, value: object) -> None:
    if key in table or len(table) < MAX_VALUES:
        table.setdefault(key, value)
