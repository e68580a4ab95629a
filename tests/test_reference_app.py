"""The reference app as `make synth` builds it: nag-clean, cfn-lint-clean, snapshot-stable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import all_states, definition, normalized, resources


def test_every_reference_stack_synthesizes_with_zero_nag_findings(reference_assembly):
    # the fixture raises with the findings when cdk-nag reports any; here: the report says so too
    report = reference_assembly / "validation-report.json"
    if report.exists():
        plugin_reports = json.loads(report.read_text())["pluginReports"]
        assert all(not p["violations"] for p in plugin_reports)
    assert sorted(p.name for p in reference_assembly.glob("*.template.json")) == [
        "GenaiPacerEndpointScaling.template.json",
        "GenaiPacerExperiment.template.json",
        "GenaiPacerObservability.template.json",
        "GenaiPacerOrchestration.template.json",
        "GenaiPacerPrecompute.template.json",
        "GenaiPacerQueuedInference.template.json",
        "GenaiPacerRetrieval.template.json",
    ]


def test_cfn_lint_finds_no_errors(reference_assembly):
    templates = sorted(str(p) for p in reference_assembly.glob("*.template.json"))
    assert templates
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    result = subprocess.run(
        [str(cfn_lint), "--format", "parseable", *templates], capture_output=True, text=True
    )
    # exit status is a bit mask: 2 = errors, 4 = warnings, 8 = informational; 1 = cfn-lint itself failed
    assert result.returncode in (0, 4, 8, 12), result.stdout + result.stderr


def test_cfn_lint_catches_a_broken_template(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text(
        json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"Bogus": 1}}}})
    )
    result = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), str(broken)], capture_output=True
    )
    assert result.returncode & 2


def test_snapshots(reference_templates, snapshot):
    for name, template in reference_templates.items():
        assert normalized(template) == snapshot(name=name)


def test_every_model_call_in_every_state_machine_retries_throttles_with_full_jitter(reference_templates):
    checked = 0
    for template in reference_templates.values():
        for machine in resources(template, "AWS::StepFunctions::StateMachine").values():
            for name, state in all_states(definition(machine)).items():
                if state["Type"] == "Task" and state["Resource"].endswith(
                    (":bedrock:invokeModel", ":aws-sdk:bedrockruntime:converse")
                ):
                    retry = state["Retry"][0]
                    service = "Bedrock" if state["Resource"].endswith("invokeModel") else "BedrockRuntime"
                    assert f"{service}.ThrottlingException" in retry["ErrorEquals"], name
                    assert retry["JitterStrategy"] == "FULL" and retry["MaxDelaySeconds"] > 0, name
                    checked += 1
    assert checked == 7  # three branches and a synthesis, one per Map, one in the scheduled pre-computation


def test_maps_are_bounded_by_their_share_of_one_quota(reference_templates):
    """Each Map draws its own share of the model's one quota: together with the digest's three
    parallel calls they stay within what the whole quota sustains (a plan of 10 in flight)."""
    from genai_pacer import planning

    from stacks.settings import CONTEXT_DEFAULTS

    burndown, tpm = float(CONTEXT_DEFAULTS["burndown"][0]), float(CONTEXT_DEFAULTS["tpm_quota"][0])
    profile = planning.TokenProfile(
        input_tokens=2_500, output_tokens=300, max_tokens=planning.size_max_tokens(400).max_tokens, burndown=burndown
    )

    def cap(fraction: float) -> int:
        return planning.sustainable_rate(profile, tpm_quota=tpm * fraction, call_seconds=6).max_concurrency

    caps = sorted(
        state["MaxConcurrency"]
        for machine in resources(
            reference_templates["GenaiPacerOrchestration"], "AWS::StepFunctions::StateMachine"
        ).values()
        for state in definition(machine)["States"].values()
        if state["Type"] == "Map"
    )
    assert caps == sorted([cap(0.3), cap(0.25)])  # the tickers' and the catalog's shares
    whole = planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=6).max_concurrency
    assert sum(caps) + 3 <= whole  # with the digest's three branches: within the whole quota's plan


@pytest.mark.parametrize(
    "context", [{"model_id": "amazon.nova-lite-v1:0", "tpm_quota": "2000000", "burndown": "1"}]
)
def test_context_changes_the_model_without_code_edits(tmp_path, context):
    from app import build_app

    assembly = build_app(context=context, outdir=str(tmp_path)).synth()
    template = json.dumps(assembly.get_stack_by_name("GenaiPacerOrchestration").template)
    assert "foundation-model/amazon.nova-lite-v1:0" in template
    assert "inference-profile" not in template


def test_queued_inference_is_bounded_by_half_the_quota(reference_templates):
    from genai_pacer import planning

    from stacks.settings import CONTEXT_DEFAULTS

    profile = planning.TokenProfile(
        input_tokens=1_500,
        output_tokens=250,
        max_tokens=planning.size_max_tokens(350).max_tokens,
        burndown=float(CONTEXT_DEFAULTS["burndown"][0]),
    )
    expected = planning.sustainable_rate(
        profile, tpm_quota=float(CONTEXT_DEFAULTS["tpm_quota"][0]) / 2, call_seconds=5
    )
    template = reference_templates["GenaiPacerQueuedInference"]
    (mapping,) = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] == expected.max_concurrency
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_non_numeric_context_is_rejected_with_the_key(tmp_path):
    from app import build_app

    with pytest.raises(ValueError, match="context burndown and tpm_quota must be numbers"):
        build_app(context={"tpm_quota": "lots"}, outdir=str(tmp_path))


def test_readme_planning_example_runs_and_its_comments_are_true():
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"## Planning\n\n```python\n(.*?)```", readme, re.S).group(1)
    scope: dict = {}
    exec(block, scope)
    assert (scope["p"].reserved, scope["p"].settled, scope["p"].billed) == (8500, 4000, 2800)
    assert (scope["sizing"].max_tokens, scope["sizing"].reservation_saved_per_request) == (990, 15_010)
