"""``plait --version`` answers with the installed distribution's version."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

import plait
from plait.entrypoints.cli.main import main


def test_version_prints_the_distributions_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"plait {version('plait')}\n"


@pytest.mark.parametrize("argv", [["--version", "--json"], ["--json", "--version"]])
def test_version_as_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {"name": "plait", "version": version("plait")}


def test_the_package_and_its_metadata_agree() -> None:
    assert plait.__version__ == version("plait")


def test_version_with_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "list", "--version"]) == 2
    assert "--version" in capsys.readouterr().err
