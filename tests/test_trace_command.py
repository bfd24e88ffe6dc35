"""The user's command after `--`: read, checked, and rewritten so every rank starts through
the monitor, with torchrun's own options and the script's arguments unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.trace.command import (
    BOOT_MODULE,
    CommandError,
    interpreter_of,
    parse_command,
)

LOGS = "/tmp/doctor/torchrun"


def test_torchrun_options_stay_and_the_script_goes_through_the_boot() -> None:
    words = [
        "torchrun",
        "--nnodes=1",
        "--nproc-per-node",
        "2",
        "--standalone",
        "train.py",
        "--lr",
        "0.1",
    ]
    command = parse_command(words)
    assert (command.launcher, command.entry, command.target) == ("torchrun", "script", "train.py")
    assert command.args == ("--lr", "0.1")
    assert command.expected_ranks == 2
    argv = command.argv("/py", LOGS)
    assert argv[:3] == ["/py", "-m", "torch.distributed.run"]
    assert argv[3:8] == ["--nnodes=1", "--nproc-per-node", "2", "--standalone", "--log-dir"]
    assert argv[-6:] == ["-m", BOOT_MODULE, "script", "train.py", "--lr", "0.1"]


def test_arguments_of_the_script_that_look_like_torchrun_options_are_the_scripts() -> None:
    command = parse_command(["torchrun", "train.py", "--nproc-per-node", "8", "-m", "x"])
    assert command.target == "train.py" and command.expected_ranks == 1
    assert command.args == ("--nproc-per-node", "8", "-m", "x")


def test_rendezvous_options_and_a_module() -> None:
    words = [
        "torchrun",
        "--nnodes", "2",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "10.0.0.1:29400",
        "--rdzv_id=job7",
        "-r3",
        "-m", "trainer.main", "--epochs", "3",
    ]  # fmt: skip
    command = parse_command(words)
    assert (command.entry, command.target, command.args) == (
        "module",
        "trainer.main",
        ("--epochs", "3"),
    )
    assert "--rdzv-endpoint" in command.launcher_options and "-r3" in command.launcher_options
    argv = command.argv("/py", LOGS)
    assert argv[-6:] == ["-m", BOOT_MODULE, "module", "trainer.main", "--epochs", "3"]
    assert "-m" not in argv[3:-6]  # the user's -m became the boot's "module" argument


def test_a_log_dir_of_the_users_is_kept() -> None:
    command = parse_command(["torchrun", "--log-dir", "/var/log/run", "train.py"])
    assert "--log-dir" in command.launcher_options
    assert command.argv("/py", LOGS).count("--log-dir") == 1


def test_no_python_keeps_the_users_executable() -> None:
    command = parse_command(["torchrun", "--nproc_per_node=2", "--no-python", "./train.sh", "a"])
    assert (command.entry, command.target, command.expected_ranks) == ("no-python", "./train.sh", 2)
    assert command.argv("/py", LOGS)[-3:] == ["--no-python", "./train.sh", "a"]


def test_python_forms() -> None:
    assert parse_command(["python", "train.py", "x"]).argv("/py", LOGS) == [
        "/py", "-u", "-m", BOOT_MODULE, "script", "train.py", "x",
    ]  # fmt: skip
    module = parse_command(["python3", "-W", "ignore", "-m", "pkg.train"])
    assert module.entry == "module" and module.launcher_options == ("-W", "ignore")
    via_python = parse_command(["/opt/venv/bin/python", "-m", "torch.distributed.run", "t.py"])
    assert via_python.launcher == "torchrun" and via_python.interpreter == "/opt/venv/bin/python"


@pytest.mark.parametrize(
    "words",
    [
        [],
        ["bash", "train.sh"],
        ["torchrun", "--nproc-per-node"],
        ["torchrun", "--nproc-per-node", "2"],
        ["torchrun", "-m", "--no-python", "x"],
        ["python", "-c", "print(1)"],
        ["python", "-I", "train.py"],
        ["python", "-E", "train.py"],
        ["python"],
        ["python", "-m"],
    ],
)
def test_commands_that_cannot_be_traced(words: list[str]) -> None:
    with pytest.raises(CommandError):
        parse_command(words)


def test_nproc_that_is_not_a_number_leaves_the_count_open() -> None:
    assert parse_command(["torchrun", "--nproc-per-node=gpu", "t.py"]).expected_ranks is None


def test_the_interpreter_of_a_torchrun_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / "python3"
    python.write_text("")
    python.chmod(0o755)
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\n")
    torchrun.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert interpreter_of(parse_command(["torchrun", "t.py"])) == str(python)
    torchrun.write_text("#!/usr/bin/env bash\nexec something\n")  # a pyenv shim: no Python
    assert interpreter_of(parse_command(["torchrun", "t.py"])) is None
    assert interpreter_of(parse_command(["python3", "t.py"])) == str(python)
