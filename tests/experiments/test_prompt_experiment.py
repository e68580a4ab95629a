"""PromptExperiment: the AppConfig application, environment, freeform profile, JSON Schema validator
and deployment strategy; the document the runtime reads; per-variant guard alarms as rollback
monitors; the fallback to control after the bake time; the evaluate grant; every bad prop."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_appconfig as appconfig
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks
from conftest import nag_violations
from genai_pacer import BedrockModel, InvalidPropsError
from genai_pacer.experiments.prompt_experiment import (
    DOCUMENT_SCHEMA,
    ExperimentVariant,
    ManagedPrompt,
    PromptExperiment,
    TextPrompt,
)
from genai_pacer.models import SERVICE_TIER_KEY
from helpers import all_states, definition, new_stack, only, policy_statements, resources
from pacer_runtime import experiment as runtime
from pacer_runtime import metrics

NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
HAIKU = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
PROMPT = "arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT12AB"


def variants() -> list[ExperimentVariant]:
    return [
        ExperimentVariant("control", NOVA, 90, TextPrompt("Answer: {{question}}", system="Be brief."), max_tokens=300,
                          temperature=0.2),
        ExperimentVariant("managed", HAIKU, 10, ManagedPrompt(PROMPT, "3")),
    ]


def build(stack: cdk.Stack | None = None, **props) -> tuple[cdk.Stack, PromptExperiment]:
    stack = stack or new_stack()
    return stack, PromptExperiment(stack, "Exp", **{"variants": variants(), "experiment_name": "support", **props})


@pytest.fixture(scope="module")
def built() -> tuple[PromptExperiment, dict]:
    stack, experiment = build()
    role = iam.Role(stack, "Evaluator", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    experiment.grant_evaluate(role)
    return experiment, Template.from_stack(stack).to_json()


def guard_alarms(template: dict) -> dict[str, dict]:
    """The guard alarms: every metric alarm of the experiment but the fallback's own failure alarm."""
    return {k: v for k, v in resources(template, "AWS::CloudWatch::Alarm").items() if "FallbackFailed" not in k}


def versions(template: dict) -> dict[str, dict]:
    return {k: v["Properties"] for k, v in resources(template, "AWS::AppConfig::HostedConfigurationVersion").items()}


# ---- AppConfig --------------------------------------------------------------------------------


def test_the_split_is_a_freeform_profile_with_the_json_schema_validator(built):
    _, template = built
    profile = only(template, "AWS::AppConfig::ConfigurationProfile")["Properties"]
    assert profile["LocationUri"] == "hosted" and profile["Name"] == "support-split"
    (validator,) = profile["Validators"]
    assert validator["Type"] == "JSON_SCHEMA" and json.loads(validator["Content"]) == DOCUMENT_SCHEMA
    assert profile.get("Type", "AWS.Freeform") == "AWS.Freeform"


def test_the_deployed_document_is_what_the_runtime_reads_and_the_fallback_puts_everyone_on_control(built):
    experiment, template = built
    (main,) = [v for v in versions(template).values() if "control variant" not in v.get("Description", "")]
    (fallback,) = [v for v in versions(template).values() if "control variant" in v.get("Description", "")]
    parsed = runtime.Experiment.from_config(main["Content"])
    assert parsed.shares == {"control": 90, "managed": 10} and parsed.salt == "support" and parsed.control == "control"
    control = parsed.variant("control")
    assert (control.model_id, control.system, control.inference_config) == (NOVA.model_id, "Be brief.",
                                                                           {"maxTokens": 300, "temperature": 0.2})
    assert parsed.variant("managed").prompt_arn == f"{PROMPT}:3"
    assert runtime.Experiment.from_config(fallback["Content"]).shares == {"control": 100, "managed": 0}
    assert json.loads(main["Content"]) == experiment.document
    assert main["ContentType"] == fallback["ContentType"] == "application/json"


def test_the_schema_names_exactly_the_fields_the_runtime_takes():
    item = DOCUMENT_SCHEMA["properties"]["variants"]["items"]
    assert set(item["properties"]) == set(runtime._VARIANT_KEYS)
    assert DOCUMENT_SCHEMA["$schema"].endswith("draft-04/schema#")  # the draft AppConfig validators use
    assert len(json.dumps(DOCUMENT_SCHEMA)) < 32_768  # AppConfig's validator content limit


def test_a_split_change_deploys_at_once_and_bakes_while_the_guards_watch(built):
    _, template = built
    deployment = only(template, "AWS::AppConfig::Deployment")["Properties"]
    strategies = resources(template, "AWS::AppConfig::DeploymentStrategy")
    strategy = strategies[deployment["DeploymentStrategyId"]["Ref"]]["Properties"]
    assert (strategy["GrowthFactor"], strategy["DeploymentDurationInMinutes"], strategy["FinalBakeTimeInMinutes"]) == (100, 0, 10)
    environment = only(template, "AWS::AppConfig::Environment")["Properties"]
    monitored = {m["AlarmArn"]["Fn::GetAtt"][0] for m in environment["Monitors"]}
    assert monitored == set(guard_alarms(template))
    assert len(monitored) == 4


def test_each_variant_has_an_error_rate_and_a_p90_guard_on_its_variant_metrics(built):
    _, template = built
    alarms = list(guard_alarms(template).values())
    assert not [a for a in alarms if "MetricName" in a["Properties"]]  # both guards are gated metric math
    p90 = [a["Properties"] for a in alarms if "p90" in json.dumps(a["Properties"]["Metrics"])]
    assert {a["Threshold"] for a in p90} == {10_000}
    dimension_sets = set()
    for alarm in p90:
        # one slow call of a 10% treatment is its whole p90: the guard counts periods with guard_min_calls+ calls only
        assert next(q for q in alarm["Metrics"] if "Expression" in q)["Expression"] == "IF(FILL(c, 0) >= 20, FILL(p, 0), 0)"
        stats = {q["Id"]: q["MetricStat"] for q in alarm["Metrics"] if "MetricStat" in q}
        assert {i: (m["Metric"]["MetricName"], m["Stat"], m["Period"]) for i, m in stats.items()} == {
            "p": (metrics.LATENCY_MS, "p90", 60), "c": (metrics.LATENCY_MS, "SampleCount", 60)}
        assert all(m["Metric"]["Namespace"] == metrics.NAMESPACE for m in stats.values())
        (dims,) = {tuple(sorted((d["Name"], d["Value"]) for d in m["Metric"]["Dimensions"])) for m in stats.values()}
        dimension_sets.add(dims)  # p90 and the count of the same calls: one dimension set per alarm
    assert dimension_sets == {
        (("Experiment", "support"), ("ModelId", NOVA.model_id), ("Variant", "control")),
        (("Experiment", "support"), ("ModelId", HAIKU.model_id), ("Variant", "managed")),
    }
    rates = [a["Properties"] for a in alarms if "p90" not in json.dumps(a["Properties"]["Metrics"])]
    assert len(rates) == 2
    for rate in rates:
        expression = next(q for q in rate["Metrics"] if "Expression" in q)["Expression"]
        assert expression.startswith("IF((FILL(e, 0) + FILL(c, 0)) >= 20, 100 * FILL(e, 0)")
        stats = {q["Id"]: (q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"]) for q in rate["Metrics"] if "MetricStat" in q}
        assert stats == {"e": (metrics.CALL_ERRORS, "Sum"), "c": (metrics.LATENCY_MS, "SampleCount")}
        assert rate["Threshold"] == 5
    for alarm in alarms:
        props = alarm["Properties"]
        assert (props["EvaluationPeriods"], props["DatapointsToAlarm"], props["TreatMissingData"]) == (3, 3, "notBreaching")


def test_a_guard_alarm_after_the_bake_time_deploys_the_fallback_through_eventbridge_and_step_functions(built):
    _, template = built
    rule = only(template, "AWS::Events::Rule")["Properties"]
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.cloudwatch"] and pattern["detail-type"] == ["CloudWatch Alarm State Change"]
    assert pattern["detail"] == {"state": {"value": ["ALARM"]}}
    assert {r["Fn::GetAtt"][0] for r in pattern["resources"]} == set(guard_alarms(template))
    (target,) = rule["Targets"]
    assert target["Arn"]["Ref"] in resources(template, "AWS::StepFunctions::StateMachine")
    states = all_states(definition(only(template, "AWS::StepFunctions::StateMachine")))
    disable, deploy = states["Disable guard alarm actions"], states["Deploy fallback"]
    assert disable["Resource"].endswith(":states:::aws-sdk:cloudwatch:disableAlarmActions")
    assert disable["Next"] == "Deploy fallback"
    assert deploy["Resource"].endswith(":states:::aws-sdk:appconfig:startDeployment")
    assert deploy["Retry"][0]["ErrorEquals"] == ["AppConfig.ConflictException"]
    assert deploy["Catch"][0]["Next"] == "Enable guard alarm actions after a failure"
    assert states["Enable guard alarm actions after a failure"]["Next"] == "Fallback failed"
    choice = states["Deployment ended?"]
    assert choice["Default"] == "Count a poll" and states["Count a poll"]["Next"] == "Wait for the deployment"
    assert [c["Next"] for c in choice["Choices"]] == [
        "Enable guard alarm actions",  # COMPLETE
        "Enable guard alarm actions after a failure",  # ROLLED_BACK or REVERTED: the split is still served
        "Enable guard alarm actions after a failure",  # polled FALLBACK_MAX_POLLS times: no endless loop
    ]
    assert choice["Choices"][2] == {"Variable": "$.fallback.polls", "NumericGreaterThanEquals": 60,
                                    "Next": "Enable guard alarm actions after a failure"}
    assert states["Enable guard alarm actions"]["Resource"].endswith(":states:::aws-sdk:cloudwatch:enableAlarmActions")
    assert "End" in states["Enable guard alarm actions"]
    for name in ("Disable guard alarm actions", "Enable guard alarm actions", "Enable guard alarm actions after a failure"):
        assert states[name]["Retry"][0]["ErrorEquals"] == ["States.ALL"], name  # a throttle must not leave them off
    assert disable["Catch"][0]["Next"] == "Enable guard alarm actions after a failure"
    # the description is built before the guards are touched, with or without an alarm in the event
    start = states["Started by an alarm?"]
    assert start["Choices"][0]["Next"] == "Name the alarm" and start["Default"] == "Started by hand"
    assert states["Name the alarm"]["Next"] == states["Started by hand"]["Next"] == "Disable guard alarm actions"
    assert deploy["Parameters"]["Description.$"] == "$.fallback.description"


def test_the_fallback_deploys_the_control_only_version_with_an_immediate_strategy(built):
    _, template = built
    machine = only(template, "AWS::StepFunctions::StateMachine")["Properties"]
    text = json.dumps(machine["DefinitionString"])
    fallback = next(k for k, v in versions(template).items() if "control variant" in v.get("Description", ""))
    assert json.dumps({"Fn::GetAtt": [fallback, "VersionNumber"]}) in text
    immediate = next(k for k, v in resources(template, "AWS::AppConfig::DeploymentStrategy").items()
                     if v["Properties"]["FinalBakeTimeInMinutes"] == 0)
    assert json.dumps({"Ref": immediate}) in text
    assert machine["LoggingConfiguration"]["Level"] == "ALL" and machine["TracingConfiguration"] == {"Enabled": True}


def test_the_fallback_role_may_toggle_only_the_guards_and_deploy_only_to_this_environment(built):
    _, template = built
    policy = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("ExpStateMachineRole"))
    by_action = {s["Action"]: s["Resource"] for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    alarms = sorted(guard_alarms(template))
    for action in ("cloudwatch:DisableAlarmActions", "cloudwatch:EnableAlarmActions"):
        assert sorted(r["Fn::GetAtt"][0] for r in by_action[action]) == alarms
    assert len(by_action["appconfig:StartDeployment"]) == 4
    assert "/deployment/*" in json.dumps(by_action["appconfig:GetDeployment"])
    assert set(by_action) == {"cloudwatch:DisableAlarmActions", "cloudwatch:EnableAlarmActions",
                              "appconfig:StartDeployment", "appconfig:GetDeployment"}


def test_grant_evaluate_reads_this_configuration_and_invokes_every_variants_model_and_prompt_only(built):
    _, template = built
    policy = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("Evaluator"))
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions == {"appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration", "bedrock:InvokeModel",
                       "bedrock:RenderPrompt"}
    text = json.dumps(statements)
    assert '"*"' not in text
    # Converse with a prompt ARN renders the prompt version: RenderPrompt on exactly that version, nothing else
    render = [s for s in statements if "bedrock:RenderPrompt" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])]
    assert [s["Resource"] for s in render] == [f"{PROMPT}:3"]
    assert f"{PROMPT}:3" in text and "inference-profile/us.amazon.nova-lite-v1:0" in text
    assert "inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0" in text
    read = next(s for s in statements if "appconfig:GetLatestConfiguration" in s["Action"])
    assert "/configuration/" in json.dumps(read["Resource"])


def test_grant_evaluate_streaming_adds_the_stream_action_and_environment_variables_name_the_ids():
    stack, experiment = build()
    role = iam.Role(stack, "R", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    experiment.grant_evaluate(role, streaming=True)
    template = Template.from_stack(stack).to_json()
    text = json.dumps(template)
    assert "bedrock:InvokeModelWithResponseStream" in text
    policy = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("R"))
    (prompt_statement,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Resource"] == f"{PROMPT}:3"]
    assert set(prompt_statement["Action"]) == {"bedrock:InvokeModel", "bedrock:RenderPrompt",
                                               "bedrock:InvokeModelWithResponseStream"}
    assert set(experiment.environment_variables()) == {"EXPERIMENT_APPLICATION_ID", "EXPERIMENT_ENVIRONMENT_ID",
                                                       "EXPERIMENT_PROFILE_ID"}
    with pytest.raises(InvalidPropsError, match="streaming=1 is an int"):
        experiment.grant_evaluate(role, streaming=1)


def test_metric_methods_read_what_the_runtime_writes():
    _, experiment = build()
    latency = experiment.metric_latency("managed")
    assert (latency.namespace, latency.metric_name) == (metrics.NAMESPACE, metrics.LATENCY_MS)
    assert latency.dimensions == {"ModelId": HAIKU.model_id, "Experiment": "support", "Variant": "managed"}
    assert experiment.metric_errors("control").metric_name == metrics.CALL_ERRORS
    assert experiment.metric_outcome("control", "escalation").metric_name == metrics.OUTCOMES["escalation"]
    with pytest.raises(ValueError, match="variant='nobody' is not in experiment"):
        experiment.metric_latency("nobody")
    with pytest.raises(ValueError, match="outcome='like' must be one of"):
        experiment.metric_outcome("control", "like")


def test_defaults_options_and_bring_your_own():
    stack = new_stack()
    app = appconfig.Application(stack, "Mine")
    topic = sns.Topic(stack, "Alerts", enforce_ssl=True)
    strategy = appconfig.DeploymentStrategy(stack, "Slow", rollout_strategy=appconfig.RolloutStrategy.CANARY_10_PERCENT_20_MINUTES)
    _, experiment = build(stack, application=app, deployment_strategy=strategy, fallback_on_alarm=False,
                          alarm_actions=[cw_actions.SnsAction(topic)], control="managed", salt="fresh",
                          max_p90_latency=cdk.Duration.seconds(4), max_error_rate_percent=2.5, guard_evaluation_periods=2,
                          guard_min_calls=7)
    template = Template.from_stack(stack).to_json()
    assert len(resources(template, "AWS::AppConfig::Application")) == 1
    assert resources(template, "AWS::Events::Rule") == {} and resources(template, "AWS::StepFunctions::StateMachine") == {}
    assert experiment.fallback_state_machine is None and experiment.fallback_rule is None
    assert experiment.document["control"] == "managed" and experiment.document["salt"] == "fresh"
    alarms = [a["Properties"] for a in guard_alarms(template).values()]
    assert {a["Threshold"] for a in alarms} == {4000, 2.5}
    gates = {next(q for q in a["Metrics"] if "Expression" in q)["Expression"].split(" >= ")[1][:2] for a in alarms}
    assert gates == {"7,"}  # guard_min_calls gates both guards
    assert all(a["AlarmActions"] == [{"Ref": next(iter(resources(template, "AWS::SNS::Topic")))}] for a in alarms)
    assert only(template, "AWS::AppConfig::Deployment")["Properties"]["DeploymentStrategyId"]["Ref"].startswith("Slow")
    _, default = build(experiment_name=None)
    assert default.experiment_name == "Exp" and default.control == "control"


def test_variant_names_that_differ_only_in_punctuation_get_their_own_alarms():
    stack = new_stack()
    build(stack, variants=[variant(name="a-b", share=50), variant(name="ab", share=50)])
    assert len(guard_alarms(Template.from_stack(stack).to_json())) == 4


def test_a_deploy_time_error_rate_limit_is_every_error_guards_threshold():
    """Issue 35.11: this test used to build the experiment and assert nothing."""
    stack = new_stack()
    param = cdk.CfnParameter(stack, "Limit", type="Number")
    _, experiment = build(stack, max_error_rate_percent=param.value_as_number, experiment_name="support")
    template = Template.from_stack(stack).to_json()
    guards = [name for name in experiment.alarms if name.endswith("-errors")]
    assert guards and len(guards) == len(experiment.variants)
    thresholds = [r["Properties"]["Threshold"] for k, r in template["Resources"].items()
                  if r["Type"] == "AWS::CloudWatch::Alarm" and "ErrorRate" in k]
    assert thresholds == [{"Ref": "Limit"}] * len(guards)


# ---- service tiers per variant ------------------------------------------------------------------


def test_a_variant_names_its_service_tier_and_the_handler_sends_it_for_that_variant_only():
    """An A/B test of Priority against Standard on the user's path: the tier is in the deployed document,
    the runtime parses it, and the request built for each variant asks for that variant's tier."""
    stack = new_stack()
    _, experiment = build(stack, variants=[
        ExperimentVariant("standard", NOVA, 50, TextPrompt("Answer: {{question}}")),
        ExperimentVariant("priority", NOVA, 50, TextPrompt("Answer: {{question}}"), service_tier="priority"),
    ])
    main, fallback = (only_version(Template.from_stack(stack).to_json(), control) for control in (False, True))
    assert json.loads(main)["variants"][1]["serviceTier"] == {"type": "priority"}
    assert "serviceTier" not in json.loads(main)["variants"][0]
    parsed = runtime.Experiment.from_config(main)
    assert runtime.Experiment.from_config(fallback).variant("priority").service_tier == "priority"
    asked = {v.name: runtime.build_request(parsed, v, variables={"question": "q"}).get("serviceTier")
             for v in parsed.variants}
    assert asked == {"standard": None, "priority": {"type": "priority"}}
    # the variant's own tier wins over the handler's; the handler's is the tier of a variant naming none
    asked = {v.name: runtime.build_request(parsed, v, variables={"question": "q"}, service_tier="flex")["serviceTier"]
             for v in parsed.variants}
    assert asked == {"standard": {"type": "flex"}, "priority": {"type": "priority"}}
    assert experiment.metric_served_below_requested_tier("priority").metric_name == metrics.SERVED_BELOW_REQUESTED_TIER
    assert experiment.metric_served_below_requested_tier("priority").dimensions["Variant"] == "priority"


def only_version(template: dict, fallback: bool) -> str:
    (content,) = [v["Content"] for v in versions(template).values()
                  if ("control variant" in v.get("Description", "")) == fallback]
    return content


def tier_denies(template: dict) -> list[dict]:
    """The Deny statements of every policy: the tier fences."""
    return [s for s in policy_statements(template) if s["Effect"] == "Deny"]


def test_grant_evaluate_denies_the_tiers_no_variant_of_a_model_asks_for():
    """Priority against Standard on one model, Flex on another: the handler may call NOVA at priority or
    default and HAIKU at flex, no other tier, whatever it sends; the grants themselves are unchanged."""
    stack = new_stack()
    _, experiment = build(stack, variants=[
        ExperimentVariant("standard", NOVA, 40, TextPrompt("q"), service_tier="default"),
        ExperimentVariant("priority", NOVA, 40, TextPrompt("q"), service_tier="priority"),
        ExperimentVariant("flex", HAIKU, 20, ManagedPrompt(PROMPT, "3"), service_tier="flex"),
    ])
    experiment.grant_evaluate(iam.Role(stack, "Evaluator", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")),
                              streaming=True)
    template = Template.from_stack(stack).to_json()
    fences = {json.dumps(s["Resource"]): s for s in tier_denies(template)}
    assert len(fences) == 2
    for model, allowed in ((NOVA, ("priority", "default")), (HAIKU, ("flex",))):
        (fence,) = [s for key, s in fences.items() if model.model_id in key]
        assert fence["Condition"] == {"StringEquals": {SERVICE_TIER_KEY: [
            t for t in ("priority", "default", "flex", "reserved") if t not in allowed]}}
        assert fence["Action"] == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
        assert fence["Resource"] == stack.resolve(model.resource_arns(stack))  # what the grant allows, all of it


def test_grant_evaluate_fences_each_arn_to_every_tier_that_reaches_it():
    """A base model at default and its US profile at flex share the foundation-model ARN: a Deny per model
    denied that ARN default (the profile's fence) and flex (the base model's), so neither arm could be
    served there. Each ARN is fenced to the union of the tiers of the variants that reach it."""
    stack = new_stack()
    base, profile = BedrockModel.from_id("amazon.nova-lite-v1:0"), BedrockModel.from_id("us.amazon.nova-lite-v1:0")
    _, experiment = build(stack, variants=[
        ExperimentVariant("base", base, 50, TextPrompt("q"), service_tier="default"),
        ExperimentVariant("profile", profile, 50, TextPrompt("q"), service_tier="flex"),
    ])
    experiment.grant_evaluate(iam.Role(stack, "Evaluator", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    denied: dict[str, set[str]] = {}
    for fence in tier_denies(Template.from_stack(stack).to_json()):
        for arn in fence["Resource"] if isinstance(fence["Resource"], list) else [fence["Resource"]]:
            denied.setdefault(json.dumps(arn), set()).update(fence["Condition"]["StringEquals"][SERVICE_TIER_KEY])
    reached = {json.dumps(a): set() for a in stack.resolve(profile.resource_arns(stack) + base.resource_arns(stack))}
    for model, tier in ((base, "default"), (profile, "flex")):
        for arn in stack.resolve(model.resource_arns(stack)):
            reached[json.dumps(arn)].add(tier)
    assert denied == {arn: {"priority", "default", "flex", "reserved"} - tiers for arn, tiers in reached.items()}
    shared = [arn for arn, tiers in reached.items() if tiers == {"default", "flex"}]
    assert shared and all(denied[arn] == {"priority", "reserved"} for arn in shared)


def test_grant_evaluate_fences_no_model_a_variant_leaves_to_the_handler_and_a_deploy_time_tier_to_its_value():
    """A variant naming no tier is called at the tier the handler passes: its model keeps every tier (as a
    construct given no tier does). A deploy-time tier's other tiers are not known at synth: its model is
    denied every tier but the parameter's, where a call names one (docs/tiers.md)."""
    stack = new_stack()
    tier = cdk.CfnParameter(stack, "Tier", type="String").value_as_string
    _, experiment = build(stack, variants=[
        ExperimentVariant("standard", NOVA, 40, TextPrompt("q")),
        ExperimentVariant("priority", NOVA, 40, TextPrompt("q"), service_tier="priority"),
        ExperimentVariant("chosen", HAIKU, 20, TextPrompt("q"), service_tier=tier),
    ])
    experiment.grant_evaluate(iam.Role(stack, "Evaluator", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    [fence] = tier_denies(Template.from_stack(stack).to_json())
    assert fence["Condition"] == {"StringNotEquals": {"bedrock:ServiceTier": [{"Ref": "Tier"}]},
                                  "Null": {"bedrock:ServiceTier": "false"}}
    assert all("claude-3-5-haiku" in json.dumps(arn) for arn in fence["Resource"])  # the NOVA ARN stays open


def test_a_tier_fence_over_several_tiers_checks_each_and_denies_only_the_rest():
    stack = new_stack()
    assert NOVA.tier_fence(stack, ["priority", "default", "flex", "reserved"]) is None  # nothing left to deny
    with pytest.raises(InvalidPropsError, match=r"service_tier\[1\]='standard' must be one of 'priority', 'default'"):
        NOVA.tier_fence(stack, ["priority", "standard"])


def test_a_managed_prompt_variant_takes_a_service_tier_too():
    stack = new_stack()
    build(stack, variants=[
        ExperimentVariant("control", NOVA, 50, TextPrompt("q")),
        ExperimentVariant("managed", NOVA, 50, ManagedPrompt(PROMPT, "3"), service_tier="flex"),
    ])
    parsed = runtime.Experiment.from_config(only_version(Template.from_stack(stack).to_json(), False))
    request = runtime.build_request(parsed, parsed.variant("managed"), variables={"question": "q"})
    assert request["modelId"] == f"{PROMPT}:3" and request["serviceTier"] == {"type": "flex"}


def test_a_deploy_time_service_tier_flows_into_the_document_and_the_schema_holds_it_to_botocores_four():
    stack = new_stack()
    tier = cdk.CfnParameter(stack, "Tier", type="String", allowed_values=list(metrics.SERVICE_TIERS))
    build(stack, variants=[variant(name="control"), variant(name="treat", service_tier=tier.value_as_string)])
    content = only_version(Template.from_stack(stack).to_json(), False)
    assert {"Ref": "Tier"} in content["Fn::Join"][1]  # the parameter's value, written into the JSON at deploy
    text = "".join(part if isinstance(part, str) else "priority" for part in content["Fn::Join"][1])
    parsed = runtime.Experiment.from_config(text)  # as the runtime reads it once the parameter resolves
    assert parsed.variant("treat").service_tier == "priority"
    schema = DOCUMENT_SCHEMA["properties"]["variants"]["items"]["properties"]["serviceTier"]
    assert schema["properties"]["type"]["enum"] == list(metrics.SERVICE_TIERS) and schema["required"] == ["type"]


# ---- bad values ---------------------------------------------------------------------------------


def variant(**overrides) -> ExperimentVariant:
    return ExperimentVariant(**{"name": "v", "model": NOVA, "share": 50, "prompt": TextPrompt("q"), **overrides})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TextPrompt(""), "template='' is empty"),
        (lambda: TextPrompt(None), "template is required"),
        (lambda: TextPrompt(3), "template=3 is an int"),
        (lambda: TextPrompt("q", system=""), "system='' is empty"),
        (lambda: ManagedPrompt("arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT12AB:3", "3"), "without ':<version>'"),
        (lambda: ManagedPrompt("not-an-arn", "3"), "is not a prompt ARN"),
        (lambda: ManagedPrompt(PROMPT, "DRAFT"), "version='DRAFT' must be a published version number"),
        (lambda: ManagedPrompt(PROMPT, 3), "version=3 is an int"),
        (lambda: ManagedPrompt(None, "3"), "prompt_arn is required"),
        (lambda: variant(name=""), "name='' is empty"),
        (lambda: variant(name="has space"), "may hold letters, digits"),
        (lambda: variant(name="x" * 65), "at most 64 are allowed"),
        (lambda: variant(model="us.amazon.nova-lite-v1:0"), "model='us.amazon.nova-lite-v1:0' is a str; pass a BedrockModel"),
        (lambda: variant(model=None), "model is required"),
        (lambda: variant(share=None), "share is required"),
        (lambda: variant(share=-1), "share=-1 is below the minimum of 0"),
        (lambda: variant(share=101), "share=101 exceeds the maximum of 100"),
        (lambda: variant(share=math.nan), "share=nan is not a finite number"),
        (lambda: variant(share=math.inf), "share=inf is not a finite number"),
        (lambda: variant(share=True), "share=True is a bool"),
        (lambda: variant(share="50"), "share='50' is a str"),
        (lambda: variant(share=cdk.Token.as_number(cdk.Fn.ref("P"))), "share is a deploy-time token"),
        (lambda: variant(prompt="q"), "prompt='q' is a str; pass a TextPrompt"),
        (lambda: variant(max_tokens=0), "max_tokens=0 is below the minimum of 1"),
        (lambda: variant(max_tokens=1.5), "max_tokens=1.5 is not a whole number"),
        (lambda: variant(temperature=1.5), "temperature=1.5 exceeds the maximum of 1"),
        (lambda: variant(top_p=-0.1), "top_p=-0.1 is below the minimum of 0"),
        (lambda: variant(stop_sequences="END"), "stop_sequences='END' is a str; pass a list"),
        (lambda: variant(stop_sequences=[""]), r"stop_sequences\[0\]='' is empty"),
        (lambda: variant(additional_fields=[1]), "additional_fields=.* is a list"),
        (lambda: variant(prompt=ManagedPrompt(PROMPT, "3"), temperature=0.1), "cannot be set with a ManagedPrompt"),
        # found by a new-user sweep: each was accepted and failed later (at deploy, or in the model's prompt)
        (lambda: TextPrompt("Answer {{the question}}"), r"template has \['\{\{the question\}\}'\], which the runtime would send"),
        (lambda: TextPrompt("Answer {{q-1}}"), r"a placeholder is \{\{name\}\} with letters, digits and '_' only"),
        (lambda: ManagedPrompt(PROMPT, "0"), "version='0' must be a published version number from 1"),
        (lambda: variant(stop_sequences=[f"s{i}" for i in range(2501)]), "stop_sequences has 2501 items; Converse accepts at most 2,500"),
        (lambda: variant(additional_fields={"top_k": math.nan}), "cannot be written into the JSON experiment document"),
        (lambda: variant(additional_fields={"x": object()}), "cannot be written into the JSON experiment document"),
        (lambda: variant(name="fast", service_tier="standard"),
         r"ExperimentVariant 'fast': \[ExperimentVariant\.service_tier\.[a-z-]+\] service_tier='standard' must be one of 'priority', 'default', 'flex', 'reserved'; "
         r"Bedrock spells standard 'default'"),
        (lambda: variant(name="fast", service_tier="Priority"), r"ExperimentVariant 'fast': \[ExperimentVariant\.service_tier\.[a-z-]+\] service_tier='Priority' must be one of"),
        (lambda: variant(name="fast", service_tier=1), r"ExperimentVariant 'fast': \[ExperimentVariant\.service_tier\.[a-z-]+\] service_tier=1 must be one of"),
        (lambda: variant(name="fast", service_tier=cdk.Token.as_number(cdk.Fn.ref("P"))),
         r"ExperimentVariant 'fast': \[ExperimentVariant\.service_tier\.[a-z-]+\] service_tier is a deploy-time number; pass 'priority'"),
    ],
)
def test_bad_variant_and_prompt_values_are_refused(make, message):
    with pytest.raises(InvalidPropsError, match=message):
        make()


def pair(a: float, b: float, names=("control", "treat")) -> list[ExperimentVariant]:
    return [variant(name=names[0], share=a), variant(name=names[1], share=b)]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"variants": pair(90, 20)}, r"shares sum to 110 \(control 90 \+ treat 20\), not 100"),
        ({"variants": pair(40, 50)}, r"shares sum to 90"),
        ({"variants": pair(50, 50, names=("a", "a"))}, r"variant names \['a'\] appear more than once"),
        ({"variants": pair(100, 0)[:1]}, "variants has 1; an experiment needs a control and at least one treatment"),
        ({"variants": []}, "variants has 0"),
        ({"variants": None}, "variants=None is a NoneType; pass a list"),
        ({"variants": variant()}, "variants=.* is an ExperimentVariant; pass a list"),
        ({"variants": ["x", "y"]}, r"variants\[0\]='x' is a str; pass an ExperimentVariant"),
        ({"variants": pair(0, 100)}, "control 'control' has share 0"),
        ({"control": "nobody"}, "control='nobody' is not a variant"),
        ({"control": ""}, "control='' is empty"),
        ({"experiment_name": "has space"}, "experiment_name='has space' may hold letters"),
        ({"experiment_name": ""}, "experiment_name='' is empty"),
        ({"salt": ""}, "salt='' is empty"),
        ({"application": "app"}, "application='app' is a str"),
        ({"deployment_strategy": "AppConfig.AllAtOnce"}, "deployment_strategy='AppConfig.AllAtOnce' is a str"),
        ({"bake_time": cdk.Duration.minutes(1441)}, "bake_time=1 day 1 minute exceeds the maximum of 1 day"),
        ({"bake_time": cdk.Duration.seconds(90)}, "bake_time=1 minute 30 seconds is not whole minutes"),
        ({"bake_time": 10}, "bake_time=10 is an int; pass a cdk.Duration"),
        ({"max_error_rate_percent": 0}, "max_error_rate_percent=0 must be greater than 0"),
        ({"max_error_rate_percent": 101}, "max_error_rate_percent=101 exceeds the maximum of 100"),
        ({"max_error_rate_percent": 100}, "max_error_rate_percent=100 can never be exceeded"),
        ({"variants": [variant(name=f"v{i}", share=100 / 21) for i in range(21)]}, "variants has 21; at most 20"),
        ({"guard_period": cdk.Duration.minutes(59), "guard_evaluation_periods": 25},
         "guard_period x guard_evaluation_periods = 59 minutes x 25 is more than CloudWatch's 1 day"),
        ({"guard_period": cdk.Duration.days(1), "guard_evaluation_periods": 8}, "is more than CloudWatch's 7 days"),
        ({"max_error_rate_percent": math.nan}, "max_error_rate_percent=nan is not a finite number"),
        ({"max_error_rate_percent": None}, "max_error_rate_percent is required"),
        ({"max_p90_latency": cdk.Duration.millis(500)}, "max_p90_latency=500 millis is below the minimum of 1 second"),
        ({"max_p90_latency": cdk.Duration.minutes(16)}, "max_p90_latency=16 minutes exceeds the maximum"),
        ({"guard_min_calls": 0}, "guard_min_calls=0 is below the minimum of 1"),
        ({"guard_min_calls": 2.5}, "guard_min_calls=2.5 is not a whole number"),
        ({"guard_period": cdk.Duration.seconds(30)}, "guard_period=30 seconds is below the minimum of 1 minute"),
        ({"guard_period": cdk.Duration.seconds(90)}, r"guard_period=1 minute 30 seconds \(90 s\) must be whole minutes"),
        # to_seconds() raised jsii's "cannot be converted into a whole number" on a fraction of a second
        ({"guard_period": cdk.Duration.millis(61500)},
         r"guard_period=1 minute 1 second \(61.5 s\) must be whole minutes: CloudWatch alarm periods above 30 seconds"),
        ({"guard_evaluation_periods": 0}, "guard_evaluation_periods=0 is below the minimum of 1"),
        ({"guard_evaluation_periods": math.inf}, "guard_evaluation_periods=inf is not a finite number"),
        ({"fallback_on_alarm": "yes"}, "fallback_on_alarm='yes' is a str"),
        ({"alarm_actions": ["arn:aws:sns:us-east-1:1:t"]}, r"alarm_actions\[0\]=.* is a str; pass an alarm action"),
        ({"encryption_key": "alias/x"}, "encryption_key='alias/x' is a str"),
        ({"log_retention": 30}, "log_retention=30 is an int"),
    ],
)
def test_bad_props_are_refused_with_the_rule_and_fix(props, message):
    with pytest.raises(InvalidPropsError, match=message):
        build(**props)


def test_the_logs_key_serves_the_guard_wait_even_without_a_fallback():
    stack = new_stack()
    key = kms.Key(stack, "K")
    _, experiment = build(stack, fallback_on_alarm=False, encryption_key=key)
    assert experiment.logs_key is key
    groups = list(resources(Template.from_stack(stack).to_json(), "AWS::Logs::LogGroup").values())
    assert [g["Properties"]["KmsKeyId"]["Fn::GetAtt"][0] for g in groups] == [stack.get_logical_id(key.node.default_child)]


def test_props_that_would_be_ignored_are_refused():
    stack = new_stack()
    strategy = appconfig.DeploymentStrategy.from_deployment_strategy_id(stack, "S", appconfig.DeploymentStrategyId.from_string("abc"))
    with pytest.raises(InvalidPropsError, match="bake_time configures the new deployment strategy"):
        build(stack, deployment_strategy=strategy, bake_time=cdk.Duration.minutes(10))


def test_several_problems_are_reported_at_once():
    with pytest.raises(InvalidPropsError) as error:
        build(variants=pair(90, 20), max_error_rate_percent=-1, guard_evaluation_periods=0)
    assert len(error.value.problems) == 3


def test_template_placeholders_that_the_runtime_fills_are_accepted():
    assert TextPrompt("Answer {{question}} for {{ user_name }} in {{lang2}}").template.startswith("Answer")
    assert TextPrompt("JSON like {\"a\": 1} is not a placeholder").template


# ---- more than AppConfig's 5 monitors ---------------------------------------------------------


def three_variants() -> list[ExperimentVariant]:
    return [variant(name="control", share=80), variant(name="b", share=10), variant(name="c", share=10)]


def test_up_to_five_guard_alarms_each_is_a_monitor_beyond_that_one_composite_alarm_is():
    """AppConfig's CreateEnvironment takes at most 5 monitors: three variants (6 guards) failed at deploy."""
    stack, experiment = build(variants=three_variants())
    template = Template.from_stack(stack).to_json()
    guards = set(guard_alarms(template))
    assert len(guards) == 6
    (composite_id, composite), = resources(template, "AWS::CloudWatch::CompositeAlarm").items()
    rule = json.dumps(composite["Properties"]["AlarmRule"])
    assert all(guard in rule for guard in guards) and " OR " in rule
    monitors = only(template, "AWS::AppConfig::Environment")["Properties"]["Monitors"]
    assert [m["AlarmArn"]["Fn::GetAtt"][0] for m in monitors] == [composite_id]
    assert experiment.monitored_alarms == [experiment.any_guard_alarm]
    # the fallback disables the composite's actions too (AppConfig skips a monitor whose actions are
    # disabled), while the EventBridge rule still starts it from any guard
    policy = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("ExpStateMachineRole"))
    by_action = {s["Action"]: s["Resource"] for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert {r["Fn::GetAtt"][0] for r in by_action["cloudwatch:DisableAlarmActions"]} == guards | {composite_id}
    pattern = only(template, "AWS::Events::Rule")["Properties"]["EventPattern"]
    assert {r["Fn::GetAtt"][0] for r in pattern["resources"]} == guards
    states = all_states(definition(only(template, "AWS::StepFunctions::StateMachine")))
    assert len(states["Disable guard alarm actions"]["Parameters"]["AlarmNames"]) == 7  # 6 guards and the composite
    assert len(states["Enable guard alarm actions"]["Parameters"]["AlarmNames"]) == 7
    # the first deployment waits for the composite's first evaluation too
    (wait,) = resources(template, "Custom::GenaiPacerGuardsEvaluated").values()
    assert {n["Ref"] for n in wait["Properties"]["AlarmNames"]} == guards | {composite_id}


def test_two_variants_keep_their_four_guards_as_monitors(built):
    experiment, template = built
    assert experiment.any_guard_alarm is None and resources(template, "AWS::CloudWatch::CompositeAlarm") == {}
    assert len(only(template, "AWS::AppConfig::Environment")["Properties"]["Monitors"]) == 4


def test_a_failed_status_read_re_enables_the_guards(built):
    """Without a catch, a failed GetDeployment left the guards' actions disabled: AppConfig would never
    roll a split change back again."""
    _, template = built
    states = all_states(definition(only(template, "AWS::StepFunctions::StateMachine")))
    status = states["Read deployment"]
    assert status["Retry"][0]["ErrorEquals"] == ["States.ALL"] and status["Retry"][0]["MaxAttempts"] == 4
    assert status["Catch"][0]["Next"] == "Enable guard alarm actions after a failure"


def test_a_guard_window_longer_than_the_bake_time_is_warned():
    stack, _ = build(bake_time=cdk.Duration.minutes(2))
    warnings = [m for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
                if "genai-pacer:experiment-guard-slower-than-bake" in json.dumps(m.entry.data)]
    assert len(warnings) == 1 and "bake_time is 2 minutes" in json.dumps(warnings[0].entry.data)
    stack, _ = build()  # 10 minutes against 3 x 1 minute
    assert not [m for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
                if "genai-pacer:experiment-guard-slower-than-bake" in json.dumps(m.entry.data)]


def test_a_treatment_with_no_traffic_is_warned_naming_it():
    """Trial: a 0% variant was accepted silently; no user reaches it, so it measures nothing."""
    parked = [*variants()[:1], dataclasses.replace(variants()[1], share=0)]
    parked[0] = dataclasses.replace(parked[0], share=100)
    stack, _ = build(variants=parked)
    warnings = [json.dumps(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
                if "genai-pacer:experiment-variant-without-traffic" in json.dumps(m.entry.data)]
    assert len(warnings) == 1 and "variant 'managed' has share 0: no user is assigned to it" in warnings[0]
    stack, _ = build()
    assert not [m for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
                if "genai-pacer:experiment-variant-without-traffic" in json.dumps(m.entry.data)]


# ---- add_to_function: what a handler needs, in one call ------------------------------------------


def handler(stack: cdk.Stack, architecture=lambda_.Architecture.ARM_64) -> lambda_.Function:
    return lambda_.Function(stack, "Handler", runtime=lambda_.Runtime.PYTHON_3_14, architecture=architecture,
                            handler="index.handler", code=lambda_.Code.from_inline("def handler(e, c): return e"))


def handlers(template: dict) -> dict:
    """The template's functions but the experiment's own guard wait."""
    return {k: v for k, v in resources(template, "AWS::Lambda::Function").items() if not k.startswith("ExpGuardWait")}


def test_add_to_function_in_an_environment_agnostic_stack_maps_the_extension_layer_per_region():
    """Application.get_lambda_layer_version_arn(stack.region) fails in such a stack ("Unable to
    serialize value as string"): the docstring's advice did not work for a stack without a Region."""
    stack = cdk.Stack(cdk.App(), "Agnostic")
    _, experiment = build(stack)
    experiment.add_to_function(handler(stack))
    x86 = lambda_.Function(stack, "X86", runtime=lambda_.Runtime.PYTHON_3_14, handler="index.handler",
                           code=lambda_.Code.from_inline("def handler(e, c): return e"))
    experiment.add_to_function(x86)
    template = Template.from_stack(stack).to_json()
    (mapping,) = template["Mappings"].values()
    assert mapping["us-east-1"]["arm64"].startswith("arn:aws:lambda:us-east-1:") and "Arm64" in mapping["us-east-1"]["arm64"]
    assert "Arm64" not in mapping["us-east-1"]["x8664"]
    functions = {k: v["Properties"] for k, v in handlers(template).items()}
    layers = {k[:3]: p["Layers"][0]["Fn::FindInMap"][2] for k, p in functions.items()}
    assert layers == {"Han": "arm64", "X86": "x8664"}
    for props in functions.values():
        assert set(props["Environment"]["Variables"]) == set(experiment.environment_variables())


def test_add_to_function_with_a_concrete_region_uses_its_layer_and_grants_exactly_read_and_invoke():
    stack, experiment = build()
    function = handler(stack)
    experiment.add_to_function(function)
    template = Template.from_stack(stack).to_json()
    (props,) = [v["Properties"] for v in handlers(template).values()]
    assert props["Layers"] == [appconfig.Application.get_lambda_layer_version_arn("us-east-1", platform=appconfig.Platform.ARM_64)]
    assert "Mappings" not in template
    policy = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("HandlerServiceRole"))
    actions = {a for s in policy["Properties"]["PolicyDocument"]["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions == {"appconfig:StartConfigurationSession", "appconfig:GetLatestConfiguration", "bedrock:InvokeModel",
                       "bedrock:RenderPrompt"}


def test_add_to_function_twice_adds_nothing_twice():
    """A second call failed with "There is already a Construct with name 'AppConfigExtension...'"."""

    def wired(*streaming: bool) -> dict:
        stack, experiment = build()  # a stack per case: a synthesized app caches its first template
        function = handler(stack)
        for flag in streaming:
            experiment.add_to_function(function, streaming=flag)
        return Template.from_stack(stack).to_json()

    once = wired(False)
    assert wired(False, False) == once  # one layer, the same variables, the same grant
    (props,) = [v["Properties"] for v in handlers(once).values()]
    assert len(props["Layers"]) == 1
    # a later streaming=True is not ignored: the function may do what streaming=True alone grants, no more
    def granted(template: dict) -> set[tuple[str, str]]:
        policy = next(p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("HandlerServiceRole"))
        return {(action, json.dumps(resource, sort_keys=True))
                for s in policy["Properties"]["PolicyDocument"]["Statement"]
                for action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
                for resource in ([s["Resource"]] if not isinstance(s["Resource"], list) else s["Resource"])}

    assert granted(wired(False, True)) == granted(wired(True)) == granted(wired(True, False)) > granted(once)
    assert {a for a, _ in granted(wired(False, True)) - granted(once)} == {"bedrock:InvokeModelWithResponseStream"}
    (props,) = [v["Properties"] for v in handlers(wired(False, True)).values()]
    assert len(props["Layers"]) == 1


def test_add_to_function_refuses_what_it_cannot_wire():
    stack, experiment = build()
    with pytest.raises(InvalidPropsError, match="function='fn' is a str; pass a lambda_.Function"):
        experiment.add_to_function("fn")
    with pytest.raises(InvalidPropsError, match="streaming='yes' is a str"):
        experiment.add_to_function(handler(stack), streaming="yes")
    nowhere = cdk.Stack(cdk.App(), "Nowhere", env=cdk.Environment(account="111122223333", region="xx-nowhere-1"))
    _, elsewhere = build(nowhere)
    with pytest.raises(InvalidPropsError, match="region='xx-nowhere-1' has no AppConfig Lambda extension layer"):
        elsewhere.add_to_function(handler(nowhere))


@pytest.mark.parametrize(("period", "periods"), [(cdk.Duration.minutes(59), 24), (cdk.Duration.hours(1), 100)])
def test_the_longest_guard_windows_cloudwatch_accepts_are_accepted(period, periods):
    """The limits' edges (1 day under an hour's period, 7 days from an hour) reach the guards unchanged."""
    stack, _ = build(guard_period=period, guard_evaluation_periods=periods, bake_time=cdk.Duration.days(1))
    guards = [r["Properties"] for k, r in Template.from_stack(stack).to_json()["Resources"].items()
              if r["Type"] == "AWS::CloudWatch::Alarm" and ("ErrorRate" in k or "P90Latency" in k)]
    assert guards and all(g["EvaluationPeriods"] == periods for g in guards)
    assert {q["MetricStat"]["Period"] for g in guards for q in g["Metrics"] if "MetricStat" in q} == {period.to_seconds()}


def test_twenty_variants_of_five_percent_each_get_their_guards():
    _, experiment = build(variants=[variant(name=f"v{i}", share=5) for i in range(20)])
    assert len([name for name in experiment.alarms if name.endswith(("-errors", "-p90"))]) == 40


# ---- cdk-nag: the fallback's one wildcard is acknowledged, nothing broader ---------------------------


def test_nag_acknowledges_the_fallbacks_deployment_wildcard_only():
    """The acknowledgment names exactly the fallback's GetDeployment resource (through _nag's flattening):
    the stack is nag-clean, and a wildcard the user adds to the same role still fails."""
    def synth(extra_wildcard: bool) -> list[str]:
        outdir = Path(tempfile.mkdtemp())
        app = cdk.App(outdir=str(outdir))
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        stack = cdk.Stack(app, "Nag", env=cdk.Environment(account="111122223333", region="us-east-1"))
        experiment = PromptExperiment(stack, "Exp", variants=variants(), experiment_name="support")
        (finding,) = experiment.fallback_acknowledgments
        assert finding.startswith("AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:appconfig:us-east-1:111122223333:"
                                  "application/<ExpApplication") and finding.endswith("/deployment/*]")
        if extra_wildcard:
            experiment.fallback_state_machine.role.add_to_principal_policy(iam.PolicyStatement(
                actions=["appconfig:GetDeployment"],
                resources=["arn:aws:appconfig:us-east-1:111122223333:application/other/environment/env/deployment/*"]))
        with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
            app.synth()
        return nag_violations(outdir)

    assert synth(extra_wildcard=False) == []
    findings = synth(extra_wildcard=True)
    assert [f for f in findings if f.startswith("AwsSolutions-IAM5")] and all(
        "StateMachine/Role/DefaultPolicy" in f for f in findings), findings


# ---- the first deployment waits for the guards' first evaluation (issue 21.5) ------------------


def test_the_stacks_deployment_waits_for_a_custom_resource_listing_every_guard(built):
    experiment, template = built
    waits = resources(template, "Custom::GenaiPacerGuardsEvaluated")
    assert len(waits) == 1
    (wait_id, wait), = waits.items()
    names = wait["Properties"]["AlarmNames"]
    assert sorted(n["Ref"] for n in names) == sorted(guard_alarms(template))
    deployment = only(template, "AWS::AppConfig::Deployment")
    assert wait_id in deployment["DependsOn"]
    # the wait answers in time: its function's timeout < CloudFormation's wait for it
    function = template["Resources"][wait["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]["Properties"]
    assert function["Timeout"] < int(wait["Properties"]["ServiceTimeout"]) <= 3600
    assert function["Environment"]["Variables"]["WAIT_SECONDS"] == "300"
    # a split change with new guards (a new variant) changes the properties, so it waits again
    stack, other = build(variants=[variants()[0], ExperimentVariant("t2", NOVA, 10, TextPrompt("q"))])
    (changed,) = resources(Template.from_stack(stack).to_json(), "Custom::GenaiPacerGuardsEvaluated").values()
    assert sorted(n["Ref"] for n in changed["Properties"]["AlarmNames"]) != sorted(n["Ref"] for n in names)


def test_the_guard_waits_role_may_only_describe_alarms_and_write_its_own_logs(built):
    _, template = built
    policies = [p["Properties"] for k, p in resources(template, "AWS::IAM::Policy").items() if "GuardWait" in k]
    statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    actions = sorted(a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    assert actions == ["cloudwatch:DescribeAlarms", "logs:CreateLogStream", "logs:PutLogEvents"]


# ---- trust policies (issue 27) --------------------------------------------------------------------


def test_eventbridge_may_assume_the_fallback_role_only_for_this_rule_in_this_account(built):
    _, template = built
    rule = only(template, "AWS::Events::Rule")["Properties"]
    (target,) = rule["Targets"]
    role_id = target["RoleArn"]["Fn::GetAtt"][0]
    trust = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    uuid = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    (experiment_addr,) = {rule["Name"]["Fn::Join"][1][2]}
    assert rule["Name"] == {"Fn::Join": ["-", ["gp-fallback", uuid, experiment_addr]]}
    assert trust == [{
        "Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
        "Condition": {
            "StringEquals": {"aws:SourceAccount": "111122223333"},
            "ArnEquals": {"aws:SourceArn": {"Fn::Join": ["", [
                "arn:", {"Ref": "AWS::Partition"}, ":events:us-east-1:111122223333:rule/", rule["Name"]]]}},
        },
    }]
    # the role may start this workflow only
    (policy,) = [p["Properties"] for p in resources(template, "AWS::IAM::Policy").values() if p["Properties"]["Roles"] == [{"Ref": role_id}]]
    assert policy["PolicyDocument"]["Statement"] == [{"Action": "states:StartExecution", "Effect": "Allow",
                                                      "Resource": {"Ref": next(iter(resources(template, "AWS::StepFunctions::StateMachine")))}}]
    # no other role trusts events.amazonaws.com
    events_roles = [k for k, r in resources(template, "AWS::IAM::Role").items()
                    if "events.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    assert events_roles == [role_id]


def test_the_appconfig_monitor_role_reads_alarms_only_and_its_trust_is_documented_unconditioned(built):
    """No primary source says what AppConfig sets in aws:SourceArn / aws:SourceAccount: the trust stays as
    AppConfig's user guide shows it, and the role can only read alarm states."""
    _, template = built
    environment = only(template, "AWS::AppConfig::Environment")["Properties"]
    role_ids = {m["AlarmRoleArn"]["Fn::GetAtt"][0] for m in environment["Monitors"]}
    (role,) = [template["Resources"][r]["Properties"] for r in role_ids]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "appconfig.amazonaws.com"}}]
    assert [s["Action"] for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]] == ["cloudwatch:DescribeAlarms"]


def test_two_experiments_of_a_stack_name_their_fallback_rules_apart_and_each_role_trusts_its_own():
    stack, first = build()
    second = PromptExperiment(stack, "Other", variants=variants())
    template = Template.from_stack(stack).to_json()
    names = [r["Properties"]["Name"] for r in resources(template, "AWS::Events::Rule").values()]
    assert len(names) == 2 and names[0] != names[1]
    for experiment in (first, second):
        rule = stack.resolve(experiment.fallback_rule.node.default_child.name)
        trust = stack.resolve(experiment.fallback_events_role.assume_role_policy.to_json())
        assert trust["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::Join"][1][-1] == rule


def test_a_fallback_that_cannot_start_or_fails_raises_its_own_alarm_which_is_no_guard(built):
    """A wrong trust condition or a throttled start would otherwise leave the split served unseen."""
    experiment, template = built
    (alarm_id, alarm), = [(k, a["Properties"]) for k, a in resources(template, "AWS::CloudWatch::Alarm").items()
                          if "FallbackFailed" in k]
    assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["TreatMissingData"]) == (0, "GreaterThanThreshold", "notBreaching")
    queries = {q["Id"]: q for q in alarm["Metrics"]}
    assert next(q["Expression"] for q in queries.values() if "Expression" in q) == "FILL(starts, 0) + FILL(runs, 0)"
    starts = queries["starts"]["MetricStat"]["Metric"]
    rule_id = next(iter(resources(template, "AWS::Events::Rule")))
    assert (starts["Namespace"], starts["MetricName"]) == ("AWS/Events", "FailedInvocations")
    assert starts["Dimensions"] == [{"Name": "RuleName", "Value": {"Ref": rule_id}}]
    assert queries["runs"]["MetricStat"]["Metric"]["MetricName"] == "ExecutionsFailed"
    # not a monitor (it would roll back every split change while a fallback failure is unresolved), not toggled
    monitors = only(template, "AWS::AppConfig::Environment")["Properties"]["Monitors"]
    assert alarm_id not in json.dumps(monitors)
    assert alarm_id not in json.dumps(only(template, "AWS::StepFunctions::StateMachine"))
    assert experiment.fallback_failed_alarm is not None and experiment.fallback_failed_alarm not in experiment.alarms.values()
