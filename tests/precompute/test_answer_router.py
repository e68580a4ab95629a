"""AnswerRouter construct: the function, its environment, grants, URL auth, metrics and every bad prop."""

from __future__ import annotations

import json
import math
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template
from genai_pacer import AnswerStore, BedrockModel, InvalidPropsError, planning
from genai_pacer.precompute.router import AnswerRouter
from helpers import new_stack, only, policy_statements, resources

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
    assert env["COALESCE_WAIT_SECONDS"] == "30"  # half the timeout
    assert env["PROMPTS"] == "[]" and "SYSTEM_PROMPT" not in env  # no prompts: stored answers only
    assert "ANSWER_TABLE" in env
    template.has_resource_properties("AWS::Lambda::Url", {"AuthType": "AWS_IAM"})


def test_write_back_grants_put_and_a_read_only_router_gets_only_get_item():
    stack, _ = build()
    actions = {a for s in policy_statements(Template.from_stack(stack)) for a in _list(s["Action"])}
    assert {"dynamodb:GetItem", "dynamodb:PutItem", "bedrock:InvokeModel"} <= actions
    assert "dynamodb:DeleteItem" not in actions  # answers and the router's claims are PutItem only (issue 27.1)
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
    with pytest.raises(ValueError, match="no function URL") as refused:
        router.grant_invoke_url(router.function)
    assert refused.value.ids == ["AnswerRouter.grant_invoke_url.function_url.none-to-grant"]  # one style: an id too


def test_reserved_concurrency_above_what_a_default_account_can_reserve_is_warned():
    """Issue 35.5: Lambda's account concurrency is 1,000 by default (adjustable) and 100 stay unreserved."""
    stack, _ = build(reserved_concurrency=1_000)
    Annotations.from_stack(stack).has_warning("/Test/Router", Match.string_like_regexp(
        "reserved_concurrency=1,000 is above the 900 a default account can reserve.*at least 1,100.*Service Quotas"))
    quiet, _ = build(reserved_concurrency=900)
    assert not Annotations.from_stack(quiet).find_warning("*", Match.string_like_regexp("can reserve"))


def test_reserved_concurrency_takes_a_rate_plan_as_every_cap_does():
    """2,000 + 500 tokens a call, 100,000 TPM: 40 calls a minute of 6 s, 4 in flight."""
    profile = planning.TokenProfile(input_tokens=2_000, output_tokens=500, max_tokens=500)
    plan = planning.sustainable_rate(profile, tpm_quota=100_000, call_seconds=6)
    stack, router = build(reserved_concurrency=plan)
    assert router_function(Template.from_stack(stack))["Properties"]["ReservedConcurrentExecutions"] == 4
    assert router.concurrency_plan is plan  # what ModelQuota reads to know who holds a share


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


def test_prompts_and_the_system_prompt_reach_the_function():
    prompts = {"ticker-morning#{ticker}": "Write this morning's note for {ticker}.", "digest#{day}#{lang}": "Digest {day} in {lang}."}
    stack, router = build(prompts=prompts, system_prompt="You write for investors.", coalesce_wait=cdk.Duration.seconds(5))
    env = router_function(Template.from_stack(stack))["Properties"]["Environment"]["Variables"]
    assert json.loads(env["PROMPTS"]) == [{"key": k, "prompt": v} for k, v in prompts.items()]
    assert env["SYSTEM_PROMPT"] == "You write for investors." and env["COALESCE_WAIT_SECONDS"] == "5"
    assert router.prompts == prompts


def test_a_token_max_age_reaches_the_function_as_a_token():
    stack = new_stack()
    seconds = cdk.CfnParameter(stack, "MaxAgeSeconds", type="Number", default=3600)
    router = AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=MODEL,
                          max_age=cdk.Duration.seconds(seconds.value_as_number),
                          coalesce_wait=cdk.Duration.seconds(seconds.value_as_number))
    env = router_function(Template.from_stack(stack))["Properties"]["Environment"]["Variables"]
    assert env["MAX_AGE_SECONDS"] == {"Ref": "MaxAgeSeconds"}
    assert env["COALESCE_WAIT_SECONDS"] == {"Ref": "MaxAgeSeconds"}
    assert router.max_age.is_unresolved()


def test_number_tokens_reach_the_function_as_tokens():
    stack = new_stack()
    value = cdk.CfnParameter(stack, "Value", type="Number", default=300).value_as_number
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=MODEL,
                 max_output_tokens=value, timeout=cdk.Duration.seconds(value))
    function = router_function(Template.from_stack(stack))["Properties"]
    assert function["Environment"]["Variables"]["MAX_OUTPUT_TOKENS"] == {"Ref": "Value"}
    assert function["Timeout"] == {"Ref": "Value"}
    # half a deploy-time timeout: the function gets the timeout and halves it (it was a fixed 10 s, trial F4)
    assert function["Environment"]["Variables"]["FUNCTION_TIMEOUT_SECONDS"] == {"Ref": "Value"}
    assert "COALESCE_WAIT_SECONDS" not in function["Environment"]["Variables"]


def test_a_literal_coalesce_wait_beside_a_deploy_time_timeout_reaches_the_function_as_given():
    stack = new_stack()
    value = cdk.CfnParameter(stack, "Value", type="Number", default=30).value_as_number
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=MODEL,
                 timeout=cdk.Duration.seconds(value), coalesce_wait=cdk.Duration.seconds(4))
    variables = router_function(Template.from_stack(stack))["Properties"]["Environment"]["Variables"]
    assert variables["COALESCE_WAIT_SECONDS"] == "4" and "FUNCTION_TIMEOUT_SECONDS" not in variables


@pytest.mark.parametrize("prop", ["max_age", "coalesce_wait", "timeout"])
def test_a_token_duration_in_another_unit_is_refused_by_name(prop):
    stack = new_stack()
    value = cdk.CfnParameter(stack, "Value", type="Number", default=3).value_as_number
    with pytest.raises(InvalidPropsError, match=rf"{prop} is a deploy-time Duration in another unit.*cdk\.Duration\.seconds"):
        AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=MODEL,
                     **{prop: cdk.Duration.minutes(value)})


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
        ("prompts", "Write a note for {ticker}", "pass a dict of key pattern"),
        ("prompts", {"Ticker#{t}": "Note {t}"}, "write it as 'ticker#{t}'"),
        ("prompts", {"ticker#{t}": "Note for {ticker}"}, "only the pattern's variables"),
        ("prompts", {"ticker#{t}": "Note {t!r}"}, "no format spec"),
        ("prompts", {"ticker#{t}": "Note {t:>9}"}, "no format spec"),
        ("prompts", {"ticker#{t}": "Note {t.__class__}"}, "only the pattern's variables"),
        ("prompts", {"ticker#{t}#{u}": "Note {t}"}, "does not use ['u']"),
        ("prompts", {"ticker#{t}#{t}": "Note {t}"}, "used once"),
        ("prompts", {"{t}": "Note {t}"}, "the first literal"),
        ("prompts", {"ticker#x{t}": "Note {t}"}, "one variable such as"),
        ("prompts", {"ticker#{t}": "Note {t"}, "unmatched brace"),
        ("prompts", {"ticker#{t}": ""}, "is empty"),
        ("prompts", {"ticker#{t}": 5}, "is int"),
        ("prompts", {"claim#key#{t}": "Note {t}"}, "may not start with 'claim#'"),
        ("prompts", {"ticker#{t}": "x" * 3100 + "{t}"}, "at most 3,000 fit"),
        ("system_prompt", "", "is empty"),
        ("system_prompt", 5, "pass a string"),
        ("coalesce_wait", cdk.Duration.seconds(60), "must be shorter than timeout=1 minute"),
        ("coalesce_wait", 5, "pass a cdk.Duration"),
    ],
)
def test_bad_props_are_refused_with_the_rule(prop, value, message):
    with pytest.raises(InvalidPropsError, match=re.escape(message)):
        build(**{prop: value})


def test_coalesce_wait_without_write_back_is_refused_not_ignored():
    """Without write-back nothing is written and no claim is taken, so the wait could never apply (issue 34.7)."""
    with pytest.raises(InvalidPropsError) as refused:
        build(write_back=False, coalesce_wait=cdk.Duration.seconds(5))
    assert refused.value.problems == [
        "coalesce_wait is set with write_back=False: without write-back a miss writes nothing and takes no claim, so "
        "no request can wait for another's answer and the wait would never apply; drop coalesce_wait, or keep "
        "write_back=True"
    ]
    build(write_back=True, coalesce_wait=cdk.Duration.seconds(5))
    build(write_back=False)


def test_tokens_are_accepted_where_a_value_comes_at_deploy_time():
    token = cdk.Token.as_number(cdk.Fn.ref("SomeParameter"))
    stack, _ = build(memory_size=token, reserved_concurrency=token)
    assert only(Template.from_stack(stack).to_json(), "AWS::Lambda::Url")


def _list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_the_handler_reads_the_prompts_the_construct_writes(monkeypatch):
    prompts = {"ticker-morning#{ticker}": "Write this morning's note for {ticker}.",
               "digest#{day}#{lang}": "Digest of {day} in {lang}, {{braces}} kept.", "daily-quote": "A quote for today."}
    stack, _ = build(prompts=prompts)
    env = router_function(Template.from_stack(stack))["Properties"]["Environment"]["Variables"]
    import importlib
    import sys

    for name, value in {"AWS_DEFAULT_REGION": "us-east-1", "MODEL_ID": "m", "ANSWER_TABLE": "t", "MAX_AGE_SECONDS": "60",
                        "MAX_OUTPUT_TOKENS": "10", "PROMPTS": env["PROMPTS"]}.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("answer_router.handler", None)
    handler = importlib.import_module("answer_router.handler")

    def prompt(key: str) -> str | None:
        return next((p for p in (kp.prompt_for(key) for kp in handler.PROMPTS) if p is not None), None)

    assert prompt("ticker-morning#aapl") == "Write this morning's note for aapl."
    assert prompt("digest#monday#de") == "Digest of monday in de, {braces} kept."
    assert prompt("daily-quote") == "A quote for today."
    assert prompt("ticker-morning#") is None and prompt("ticker-morning#a#b") is None and prompt("digest#monday") is None
    assert prompt("ticker-morning#{lang}") == "Write this morning's note for {lang}."  # values are text, never templates
    sys.modules.pop("answer_router.handler", None)


def test_grant_invoke_names_the_unqualified_function_and_another_account_gets_a_permission():
    """Issue 34.10: aws-cdk-lib's Function.grant_invoke adds "<arn>:*" (every version and alias), an
    AwsSolutions-IAM5 finding on the caller's own role; the router publishes neither, so the caller
    gets exactly the function's ARN (tests/test_grants_nag.py runs cdk-nag over it)."""
    stack, router = build()
    caller = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    assert router.grant_invoke(caller).success
    other_account = iam.AccountPrincipal("210987654321")
    router.grant_invoke(other_account)
    template = Template.from_stack(stack).to_json()
    function_id = next(k for k, r in template["Resources"].items()
                       if r["Type"] == "AWS::Lambda::Function" and k.startswith("RouterFunction"))
    (statement,) = [s for s in policy_statements(template) if "lambda:InvokeFunction" in _list(s["Action"])]
    assert statement["Resource"] == {"Fn::GetAtt": [function_id, "Arn"]}
    (permission,) = [p for p in resources(template, "AWS::Lambda::Permission").values()
                     if p["Properties"]["Principal"] != "lambda.amazonaws.com"]
    assert permission["Properties"]["Principal"] == "210987654321"
    assert permission["Properties"]["Action"] == "lambda:InvokeFunction"


def test_server_errors_and_function_errors_alarm_with_the_users_actions():
    """Issue 34.12: a router answering 5xx, or failing outright, went unnoticed."""
    from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
    from aws_cdk import aws_sns as sns

    stack = new_stack()
    topic = sns.Topic(stack, "Pager")
    store = AnswerStore(stack, "Store")
    router = AnswerRouter(stack, "Router", answer_store=store, model=MODEL, server_error_threshold=3,
                          alarm_actions=[cloudwatch_actions.SnsAction(topic)])
    template = Template.from_stack(stack).to_json()
    alarms = {r["Properties"]["MetricName"]: r["Properties"] for r in resources(template, "AWS::CloudWatch::Alarm").values()}
    assert sorted(router.alarms) == ["FunctionErrors", "ServerErrors"]
    function_id = next(k for k, r in template["Resources"].items()
                       if r["Type"] == "AWS::Lambda::Function" and k.startswith("RouterFunction"))
    served = alarms["AnswerServerErrors"]
    assert (served["Namespace"], served["Statistic"], served["Period"], served["Threshold"]) == ("GenaiPacer", "Sum", 300, 3)
    assert served["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    crashed = alarms["Errors"]
    assert (crashed["Namespace"], crashed["Statistic"], crashed["Threshold"]) == ("AWS/Lambda", "Sum", 0)
    assert crashed["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    topic_id = next(iter(resources(template, "AWS::SNS::Topic")))
    assert all(alarm["AlarmActions"] == [{"Ref": topic_id}] for alarm in alarms.values())


def test_a_deploy_time_server_error_threshold_is_the_alarms_threshold_and_a_bad_one_is_refused():
    stack = new_stack()
    threshold = cdk.CfnParameter(stack, "Tolerated", type="Number").value_as_number
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=MODEL, server_error_threshold=threshold)
    template = Template.from_stack(stack).to_json()
    (alarm,) = [r["Properties"] for r in resources(template, "AWS::CloudWatch::Alarm").values()
                if r["Properties"]["MetricName"] == "AnswerServerErrors"]
    assert alarm["Threshold"] == {"Ref": "Tolerated"}
    assert "e+2" not in json.dumps(alarm["AlarmDescription"])
    with pytest.raises(InvalidPropsError, match="server_error_threshold=-1 is below the minimum of 0"):
        build(server_error_threshold=-1)


@pytest.mark.parametrize("max_output_tokens", [100, 4_000])
def test_max_output_tokens_is_every_misss_max_tokens_and_leaves_the_timeout_alone(max_output_tokens):
    """Trial F8: the docstring said max_output_tokens was a default and a ceiling and sized the function's
    timeout; the function sends it as every miss's maxTokens (a caller's inferenceConfig is refused) and the
    timeout is the timeout prop's. The docstring now says what the code does."""
    stack, _ = build(max_output_tokens=max_output_tokens)
    function = router_function(Template.from_stack(stack))["Properties"]
    assert function["Environment"]["Variables"]["MAX_OUTPUT_TOKENS"] == str(max_output_tokens)
    assert function["Timeout"] == 60
    doc = " ".join((AnswerRouter.__doc__ or "").split())
    assert "max_output_tokens: the maxTokens of every miss's model call (a caller cannot set it" in doc
    assert "It does not change the function's timeout" in doc and "sizes the function's timeout" not in doc
