"""The classic CDK flow a newcomer types, on a fresh copy of the repository, outside make:

    python3 -m venv env && source env/bin/activate && pip install -r requirements.txt
    npm ci && npx cdk synth

It must synthesize with a venv that is not `.venv`, print no Node end-of-life banner and no
"feature flags are not configured" notice (README: "The classic CDK flow").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BUILTIN_VALIDATION_ENV, ROOT


def fresh_copy(destination: Path) -> Path:
    """What a clone of this working tree holds: tracked and new files, nothing ignored (.venv,
    node_modules, cdk.out stay behind). Uncommitted edits come along, so the test checks them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a clone of it
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def user_environment(venv: Path) -> dict[str, str]:
    """A shell after `source env/bin/activate`: none of make's or this test run's settings."""
    ours = {str(ROOT / "node_modules" / ".bin"), str(ROOT / ".venv" / "bin"), str(Path(sys.executable).parent)}
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p and p not in ours]
    env = {k: v for k, v in os.environ.items()
           if k not in ("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "PYTHONPATH", "VIRTUAL_ENV", "CDK_OUTDIR",
                         BUILTIN_VALIDATION_ENV)
           and not k.startswith(("MAKE", "PYTEST_"))}
    return {**env, "PATH": os.pathsep.join([str(venv / "bin"), *path]), "VIRTUAL_ENV": str(venv)}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(command)} failed ({result.returncode}):\n{output[-4000:]}"
    return output


@pytest.mark.slow
def test_classic_flow_on_a_fresh_copy_synthesizes_without_banner_or_flag_notice(tmp_path, reference_templates):
    if shutil.which("npm") is None:
        pytest.fail("npm is not installed: the classic flow (and make) need Node.js with npm")
    tree = fresh_copy(tmp_path / "genai-pacer")
    venv = tree / "env"
    env = user_environment(venv)
    python3 = shutil.which("python3", path=env["PATH"]) or sys._base_executable
    run([python3, "-m", "venv", "env"], tree, env)
    # --no-compile: bytecode compilation is most of the install time and not what this test is about
    run(["pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check", "-r", "requirements.txt"],
        tree, env)
    run(["npm", "ci", "--no-audit", "--no-fund"], tree, env)
    synth = run(["npx", "cdk", "synth", "--no-notices"], tree, env)  # notices come from the network

    assert "end-of-life" not in synth and "not supported anymore" not in synth, synth
    assert "feature flags are not configured" not in synth, synth
    assert "Successfully synthesized" in synth, synth
    synthesized = sorted(p.name.removesuffix(".template.json") for p in (tree / "cdk.out").glob("*.template.json"))
    assert synthesized == sorted(reference_templates)  # every reference stack, as the in-process app builds them
    # aws-cdk-lib's built-in CloudFormation validation (on here, off in the other tests for speed) and cdk-nag
    # report nothing: the report lists a plugin only when it found or suppressed something
    reports = json.loads((tree / "cdk.out" / "validation-report.json").read_text())["pluginReports"]
    assert {r["pluginName"]: r["violations"] for r in reports if r["violations"]} == {}
