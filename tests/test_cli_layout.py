"""The genai-pacer command line (issue 36): one root, genai_pacer.cli, and each command registered where
its capability lives, through the package's entry points; the console script runs the root."""

from __future__ import annotations

import argparse
import ast
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from conftest import ROOT
from genai_pacer import cli
from genai_pacer.quota import check as quota_check
from genai_pacer.testing import cli as testing_cli

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def commands(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (found,) = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found.choices)


def test_the_console_script_runs_the_root_and_each_capability_registers_its_commands():
    assert PYPROJECT["project"]["scripts"] == {"genai-pacer": "genai_pacer.cli:main"}
    declared = PYPROJECT["project"]["entry-points"][cli.COMMANDS_GROUP]
    assert declared == {"quota": "genai_pacer.quota.check:register", "testing": "genai_pacer.testing.cli:register"}
    installed = {entry.name: entry.value for entry in entry_points(group=cli.COMMANDS_GROUP)}
    assert installed == declared, "the installed metadata is stale: make .venv/.dev-installed"


def test_quota_check_is_registered_by_the_quota_capability_and_the_test_bed_registers_only_its_own():
    root = argparse.ArgumentParser()
    quota_check.register(root.add_subparsers())
    assert list(commands(root)) == ["quota-check"]
    root = argparse.ArgumentParser()
    testing_cli.register(root.add_subparsers())
    assert list(commands(root)) == ["emulator", "bench", "experiments"]
    assert sorted(commands(cli.parser())) == ["bench", "emulator", "experiments", "quota-check"]


def test_the_root_imports_nothing_of_the_package():
    """Its commands come from the entry points alone, so it depends on no capability and not on the test bed."""
    tree = ast.parse(Path(cli.__file__).read_text())
    imported = {node.module or "." for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"__future__", "argparse", "sys", "importlib.metadata", "typing"}


def test_the_former_entry_point_and_module_keep_working(capsys):
    """genai_pacer.testing.cli:main was the console script's target; it is the root's main now."""
    assert testing_cli.main is cli.main and testing_cli.parser is cli.parser
    with pytest.raises(SystemExit) as shown:
        testing_cli.main(["quota-check", "--help"])
    assert shown.value.code == 0 and "--assembly" in capsys.readouterr().out


def test_without_registered_commands_the_root_says_how_to_install_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert cli.main(["quota-check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install /path/to/genai-pacer" in err and cli.COMMANDS_GROUP in err
