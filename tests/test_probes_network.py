"""The interface list through psutil: aliases folded, IPv6 zones dropped, IPv4 first, loopback
from the system's flags, an interface without addresses kept; nothing listed is no crash."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from ddp_doctor.probes import host, network


def _address(family: int, address: str) -> SimpleNamespace:
    return SimpleNamespace(family=family, address=address)


def _stats(flags: str) -> SimpleNamespace:
    return SimpleNamespace(isup=True, flags=flags)


def test_interfaces_as_psutil_lists_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    listed = {
        "eth1": [_address(socket.AF_INET6, "fe80::1%eth1"), _address(socket.AF_INET, "10.0.0.2")],
        "eth1:0": [_address(socket.AF_INET, "10.0.0.3")],
        "loop9": [_address(socket.AF_INET, "127.0.0.1"), _address(psutil.AF_LINK, "00:00")],
    }
    stats = {
        "eth1": _stats("up,broadcast,running"),
        "loop9": _stats("up,loopback,running"),
        "down0": _stats("broadcast"),
    }
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: listed)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: stats)
    found = {i.name: i for i in network.list_interfaces(tmp_path)}
    assert found["eth1"].addresses == ("10.0.0.2", "10.0.0.3", "fe80::1")
    assert (found["eth1"].kind, found["loop9"].kind) == ("other", "loopback")
    assert found["loop9"].addresses == ("127.0.0.1",)
    assert found["down0"].addresses == ()
    assert "eth1:0" not in found


def test_a_system_that_lists_nothing_gives_no_interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> dict:  # type: ignore[type-arg]
        raise PermissionError("sandboxed")

    monkeypatch.setattr(psutil, "net_if_stats", refuse)
    assert network.list_interfaces() == []


def test_this_machine_lists_loopback_first() -> None:
    interfaces = network.list_interfaces()
    assert interfaces[0].kind == "loopback" and "127.0.0.1" in interfaces[0].addresses


def test_interfaces_up_as_the_system_reports_them(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = {"lo": SimpleNamespace(isup=True), "eth0": SimpleNamespace(isup=False)}
    monkeypatch.setattr(psutil, "net_if_stats", lambda: stats)
    assert host.interfaces_up(("eth0", "lo", "gone0")) == ("lo",)

    def refuse() -> dict:  # type: ignore[type-arg]
        raise PermissionError("sandboxed")

    monkeypatch.setattr(psutil, "net_if_stats", refuse)
    assert host.interfaces_up(("lo",)) is None
