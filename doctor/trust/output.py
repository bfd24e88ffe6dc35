"""Where a report goes: checked before any work, written last, through one final pass.

Every rendered output (each format, stdout or `-o`) leaves through `emit`: secrets are redacted
in the final text (secrets.py; the command line in the header included), control sequences made
visible (inert.py), and only then written. `-o` never follows a symbolic link, never names one
of the command's own inputs, and writes a regular file through a temporary file in the same
folder and a rename, so a full disk leaves the previous report whole. A FIFO or a device
(`-o /dev/stdout`) is written directly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

import click

from ddp_doctor.trust import streams
from ddp_doctor.trust.inert import inert

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_held_outputs: dict[Path, int] = {}  # --output FIFOs, open from the check to the report


class OutputError(click.ClickException):
    """The report cannot be written: one line, exit 2 (cli.DoctorError's form)."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        from ddp_doctor.trust.inert import escape_controls

        with contextlib.suppress(OSError, ValueError):
            click.echo(f"ddp-doctor: error: {escape_controls(self.message)}", err=True)


def shown(path: Path | str) -> str:
    """A path as the user can read it: quoted, with surrogate escapes and controls visible."""
    return repr(os.fsdecode(path) if isinstance(path, bytes) else str(path))


def check_output_writable(output: Path | None, inputs: Iterable[object] = ()) -> None:
    """Fails before any probing when the report could not be written anyway: opens the file
    for writing (without truncating it; one made only for the test is removed again).
    Permission bits alone say nothing for root, nor for /proc or /sys."""
    if output is None:
        return
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise click.BadParameter(f"folder {shown(parent)} does not exist", param_hint="--output")
    if output.is_symlink():
        raise click.BadParameter(
            f"{shown(output)} is a symbolic link; give the file it points to, or another name",
            param_hint="--output",
        )
    _refuse_own_input(output, inputs)
    existed = os.path.lexists(output)
    flags = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | _NOFOLLOW
    try:
        descriptor = os.open(output, flags if existed else flags | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as error:
        raise click.BadParameter(
            f"cannot write to {shown(output)}: {_why_not(error)}", param_hint="--output"
        ) from None
    mode = os.fstat(descriptor).st_mode
    if stat.S_ISFIFO(mode):  # closing would end its reader's input: keep it for the report
        _held_outputs[output] = descriptor
        return
    os.close(descriptor)
    if not existed:
        with contextlib.suppress(OSError):
            os.unlink(output)
    if stat.S_ISDIR(mode):
        raise click.BadParameter(f"{shown(output)} is a folder", param_hint="--output")


def _refuse_own_input(output: Path, inputs: Iterable[object]) -> None:
    """`-o` onto the log, report or script being read would replace what it diagnoses."""
    if not output.exists():
        return
    for candidate in _paths(inputs):
        with contextlib.suppress(OSError, ValueError):
            if candidate.is_file() and os.path.samefile(candidate, output):
                raise click.BadParameter(
                    f"{shown(output)} is one of this command's inputs; write the report elsewhere",
                    param_hint="--output",
                )


def _paths(values: Iterable[object]) -> Iterable[Path]:
    for value in values:
        if isinstance(value, (tuple, list)):
            yield from _paths(value)
        elif isinstance(value, (str, Path)) and str(value) not in ("", "-"):
            yield Path(value)


def _why_not(error: OSError) -> str:
    if error.errno == errno.ENXIO:  # a FIFO nobody reads: writing would block forever
        return "a FIFO with no reader"
    if error.errno == errno.ELOOP:
        return "a symbolic link"
    return error.strerror or str(error)


def final_text(text: str, fmt: str, redact: bool = True) -> str:
    """The one pass over a rendered output: secrets out (unless --no-redact), then inert."""
    if redact:
        from ddp_doctor.trust.secrets import redact_secrets

        text = redact_secrets(text)
    return inert(text, fmt)


def emit(text: str, output: Path | None, fmt: str = "text", redact: bool = True) -> None:
    text = final_text(text, fmt, redact)
    text = text if text.endswith("\n") else text + "\n"
    if output is None:
        if streams.stdout_closed():
            raise OutputError("standard output is closed; give -o FILE for the report")
        try:
            streams.write_stdout(text)
        except streams.OutputFailed as error:
            raise OutputError(
                f"cannot write the report to standard output: {error.strerror}"
            ) from None
        return
    try:
        _write_output(output, text.encode("utf-8", "surrogateescape"))
    except OSError as error:
        raise OutputError(f"cannot write {shown(output)}: {_why_not(error)}") from None
    with contextlib.suppress(OSError, ValueError):
        click.echo(f"report written to {escape_name(output)}", err=True)


def print_text(text: str) -> None:
    """A text of the doctor's own (rules, explain) to stdout: `| head` ends it quietly (exit 0),
    a full disk is one line and exit 2."""
    try:
        streams.write_stdout(text if text.endswith("\n") else text + "\n")
    except streams.OutputFailed as error:
        raise OutputError(f"cannot write to standard output: {error.strerror}") from None


def escape_name(path: Path) -> str:
    from ddp_doctor.trust.inert import escape_controls

    return escape_controls(os.fsdecode(path).encode("utf-8", "backslashreplace").decode())


def _write_output(output: Path, data: bytes) -> None:
    """A FIFO or device is written directly (never blocking on a FIFO that lost its reader);
    a regular file through a temporary file beside it and a rename."""
    descriptor = _held_outputs.pop(output, None)
    if descriptor is None and _is_special(output):
        flags = os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW
        descriptor = os.open(output, flags)
    if descriptor is not None:
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
        return
    _replace_atomically(output, data)


def _is_special(output: Path) -> bool:
    try:
        mode = os.lstat(output).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        raise OSError(errno.ELOOP, "a symbolic link")
    return not stat.S_ISREG(mode)


def _replace_atomically(output: Path, data: bytes) -> None:
    folder = output.parent if str(output.parent) else Path(".")
    try:
        mode = stat.S_IMODE(os.stat(output).st_mode)
    except FileNotFoundError:
        mode = 0o644 & ~_umask()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{output.name}.", dir=folder)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
