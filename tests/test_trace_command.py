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
    spawn_refusal,
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


@pytest.mark.parametrize(
    ("words", "launcher", "instead"),
    [
        (
            ["accelerate", "launch", "--num_processes", "2", "train.py", "--lr", "1"],
            "accelerate",
            "-- torchrun --nproc-per-node 2 train.py --lr 1",
        ),
        (
            ["python", "-m", "accelerate.commands.launch", "train.py"],
            "accelerate",
            "-- torchrun --nproc-per-node N train.py",
        ),
        (
            ["deepspeed", "--num_gpus=4", "train.py", "--deepspeed", "ds.json"],
            "deepspeed",
            "-- torchrun --nproc-per-node 4 train.py --deepspeed ds.json",
        ),
        (
            ["srun", "-N2", "python", "train.py"],
            "srun",
            "srun -N2 ddp-doctor trace -- python train.py",
        ),
        (["mpirun", "-np", "2", "python", "t.py"], "mpirun", "ddp-doctor trace -- python t.py"),
    ],
)
def test_launchers_that_start_ranks_their_own_way_are_refused_with_the_way_that_works(
    words: list[str], launcher: str, instead: str
) -> None:
    with pytest.raises(CommandError) as refused:
        parse_command(words)
    message = str(refused.value)
    assert message.startswith(f"cannot trace {launcher}: ") and message.endswith(instead)


def test_python_m_torch_distributed_run_is_torchrun() -> None:
    command = parse_command(
        ["python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"]
    )
    assert command.launcher == "torchrun" and command.expected_ranks == 2


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        ("import torch.multiprocessing as mp\nmp.spawn(work, nprocs=2)\n", True),
        ("import torch.multiprocessing\ntorch.multiprocessing.start_processes(f)\n", True),
        ("from torch.multiprocessing import spawn\nspawn(work, nprocs=2)\n", True),
        ("import torch.distributed as dist\ndist.init_process_group('gloo')\n", False),
        ("import multiprocessing as mp\nctx = mp.get_context('spawn')\n", False),
    ],
)
def test_scripts_that_spawn_their_own_ranks_are_refused(
    tmp_path: Path, source: str, refused: bool
) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    reason = spawn_refusal(str(script))
    assert (reason is not None) == refused
    if reason:
        assert "mp.spawn" in reason and "torchrun" in reason
