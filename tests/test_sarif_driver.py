"""SARIF names the tool's home page only where the package's metadata declares one."""

from __future__ import annotations

from email.message import Message
from importlib import metadata

import pytest

from ddp_doctor.render import sarif


def _metadata(**fields: list[str]) -> Message:
    message = Message()
    for name, values in fields.items():
        for value in values:
            message[name.replace("_", "-")] = value
    return message


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"Project_URL": ["Homepage, https://example.org/ddp-doctor"]},
            "https://example.org/ddp-doctor",
        ),
        ({"Project_URL": ["Issues, https://example.org/issues"]}, None),
        ({"Home_page": ["https://example.org/home"]}, "https://example.org/home"),
        ({}, None),
    ],
)
def test_information_uri_comes_from_metadata(
    monkeypatch: pytest.MonkeyPatch, fields: dict[str, list[str]], expected: str | None
) -> None:
    monkeypatch.setattr(metadata, "metadata", lambda name: _metadata(**fields))
    driver = sarif._driver("1.0", [])
    assert driver.get("informationUri") == expected


def test_no_metadata_no_information_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Message:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "metadata", missing)
    assert "informationUri" not in sarif._driver("1.0", [])
