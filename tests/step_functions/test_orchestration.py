"""BedrockRetry, requests, BoundedMap, BoundedDistributedMap and ParallelPrompts: every prop path,
default and bad value, read from the synthesized template."""

from __future__ import annotations

import contextlib
import json
import math
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk.assertions import Annotations, Match
from conftest import nag_findings
from genai_pacer import (
    DEFAULT_RETRY_ERRORS,
    BedrockModel,
    BedrockRetry,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    InvalidPropsError,
    NativeRequest,
    ParallelPrompts,
    QueuedInference,
    StateMachineOptions,
    TaskOptions,
    planning,
)
from genai_pacer._internal.nag import flatten_reference
from helpers import (
    all_states,
    definition,
    definition_with_refs,
    kms_statements,
    new_stack,
    only,
    policy_statements,
    resources,
    template_of,
)

PROFILE = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
REQUEST = ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=400)
NAN, INF = math.nan, math.inf


def a_token() -> float:
    return cdk.Token.as_number(cdk.Fn.ref("SomeParameter"))


def bedrock_resources(template) -> list:
    found = []
    for statement in policy_statements(template):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(a.startswith("bedrock:") for a in actions):
            found.extend(statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]])
    return found


def arn_text(arn) -> str:
    """An Fn::Join ARN as text with pseudo parameters named."""
    if isinstance(arn, str):
        return arn
    return "".join(p if isinstance(p, str) else "<" + p.get("Ref", "?") + ">" for p in arn["Fn::Join"][1])


def machine_definition(template: dict) -> dict:
    return definition(only(template, "AWS::StepFunctions::StateMachine"))


@pytest.fixture(scope="module")
def inline_map():
    stack = new_stack()
    construct = BoundedMap(stack, "Map", max_concurrency=8, model=PROFILE, request=REQUEST)
    return construct, template_of(stack).to_json()


# --- BedrockRetry -----------------------------------------------------------------------------------


def test_retry_defaults_on_every_model_task(inline_map):
    _, template = inline_map
    task = all_states(machine_definition(template))["InvokeModel"]
    assert task["Retry"] == [
        {
            "ErrorEquals": list(DEFAULT_RETRY_ERRORS),
            "IntervalSeconds": 2,
            "MaxAttempts": 6,
            "BackoffRate": 2,
            "MaxDelaySeconds": 30,
            "JitterStrategy": "FULL",
        }
    ]
    assert "BedrockRuntime.ThrottlingException" in DEFAULT_RETRY_ERRORS  # the Converse integration's name


def test_retry_is_overridable_and_one_error_name_is_one_name():
    stack = new_stack()
    retry = BedrockRetry(
        errors="BedrockRuntime.ThrottlingException",
        interval=cdk.Duration.seconds(1),
        backoff_rate=3,
        max_retries=9,
        max_delay=cdk.Duration.seconds(20),
    )
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST, retry=retry)
    (entry,) = all_states(machine_definition(template_of(stack).to_json()))["InvokeModel"]["Retry"]
    assert entry == {
        "ErrorEquals": ["BedrockRuntime.ThrottlingException"],
        "IntervalSeconds": 1,
        "MaxAttempts": 9,
        "BackoffRate": 3,
        "MaxDelaySeconds": 20,
        "JitterStrategy": "FULL",
    }


def test_deploy_time_retries_and_backoff_reach_the_model_tasks_retrier():
    """Issue 35.11: this test used to build a BedrockRetry and assert nothing."""
    stack = new_stack()
    retries = cdk.CfnParameter(stack, "Retries", type="Number").value_as_number
    backoff = cdk.CfnParameter(stack, "Backoff", type="Number").value_as_number
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST,
               retry=BedrockRetry(max_retries=retries, backoff_rate=backoff))
    template = template_of(stack).to_json()
    retriers = all_states(definition_with_refs(template))["InvokeModel"]["Retry"]
    (retrier,) = [r for r in retriers if "States.ALL" not in r["ErrorEquals"]]
    assert (retrier["MaxAttempts"], retrier["BackoffRate"]) == ("<<number Retries>>", "<<number Backoff>>"), retrier
    assert "e+2" not in json.dumps(template["Resources"])


def test_a_retry_no_converse_error_can_match_is_refused_naming_the_real_names():
    """Issue 35.6: the Converse SDK integration names its errors BedrockRuntime.*, so a Retry on
    Bedrock.ThrottlingException alone retried nothing, silently, and every throttle failed the item."""
    retry = BedrockRetry(errors=["Bedrock.ThrottlingException"])
    for build in (
        lambda stack: BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST, retry=retry),
        lambda stack: ParallelPrompts(stack, "P", model=NOVA, prompts={"A": REQUEST}, retry=retry),
    ):
        with pytest.raises(InvalidPropsError) as error:
            build(new_stack())
        text = str(error.value)
        assert "retry.errors=['Bedrock.ThrottlingException'] can never match" in text
        assert "raises BedrockRuntime.AccessDeniedException" in text and "BedrockRuntime.ValidationException" in text
        assert "list BedrockRuntime.ThrottlingException, or keep DEFAULT_RETRY_ERRORS" in text


def test_a_retry_name_a_converse_task_never_raises_is_warned_when_others_match():
    """A list shared with an optimized InvokeModel task (whose prefix is unconfirmed) may carry Bedrock.
    names: warned, not refused, and only when their BedrockRuntime. twin is missing."""
    stack = new_stack()
    retry = BedrockRetry(errors=["Bedrock.ThrottlingException", "BedrockRuntime.ServiceUnavailableException"])
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST, retry=retry)
    Annotations.from_stack(stack).has_warning("/Test/Map", Match.string_like_regexp(
        "retry.errors names Bedrock.ThrottlingException, which a Converse task never raises.*"
        "add BedrockRuntime.ThrottlingException"))
    quiet = new_stack()
    for errors in (list(DEFAULT_RETRY_ERRORS), ["Bedrock.ThrottlingException", "States.TaskFailed"], ["States.Timeout"]):
        BoundedMap(quiet, f"Map{len(errors)}", max_concurrency=4, model=NOVA, request=REQUEST,
                   retry=BedrockRetry(errors=errors))
    assert not Annotations.from_stack(quiet).find_warning("*", Match.string_like_regexp("never raises"))


def test_a_native_request_keeps_the_unconfirmed_prefix():
    """The optimized bedrock:invokeModel integration's prefix is unconfirmed: Bedrock. names are its guess."""
    stack = new_stack()
    native = NativeRequest(body={"messages": [], "max_tokens": 5})
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=native,
               retry=BedrockRetry(errors=["Bedrock.ThrottlingException"]))
    assert not Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("never"))


def test_a_max_tokens_above_every_documented_model_limit_is_warned():
    """Issue 35.5: max_tokens=10**9 passed silently; every call would be refused by the model. The limit
    is per model and grows, so it is a warning, not a refusal; at the largest documented limit, none."""
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=ConverseRequest(prompt="p", max_tokens=10**9))
    Annotations.from_stack(stack).has_warning("/Test/Map", Match.string_like_regexp(
        "max_tokens=1,000,000,000 is above 128,000, the largest output limit any Bedrock model documents"))
    quiet = new_stack()
    BoundedMap(quiet, "Map", max_concurrency=4, model=NOVA, request=ConverseRequest(prompt="p", max_tokens=128_000))
    assert not Annotations.from_stack(quiet).find_warning("*", Match.string_like_regexp("largest output limit"))


def test_an_inline_map_takes_as_many_expected_items_as_its_state_can_hold():
    BoundedMap(new_stack(), "Map", max_concurrency=4, model=NOVA, request=REQUEST, expected_items=131_072)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(errors=()), "errors=\\(\\) retries nothing"),
        (dict(errors=[1]), r"errors\[0\]=1 is an int; pass a string"),
        (dict(errors=[""]), r"errors\[0\]='' is empty"),
        (dict(errors=None), "errors=None is a NoneType; pass a list"),
        (dict(max_retries=0), "max_retries=0 is below the minimum of 1.*needs retries"),
        (dict(max_retries=2.5), "max_retries=2.5 is not a whole number"),
        (dict(max_retries=True), "max_retries=True is a bool"),
        (dict(max_retries=NAN), "max_retries=nan is not a finite number"),
        (dict(max_retries=INF), "max_retries=inf is not a finite number"),
        (dict(max_retries=100_000_000), "max_retries=100000000 exceeds the maximum of 99,999,999"),
        (dict(max_retries="6"), "max_retries='6' is a str"),
        (dict(backoff_rate=0.5), "backoff_rate=0.5 is below the minimum of 1.*shrinks the wait"),
        (dict(backoff_rate=NAN), "backoff_rate=nan is not a finite number"),
        (dict(interval=cdk.Duration.seconds(0)), "interval=0 seconds is below the minimum of 1 second"),
        (dict(interval=cdk.Duration.millis(1500)), "interval=1 second 500 millis is not whole seconds"),
        (dict(interval=2), r"interval=2 is an int; pass a cdk.Duration such as cdk.Duration.seconds\(2\)"),
        (dict(max_delay=cdk.Duration.days(400)), "max_delay=400 days exceeds the maximum of 366 days"),
        (dict(interval=cdk.Duration.seconds(10), max_delay=cdk.Duration.seconds(5)), "max_delay=5 seconds is shorter than interval=10 seconds"),
    ],
)
def test_retry_rejects_settings_that_defeat_it(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        BedrockRetry(**kwargs)


def test_retry_reports_every_problem_at_once():
    with pytest.raises(InvalidPropsError) as caught:
        BedrockRetry(max_retries=0, backoff_rate=0.5, interval=cdk.Duration.seconds(0))
    assert len(caught.value.problems) == 3
    assert str(caught.value).startswith("BedrockRetry: 3 problems:")


# --- requests ---------------------------------------------------------------------------------------


def test_converse_request_parameters_are_pascal_case_with_sampling_in_inference_config():
    request = ConverseRequest(
        prompt="hi",
        system="be brief",
        max_tokens=300,
        temperature=0.2,
        top_p=0.9,
        stop_sequences=["END"],
        additional_fields={"top_k": 40},
        latency="optimized",
    )
    assert request.parameters("amazon.nova-lite-v1:0") == {
        "ModelId": "amazon.nova-lite-v1:0",
        "Messages": [{"Role": "user", "Content": [{"Text": "hi"}]}],
        "System": [{"Text": "be brief"}],
        "InferenceConfig": {"MaxTokens": 300, "Temperature": 0.2, "TopP": 0.9, "StopSequences": ["END"]},
        "AdditionalModelRequestFields": {"top_k": 40},
        "PerformanceConfig": {"Latency": "optimized"},
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_tokens=400), "exactly one of prompt"),
        (dict(prompt="a", messages=[{"Role": "user", "Content": []}], max_tokens=4), "exactly one of prompt"),
        (dict(prompt="", max_tokens=4), "prompt='' is empty"),
        (dict(prompt=5, max_tokens=4), "prompt=5 is an int; pass a string"),
        (dict(messages=[{"role": "user", "content": []}], max_tokens=4), r"messages\[0\] has keys \['content', 'role'\].*PascalCase"),
        (dict(messages=["hi"], max_tokens=4), r"messages\[0\]='hi' is a str"),
        (dict(messages=[], max_tokens=4), "messages is empty"),
        (dict(prompt="a"), "max_tokens is required.*reserves the model's maximum"),
        (dict(prompt="a", max_tokens=0), "max_tokens=0 is below the minimum of 1"),
        (dict(prompt="a", max_tokens=2.5), "max_tokens=2.5 is not a whole number"),
        (dict(prompt="a", max_tokens=True), "max_tokens=True is a bool"),
        (dict(prompt="a", max_tokens=NAN), "max_tokens=nan is not a finite number"),
        (dict(prompt="a", max_tokens=4, temperature=2), "temperature=2 exceeds the maximum of 1"),
        (dict(prompt="a", max_tokens=4, top_p=-1), "top_p=-1 is below the minimum of 0"),
        (dict(prompt="a", max_tokens=4, stop_sequences="END"), "stop_sequences='END' is a str; pass a list"),
        (dict(prompt="a", max_tokens=4, additional_fields=[1]), r"additional_fields=\[1\] is a list"),
        (dict(prompt="a", max_tokens=4, latency="fast"), "latency='fast' must be one of 'standard', 'optimized'"),
        (dict(prompt="a", max_tokens=4, system=""), "system='' is empty"),
    ],
)
def test_converse_request_rejects_bad_fields(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        ConverseRequest(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(body={}), "body=\\{\\} is empty"),
        (dict(body=["x"]), r"body=\['x'\] is a list"),
        (dict(body={"a": 1}, max_tokens=0), "max_tokens=0 is below the minimum of 1"),
    ],
)
def test_native_request_rejects_bad_fields(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        NativeRequest(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(result_path="answer"), "result_path='answer' is not a reference path"),
        (dict(result_selector=["x"]), r"result_selector=\['x'\] is a list"),
        (dict(timeout=cdk.Duration.seconds(0)), "timeout=0 seconds is below the minimum"),
        (dict(heartbeat=30), "heartbeat=30 is an int; pass a cdk.Duration"),
        (dict(timeout=cdk.Duration.seconds(10), heartbeat=cdk.Duration.minutes(1)),
         "heartbeat=1 minute is not shorter than timeout=10 seconds"),
    ],
)
def test_task_options_reject_bad_fields(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        TaskOptions(**kwargs)


# --- BoundedMap (inline) -----------------------------------------------------------------------------


def test_inline_map_calls_converse_and_narrows_each_result(inline_map):
    _, template = inline_map
    asl = machine_definition(template)
    state = asl["States"]["Map"]
    assert (state["MaxConcurrency"], state["ItemsPath"]) == (8, "$.items")
    states = all_states(asl)
    task = states["InvokeModel"]
    assert task["Resource"].endswith(":states:::aws-sdk:bedrockruntime:converse")
    assert task["Parameters"] == {
        "ModelId": "us.anthropic.claude-3-5-haiku-20241022-v1:0",
        "Messages": [{"Role": "user", "Content": [{"Text.$": "$.prompt"}]}],
        "InferenceConfig": {"MaxTokens": 400},
    }
    # text (the first *text* block: a reasoning block can come first), stop reason and usage only
    assert task["ResultSelector"] == {
        "texts.$": "$.Output.Message.Content[?(@.Text)].Text",
        "stopReason.$": "$.StopReason",
        "usage": {"inputTokens.$": "$.Usage.InputTokens", "outputTokens.$": "$.Usage.OutputTokens"},
    }
    assert states["InvokeModel answer"]["Parameters"] == {
        "text.$": "States.ArrayGetItem($.texts, 0)",
        "stopReason.$": "$.stopReason",
        "usage.$": "$.usage",
    }
    assert states["InvokeModel no text"]["Parameters"]["text"] == ""
    assert states["InvokeModel has text?"]["Choices"][0]["Variable"] == "$.texts[0]"


def test_converse_is_granted_as_invoke_model_on_the_profile_and_its_regional_models(inline_map):
    _, template = inline_map
    invoke = [s for s in policy_statements(template) if "bedrock:InvokeModel" in json.dumps(s["Action"])]
    assert all(s["Action"] == "bedrock:InvokeModel" for s in invoke)  # never the derived bedrockruntime:converse
    arns = sorted(arn_text(a) for a in bedrock_resources(template))
    assert arns == sorted(
        ["arn:<AWS::Partition>:bedrock:us-east-1:111122223333:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"]
        + [f"arn:<AWS::Partition>:bedrock:{r}::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0" for r in PROFILE.profile_regions]
    )


def test_state_machine_is_logged_traced_and_encrypted(inline_map):
    _, template = inline_map
    machine = only(template, "AWS::StepFunctions::StateMachine")["Properties"]
    assert machine["TracingConfiguration"] == {"Enabled": True}
    assert machine["LoggingConfiguration"]["Level"] == "ALL"
    assert machine["LoggingConfiguration"]["IncludeExecutionData"] is False
    assert "KmsKeyId" in only(template, "AWS::Logs::LogGroup")["Properties"]
    assert only(template, "AWS::KMS::Key")["Properties"]["EnableKeyRotation"] is True


def test_only_the_tracing_and_log_delivery_policy_holds_wildcards(inline_map):
    _, template = inline_map
    wildcard_policies = {
        name: policy
        for name, policy in resources(template, "AWS::IAM::Policy").items()
        if any(s["Resource"] == "*" for s in policy["Properties"]["PolicyDocument"]["Statement"])
    }
    (name,) = wildcard_policies
    assert name.startswith("MapTracingAndLogDelivery")
    actions = sorted(a for s in wildcard_policies[name]["Properties"]["PolicyDocument"]["Statement"] for a in s["Action"])
    assert all(a.startswith(("xray:", "logs:")) for a in actions)


def test_a_plan_is_fitted_to_the_inline_limit_with_a_warning():
    stack = new_stack()
    plan = planning.RatePlan(requests_per_minute=900, limited_by="tpm", max_concurrency=90, call_seconds=6)
    BoundedMap(stack, "Map", max_concurrency=plan, model=NOVA, request=REQUEST)
    assert machine_definition(template_of(stack).to_json())["States"]["Map"]["MaxConcurrency"] == 40
    Annotations.from_stack(stack).has_warning(
        "/Test/Map", Match.string_like_regexp("plan sustains 90 calls at once but an inline Map allows at most 40")
    )


def test_a_plan_within_range_is_used_as_is():
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=planning.RatePlan(300, "tpm", 12, 5), model=NOVA, request=REQUEST)
    assert machine_definition(template_of(stack).to_json())["States"]["Map"]["MaxConcurrency"] == 12


def test_one_at_a_time_synthesizes_with_a_warning():
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=1, model=NOVA, request=REQUEST)
    Annotations.from_stack(stack).has_warning("/Test/Map", Match.string_like_regexp("runs every call in sequence"))


def test_a_plan_below_one_call_is_refused_like_the_queue_and_the_quota_refuse_it():
    """Issue 35.7: a plan of 0.5 calls at a time (6 requests a minute of 5 s) rounds to a cap of 1, which
    overdraws its quota; BoundedMap used to take it and warn that calls "finish sooner side by side"."""
    plan = planning.RatePlan(6, "tpm", 1, 5)
    with pytest.raises(InvalidPropsError) as error:
        BoundedMap(new_stack(), "Map", max_concurrency=plan, model=NOVA, request=REQUEST)
    assert "the plan sustains 0.5 calls at once (6.0 requests per minute), below an inline Map's minimum of 1" in str(error.value)
    assert "no construct runs less than one call at a time" in str(error.value)
    with pytest.raises(InvalidPropsError, match="the plan sustains 0.5 calls at once"):
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=plan)


def test_a_plan_of_one_call_at_a_time_takes_no_side_by_side_advice():
    """The quota allows one call at a time: "finish sooner side by side" would tell the user to overdraw it."""
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=planning.RatePlan(12, "tpm", 1, 5), model=NOVA, request=REQUEST)
    assert machine_definition(template_of(stack).to_json())["States"]["Map"]["MaxConcurrency"] == 1
    assert not Annotations.from_stack(stack).find_warning("/Test/Map", Match.string_like_regexp("side by side"))


def test_unbounded_only_when_allowed():
    with pytest.raises(InvalidPropsError, match="max_concurrency=0 leaves the Map unbounded.*planning"):
        BoundedMap(new_stack(), "Map", max_concurrency=0, model=NOVA, request=REQUEST)
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=0, allow_unbounded=True, model=NOVA, request=REQUEST)
    assert machine_definition(template_of(stack).to_json())["States"]["Map"].get("MaxConcurrency", 0) == 0


def test_a_token_cap_is_the_maps_max_concurrency():
    """Issue 35.11: this test used to synthesize and assert nothing."""
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=a_token(), model=NOVA, request=REQUEST)
    states = all_states(definition_with_refs(template_of(stack).to_json()))
    assert states["Map"]["MaxConcurrency"] == "<<number SomeParameter>>"


def test_output_that_can_exceed_the_state_limit_warns_with_the_numbers():
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=8, model=NOVA, request=REQUEST, expected_items=200)
    Annotations.from_stack(stack).has_warning(
        "/Test/Map",
        Match.string_like_regexp("200 items x up to 400 output tokens .* above Step Functions' 256 KiB .*BoundedDistributedMap"),
    )
    quiet = new_stack()
    BoundedMap(quiet, "Map", max_concurrency=8, model=NOVA, request=REQUEST, expected_items=100)
    assert not Annotations.from_stack(quiet).find_warning("*", Match.string_like_regexp("256 KiB"))


def test_task_options_reach_the_task():
    stack = new_stack()
    BoundedMap(
        stack,
        "Map",
        max_concurrency=4,
        model=NOVA,
        request=REQUEST,
        task_options=TaskOptions(result_path="$.answer", timeout=cdk.Duration.minutes(2)),
    )
    states = all_states(machine_definition(template_of(stack).to_json()))
    assert (states["InvokeModel"]["ResultPath"], states["InvokeModel"]["TimeoutSeconds"]) == ("$.answer", 120)
    assert states["InvokeModel answer"]["Parameters"]["text.$"] == "States.ArrayGetItem($.answer.texts, 0)"
    assert states["InvokeModel answer"]["ResultPath"] == "$.answer"
    custom = new_stack()
    BoundedMap(
        custom, "Map", max_concurrency=4, model=NOVA, request=REQUEST,
        task_options=TaskOptions(result_selector={"answer.$": "$.Output.Message.Content[0].Text"}),
    )
    states = all_states(machine_definition(template_of(custom).to_json()))
    assert states["InvokeModel"]["ResultSelector"] == {"answer.$": "$.Output.Message.Content[0].Text"}
    assert "InvokeModel answer" not in states


def test_a_native_body_uses_invoke_model_and_keeps_only_the_body():
    stack = new_stack()
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 300, "messages": [{"role": "user", "content": "hi"}]}
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=NativeRequest(body))
    task = all_states(machine_definition(template_of(stack).to_json()))["InvokeModel"]
    assert task["Resource"].endswith(":states:::bedrock:invokeModel")
    assert task["ResultSelector"] == {"body.$": "$.Body"}
    assert task["Parameters"]["Body"] == body


def test_a_users_processor_keeps_its_own_retry_and_others_get_ours():
    stack = new_stack()
    model = NOVA.as_imodel(stack, "Model")
    own = tasks.BedrockInvokeModel(stack, "Own", model=model, body=sfn.TaskInput.from_object({"x": 1}))
    own.add_retry(errors=["Bedrock.ThrottlingException"], max_attempts=2)
    bare = tasks.BedrockInvokeModel(stack, "Bare", model=model, body=sfn.TaskInput.from_object({"x": 1}))
    BoundedMap(stack, "Map", max_concurrency=4, item_processor=own.next(bare))
    states = all_states(machine_definition(template_of(stack).to_json()))
    assert [r["MaxAttempts"] for r in states["Own"]["Retry"]] == [2]
    assert [r["MaxAttempts"] for r in states["Bare"]["Retry"]] == [6]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_concurrency=41), "max_concurrency=41 exceeds the maximum of 40.*inline Map allows 1..40"),
        (dict(max_concurrency=-2), "max_concurrency=-2 is below the minimum of 1"),
        (dict(max_concurrency=2.5), "max_concurrency=2.5 is not a whole number"),
        (dict(max_concurrency=True), "max_concurrency=True is a bool"),
        (dict(max_concurrency="8"), "max_concurrency='8' is a str"),
        (dict(max_concurrency=NAN), "max_concurrency=nan is not a finite number"),
        (dict(max_concurrency=INF), "max_concurrency=inf is not a finite number"),
        (dict(max_concurrency=None), "max_concurrency is required"),
        (dict(model="amazon.nova-lite-v1:0"), "model='amazon.nova-lite-v1:0' is a str; pass a BedrockModel"),
        (dict(model=None), "exactly one of model"),
        (dict(request=None), "model is set but request is not"),
        (dict(request={"messages": []}), "request=.* is a dict; pass ConverseRequest.*NativeRequest"),
        (dict(item_processor=sfn.Pass(cdk.Stack(), "P")), "exactly one of model"),
        (dict(retry=3), "retry=3 is an int; pass BedrockRetry"),
        (dict(task_options={"timeout": 3}), "task_options=.* is a dict; pass TaskOptions"),
        (dict(items_path="items"), "items_path='items' is not a JsonPath"),
        (dict(items_path=""), "items_path='' is empty"),
        (dict(expected_items=0), "expected_items=0 is below the minimum of 1"),
        # Issue 35.5: an inline Map's items arrive in a 256 KiB state, 2 bytes each at the least.
        (dict(expected_items=131_073), "expected_items=131073 exceeds the maximum of 131,072; how many items a run "
         "usually gets, 1..131,072: an inline Map's items arrive in its state input, which Step Functions limits to "
         "256 KiB"),
        (dict(allow_unbounded="yes"), "allow_unbounded='yes' is a str"),
        (dict(state_machine_options={"timeout": 5}), "state_machine_options=.* is a dict"),
    ],
)
def test_bounded_map_rejects_bad_input(kwargs, message):
    props = dict(max_concurrency=5, model=NOVA, request=REQUEST) | kwargs
    with pytest.raises(InvalidPropsError, match=message):
        BoundedMap(new_stack(), "Map", **props)


def test_processor_with_request_or_task_options_is_refused_not_ignored():
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="request is set with item_processor.*\n.*task_options is set with item_processor"):
        BoundedMap(stack, "Map", max_concurrency=4, item_processor=sfn.Pass(stack, "P"), request=REQUEST, task_options=TaskOptions())


# --- BoundedDistributedMap -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def distributed_map():
    stack = new_stack()
    items = s3.Bucket(stack, "Items")
    results = s3.Bucket(stack, "Results")
    BoundedDistributedMap(
        stack,
        "Map",
        max_concurrency=200,
        model=PROFILE,
        request=REQUEST,
        items_bucket=items,
        items_key="in/items.jsonl",
        results_bucket=results,
        results_prefix="out/",
        tolerated_failure_percentage=1.5,
    )
    return stack, template_of(stack).to_json()


def test_distributed_map_reads_s3_and_writes_results(distributed_map):
    _, template = distributed_map
    state = machine_definition(template)["States"]["Map"]
    assert state["MaxConcurrency"] == 200
    assert state["ToleratedFailurePercentage"] == 1.5
    assert state["ItemReader"]["Resource"].endswith(":states:::s3:getObject")
    assert state["ItemReader"]["ReaderConfig"]["InputType"] == "JSONL"
    assert state["ItemReader"]["Parameters"]["Key"] == "in/items.jsonl"
    assert state["ResultWriter"]["Parameters"]["Prefix"] == "out/"
    assert state["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    machine = only(template, "AWS::StepFunctions::StateMachine")
    bucket_refs = [p for p in machine["Properties"]["DefinitionString"]["Fn::Join"][1] if isinstance(p, dict)]
    results_bucket = next(k for k in resources(template, "AWS::S3::Bucket") if k.startswith("Results"))
    items_bucket = next(k for k in resources(template, "AWS::S3::Bucket") if k.startswith("Items"))
    assert {"Ref": results_bucket} in bucket_refs and {"Ref": items_bucket} in bucket_refs


def test_distributed_map_acknowledges_exactly_its_generated_names(distributed_map):
    stack, _ = distributed_map
    # The acknowledgments are stored as metadata; read them back from the construct tree.
    acknowledged = sorted(
        (node.node.path.removeprefix("Test/Map/"), key.removeprefix("Annotation::AwsSolutions-IAM5[Resource::").removesuffix("]"))
        for node in stack.node.find_all()
        for entry in node.node.metadata
        if isinstance(entry.data, dict)
        for key in entry.data
        if key.startswith("Annotation::AwsSolutions-")
    )
    execution = 'arn:<AWS::Partition>:states:us-east-1:111122223333:execution:{"Fn::Select":[6,{"Fn::Split":[":",{"Ref":"MapStateMachine1A6C82C3"}]}]}'
    assert [(path, resource.replace("Results25575328", "Results").replace("Items5C12978B", "Items")) for path, resource in acknowledged] == [
        ("StateMachine/DistributedMapPolicy", execution + "/*:*"),  # child executions
        ("StateMachine/DistributedMapPolicy", execution + ":*"),
        ("StateMachine/Role/DefaultPolicy", "arn:<AWS::Partition>:s3:::<Items>/*"),  # the items object
        ("StateMachine/Role/DefaultPolicy", "arn:<AWS::Partition>:s3:::<Results>/*"),  # result objects
        ("TracingAndLogDelivery", "*"),  # X-Ray and log delivery, in a policy of their own
    ]


@pytest.mark.parametrize(
    ("reference", "flat"),
    [
        ("arn:aws:s3:::b/*", "arn:aws:s3:::b/*"),
        ({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::", {"Ref": "B1"}, "/*"]]}, "arn:<AWS::Partition>:s3:::<B1>/*"),
        ({"Fn::GetAtt": ["Bucket", "Arn"]}, "<Bucket.Arn>"),
        ({"Fn::Sub": "arn:${AWS::Partition}:s3:::x"}, "arn:<AWS::Partition>:s3:::x"),
    ],
)
def test_flatten_reference_names_findings_as_cdk_nag_does(reference, flat):
    assert flatten_reference(reference) == flat


def test_distributed_json_items_with_batching_in_a_custom_processor():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Items")
    BoundedDistributedMap(
        stack,
        "Map",
        max_concurrency=10,
        item_processor=sfn.Pass(stack, "Each"),
        items_bucket=bucket,
        items_key="items.json",
        items_format="json",
        batch_max_items=25,
        child_execution_type=sfn.StateMachineType.EXPRESS,
    )
    state = machine_definition(template_of(stack).to_json())["States"]["Map"]
    assert state["ItemReader"]["ReaderConfig"]["InputType"] == "JSON"
    assert state["ItemBatcher"] == {"MaxItemsPerBatch": 25}
    assert state["ItemProcessor"]["ProcessorConfig"]["ExecutionType"] == "EXPRESS"
    assert "ToleratedFailurePercentage" not in state  # 0, the service default: any failed item fails the run


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_concurrency=10_001), "max_concurrency=10001 exceeds the maximum of 10,000"),
        (dict(tolerated_failure_percentage=101), "tolerated_failure_percentage=101 exceeds the maximum of 100"),
        (dict(tolerated_failure_percentage=NAN), "tolerated_failure_percentage=nan is not a finite number"),
        (dict(tolerated_failure_percentage="1"), "tolerated_failure_percentage='1' is a str"),
        (dict(items_bucket="my-bucket"), "items_bucket='my-bucket' is a str; pass an s3 bucket"),
        (dict(items_key=""), "items_key='' is empty"),
        (dict(items_format="csv"), "items_format='csv' must be one of 'jsonl', 'json'"),
        (dict(batch_max_items=25), "batch_max_items=25 hands each child a list of items"),
        (dict(batch_max_items=0), "batch_max_items=0 is below the minimum of 1"),
        (dict(results_prefix=""), "results_prefix='' is empty"),
        (dict(child_execution_type="EXPRESS"), "child_execution_type='EXPRESS' must be one of"),
    ],
)
def test_distributed_map_rejects_bad_input(kwargs, message):
    stack = new_stack()
    props = dict(
        max_concurrency=5, model=NOVA, request=REQUEST, items_bucket=s3.Bucket(stack, "B"), items_key="items.jsonl"
    ) | kwargs
    with pytest.raises(InvalidPropsError, match=message):
        BoundedDistributedMap(stack, "Map", **props)


def test_an_express_parent_of_a_distributed_map_warns():
    stack = new_stack()
    BoundedDistributedMap(
        stack, "Map", max_concurrency=5, model=NOVA, request=REQUEST, items_bucket=s3.Bucket(stack, "B"),
        items_key="items.jsonl",
        state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS),
    )
    Annotations.from_stack(stack).has_warning("/Test/Map", Match.string_like_regexp("the state machine is EXPRESS"))


KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def _dist(stack, **props):
    return BoundedDistributedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST, items_key="items.jsonl", **props)


def _role_policy(template) -> str:
    """The logical id of the state machine role's default policy."""
    (policy,) = [k for k in resources(template, "AWS::IAM::Policy") if k.startswith("MapStateMachineRoleDefaultPolicy")]
    return policy


def test_the_role_may_decrypt_the_items_and_encrypt_the_results_with_each_buckets_own_key():
    """Buckets that know their key (same stack): kms:Decrypt on the items bucket's key (the item reader
    reads with the role), kms:GenerateDataKey and kms:Decrypt (multipart uploads) on the results
    bucket's, each on exactly that key's ARN and on the role that reads or writes, nowhere else."""
    stack = new_stack()
    items_key, results_key = kms.Key(stack, "ItemsKey"), kms.Key(stack, "ResultsKey")
    _dist(stack, items_bucket=s3.Bucket(stack, "Items", encryption_key=items_key),
          results_bucket=s3.Bucket(stack, "Results", encryption_key=results_key))
    template = template_of(stack).to_json()
    arn = {name: {"Fn::GetAtt": [next(k for k in resources(template, "AWS::KMS::Key") if k.startswith(name)), "Arn"]}
           for name in ("ItemsKey", "ResultsKey")}
    assert kms_statements(template) == {_role_policy(template): [
        {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": arn["ItemsKey"]},
        {"Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Effect": "Allow", "Resource": arn["ResultsKey"]},
    ]}


def test_an_imported_bucket_gets_its_key_as_a_prop_and_the_results_in_it_too():
    """s3.Bucket.from_bucket_name knows no key: items_bucket_key names it; results written to the same
    bucket need that key for writing as well, in one statement."""
    stack = new_stack()
    _dist(stack, items_bucket=s3.Bucket.from_bucket_name(stack, "Items", "users-items"),
          items_bucket_key=kms.Key.from_key_arn(stack, "ItemsKey", KEY_ARN))
    template = template_of(stack).to_json()
    assert kms_statements(template) == {_role_policy(template): [
        {"Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Effect": "Allow", "Resource": KEY_ARN},
    ]}


def test_an_imported_results_bucket_gets_its_own_key_and_a_deploy_time_key_arn_flows():
    stack = new_stack()
    key_arn = cdk.CfnParameter(stack, "ResultsKeyArn").value_as_string
    _dist(stack, items_bucket=s3.Bucket(stack, "Items"),  # SSE-S3: no key, no grant
          results_bucket=s3.Bucket.from_bucket_name(stack, "Results", "users-results"),
          results_bucket_key=kms.Key.from_key_arn(stack, "ResultsKey", key_arn))
    template = template_of(stack).to_json()
    assert kms_statements(template) == {_role_policy(template): [
        {"Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Effect": "Allow", "Resource": {"Ref": "ResultsKeyArn"}},
    ]}


def test_buckets_without_a_customer_managed_key_get_no_kms_grant():
    stack = new_stack()
    _dist(stack, items_bucket=s3.Bucket.from_bucket_name(stack, "Items", "users-items"))
    assert kms_statements(template_of(stack).to_json()) == {}


@pytest.mark.parametrize(
    ("props", "problem"),
    [
        (lambda stack: dict(items_bucket=s3.Bucket(stack, "Items", encryption_key=kms.Key(stack, "Own")),
                            items_bucket_key=kms.Key.from_key_arn(stack, "Other", KEY_ARN)),
         "items_bucket_key is Test/Other but items_bucket already knows its own key, Test/Own: the grants would name "
         "a key that does not encrypt the bucket; drop items_bucket_key"),
        (lambda stack: dict(items_bucket=s3.Bucket(stack, "Items"), results_bucket_key=kms.Key(stack, "K")),
         "results_bucket_key is set without results_bucket: the results go to items_bucket, whose key is "
         "items_bucket_key; drop results_bucket_key (or pass results_bucket)"),
        (lambda stack: dict(items_bucket=s3.Bucket(stack, "Items"), items_bucket_key=KEY_ARN),
         f"items_bucket_key='{KEY_ARN}' is a str; pass a kms.Key, e.g. kms.Key.from_key_arn(scope, id, key_arn)"),
    ],
    ids=["another-key", "results-key-without-bucket", "an-arn"],
)
def test_a_bucket_key_prop_that_cannot_be_the_buckets_key_is_refused(props, problem):
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        _dist(stack, **props(stack))
    assert refused.value.problems == [problem]


def test_the_same_key_given_twice_is_accepted():
    stack = new_stack()
    key = kms.Key(stack, "Key")
    _dist(stack, items_bucket=s3.Bucket(stack, "Items", encryption_key=key), items_bucket_key=key)
    template = template_of(stack).to_json()
    assert [s["Action"] for s in kms_statements(template)[_role_policy(template)]] == [["kms:Decrypt", "kms:GenerateDataKey"]]


def test_kms_grants_on_encrypted_buckets_leave_nag_clean():
    def build(stack):
        key = kms.Key(stack, "ItemsKey", enable_key_rotation=True)
        items = s3.Bucket(stack, "Items", encryption_key=key, enforce_ssl=True, server_access_logs_prefix="logs/")
        BoundedDistributedMap(stack, "Dist", max_concurrency=4, model=NOVA, request=REQUEST, items_bucket=items,
                              items_key="items.jsonl",
                              results_bucket=s3.Bucket.from_bucket_name(stack, "Results", "users-results"),
                              results_bucket_key=kms.Key.from_key_arn(stack, "ResultsKey", KEY_ARN))

    assert nag_findings(build) == []


# --- ParallelPrompts --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parallel():
    stack = new_stack()
    construct = ParallelPrompts(
        stack,
        "Digest",
        model=PROFILE,
        prompts={
            "Summary": ConverseRequest(prompt="summarize", max_tokens=300),
            "Sentiment": ConverseRequest(prompt="sentiment", max_tokens=20),
        },
        synthesis=ConverseRequest(
            prompt=sfn.JsonPath.format("digest {}", sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.answers"))),
            max_tokens=500,
        ),
        synthesis_model=NOVA,
    )
    return construct, template_of(stack).to_json()


def test_prompts_run_as_parallel_branches_and_the_synthesis_sees_names_and_texts_only(parallel):
    _, template = parallel
    asl = machine_definition(template)
    prompts = asl["States"]["Prompts"]
    assert [b["StartAt"] for b in prompts["Branches"]] == ["Summary", "Sentiment"]
    assert prompts["ResultSelector"] == {"answers": {"Summary.$": "$[0].text", "Sentiment.$": "$[1].text"}}
    assert prompts["Next"] == "Synthesis"
    states = all_states(asl)
    assert states["Synthesis"]["ResultPath"] == "$.synthesis"
    assert states["Synthesis"]["Parameters"]["ModelId"] == "amazon.nova-lite-v1:0"
    assert states["Synthesis answer"]["ResultPath"] == "$.synthesis"


def test_parallel_role_covers_both_models_and_nothing_else(parallel):
    _, template = parallel
    arns = {arn_text(a) for a in bedrock_resources(template)}
    assert "arn:<AWS::Partition>:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0" in arns
    assert all("haiku" in a or "nova-lite" in a for a in arns)


def test_without_synthesis_the_parallel_state_ends():
    stack = new_stack()
    ParallelPrompts(stack, "P", model=NOVA, prompts={"A": REQUEST, "B": REQUEST})
    asl = machine_definition(template_of(stack).to_json())
    assert asl["States"]["Prompts"]["End"] is True


def test_single_prompt_warns():
    stack = new_stack()
    ParallelPrompts(stack, "P", model=NOVA, prompts={"A": REQUEST})
    Annotations.from_stack(stack).has_warning("/Test/P", Match.string_like_regexp("only saves time with two or more"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(prompts={}), "prompts is empty"),
        (dict(prompts=[REQUEST]), "prompts=.* is a list; pass a dict"),
        (dict(prompts={"a/b": REQUEST}), "prompt name 'a/b' cannot be a Step Functions state name"),
        (dict(prompts={"x" * 81: REQUEST}), "prompt name has 81 characters; at most 80"),
        (dict(prompts={"Synthesis": REQUEST}), "prompt name 'Synthesis' is taken by ParallelPrompts' own states"),
        (dict(prompts={"A answer": REQUEST}), "prompt name 'A answer' is taken"),
        (dict(prompts={"A": {"messages": []}}), r"prompts\['A'\]=.* is a dict; pass ConverseRequest"),
        (dict(synthesis_model=NOVA), "synthesis_model is set without synthesis"),
        (dict(model="amazon.nova-lite-v1:0"), "model='amazon.nova-lite-v1:0' is a str; pass a BedrockModel"),
        (dict(synthesis={"x": 1}), "synthesis=.* is a dict; pass ConverseRequest"),
    ],
)
def test_parallel_prompts_rejects_bad_input(kwargs, message):
    props = dict(model=NOVA, prompts={"A": REQUEST, "B": REQUEST}) | kwargs
    with pytest.raises(InvalidPropsError, match=message):
        ParallelPrompts(new_stack(), "P", **props)


# --- StateMachineOptions ----------------------------------------------------------------------------


def test_existing_log_group_role_and_options_are_used():
    stack = new_stack()
    group = logs.LogGroup(stack, "Mine")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("states.amazonaws.com"))
    BoundedMap(
        stack,
        "Map",
        max_concurrency=5,
        model=NOVA,
        request=REQUEST,
        state_machine_options=StateMachineOptions(
            log_group=group,
            role=role,
            log_execution_data=True,
            state_machine_name="tickers",
            state_machine_type=sfn.StateMachineType.EXPRESS,
            timeout=cdk.Duration.minutes(4),
        ),
    )
    template = template_of(stack).to_json()
    machine = only(template, "AWS::StepFunctions::StateMachine")["Properties"]
    assert machine["StateMachineName"] == "tickers"
    assert machine["StateMachineType"] == "EXPRESS"
    assert machine["LoggingConfiguration"]["IncludeExecutionData"] is True
    assert machine["RoleArn"]["Fn::GetAtt"][0].startswith("Role")
    assert not resources(template, "AWS::KMS::Key")
    assert len(resources(template, "AWS::Logs::LogGroup")) == 1
    assert definition(only(template, "AWS::StepFunctions::StateMachine"))["TimeoutSeconds"] == 240


def test_express_defaults_to_its_five_minute_limit():
    stack = new_stack()
    BoundedMap(
        stack, "Map", max_concurrency=5, model=NOVA, request=REQUEST,
        state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS),
    )
    assert machine_definition(template_of(stack).to_json())["TimeoutSeconds"] == 300


def test_state_machine_options_key_and_retention():
    stack = new_stack()
    key = kms.Key(stack, "MyKey")
    BoundedMap(
        stack, "Map", max_concurrency=5, model=NOVA, request=REQUEST,
        state_machine_options=StateMachineOptions(encryption_key=key, log_retention=logs.RetentionDays.ONE_WEEK),
    )
    template = template_of(stack).to_json()
    group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert group["RetentionInDays"] == 7
    assert group["KmsKeyId"]["Fn::GetAtt"][0].startswith("MyKey")


def test_new_log_key_serves_only_this_accounts_log_groups(inline_map):
    _, template = inline_map
    statements = only(template, "AWS::KMS::Key")["Properties"]["KeyPolicy"]["Statement"]
    logs_statement = next(s for s in statements if "Service" in s["Principal"])
    assert logs_statement["Principal"]["Service"] == "logs.us-east-1.amazonaws.com"
    condition = logs_statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert arn_text(condition) == "arn:<AWS::Partition>:logs:us-east-1:111122223333:log-group:*"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(state_machine_type=sfn.StateMachineType.EXPRESS, timeout=cdk.Duration.hours(24)),
            "timeout=1 day exceeds the maximum of 5 minutes; an EXPRESS workflow runs at most 5 minutes",
        ),
        (dict(timeout=cdk.Duration.seconds(0)), "timeout=0 seconds is below the minimum of 1 second"),
        (dict(timeout=cdk.Duration.days(400)), "timeout=400 days exceeds the maximum of 365 days"),
        (dict(timeout=300), "timeout=300 is an int; pass a cdk.Duration"),
        (dict(state_machine_name="a b"), "state_machine_name='a b' may hold letters"),
        (dict(state_machine_name="x" * 81), "state_machine_name has 81 characters"),
        (dict(state_machine_type="EXPRESS"), "state_machine_type='EXPRESS' must be one of"),
        (dict(role="arn:aws:iam::1:role/x"), "role='arn:aws:iam::1:role/x' is a str; pass an iam.Role"),
        (dict(log_execution_data="yes"), "log_execution_data='yes' is a str"),
        (dict(log_retention=30), "log_retention=30 is an int; pass a logs.RetentionDays"),
    ],
)
def test_state_machine_options_reject_bad_input(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        StateMachineOptions(**kwargs)


def test_options_for_a_new_log_group_with_an_existing_one_are_refused_not_ignored():
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="encryption_key configures a new log group"):
        StateMachineOptions(log_group=logs.LogGroup(stack, "G"), encryption_key=kms.Key(stack, "K"))


# --- cdk-nag: the library never hides the user's own findings ----------------------------------------


def test_a_users_own_wildcard_on_the_map_role_still_fails_nag():
    def build(stack):
        bounded = BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST)
        bounded.state_machine.add_to_role_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=["*"])
        )

    findings = nag_findings(build)
    assert findings == ["AwsSolutions-IAM5[Resource::*] at Nag/Map/StateMachine/Role/DefaultPolicy/Resource"]


@pytest.mark.parametrize(
    ("role_kind", "at"),
    [
        ("new", "DefaultPolicy"),
        ("imported", "Policy"),
        # cdk init's feature flag names an imported role's policy Policy<Stack><Role><hash> (trial finding F1)
        ("imported-stack-safe-name", "PolicyNagUserRole[0-9A-F]{8}"),
        ("imported-default-policy-name", "UsersOwnName"),
    ],
)
def test_on_the_users_own_role_only_the_users_own_wildcards_fail_nag(role_kind, at):
    """BoundedDistributedMap with StateMachineOptions(role=...): the item reader's and result writer's
    <bucket>/* and the child executions' grants are acknowledged by their exact ARNs, on the role's policy
    whatever aws-cdk-lib names it; the user's own object wildcard on that role (the same shape, another
    bucket) is still reported."""
    from genai_pacer._internal.nag import IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG

    def build(stack):
        arn = f"arn:aws:iam::{stack.account}:role/users-machine-role"
        if role_kind == "new":
            role = iam.Role(stack, "UserRole", assumed_by=iam.ServicePrincipal("states.amazonaws.com"))
        elif role_kind == "imported-default-policy-name":
            role = iam.Role.from_role_arn(stack, "UserRole", arn, default_policy_name="UsersOwnName")
        else:
            role = iam.Role.from_role_arn(stack, "UserRole", arn)
        role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::users-archive/*"]))
        BoundedDistributedMap(
            stack, "Dist", max_concurrency=4, model=NOVA, request=REQUEST,
            items_bucket=s3.Bucket.from_bucket_name(stack, "Items", "users-items"), items_key="items.jsonl",
            results_bucket=s3.Bucket(stack, "Results", enforce_ssl=True, server_access_logs_prefix="logs/"),
            state_machine_options=StateMachineOptions(role=role),
        )

    flagged = {IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG: role_kind == "imported-stack-safe-name"}
    [finding] = nag_findings(build, context=flagged)
    assert re.fullmatch(
        re.escape("AwsSolutions-IAM5[Resource::arn:aws:s3:::users-archive/*] at Nag/UserRole/") + at + "/Resource", finding
    ), finding


def test_an_items_bucket_of_another_stack_passes_nag_and_a_users_own_bucket_wildcard_there_still_fails():
    """The item reader's <bucket>/* on a bucket of another stack is acknowledged by its exact ARN once
    aws-cdk-lib has made it Fn::ImportValue; the user's own <other bucket>/* of that stack is still reported."""
    import tempfile
    from pathlib import Path

    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = tempfile.mkdtemp()
    app = cdk.App(outdir=outdir)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    env = cdk.Environment(account="111122223333", region="us-east-1")
    owner = cdk.Stack(app, "Owner", env=env)
    items, archive = (s3.Bucket(owner, name, enforce_ssl=True, server_access_logs_prefix="logs/") for name in ("Items", "Archive"))
    dist = BoundedDistributedMap(cdk.Stack(app, "Nag", env=env), "Dist", max_concurrency=4, model=NOVA, request=REQUEST,
                                 items_bucket=items, items_key="items.jsonl")
    dist.state_machine.add_to_role_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[f"arn:aws:s3:::{archive.bucket_name}/*"]))
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    [finding] = [f for f in nag_violations(Path(outdir)) if " at Nag/" in f]
    assert finding.startswith("AwsSolutions-IAM5[Resource::arn:aws:s3:::Owner:ExportsOutputRefArchive")
    assert finding.endswith("/*] at Nag/Dist/StateMachine/Role/DefaultPolicy/Resource")


def test_the_library_alone_passes_nag():
    assert nag_findings(lambda stack: BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST)) == []


# --- execution metrics ---------------------------------------------------------------------------

def _execution_metric_constructs(stack):
    bucket = s3.Bucket(stack, "Items")
    request = ConverseRequest(prompt="hi", max_tokens=10)
    return {
        "map": BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST),
        "distributed": BoundedDistributedMap(stack, "Dist", max_concurrency=4, model=NOVA, request=REQUEST,
                                             items_bucket=bucket, items_key="items.jsonl"),
        "parallel": ParallelPrompts(stack, "Par", model=NOVA, prompts={"A": request, "B": request}),
    }


@pytest.mark.parametrize(
    ("method", "metric_name", "statistic"),
    [
        ("metric_failed_executions", "ExecutionsFailed", "Sum"),
        ("metric_throttled_executions", "ExecutionThrottled", "Sum"),
        ("metric_timed_out_executions", "ExecutionsTimedOut", "Sum"),
        ("metric_started_executions", "ExecutionsStarted", "Sum"),
        ("metric_execution_time", "ExecutionTime", "p90"),
    ],
)
def test_each_workflow_construct_exposes_its_execution_metrics(method, metric_name, statistic):
    stack = new_stack()
    for kind, construct in _execution_metric_constructs(stack).items():
        metric = getattr(construct, method)()
        assert (metric.namespace, metric.metric_name, metric.statistic) == ("AWS/States", metric_name, statistic), kind
        assert stack.resolve(metric.dimensions) == {
            "StateMachineArn": stack.resolve(construct.state_machine.state_machine_arn)
        }, kind
        assert getattr(construct, method)(statistic="Maximum").statistic == "Maximum"  # a default, not fixed


@pytest.mark.parametrize("construct", ["BoundedMap", "BoundedDistributedMap", "ParallelPrompts"])
def test_failed_and_timed_out_executions_alarm_with_the_users_actions(construct):
    """Issue 34.12: a failed run lost its items silently; no alarm, no alarm_actions."""
    from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
    from aws_cdk import aws_sns as sns

    stack = new_stack()
    actions = [cloudwatch_actions.SnsAction(sns.Topic(stack, "Pager"))]
    if construct == "BoundedMap":
        built = BoundedMap(stack, "C", max_concurrency=4, model=NOVA, request=REQUEST, alarm_actions=actions)
    elif construct == "BoundedDistributedMap":
        built = BoundedDistributedMap(stack, "C", max_concurrency=4, model=NOVA, request=REQUEST,
                                      items_bucket=s3.Bucket(stack, "B"), items_key="items.jsonl", alarm_actions=actions)
    else:
        built = ParallelPrompts(stack, "C", model=NOVA, prompts={"A": REQUEST, "B": REQUEST}, alarm_actions=actions)
    template = template_of(stack).to_json()
    alarms = {k: r["Properties"] for k, r in resources(template, "AWS::CloudWatch::Alarm").items()}
    assert sorted(built.alarms) == ["FailedExecutions", "TimedOutExecutions"]
    machine = next(iter(resources(template, "AWS::StepFunctions::StateMachine")))
    topic = next(iter(resources(template, "AWS::SNS::Topic")))
    seen = {}
    for alarm in alarms.values():
        seen[alarm["MetricName"]] = alarm
        assert (alarm["Namespace"], alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("AWS/States", "Sum", 300, 0)
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["EvaluationPeriods"] == 1
        assert alarm["Dimensions"] == [{"Name": "StateMachineArn", "Value": {"Ref": machine}}]
        assert alarm["AlarmActions"] == [{"Ref": topic}]
        assert alarm["TreatMissingData"] == "notBreaching"
    assert sorted(seen) == ["ExecutionsFailed", "ExecutionsTimedOut"]


def test_without_alarm_actions_the_alarms_still_exist_and_bad_actions_are_refused():
    stack = new_stack()
    bounded = BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, request=REQUEST)
    assert len(resources(template_of(stack), "AWS::CloudWatch::Alarm")) == 2 and set(bounded.alarms)
    with pytest.raises(InvalidPropsError, match=re.escape("alarm_actions[0]='arn:aws:sns:us-east-1:1:t' is a str")):
        BoundedMap(new_stack(), "Map", max_concurrency=4, model=NOVA, request=REQUEST, alarm_actions=["arn:aws:sns:us-east-1:1:t"])


def test_sync_execution_url_exposes_what_a_caller_waits_and_fails_on():
    from aws_cdk import aws_stepfunctions as sfn_
    from genai_pacer import SyncExecutionUrl

    stack = new_stack()
    prompts = ParallelPrompts(
        stack, "Par", model=NOVA, prompts={"A": ConverseRequest(prompt="hi", max_tokens=10)},
        state_machine_options=StateMachineOptions(state_machine_type=sfn_.StateMachineType.EXPRESS),
    )
    url = SyncExecutionUrl(stack, "Url", state_machine=prompts.state_machine)
    cases = {"metric_errors": ("Errors", "Sum"), "metric_throttles": ("Throttles", "Sum"), "metric_duration": ("Duration", "p90")}
    for method, (name, statistic) in cases.items():
        metric = getattr(url, method)()
        assert (metric.namespace, metric.metric_name, metric.statistic) == ("AWS/Lambda", name, statistic)
        assert stack.resolve(metric.dimensions) == {"FunctionName": stack.resolve(url.function.function_name)}


def test_an_ibedrockinvokable_is_accepted_wherever_a_model_is_and_synthesizes_the_same():
    """An aws_bedrock_alpha-shaped object (invokable_arn + grant_invoke) gives the template a
    BedrockModel gives: the same ModelId and the same exact grants."""
    from invokables import FakeCrossRegionProfile, FakeFoundationModel, FakePromptRouter

    def fake() -> FakeCrossRegionProfile:
        return FakeCrossRegionProfile("us", FakeFoundationModel("anthropic.claude-3-5-haiku-20241022-v1:0"))

    def templates(model) -> dict:
        stack = new_stack()
        BoundedMap(stack, "Map", max_concurrency=8, model=model, request=REQUEST)
        ParallelPrompts(stack, "Parallel", prompts={"a": REQUEST, "b": REQUEST}, model=model, synthesis=REQUEST,
                        synthesis_model=model)
        return template_of(stack).to_json()

    assert templates(fake()) == templates(PROFILE)
    with pytest.raises(InvalidPropsError, match="synthesis_model: FakePromptRouter is a prompt router"):
        ParallelPrompts(new_stack(), "P", prompts={"a": REQUEST}, model=PROFILE, synthesis=REQUEST,
                        synthesis_model=FakePromptRouter())


def immutable_role_warnings(stack: cdk.Stack) -> list[str]:
    return [str(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
            if "genai-pacer:immutable-role" in str(m.entry.data)]


def test_an_immutable_role_is_warned_naming_the_prop_and_every_statement_its_state_machine_needs():
    """Trial F7: iam.Role.from_role_arn(..., mutable=False) takes no grants, so the state machine's runs would fail
    with AccessDenied, and synth said nothing. The warning names the role prop and lists what to add, including
    grants made after the state machine exists (the distributed Map's S3 reads and writes)."""
    stack = new_stack()
    role = iam.Role.from_role_arn(stack, "UserRole", "arn:aws:iam::111122223333:role/runner", mutable=False)
    BoundedDistributedMap(
        stack, "Dist", max_concurrency=4, model=NOVA, request=REQUEST,
        items_bucket=s3.Bucket.from_bucket_name(stack, "Items", "users-items"), items_key="items.jsonl",
        results_bucket=s3.Bucket(stack, "Results", enforce_ssl=True, server_access_logs_prefix="logs/"),
        state_machine_options=StateMachineOptions(role=role),
    )
    (warning,) = immutable_role_warnings(stack)
    assert warning.startswith("BoundedDistributedMap Dist: role (StateMachineOptions(role=...)) is Test/UserRole, a role "
                              "this app cannot change (iam.Role.from_role_arn(..., mutable=False)")
    listed = json.loads(warning.split("Add these statements to the role yourself (as the template resolves them): ")[1]
                        .split("; or pass a role")[0])
    actions = {a for s in listed for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {"bedrock:InvokeModel", "xray:PutTraceSegments", "logs:CreateLogDelivery", "states:StartExecution",
            "s3:GetObject"} <= actions
    assert not resources(template_of(stack), "AWS::IAM::Policy")  # the role is left as the user asked


@pytest.mark.parametrize("mutable", ["imported", "own"])
def test_a_role_the_app_may_change_gets_its_grants_and_no_warning(mutable):
    stack = new_stack()
    role = (iam.Role.from_role_arn(stack, "UserRole", "arn:aws:iam::111122223333:role/runner") if mutable == "imported"
            else iam.Role(stack, "UserRole", assumed_by=iam.ServicePrincipal("states.amazonaws.com")))
    BoundedMap(stack, "Map", model=NOVA, request=REQUEST, max_concurrency=2,
               state_machine_options=StateMachineOptions(role=role))
    assert not immutable_role_warnings(stack)
    assert resources(template_of(stack), "AWS::IAM::Policy")
