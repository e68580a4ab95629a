"""AnswerRouter construct: the function, its environment, grants, URL auth, metrics and every bad prop."""

from __future__ import annotations

import math

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match, Template
from genai_pacer import AnswerStore, BedrockModel
from genai_pacer._checks import InvalidPropsError
from genai_pacer.answer_router import AnswerRouter
from helpers import new_stack, only, policy_statements

MODEL = BedrockModel.from_id("amazon.nova-lite-v1:0")


def build(**props) -> tuple[cdk.Stack, AnswerRouter]:
    stack = new_stack()
    store = AnswerStore(stack, "Store")
    return stack, AnswerRouter(stack, "Router", **{"answer_store": store, "model": MODEL, **props})


def router_function(template: Template) -> dict:
    functions = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": "answer_router.handler.handler"}})
    (function,) = functions.values()
    return function


def test_defaults_a_python_function_with_the_store_model_and_max_age_in_its_environment():
    stack, router = build()
    template = Template.from_stack(stack)
    function = router_function(template)["Properties"]
    assert function["Runtime"] == "python3.14" and function["Timeout"] == 60
    env = function["Environment"]["Variables"]
    assert env["MODEL_ID"] == "amazon.nova-lite-v1:0"
    assert env["MAX_AGE_SECONDS"] == "86400" and env["WRITE_BACK"] == "true" and env["MAX_OUTPUT_TOKENS"] == "1024"
    assert env["ANSWER_TTL_SECONDS"] == str(30 * 86400)
    assert "ANSWER_TABLE" in env
    template.has_resource_properties("AWS::Lambda::Url", {"AuthType": "AWS_IAM"})


def test_write_back_grants_put_and_a_read_only_router_gets_only_get_item():
    stack, _ = build()
    actions = {a for s in policy_statements(Template.from_stack(stack)) for a in _list(s["Action"])}
    assert {"dynamodb:GetItem", "dynamodb:PutItem", "bedrock:InvokeModel"} <= actions
    stack, _ = build(write_back=False)
    actions = {a for s in policy_statements(Template.from_stack(stack)) for a in _list(s["Action"])}
    assert "dynamodb:PutItem" not in actions and "dynamodb:GetItem" in actions
    assert router_function(Template.from_stack(stack))["Properties"]["Environment"]["Variables"]["WRITE_BACK"] == "false"


def test_the_model_grant_names_the_model_not_a_wildcard():
    stack, _ = build()
    invoke = [s for s in policy_statements(Template.from_stack(stack)) if "bedrock:InvokeModel" in _list(s["Action"])]
    assert invoke and all("*" not in str(s["Resource"]) for s in invoke)


def test_props_reach_the_function():
    stack, router = build(
        max_age=cdk.Duration.hours(2), max_output_tokens=300, timeout=cdk.Duration.seconds(30),
        memory_size=512, reserved_concurrency=20, function_url=False,
    )
    template = Template.from_stack(stack)
    function = router_function(template)["Properties"]
    assert (function["Timeout"], function["MemorySize"], function["ReservedConcurrentExecutions"]) == (30, 512, 20)
    assert function["Environment"]["Variables"]["MAX_AGE_SECONDS"] == "7200"
    assert function["Environment"]["Variables"]["MAX_OUTPUT_TOKENS"] == "300"
    template.resource_count_is("AWS::Lambda::Url", 0)
    assert router.url is None
    with pytest.raises(ValueError, match="no function URL"):
        router.grant_invoke_url(router.function)


def test_grants_for_callers():
    stack, router = build()
    from aws_cdk import aws_iam as iam

    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    router.grant_invoke_url(caller)
    router.grant_invoke(caller)
    actions = {a for s in policy_statements(Template.from_stack(stack)) for a in _list(s["Action"])}
    assert {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"} <= actions


def test_metrics_read_the_handlers_names():
    stack, router = build()
    hits, misses, stale = router.metric_hits(), router.metric_misses(), router.metric_stale()
    assert (hits.metric_name, misses.metric_name, stale.metric_name) == ("AnswerHits", "AnswerMisses", "AnswerStale")
    assert hits.namespace == "GenaiPacer" and "FunctionName" in hits.dimensions
    assert "hits + misses + stale" in router.metric_hit_rate().expression


def test_a_max_age_beyond_the_store_ttl_is_warned():
    stack = new_stack()
    store = AnswerStore(stack, "Store", answer_ttl=cdk.Duration.hours(1))
    AnswerRouter(stack, "Router", answer_store=store, model=MODEL, max_age=cdk.Duration.hours(2))
    Annotations.from_stack(stack).has_warning("/Test/Router", Match.string_like_regexp("longer than the store's answer_ttl"))




@pytest.mark.parametrize(
    ("prop", "value", "message"),
    [
        ("answer_store", None, "answer_store is required"),
        ("answer_store", "table", "pass an AnswerStore"),
        ("model", None, "model is required"),
        ("model", "amazon.nova-lite-v1:0", "pass a BedrockModel"),
        ("max_age", 3600, "pass a cdk.Duration"),
        ("max_age", cdk.Duration.millis(10), "below the minimum of 1 second"),
        ("max_age", cdk.Duration.days(4000), "exceeds the maximum"),
        ("write_back", "yes", "True or False"),
        ("write_back", None, "write_back is required"),
        ("max_output_tokens", 0, "below the minimum of 1"),
        ("max_output_tokens", -5, "below the minimum of 1"),
        ("max_output_tokens", 1.5, "not a whole number"),
        ("max_output_tokens", math.nan, "not a finite number"),
        ("max_output_tokens", math.inf, "not a finite number"),
        ("max_output_tokens", True, "is a bool"),
        ("max_output_tokens", None, "max_output_tokens is required"),
        ("max_output_tokens", 2_000_000, "exceeds the maximum"),
        ("timeout", cdk.Duration.minutes(16), "Lambda runs at most 15 minutes"),
        ("timeout", 30, "pass a cdk.Duration"),
        ("memory_size", 64, "128..10,240"),
        ("memory_size", 20_000, "128..10,240"),
        ("memory_size", math.nan, "not a finite number"),
        ("reserved_concurrency", 0, "below the minimum of 1"),
        ("reserved_concurrency", -1, "below the minimum of 1"),
        ("reserved_concurrency", math.inf, "not a finite number"),
        ("function_url", 1, "True or False"),
        ("encryption_key", "alias/x", "pass a kms.Key"),
        ("log_retention", 30, "pass a logs.RetentionDays"),
    ],
)
def test_bad_props_are_refused_with_the_rule(prop, value, message):
    with pytest.raises(InvalidPropsError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        build(**{prop: value})


def test_tokens_are_accepted_where_a_value_comes_at_deploy_time():
    token = cdk.Token.as_number(cdk.Fn.ref("SomeParameter"))
    stack, _ = build(memory_size=token, reserved_concurrency=token)
    assert only(Template.from_stack(stack).to_json(), "AWS::Lambda::Url")


def _list(value) -> list:
    return value if isinstance(value, list) else [value]
