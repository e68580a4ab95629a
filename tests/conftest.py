"""Shared fixtures: the reference app is synthesized once per test run, with cdk-nag registered."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
if (ROOT / "node_modules" / ".bin").is_dir():  # the supported Node.js that `make` installs
    os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}"


pytest_plugins = ["genai_pacer.testing.pytest_plugin"]  # the emulator fixtures users get, used here too


class NagFailure(AssertionError):
    pass


def nag_violations(outdir: Path) -> list[str]:
    """Every unacknowledged finding in a validation report, as 'rule at construct path' lines."""
    report = outdir / "validation-report.json"
    if not report.exists():
        return []
    lines = []
    for plugin in json.loads(report.read_text())["pluginReports"]:
        for violation in plugin["violations"]:
            for construct in violation["violatingConstructs"]:
                lines.append(f"{violation['ruleName']} at {construct['constructPath']}")
    return lines


@pytest.fixture(scope="session")
def reference_assembly(tmp_path_factory):
    """The reference app synthesized once, nag included; fails with the findings if nag objects."""
    from app import build_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    try:
        build_app(outdir=str(outdir)).synth()
    except RuntimeError as error:
        findings = nag_violations(outdir)
        if findings:
            raise NagFailure("cdk-nag findings:\n" + "\n".join(findings)) from error
        raise
    return outdir


@pytest.fixture(scope="session")
def reference_templates(reference_assembly) -> dict[str, dict]:
    return {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in sorted(reference_assembly.glob("*.template.json"))
    }
