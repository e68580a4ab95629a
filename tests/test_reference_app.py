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
        "GenaiPacerSharedQuota.template.json",
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
    # three branches and a synthesis, one per Map (3), one in the scheduled pre-computation, and the shared-quota
    # Map's fallback (ledger_steps: the same call without the ledger when DynamoDB keeps failing)
    assert checked == 9


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
        "GenaiPacerSharedQuota/Assistant", "GenaiPacerSharedQuota/TicketTriage", "GenaiPacerSharedQuota/NightlyBackfill",
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


LEDGER_SHARES = ("Assistant", "TicketTriage", "NightlyBackfill")


def _function(template: dict, variable: str, value: str) -> dict:
    (found,) = [f["Properties"] for f in resources(template, "AWS::Lambda::Function").values()
                if f["Properties"].get("Environment", {}).get("Variables", {}).get(variable) == value]
    return found


def test_the_shared_quota_stacks_ledger_consumers_hold_floors_and_burst_caps_beside_the_apps_other_shares(
        reference_assembly, reference_templates):
    """stacks/shared_quota_stack.py: a function's QuotaPacer, a QueuedInference worker and a BoundedMap share
    one QuotaLedger, each with its floor and burst cap where its runtime reads them; the app's other consumers
    take no part in the ledger, so the ledger's consumers share the allocatable quota less what the others'
    shares draw (QuotaLedger.shared_tpm), and nothing the ledger admits can land on their shares."""
    from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT

    (plan_file,) = reference_assembly.glob("genai-pacer-quota.*.json")
    plan = json.loads(plan_file.read_text())
    shares = {s["name"]: s for s in plan["shares"]}
    ledger = [shares[name] for name in LEDGER_SHARES]
    assert all(s["in_ledger"] and s["burst_tpm"] > s["tpm"] for s in ledger)
    assert [s["name"] for s in plan["shares"] if s["in_ledger"]] == list(LEDGER_SHARES)
    outside = sum(s["drawn_tpm"] for s in plan["shares"] if not s["in_ledger"])
    assert sum(s["burst_tpm"] for s in ledger) <= plan["allocatable_tpm"] - outside
    assert plan["allocation"] <= plan["warn_at"]  # the floors fit beside the other shares

    template = reference_templates["GenaiPacerSharedQuota"]
    _, _, consumer, quota_tpm, floor, burst, *_ = LEDGER_ENVIRONMENT
    for name in ("Assistant", "TicketTriage"):  # the two processes: what SharedLedger.from_environment reads
        variables = _function(template, consumer, name)["Environment"]["Variables"]
        assert (float(variables[floor]), float(variables[burst]), float(variables[quota_tpm])) == (
            round(shares[name]["tpm"]), round(shares[name]["burst_tpm"]), round(plan["allocatable_tpm"] - outside))
    # one call at a time per process: the processes the floor sustains, each falling back to its part of it
    assistant = _function(template, consumer, "Assistant")
    assert assistant["Environment"]["Variables"]["GENAI_PACER_LEDGER_PRIORITY"] == "interactive"
    assert [s["name"] for s in plan["shares"] if s["priority"]] == ["Assistant"]
    assert assistant["ReservedConcurrentExecutions"] == shares["Assistant"]["executions"] >= 1
    assert float(assistant["Environment"]["Variables"]["GENAI_PACER_TPM"]) * shares["Assistant"]["executions"] == (
        pytest.approx(shares["Assistant"]["tpm"], abs=shares["Assistant"]["executions"]))
    # the worker's and the Map's deploy-time caps are the calls their bursts sustain, more than their floors'
    (mapping,) = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] == shares["TicketTriage"]["in_flight"] > (
        shares["TicketTriage"]["planned_in_flight"])
    (machine,) = resources(template, "AWS::StepFunctions::StateMachine").values()
    (cap,) = [s["MaxConcurrency"] for s in all_states(definition(machine)).values() if s["Type"] == "Map"]
    assert cap == shares["NightlyBackfill"]["in_flight"] > shares["NightlyBackfill"]["planned_in_flight"]
    # every grant on the ledger's table is on this quota's item alone
    writes = [statement for policy in resources(template, "AWS::IAM::Policy").values()
              for statement in policy["Properties"]["PolicyDocument"]["Statement"]
              if "dynamodb:UpdateItem" in json.dumps(statement["Action"]) and "LeadingKeys" in json.dumps(statement)]
    assert len(writes) >= 3  # the function, the worker, the state machine (and the sweeper)
    assert {json.dumps(w["Condition"]) for w in writes} == {json.dumps(
        {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["quota#" + plan["model_id"]]}})}


def test_the_shared_quota_stacks_assistant_handler_holds_and_settles_its_call_in_the_ledger(
        reference_templates, monkeypatch):
    """The inline handler as deployed, with the variables the template gives it, against moto's DynamoDB
    (the ledger's table) and a stubbed Bedrock: the call is answered and settles to its real usage in the
    quota's item under the function's share."""
    import boto3
    from botocore.stub import Stubber
    from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT
    from moto import mock_aws

    template = reference_templates["GenaiPacerSharedQuota"]
    function = _function(template, LEDGER_ENVIRONMENT[2], "Assistant")
    variables = function["Environment"]["Variables"]
    for name, value in {**variables, LEDGER_ENVIRONMENT[0]: "ledger", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        assert isinstance(value, str), f"{name} is not resolved at synth: {value}"
        monkeypatch.setenv(name, value)
    with mock_aws():
        dynamodb = boto3.client("dynamodb")
        dynamodb.create_table(TableName="ledger", BillingMode="PAY_PER_REQUEST",
                              KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
        module: dict = {}
        exec(compile(function["Code"]["ZipFile"], "index.py", "exec"), module)
        with Stubber(module["bedrock"]) as stub:
            stub.add_response("converse", {
                "output": {"message": {"role": "assistant", "content": [{"text": "Reset it from Settings."}]}},
                "stopReason": "end_turn", "usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42},
                "metrics": {"latencyMs": 100}},
                {"modelId": variables["MODEL_ID"], "messages": [{"role": "user", "content": [{"text": "How do I reset?"}]}],
                 "inferenceConfig": {"maxTokens": int(variables["MAX_TOKENS"])}})
            assert module["handler"]({"question": "How do I reset?"}, None) == {"answer": "Reset it from Settings."}
            stub.assert_no_pending_responses()
        key = {"pk": {"S": "quota#" + variables[LEDGER_ENVIRONMENT[1]]}}
        held = dynamodb.get_item(TableName="ledger", Key=key, ConsistentRead=True)["Item"]
        # the settlement's return rides this process's next write (deferred: one ledger write a call) ...
        assert held["held"] == held["h#Assistant"] and int(held["held"]["N"]) > 42
        assert module["pacer"].ledger.deferred_tokens == int(held["held"]["N"]) - 42
        module["pacer"].ledger.flush()  # ... or is written when it matters; here, by hand
        item = dynamodb.get_item(TableName="ledger", Key=key, ConsistentRead=True)["Item"]
    assert (item["held"], item["h#Assistant"]) == ({"N": "42"}, {"N": "42"})  # input + output x burndown 1
