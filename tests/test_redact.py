"""Shareable output (json, markdown) never carries secrets, and on request no host identity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddp_doctor.facts.machine import EnvFacts, GpuFacts, HostFacts, NvmlFacts
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus, Remediation, Report, Severity
from ddp_doctor.redact import Redactor
from ddp_doctor.render import render
from ddp_doctor.report_io import report_to_json

SECRETS = {
    "HF_TOKEN": "hf_QwErTyUiOp1234567890",
    "WANDB_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "DB_PASSWORD": "correct-horse-battery",
    "SMTP_PASSWD": "pa55w0rd-smtp",
    "GOOGLE_APPLICATION_CREDENTIALS": "/secrets/sa-7f3a.json",
    "HTTP_AUTH_HEADER": "Basic dXNlcjpodW50ZXIy",
    "my_private_key": "-----BEGIN-KEY-abc123",
}
UUID_A = "GPU-5d0e1c3a-8b2f-4c71-9e6a-0f3b2d4c5a61"
UUID_B = "GPU-9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
MIG = "MIG-3b4f6e1d-2a9c-5e7b-8d0f-1c2e3a4b5c6d"
HOSTNAME = "gpu-node-017"


def gpu(index: int, uuid: str, mig: tuple[str, ...] = ()) -> GpuFacts:
    return GpuFacts(
        index=index,
        name="NVIDIA A100 80GB PCIe",
        uuid=uuid,
        pci_bus_id=f"00000000:{index + 1:02X}:00.0",
        memory_total_bytes=81920 * 1024**2,
        memory_used_bytes=0,
        compute_capability=(8, 0),
        mig_mode=bool(mig),
        mig_devices=mig,
    )


def report() -> Report:
    env = {
        **SECRETS,
        "NCCL_DEBUG": "INFO",
        "MASTER_ADDR": "10.12.0.1",
        "CUDA_VISIBLE_DEVICES": f"{UUID_B},{UUID_A}",
    }
    host = HostFacts(
        system="Linux",
        release="5.15.0-105-generic",
        python_version="3.11.9",
        hostname=HOSTNAME,
        hostname_address="10.12.0.17",
    )
    nvml = NvmlFacts("550.54.15", "12.4", (gpu(0, UUID_A), gpu(1, UUID_B, (MIG,))))
    torch_error = (
        "torch does not import: ImportError in /home/alice/miniconda3/envs/train/lib/"
        f"python3.11/site-packages/torch/__init__.py (HF_TOKEN={SECRETS['HF_TOKEN']} "
        "exported in /home/alice/.bashrc; last checkpoint /scratch/alice/run-42/ckpt.pt)"
    )
    finding = Finding(
        code="DDP025",
        name="ecc-errors",
        severity=Severity.ERROR,
        message=f"GPU 0 ({UUID_A}) on {HOSTNAME} (10.12.0.17) has 2 uncorrectable ECC errors; "
        "store at 2001:0db8:85a3:0000:0000:8a2e:0370:7334, local store 127.0.0.1 and ::1",
        fix=Remediation("Drain the node.", (f"ssh {HOSTNAME} nvidia-smi -r -i 0",)),
        evidence={
            "uuid": UUID_A,
            "checkpoint": "/scratch/alice/run-42/ckpt.pt",
            "api_key": "sk-live-abcdef0123456789",
        },
    )
    return Report(
        tool_version="0.1.0",
        created="2025-03-14T09:26:53+00:00",
        probes=(
            ProbeResult("env", ProbeStatus.OK, EnvFacts(env), 0.0),
            ProbeResult("host", ProbeStatus.OK, host, 0.01),
            ProbeResult("nvml", ProbeStatus.OK, nvml, 0.2),
            ProbeResult("torch", ProbeStatus.FAILED, None, 0.6, torch_error),
        ),
        findings=(finding,),
    )


@pytest.fixture
def alice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report comes from alice's machine."""
    monkeypatch.setenv("HOME", "/home/alice")
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "alice")


def outputs(redact_hosts: bool = False) -> dict[str, str]:
    return {fmt: render(report(), fmt, redact_hosts=redact_hosts) for fmt in ("json", "markdown")}


@pytest.mark.parametrize("redact_hosts", [False, True])
def test_secret_values_never_appear(alice: None, redact_hosts: bool) -> None:
    secrets = [*SECRETS.values(), "sk-live-abcdef0123456789"]
    for fmt, text in outputs(redact_hosts).items():
        for secret in secrets:
            assert secret not in text, (fmt, secret)
    # The names stay, so a maintainer sees that they were set.
    assert all(name in outputs()["json"] for name in SECRETS)


def test_other_values_are_kept(alice: None) -> None:
    document = json.loads(outputs()["json"])
    env = next(p for p in document["probes"] if p["probe"] == "env")["facts"]["variables"]
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["MASTER_ADDR"] == "10.12.0.1"
    assert env["CUDA_VISIBLE_DEVICES"] == f"{UUID_B},{UUID_A}"


def test_home_and_user_name_in_paths_are_replaced(alice: None) -> None:
    for fmt, text in outputs().items():
        assert "/home/alice" not in text, fmt
        assert "/alice/" not in text, fmt
        assert "~/miniconda3/envs/train" in text, fmt
        assert "/scratch/<user>/run-42/ckpt.pt" in text, fmt


def test_hosts_stay_unless_asked(alice: None) -> None:
    text = outputs()["json"]
    assert HOSTNAME in text and "10.12.0.17" in text and UUID_A in text


def test_redact_hosts_replaces_names_addresses_and_uuids(alice: None) -> None:
    for fmt, text in outputs(redact_hosts=True).items():
        for identity in (
            HOSTNAME,
            "10.12.0.17",
            "10.12.0.1",
            "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
            UUID_A,
            UUID_B,
            MIG,
        ):
            assert identity not in text, (fmt, identity)
        assert "127.0.0.1" in text and "::1" in text, fmt  # loopback says something, keep it


def test_uuid_stand_ins_are_consistent(alice: None) -> None:
    document = json.loads(outputs(redact_hosts=True)["json"])
    nvml = next(p for p in document["probes"] if p["probe"] == "nvml")["facts"]
    env = next(p for p in document["probes"] if p["probe"] == "env")["facts"]["variables"]
    first, second = (g["uuid"] for g in nvml["gpus"])
    assert first != second and first.startswith("GPU-") and second.startswith("GPU-")
    assert env["CUDA_VISIBLE_DEVICES"] == f"{second},{first}"
    assert document["findings"][0]["evidence"]["uuid"] == first
    (mig,) = nvml["gpus"][1]["mig_devices"]
    assert mig.startswith("MIG-") and mig not in (first, second)


def test_diagnose_output_is_redacted(
    alice: None,
    invoke,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report_to_json(report())))
    for fmt in ("json", "markdown"):
        result = invoke("diagnose", str(path), "--format", fmt, "--redact-hosts")
        assert result.exit_code in (0, 1), result.output
        for secret in (*SECRETS.values(), HOSTNAME, UUID_A, "10.12.0.17", "/home/alice"):
            assert secret not in result.stdout, (fmt, secret)


def test_compressed_ipv6_addresses_are_replaced() -> None:
    redactor = Redactor(redact_hosts=True)
    for address in ("2001:db8::10", "fe80::1ff:fe23:4567:890a", "fd12:3456:789a:1::17"):
        assert address not in redactor.text(f"MASTER_ADDR={address} tcp://[{address}]:29500")


def test_clock_times_are_not_addresses() -> None:
    line = "[rank0] 2025-03-14 09:26:53 Watchdog caught collective operation timeout"
    assert Redactor(redact_hosts=True).text(line) == line


def test_ipv4_in_text_is_replaced_but_not_version_numbers() -> None:
    redactor = Redactor(redact_hosts=True)
    text = redactor.text("driver 550.54.15, torch 2.5.1+cu124, peer 192.168.10.23:29500")
    assert "192.168.10.23" not in text
    assert "550.54.15" in text and "2.5.1+cu124" in text
    assert re.search(r"<ip>:29500", text)


def test_secrets_in_free_text_are_replaced() -> None:
    redactor = Redactor()
    for line, secret in (
        ("Authorization: Bearer sk-live-123abc", "sk-live-123abc"),
        ("python train.py --password hunter2 --epochs 3", "hunter2"),
        ("WANDB_API_KEY: 0123abcd", "0123abcd"),
        ("--hf-token=hf_abcdef", "hf_abcdef"),
        ("export AWS_SECRET_ACCESS_KEY=AKIAXYZ; echo ok", "AKIAXYZ"),
    ):
        assert secret not in redactor.text(line), line
    assert redactor.text("the token was invalid") == "the token was invalid"
    assert redactor.text("NCCL_DEBUG=INFO --epochs 3") == "NCCL_DEBUG=INFO --epochs 3"


@pytest.mark.parametrize(
    "text",
    [
        "for key: store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:30:00)",
        "KeyError: 'learning_rate'",
        "key_size: 4096, keys: /default_pg/0//cuda//0",
        "sort_key=loss",
    ],
)
def test_keys_that_are_not_secrets_are_kept(text: str) -> None:
    assert Redactor().text(text) == text


def test_a_dict_key_named_key_is_kept_and_secret_keys_are_not() -> None:
    document = {"key": "store_based_barrier_key:1", "key_size": 4, "api_key": "sk-live-9"}
    assert Redactor().document(document) == {**document, "api_key": "<redacted>"}


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("WANDB_API_KEY=0f1e2d3c", "0f1e2d3c"),
        ("apiKey: sk-live-777", "sk-live-777"),
        ("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7", "AKIAIOSFODNN7"),
        ("my_private_key: -----BEGIN", "-----BEGIN"),
        ("OPENAI_KEY=sk-proj-1", "sk-proj-1"),
    ],
)
def test_keys_that_are_secrets_are_still_hidden(text: str, secret: str) -> None:
    assert secret not in Redactor().text(text)


def test_redact_hosts_replaces_compact_host_lists() -> None:
    """A grouped cluster report names its nodes in Slurm's compact form, not one by one."""
    from ddp_doctor.facts.runs import host_list

    hosts = [f"gpu-prod-{n:04d}" for n in range(1, 1025) if n != 417] + ["r1n12", "r1n13"]
    listed = host_list(hosts)
    redactor = Redactor(hostnames=(*hosts, "gpu-prod-0417"), redact_hosts=True)
    text = redactor.text(f"nodes {listed} identical; gpu-prod-0417 differs; ranks[0-3] kept")
    assert "gpu-prod" not in text and "r1n" not in text
    assert "ranks[0-3]" in text  # a subscript is not a host list of a known host
