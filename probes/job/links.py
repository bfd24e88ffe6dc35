"""The rate of the link a node reaches the others through, as the system states it: the
interface's /sys/class/net/IFACE/speed (Mbit/s; -1 or EINVAL where the driver does not know,
a veth says 10000) and the fastest ACTIVE InfiniBand/RoCE port's
/sys/class/infiniband/DEV/ports/N/rate ("400 Gb/sec (4X NDR)"). Nominal rates, not measured:
`run --isolate` judges its pairs against them where known (readings/isolation.py)."""

from __future__ import annotations

import re
from pathlib import Path

from ddp_doctor.facts.cluster import NodeLink

SYS_NET = Path("/sys/class/net")
SYS_IB = Path("/sys/class/infiniband")
MOST_PORTS = 64  # HCAs x ports read at most
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_SAFE_NAME = re.compile(r"^[\w.:@-]{1,64}$")


def node_link(interface: str | None, sys_net: Path = SYS_NET, sys_ib: Path = SYS_IB) -> NodeLink:
    return NodeLink(interface, interface_mbps(interface, sys_net), fabric_gbit(sys_ib))


def interface_mbps(interface: str | None, sys_net: Path = SYS_NET) -> int | None:
    if not interface or not _SAFE_NAME.match(interface) or interface in (".", ".."):
        return None
    text = _small(sys_net / interface / "speed")
    try:
        mbps = int(text.strip()) if text else 0
    except ValueError:
        return None
    return mbps if mbps > 0 else None


def fabric_gbit(sys_ib: Path = SYS_IB) -> float | None:
    """The fastest ACTIVE port's rate, Gbit/s; None without any."""
    try:
        ports = sorted(sys_ib.glob("*/ports/*"))[:MOST_PORTS]
    except OSError:
        return None
    rates = []
    for port in ports:
        if "ACTIVE" not in _small(port / "state"):
            continue
        found = _RATE.match(_small(port / "rate"))
        if found:
            rates.append(float(found.group(1)))
    return max(rates) if rates else None


def _small(path: Path, most: int = 256) -> str:
    try:
        with path.open("rb") as handle:
            return handle.read(most).decode(errors="replace")
    except OSError:
        return ""
