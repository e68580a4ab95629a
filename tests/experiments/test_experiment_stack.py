"""The reference ExperimentStack: synthesized once with cdk-nag's AwsSolutions registered (zero
unacknowledged findings), cfn-lint clean, and the evaluator role limited to the experiment."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks
from conftest import nag_violations
from helpers import resources
from pacer_runtime.experiment import Experiment

from stacks.experiment_stack import TREATMENT_SHARE, ExperimentStack
from stacks.orchestration_stack import OrchestrationStack


@pytest.fixture(scope="module")
def synthesized() -> tuple[list[str], Path, dict]:
    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    quota = OrchestrationStack(app, "GenaiPacerOrchestration").quota  # as app.py shares the model's quota
    ExperimentStack(app, "GenaiPacerExperiment", quota=quota)
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    template = json.loads((outdir / "GenaiPacerExperiment.template.json").read_text())
    return nag_violations(outdir), outdir, template


def test_the_reference_stack_passes_cdk_nag(synthesized):
    findings, _, _ = synthesized
    assert findings == []


def test_the_reference_stack_passes_cfn_lint(synthesized):
    _, outdir, _ = synthesized
    result = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable",
                             str(outdir / "GenaiPacerExperiment.template.json")], capture_output=True, text=True)
    # exit status is a bit mask: 2 = errors, 4 = warnings, 8 = informational. The one warning is
    # W3005 on aws-cdk-lib's own DependsOn from a state machine to its role, as in the reference app.
    assert result.returncode in (0, 4, 8, 12), result.stdout + result.stderr
    assert {line.split(":")[5] for line in result.stdout.splitlines() if line.count(":") >= 5} <= {"W3005"}, result.stdout


def test_the_reference_experiment_splits_90_10_and_the_evaluator_may_only_read_and_invoke(synthesized):
    _, _, template = synthesized
    (main,) = [v["Properties"] for v in resources(template, "AWS::AppConfig::HostedConfigurationVersion").values()
               if "control variant" not in v["Properties"].get("Description", "")]
    assert Experiment.from_config(main["Content"]).shares == {"control": 100 - TREATMENT_SHARE, "steps-first": TREATMENT_SHARE}
    evaluator = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("Evaluator"))
    actions = {a for s in evaluator["Properties"]["PolicyDocument"]["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions == {"appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration", "bedrock:InvokeModel"}
    assert set(template["Outputs"]) == {"ApplicationId", "EnvironmentId", "ProfileId", "FallbackVersion", "EvaluatorRoleArn"}
