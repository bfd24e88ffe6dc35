"""NCCL's RAS service, asked for the job's state as `ncclras -f json` asks it (NVIDIA/nccl,
src/ras/client.cc, protocol 2): "CLIENT PROTOCOL 2" -> "SERVER PROTOCOL n", "SET FORMAT json"
-> "OK", "STATUS" -> the JSON report until the service closes the connection. JSON output
exists since NCCL 2.28; the keys read are those of its report (communicators[] with hash,
size, ranks[] {rank, host, pid, status, collective_counts}, missing_ranks[] {rank, host, pid,
status {unresponsive, considered_dead}}), as ray-project/ray's tests of NCCL 2.28.9 show.
NCCL 2.28.9 leaves out a comma before a missing rank's "status"; that is repaired here."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

from ddp_doctor.facts.attach import RasCommunicator, RasFacts, RasRank

DEFAULT_PORT = 28028
PROTOCOL = 2
MAX_REPORT_BYTES = 16 << 20
_MISSING_COMMA = re.compile(r'(\d|true|false|")(\s*\n\s*"status")')


class RasError(Exception):
    """RAS did not answer as documented."""


def address_of(value: str | None) -> tuple[str, int]:
    """NCCL_RAS_ADDR ("host:port", "[v6]:port") or localhost:28028."""
    if not value:
        return "localhost", DEFAULT_PORT
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise RasError(f"NCCL_RAS_ADDR {value!r} is not host:port")
    return host.strip("[]"), int(port)


def query(host: str, port: int, timeout_s: float) -> RasFacts:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            stream = connection.makefile("rwb")
            _say(stream, f"CLIENT PROTOCOL {PROTOCOL}")
            if not _line(stream).upper().startswith("SERVER PROTOCOL "):
                raise RasError("the service did not answer the RAS handshake")
            _say(stream, "SET FORMAT json")
            if _line(stream).strip().upper() != "OK":
                raise RasError("the service does not give JSON (NCCL before 2.28)")
            _say(stream, "STATUS")
            text = stream.read(MAX_REPORT_BYTES).decode("utf-8", errors="replace")
    except OSError as error:
        raise RasError(f"no answer from {host}:{port}: {error.strerror or error}") from None
    return parse(text, f"{host}:{port}")


def _say(stream: Any, line: str) -> None:
    stream.write((line + "\n").encode())
    stream.flush()


def _line(stream: Any) -> str:
    return stream.readline(4096).decode("utf-8", errors="replace")


def parse(text: str, address: str) -> RasFacts:
    try:
        document = json.loads(_MISSING_COMMA.sub(r"\1,\2", text))
    except json.JSONDecodeError as error:
        raise RasError(f"RAS's report is not JSON: {error.msg}") from None
    if not isinstance(document, dict):
        raise RasError("RAS's report is not a JSON object")
    return RasFacts(
        address=address,
        nccl_version=str(document.get("nccl_version", "")),
        communicators=tuple(_communicator(c) for c in _list(document.get("communicators"))),
    )


def _communicator(raw: Any) -> RasCommunicator:
    ranks = [_rank(r, missing=False) for r in _list(raw.get("ranks"))]
    ranks += [_rank(r, missing=True) for r in _list(raw.get("missing_ranks"))]
    return RasCommunicator(
        hash=str(raw.get("hash", "")),
        size=_int(raw.get("size")),
        ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
    )


def _rank(raw: Any, missing: bool) -> RasRank:
    status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    counts = raw.get("collective_counts") if isinstance(raw.get("collective_counts"), dict) else {}
    return RasRank(
        rank=_int(raw.get("rank")),
        host=str(raw.get("host", "")),
        pid=_int(raw.get("pid")) if raw.get("pid") is not None else None,
        counts={str(k): _int(v) for k, v in counts.items()},
        missing=missing,
        unresponsive=status.get("unresponsive") is True,
        considered_dead=status.get("considered_dead") is True,
        async_error=_int(status.get("async_error")),
    )


def _list(value: Any) -> list[Any]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
