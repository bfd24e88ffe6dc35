"""No secret survives any renderer: random secret-shaped values (a seeded generator) in every
place a report carries text (facts, probe errors, messages, evidence, fixes, the job's output),
rendered in every format with -v; and with --no-redact they all do appear, so the reports
really carry them."""

from __future__ import annotations

import json
import random
import string
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor.cli import ReportOptions
from ddp_doctor.commands.check import FORMATS as CHECK_FORMATS
from ddp_doctor.commands.check import render_check
from ddp_doctor.facts.job import JobFacts, Preflight, RankFacts, StageRecord
from ddp_doctor.model import (
    Finding,
    Location,
    ProbeStatus,
    Remediation,
    Report,
    Severity,
)
from ddp_doctor.redact import Redactor, redact_url_credentials
from ddp_doctor.registry import Selector
from ddp_doctor.render import render
from ddp_doctor.report_io import report_from_json

SEED = 20261130
TRIALS = 40
SECRET_NAMES = ("HF_TOKEN", "WANDB_API_KEY", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "GH_AUTH")
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "jobs" / "healthy-2rank-gloo.json"


def secret(rng: random.Random) -> str:
    """Token-shaped: letters and digits (both, so a lone URL token is recognisable as one),
    with the punctuation tokens and base64 use."""
    body = "".join(rng.choice(string.ascii_letters + string.digits + "._~+=-") for _ in range(20))
    return rng.choice(string.ascii_letters) + body + rng.choice(string.digits)


def url_password(rng: random.Random) -> str:
    """What a URL's password may hold, "@" and ":" included."""
    alphabet = string.ascii_letters + string.digits + "!$&'()*+,;=%-._~:@"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(8, 30))) + "Z9"


def carriers(rng: random.Random) -> tuple[dict[str, str], list[str]]:
    """Texts that carry a secret each, keyed by where they go, and the secrets."""
    values = [secret(rng) for _ in range(6)] + [url_password(rng)]
    token, key, flag, bearer, lone, evidence, password = values
    name = rng.choice(SECRET_NAMES)
    host = rng.choice(["10.0.0.5", "master.example", "[fd00::5]"])
    scheme = rng.choice(["tcp", "https", "redis", "s3"])
    texts = {
        "env_value": token,
        "master_addr": f"{scheme}://trainer:{password}@{host}:29500",
        "output": f"export {name}={key}\nloading https://{lone}@github.com/org/repo.git\n",
        "probe_error": f"command failed: train.py --password {flag} --epochs 3",
        "stage_error": f"HTTP 401 for Authorization: Bearer {bearer}",
        "evidence": evidence,
    }
    return texts, values


def report_with(texts: dict[str, str]) -> Report:
    healthy = report_from_json(json.loads(FIXTURE.read_text()))
    probes = []
    for result in healthy.probes:
        if result.probe == "env":
            variables = {**result.facts.variables, "HF_TOKEN": texts["env_value"]}
            variables["MASTER_ADDR"] = texts["master_addr"]
            result = replace(result, facts=replace(result.facts, variables=variables))
        elif result.probe == "job":
            result = replace(result, facts=_job(result.facts, texts))
        elif result.probe == "host":
            result = replace(result, status=ProbeStatus.FAILED, error=texts["probe_error"])
        probes.append(result)
    finding = Finding(
        code="DDP203",
        name="master-addr-unresolvable",
        severity=Severity.ERROR,
        message=f"master address {texts['master_addr']!r} does not resolve",
        fix=Remediation("Use an IP address.", (f"MASTER_ADDR={texts['master_addr']} torchrun",)),
        location=Location("train.py", 3, 1),
        evidence={"address": texts["master_addr"], "api_key": texts["evidence"]},
    )
    return replace(healthy, probes=tuple(probes), findings=(finding,))


def _job(job: JobFacts, texts: dict[str, str]) -> JobFacts:
    failed = StageRecord("init", ended=True, ok=False, seconds=1.0, error=texts["stage_error"])
    return replace(
        job,
        preflight=Preflight(texts["master_addr"], "10.0.0.5"),
        output_tail=job.output_tail + texts["output"],
        ranks=(*job.ranks[:1], RankFacts(1, (failed,), 1)),
        exit_code=1,
    )


def outputs(report: Report, redact: bool) -> dict[str, str]:
    shown = {
        f"run:{fmt}": render(report, fmt, verbose=True, redact=redact)
        for fmt in ("table", "json", "markdown")
    }
    for fmt in CHECK_FORMATS:
        options = ReportOptions(fmt, None, "error", Selector(), True, False, redact)
        shown[f"check:{fmt}"] = render_check(report, options, checked=1)
    return shown


@pytest.mark.parametrize("trial", range(TRIALS))
def test_no_secret_survives_any_renderer(trial: int) -> None:
    rng = random.Random(SEED + trial)
    texts, secrets = carriers(rng)
    for where, text in outputs(report_with(texts), redact=True).items():
        leaked = [value for value in secrets if value in text]
        assert not leaked, (where, leaked)


def test_without_redaction_every_secret_is_shown() -> None:
    texts, secrets = carriers(random.Random(SEED))
    shown = outputs(report_with(texts), redact=False)
    assert all(value in shown["run:json"] for value in secrets)
    assert texts["env_value"] in shown["run:table"]  # -v shows the facts as they are


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tcp://user:PASSWORD@host:29500", "tcp://user:<redacted>@host:29500"),
        ("https://u:p@ss:w@rd@host/plugin.so", "https://u:<redacted>@host/plugin.so"),
        ("MASTER_ADDR=tcp://u:x@10.0.0.1 next", "MASTER_ADDR=tcp://u:<redacted>@10.0.0.1 next"),
        ("https://ghp_abcdefghij1234567890@github.com/o/r", "https://<redacted>@github.com/o/r"),
        ("ssh://git@github.com/org/repo", "ssh://git@github.com/org/repo"),
        ("http://host/path?mail=a@b.c", "http://host/path?mail=a@b.c"),
        ("no url: user:pw@host", "no url: user:pw@host"),
    ],
)
def test_url_credentials(text: str, expected: str) -> None:
    assert redact_url_credentials(text) == expected
    assert Redactor().text(expected) == Redactor().text(text)  # idempotent


@pytest.mark.timeout(30)  # a quadratic scan of these takes minutes (one took 43 s)
def test_redaction_of_hostile_text_ends() -> None:
    """Texts built to make a backtracking regex quadratic, 64 KiB each like a job's output."""
    redactor = Redactor(home="/home/alice", user="alice", redact_hosts=True)
    for text in ("ab-" * 22000 + "=x", "a." * 32000 + "://", "a://" + "x@" * 32000, ":" * 65536):
        assert len(redactor.text(text)) >= len(text) // 2
