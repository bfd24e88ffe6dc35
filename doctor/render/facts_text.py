"""Facts as a reader wants them in a report: the header (what ran where), one line of
evidence per finding, and compact facts without empty values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddp_doctor import strict_json

EVIDENCE_CHARS = 160
VALUE_CHARS = 200


def code(value: object) -> str:
    """A value as a code span; its own backticks become quotes, so only the span's delimit."""
    return "`" + str(value).replace("`", "'") + "`"


def header_rows(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The versions and places a maintainer asks for first, from whatever probes ran."""
    facts = {p["probe"]: p.get("facts") or {} for p in document.get("probes", [])}
    rows = []
    if document.get("command"):
        rows.append(("command", code(document["command"])))
    rows.append(("ddp-doctor", f"{document.get('tool_version')}, {document.get('created')}"))
    rejudged = document.get("rejudged")
    if isinstance(rejudged, Mapping):
        by = f"ddp-doctor {rejudged.get('tool_version')} on {rejudged.get('created')}"
        rows.append(("re-judged by", by))
    python = facts.get("python", {})
    if python:
        version = python.get("version") or "?"
        rows.append(
            ("Python", f"{version} at {code(python.get('executable'))} ({python.get('chosen_by')})")
        )
    torch = facts.get("torch", {})
    if torch.get("version"):
        cuda = torch.get("cuda_version") or "none"
        nccl = torch.get("nccl_version") or ("none" if not torch.get("nccl_available") else "?")
        where = f" at {code(torch['location'])}" if torch.get("location") else ""
        rows.append(("torch", f"{torch['version']} (CUDA {cuda}, NCCL {nccl}){where}"))
    host = facts.get("host", {})
    if host:
        system = " ".join(str(host.get(k) or "") for k in ("system", "release")).strip()
        distro = python.get("os_release")
        libc = python.get("libc")
        rows.append(("system", ", ".join(p for p in (system, distro, libc) if p)))
    nvml = facts.get("nvml", {})
    if nvml.get("driver_version"):
        models = sorted({gpu.get("name") for gpu in nvml.get("gpus", []) if gpu.get("name")})
        count = len(nvml.get("gpus", []))
        gpus = f", {count} GPU{'s' if count != 1 else ''}: {', '.join(models)}" if models else ""
        cuda = nvml.get("cuda_driver_version")
        rows.append(("driver", f"{nvml['driver_version']} (CUDA {cuda}){gpus}"))
    rows += _collect_env_rows(facts.get("collect_env", {}))
    packages = python.get("packages") or {}
    if packages:
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in sorted(packages.items()))))
    return rows


def _collect_env_rows(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The toolchain and the CPU as collect_env reports them, one row each."""
    rows = []
    tools = [f"{name} {env[name]}" for name in ("gcc", "clang", "cmake", "nvcc") if env.get(name)]
    if tools:
        rows.append(("toolchain", ", ".join(tools)))
    if env.get("cpu_model"):
        numa = env.get("numa_nodes")
        caches = env.get("cpu_caches") or {}
        parts = [str(env["cpu_model"])]
        parts += [f"{numa} NUMA node{'s' if numa != 1 else ''}"] if numa else []
        parts += [f"L3 {caches['L3']}"] if caches.get("L3") else []
        rows.append(("CPU", ", ".join(parts)))
    return rows


def evidence_line(evidence: Mapping[str, Any]) -> str:
    """`line N: text` where a finding came from a log line, else its evidence values."""
    if evidence.get("text"):
        where = f"line {evidence['line']}: " if evidence.get("line") else ""
        return one_line(f"{where}{evidence['text']}", EVIDENCE_CHARS)
    parts = [f"{key}={_value(rounded(value))}" for key, value in evidence.items() if _kept(value)]
    return one_line(", ".join(parts), EVIDENCE_CHARS)


def rounded(value: Any) -> Any:
    """Floats as a person reads them (1.4433801 -> 1.44, 0.000123 stays); the JSON keeps
    them exact. Lists and mappings are rounded inside."""
    if isinstance(value, float):
        return _round_float(value)
    if isinstance(value, Mapping):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(item) for item in value]
    return value


def _round_float(value: float) -> float | int:
    if value != value or value in (float("inf"), float("-inf")):
        return value
    if value.is_integer():
        return int(value)
    if abs(value) >= 100:
        return round(value, 1)
    if abs(value) >= 1:
        return round(value, 2)
    return float(f"{value:.3g}")


def compact_facts(facts: Mapping[str, Any], indent: str = "") -> str:
    """`key: value` lines; nested mappings indented; empty, null and false values left out."""
    lines = []
    for key, value in facts.items():
        if not _kept(value):
            continue
        if isinstance(value, Mapping):
            inner = compact_facts(value, indent + "  ")
            if inner:
                lines += [f"{indent}{key}:", inner]
        elif isinstance(value, list) and all(isinstance(item, Mapping) for item in value):
            lines.append(f"{indent}{key}:")
            lines += [f"{indent}  - {_item_line(item)}" for item in value]
        else:
            lines.append(f"{indent}{key}: {one_line(_value(value), VALUE_CHARS)}")
    return "\n".join(lines)


def _item_line(item: Mapping[str, Any]) -> str:
    parts = [f"{key}={_value(value)}" for key, value in item.items() if _kept(value)]
    return one_line(", ".join(parts), 2 * VALUE_CHARS)


def _kept(value: Any) -> bool:
    """Zero is a value; None, False and empty texts or containers are not."""
    if value is None or value is False:
        return False
    return not (isinstance(value, (str, list, tuple, dict)) and not value)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else strict_json.dumps(value, ensure_ascii=False)


def one_line(text: str, limit: int) -> str:
    """The text on one line, cut to `limit` characters with "..." where it is longer."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
