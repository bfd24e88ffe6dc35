"""The attached job in a report: the verdict, one line per rank (state, CPU time, where it is),
then each rank's main-thread stack with the user's frames first and the library's folded.
Reads the facts' JSON form (table and markdown share it)."""

from __future__ import annotations

from typing import Any

from ddp_doctor.attach.places import is_user_frame
from ddp_doctor.attach.rate import step_rate
from ddp_doctor.attach.verdict import PROGRESSING, RankView, label, verdict_of
from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.attach import AttachFacts
from ddp_doctor.facts.trace import Site
from ddp_doctor.render.columns import plain_table

HEADERS = ("rank", "host", "pid", "state", "cpu s (+sampled)", "where")
USER_FRAMES = 6  # of the user's frames shown per stack; the library's are counted


def render_attach_text(facts: dict[str, Any]) -> str:
    try:
        attached = from_jsonable(AttachFacts, facts)
    except CodecError as error:
        return f"attach facts unreadable: {error}"
    verdict = verdict_of(attached)
    rate = ""
    if verdict.kind == PROGRESSING:
        rate = (
            ", "
            + step_rate(
                [(v.key, v.rank.samples) for v in verdict.views],
                [(v.key, v.rank.flight_recorder_pace) for v in verdict.views],
            ).describe()
        )
    parts = [_summary(attached) + f"\nverdict: {verdict.kind}{rate}"]
    if verdict.views:
        rows = [_row(view) for view in verdict.views]
        parts.append(plain_table(rows, HEADERS, right=(2,)))
        parts.append("\n".join(line for view in verdict.views for line in stack_lines(view)))
    unread = [f"{s.name} ({s.note})" for s in attached.sources if s.status != "read"]
    if unread:
        parts.append("not read: " + "; ".join(unread))
    return printable("\n\n".join(parts))


def printable(text: str) -> str:
    """Paths, function names and command lines come from the job: no control character of
    theirs reaches a terminal, and no backtick fence ends a Markdown code block early."""
    kept = "".join(c if c == "\n" or c.isprintable() else "\ufffd" for c in text)
    return kept.replace("```", "`\u200b`\u200b`")


def _summary(attached: AttachFacts) -> str:
    agent = f", agent pid {attached.agent_pid}" if attached.agent_pid else ""
    nodes = f" on {', '.join(attached.nodes)}" if attached.nodes else f" on {attached.hostname}"
    span = f"{attached.sample_count} samples {attached.interval_s:g} s apart"
    others = (
        f"\nother jobs on this host: {', '.join(attached.other_jobs)}"
        if attached.other_jobs
        else ""
    )
    return (
        f"attached: job {attached.job_id} ({attached.launcher}{agent}){nodes}, "
        f"{len(attached.ranks)} ranks, {span}{others}"
    )


def _row(view: RankView) -> tuple[str, ...]:
    samples = view.rank.samples
    first, last = samples[0], samples[-1]
    cpu = "-"
    if last.cpu_s is not None:
        grown = (last.cpu_s - first.cpu_s) if first.cpu_s is not None else 0.0
        cpu = f"{last.cpu_s:.1f} (+{grown:.2f})"
    state = last.state + (f" ({last.wchan})" if last.wchan else "")
    return (
        label(view.key).replace("rank ", ""),
        view.rank.host,
        str(view.rank.pid),
        state,
        cpu,
        view.last.describe(),
    )


def stack_lines(view: RankView) -> list[str]:
    """The main thread's last stack: the user's frames (innermost first), the library's
    frames between them folded into a count."""
    sample = view.rank.samples[-1]
    thread = next((t for t in sample.threads if t.name == "MainThread"), None)
    thread = thread or (sample.threads[0] if sample.threads else None)
    head = f"{label(view.key)} (pid {view.rank.pid})"
    if thread is None:
        return [f"{head}: no stack ({sample.stacks_error or 'not read'})"]
    lines = [f"{head}, {thread.name or 'thread'} {'idle' if thread.idle else 'active'}:"]
    lines.extend(fold(thread.frames))
    others = len(sample.threads) - 1
    if others > 0:
        lines.append(f"    (+{others} other thread{'s' if others > 1 else ''}, in the JSON report)")
    return lines


def fold(frames: tuple[Site, ...]) -> list[str]:
    """The user's frames first (innermost first), then the library's folded into one line that
    names the innermost of them (where the rank waits)."""
    user = [f for f in frames if is_user_frame(f)]
    library = [f for f in frames if not is_user_frame(f)]
    lines = [f"    {f.path}:{f.line} in {f.function}" for f in user[:USER_FRAMES]]
    if len(user) > USER_FRAMES:
        lines.append(f"    ... {len(user) - USER_FRAMES} more of your frames")
    if library:
        lines.append(_folded(library))
    return lines


def _folded(library: list[Site]) -> str:
    innermost = library[0]
    name = innermost.path.rsplit("site-packages/", 1)[-1]
    more = f" (+{len(library) - 1} more library frames)" if len(library) > 1 else ""
    return f"      innermost library frame: {name}:{innermost.line} in {innermost.function}{more}"


def threads_markdown(facts: dict[str, Any]) -> list[str]:
    """Every thread of every rank, folded in <details>, for the Markdown report."""
    try:
        attached = from_jsonable(AttachFacts, facts)
    except CodecError:
        return []
    lines: list[str] = []
    for view in verdict_of(attached).views:
        threads = view.rank.samples[-1].threads
        if not threads:
            continue
        lines += [f"<details><summary>{label(view.key)}: {len(threads)} threads</summary>", ""]
        lines.append("```")
        for thread in threads:
            lines.append(f"{thread.name or 'thread'} {'idle' if thread.idle else 'active'}:")
            lines.extend(fold(thread.frames))
        lines += ["```", "", "</details>", ""]
    return [line if line.startswith(("```", "<")) else printable(line) for line in lines]
