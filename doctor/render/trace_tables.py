"""The traced run in a report: how far each rank got and how it ended, and where every rank
stood when forensics were collected. Reads the facts' JSON form (table and markdown share it)."""

from __future__ import annotations

from typing import Any

from ddp_doctor.render.columns import plain_table

HEADERS = ("rank", "pid", "init", "steps", "epochs", "collectives", "end", "exit")
NUMBERS = (0, 1, 3, 4, 5, 7)  # to the right


def render_trace_text(trace: dict[str, Any]) -> str:
    parts = [_summary(trace)]
    if trace.get("command"):
        parts[0] += "\n  command: " + str(trace["command"])
    if trace.get("ranks"):
        rows = [_row(rank) for rank in trace["ranks"]]
        parts.append(plain_table(rows, HEADERS, right=NUMBERS))
    forensics = trace.get("forensics")
    if forensics and forensics.get("ranks"):
        parts.append(_forensics(forensics))
    return "\n\n".join(parts)


def _summary(trace: dict[str, Any]) -> str:
    ranks = len(trace.get("ranks") or [])
    outcome = {
        "finished": f"exit code {trace.get('exit_code')}",
        "hang": "hung, stopped by the doctor",
        "timeout": f"timed-out: stopped at the time limit ({trace.get('timeout_s', 0):g} s)",
    }.get(trace.get("outcome", ""), str(trace.get("outcome")))
    bounds = [f"{name} {trace[name]}" for name in ("steps", "epochs") if trace.get(name)]
    bound_note = f"; bound: {', '.join(bounds)}" if bounds else ""
    return (
        f"trace: {trace.get('launcher')}, {ranks} rank{'s' if ranks != 1 else ''}, {outcome}, "
        f"{trace.get('duration_s', 0):.1f} s{bound_note}; flight recorder "
        f"{trace.get('flight_recorder')}"
    )


def _row(rank: dict[str, Any]) -> list[str]:
    init = rank.get("init")
    if init is None:
        init_cell = "-"
    elif init.get("ok"):
        init_cell = f"{init.get('backend')} x{init.get('world_size')}"
    else:
        init_cell = "FAILED"
    exit_code = rank.get("exit_code")
    return [
        str(rank.get("rank")),
        str(rank.get("pid")),
        init_cell,
        str(rank.get("steps", 0)),
        str(rank.get("epochs", 0)),
        str(rank.get("collectives", 0)),
        _end(rank),
        "" if exit_code is None else str(exit_code),
    ]


def _end(rank: dict[str, Any]) -> str:
    end = rank.get("end", "unknown")
    detail = rank.get("end_detail")
    exception = rank.get("exception")
    if end == "exception" and exception:
        site = exception.get("site")
        where = f" at {site['path']}:{site['line']}" if site else ""
        return f"raised {exception.get('type')}{where}"
    if end == "bound":
        return f"stopped at {detail}"
    if end == "exit":
        return f"sys.exit({detail})"
    return {"stopped": "stopped by the doctor", "unknown": "killed"}.get(end, end)


def _forensics(forensics: dict[str, Any]) -> str:
    title = (
        f"where the ranks were ({forensics.get('reason')}, {forensics.get('after_s', 0):.1f} s "
        f"into the run, no progress for {forensics.get('quiet_s', 0):.0f} s)"
    )
    lines = [title]
    for snapshot in forensics["ranks"]:
        lines.append(f"  rank {snapshot.get('rank')}: {_position(snapshot)}")
    return "\n".join(lines)


def _position(snapshot: dict[str, Any]) -> str:
    if snapshot.get("exited"):
        return "had exited"
    where = snapshot.get("where")
    at = f" at {where['path']}:{where['line']} ({where.get('function')})" if where else ""
    pending = snapshot.get("pending")
    if pending:
        return f"waits in {pending.get('op')} (collective {pending.get('seq')}){at}"
    waiting = snapshot.get("waiting")
    if waiting == "collective":
        return f"waits in a collective{at}"
    if waiting == "backward":
        return f"waits in backward (DDP's all-reduce){at}"
    return f"runs{at}" if at else "no stack (the rank did not answer)"
