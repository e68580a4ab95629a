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


def test_every_consumer_of_the_model_draws_a_share_of_one_quota(reference_assembly, reference_templates):
    """The app's one ModelQuota: every construct that calls the model, in whichever stack, holds a
    share, the shares stay inside the quota, and each cap in the templates is its share's."""
    (plan_file,) = reference_assembly.glob("genai-pacer-quota.*.json")
    plan = json.loads(plan_file.read_text())
    assert plan["unshared_consumers"] == [] and plan["unheld_shares"] == []
    assert plan["allocation"] <= plan["warn_at"]
    shares = {s["name"]: s for s in plan["shares"]}
    assert {holder for s in plan["shares"] for holder in s["holders"]} == {
        "GenaiPacerOrchestration/ReviewDigest", "GenaiPacerOrchestration/TickerSummaries",
        "GenaiPacerOrchestration/CatalogDescriptions", "GenaiPacerQueuedInference/ReviewSummaries",
        "GenaiPacerPrecompute/MorningNotes", "GenaiPacerPrecompute/Router", "GenaiPacerExperiment/Evaluator",
    }

    def map_caps(stack: str) -> list[int]:
        return sorted(
            state["MaxConcurrency"]
            for machine in resources(reference_templates[stack], "AWS::StepFunctions::StateMachine").values()
            for state in all_states(definition(machine)).values()
            if state["Type"] == "Map" and "MaxConcurrency" in state
        )

    assert map_caps("GenaiPacerOrchestration") == sorted(
        [shares["TickerSummaries"]["in_flight"], shares["CatalogDescriptions"]["in_flight"]])
    assert shares["MorningNotes"]["in_flight"] in map_caps("GenaiPacerPrecompute")
    (mapping,) = resources(reference_templates["GenaiPacerQueuedInference"], "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] == shares["ReviewSummaries"]["in_flight"]
    routers = [f for f in resources(reference_templates["GenaiPacerPrecompute"], "AWS::Lambda::Function").values()
               if "answer_router" in json.dumps(f["Properties"].get("Handler", ""))]
    assert [f["Properties"]["ReservedConcurrentExecutions"] for f in routers] == [shares["Router"]["in_flight"]]


@pytest.mark.parametrize(
    "context", [{"model_id": "amazon.nova-lite-v1:0", "tpm_quota": "2000000", "burndown": "1"}]
)
def test_context_changes_the_model_without_code_edits(tmp_path, context):
    from app import build_app

    assembly = build_app(context=context, outdir=str(tmp_path)).synth()
    template = json.dumps(assembly.get_stack_by_name("GenaiPacerOrchestration").template)
    assert "foundation-model/amazon.nova-lite-v1:0" in template
    assert "inference-profile" not in template


def test_non_numeric_context_is_rejected_with_the_key(tmp_path):
    from app import build_app

    with pytest.raises(ValueError, match="context burndown and tpm_quota must be numbers"):
        build_app(context={"tpm_quota": "lots"}, outdir=str(tmp_path))


def test_the_planning_example_runs_and_its_comments_are_true():
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "quota.md").read_text()
    block = re.search(r"## Planning\n\n```python\n(.*?)```", page, re.S).group(1)
    scope: dict = {}
    exec(block, scope)
    assert (scope["p"].reserved, scope["p"].settled, scope["p"].billed) == (8500, 4000, 2800)
    assert (scope["sizing"].max_tokens, scope["sizing"].reservation_saved_per_request) == (990, 15_010)


def test_the_router_asks_priority_for_its_misses_and_the_morning_run_flex_on_a_model_listed_for_both(reference_templates):
    """Issue 37's reference use of the tiers: a user waits on the router's miss (Priority), nobody waits
    on the scheduled pre-computation (Flex), each role denied the other tiers, on the default model the
    service tiers page lists for both (stacks/settings.py, with the page's date)."""
    from stacks.settings import CONTEXT_DEFAULTS

    assert CONTEXT_DEFAULTS["model_id"][0] == "us.amazon.nova-2-lite-v1:0"
    template = reference_templates["GenaiPacerPrecompute"]
    routers = [f for f in resources(template, "AWS::Lambda::Function").values()
               if "answer_router" in json.dumps(f["Properties"].get("Handler", ""))]
    assert [f["Properties"]["Environment"]["Variables"]["SERVICE_TIER"] for f in routers] == ["priority"]
    converse_tiers = [
        state["Parameters"].get("ServiceTier")
        for machine in resources(template, "AWS::StepFunctions::StateMachine").values()
        for state in all_states(definition(machine)).values()
        if state["Type"] == "Task" and state["Resource"].endswith(":aws-sdk:bedrockruntime:converse")
    ]
    assert converse_tiers == [{"Type": "flex"}]  # the morning notes; the batch jobs take no tier
    denied = sorted(
        tuple(statement["Condition"]["StringEquals"]["bedrock:ServiceTier"])
        for policy in resources(template, "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny" and "bedrock:ServiceTier" in json.dumps(statement.get("Condition", {}))
    )
    assert denied == [("default", "flex", "reserved"), ("priority", "default", "reserved")]
