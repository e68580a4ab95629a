"""cdk.json holds what `cdk init` writes: `python3 app.py` and the recommended feature flags of the
installed aws-cdk-lib. `cdk synth` applies those flags; an App() built in code (tests, a user's own
entry point) does not. The reference app is nag- and cfn-lint-clean either way, since users have either."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import aws_cdk
import pytest
from conftest import ROOT, synth_reference_app
from helpers import normalized


def cdk_json() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())


def recommended_flags() -> dict:
    """aws-cdk-lib's own list, the one `cdk init` copies into a new app's cdk.json."""
    (assembly,) = (Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    with tarfile.open(assembly) as package:
        member = package.extractfile("package/recommended-feature-flags.json")
        assert member is not None
        return json.loads(member.read())


def test_cdk_json_runs_the_app_with_python3_like_cdk_init():
    # not .venv/bin/python: the classic flow's venv may have any name (make puts .venv first on PATH)
    assert cdk_json()["app"] == "python3 app.py"


def test_cdk_json_sets_every_recommended_feature_flag_of_the_installed_aws_cdk_lib():
    flags, context = recommended_flags(), cdk_json()["context"]
    assert len(flags) > 80
    differing = {name: (context.get(name, "<unset>"), value) for name, value in flags.items() if context.get(name) != value}
    assert not differing, f"cdk.json context differs from the recommended flags (ours, recommended): {differing}"


@pytest.fixture(scope="module")
def flagged_assembly(tmp_path_factory) -> Path:
    """The reference app as `cdk synth` builds it: with cdk.json's context."""
    return synth_reference_app(tmp_path_factory.mktemp("cdk.out.flags"), context=cdk_json()["context"])


@pytest.mark.parametrize("flags", ["without cdk.json", "with cdk.json"])
def test_reference_app_is_nag_clean_with_and_without_the_feature_flags(flags, request):
    # the fixtures raise NagFailure naming each finding; here the report says so too
    assembly = request.getfixturevalue("reference_assembly" if flags == "without cdk.json" else "flagged_assembly")
    report = assembly / "validation-report.json"
    if report.exists():
        assert all(not plugin["violations"] for plugin in json.loads(report.read_text())["pluginReports"])
    assert len(list(assembly.glob("*.template.json"))) >= 2


def test_flagged_templates_are_cfn_lint_clean_and_do_differ(flagged_assembly, reference_templates):
    templates = sorted(str(path) for path in flagged_assembly.glob("*.template.json"))
    result = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable", *templates],
                            capture_output=True, text=True)
    assert result.returncode in (0, 4, 8, 12), result.stdout + result.stderr  # bit 2 = errors
    flagged = {Path(p).name.removesuffix(".template.json"): json.loads(Path(p).read_text()) for p in templates}
    assert flagged.keys() == reference_templates.keys()
    # the context reached the constructs: the flags change some resources (IAM statements are merged, ...)
    assert any(normalized(flagged[name]) != normalized(reference_templates[name]) for name in flagged)
