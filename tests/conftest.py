"""Shared fixtures: the reference app is synthesized once per test run, with cdk-nag registered."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.loaders
import botocore.session
import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]
if (ROOT / "node_modules" / ".bin").is_dir():  # the supported Node.js that `make` installs
    os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ['PATH']}"


def _silence_node_end_of_life_banner() -> None:
    """jsii prints its Node end-of-life banner unless this variable lists the major version of the
    Node.js it runs on (`1` silences nothing); add that version, keeping any the user set."""
    node = shutil.which("node")
    if node is None:
        return
    major = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True)
    name = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
    listed = [v.strip() for v in os.environ.get(name, "").split(",") if v.strip()]
    if major.returncode == 0 and major.stdout.strip() not in listed:
        os.environ[name] = ",".join([*listed, major.stdout.strip()])


_silence_node_end_of_life_banner()

#: aws-cdk-lib (2.275) runs its built-in CloudFormation validation on every synth unless CDK_VALIDATION=false
#: (AppProps.builtin_cloud_formation_validation's docstring lists this variable; aws-cdk-lib's
#: core/lib/private/synthesis-validation.js `defaultValidationEnabled` reads it). It cost about 0.3 s per stack
#: here, and the suite synthesizes well over a thousand stacks. The user's own flow keeps it: the classic-flow
#: test runs `cdk synth` without this variable and requires the validation to report nothing.
BUILTIN_VALIDATION_ENV = "CDK_VALIDATION"
os.environ.setdefault(BUILTIN_VALIDATION_ENV, "false")  # CDK_VALIDATION=true turns it back on


# Property tests: the gate (`make test`, which sets HYPOTHESIS_PROFILE=ci, and any run with CI=true)
# replays the same examples on every run, so a change never fails for a random new example it did not
# cause (a bug such an example finds is reported with its blob and fixed on purpose); the development
# loop (`make test-fast`, plain pytest) explores freely. Neither has a deadline: how long an example
# takes depends on the machine's load (a 2-core machine running other work took 308 ms for a 200 ms
# deadline), never on the code under test.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.register_profile("dev", print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"))


# moto resets boto3's default session at every mock_aws(), so each test's clients built a new botocore
# Loader and parsed the service models and endpoints.json again (55 ms a test; 5.5 of the 36 s of
# tests/precompute/test_store_integrity.py under cProfile). Sessions here share one Loader per data
# path, as every client of one session already does: the models are read-only.
botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)  # type: ignore[attr-defined]


pytest_plugins = [
    "genai_pacer.testing.pytest_plugin",  # the emulator fixtures users get, used here too
    "queued_worker_harness",  # the queue worker as Lambda runs it (`worker`), for the queue's and the store's tests
]


class NagFailure(AssertionError):
    """cdk-nag reported findings on the reference app."""


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


def nag_findings(build, context: dict[str, object] | None = None) -> list[str]:
    """Synthesize a one-stack app with AwsSolutions registered, composed by build(stack); return the
    unacknowledged findings."""
    import contextlib
    import tempfile

    import aws_cdk as cdk
    from cdk_nag import AwsSolutionsChecks

    outdir = tempfile.mkdtemp()
    app = cdk.App(outdir=outdir, context=context)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Nag", env=cdk.Environment(account="111122223333", region="us-east-1"))
    build(stack)
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    return nag_violations(Path(outdir))


def synth_reference_app(outdir: Path, context: dict[str, Any] | None = None) -> Path:
    """The reference app synthesized into outdir, nag included; fails with the findings if nag objects."""
    from app import build_app

    try:
        build_app(context=context, outdir=str(outdir)).synth()
    except RuntimeError as error:
        findings = nag_violations(outdir)
        if findings:
            raise NagFailure("cdk-nag findings:\n" + "\n".join(findings)) from error
        raise
    return outdir


@pytest.fixture(scope="session")
def reference_assembly(tmp_path_factory):
    """The reference app as a test or a user's own code builds it: cdk.App() without cdk.json's context."""
    return synth_reference_app(tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def reference_templates(reference_assembly) -> dict[str, dict]:
    return {
        path.name.removesuffix(".template.json"): json.loads(path.read_text())
        for path in sorted(reference_assembly.glob("*.template.json"))
    }


@pytest.fixture
def no_sdk_backoff(monkeypatch):
    """The SDK retries a throttled call at once: botocore's standard-mode backoff (a real sleep of up to
    1 s, then 2 s, before each retry: botocore/retries/standard.py ExponentialBackoff.delay_amount)
    returns 0. The retries still happen and are counted; only the wall time between them goes."""
    from botocore.retries.standard import ExponentialBackoff

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
