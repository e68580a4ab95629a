"""Every prop of AnswerStore and AnswerRouter given an unresolved token of each kind a user passes from a
CfnParameter (value_as_number, value_as_string, cdk.Duration.seconds(value_as_number), value_as_list)
(issue 35.10).

A token reaches the template as a Ref where the value goes to CloudFormation unchanged (the router's
environment, its function's settings, an alarm's threshold and description), with the construct's logic
intact. Synth refuses it, naming the prop, where the value is needed at synth: the router's prompt
templates are checked against their patterns, and objects (a store, a model, a key) and switches are
refused by type. Never a token's number encoding (about -1.9e289) in the template or a message, never an
AttributeError, TypeError or jsii error. (ModelQuota's and QuotaLedger's: tests/quota/test_tokens_quota.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from genai_pacer import AnswerRouter, AnswerStore, BedrockModel
from helpers import check_token_case, new_stack, resources, token_of

KINDS = ("number", "string", "duration", "list")
NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
PROMPTS = {"note#{ticker}": "Write a note on {ticker}."}


# ---- the constructs, each with the least it needs -------------------------------------------------------


def store_and_router(stack: cdk.Stack, **props: Any) -> AnswerRouter:
    """An AnswerStore with `props`, read by a router: the handlers are where its settings land."""
    return AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store", **props), model=NOVA, prompts=PROMPTS)


def router(stack: cdk.Stack, **props: Any) -> AnswerRouter:
    return AnswerRouter(stack, "Router", **{"answer_store": AnswerStore(stack, "Store"), "model": NOVA,
                                            "prompts": PROMPTS, **props})


# ---- where a passing token lands ------------------------------------------------------------------------


def function(template: dict) -> dict:
    (found,) = [r["Properties"] for r in resources(template, "AWS::Lambda::Function").values()
                if r["Properties"].get("Handler") == "answer_router.handler.handler"]
    return found


def env(name: str) -> Callable[[dict], list[Any]]:
    return lambda t: [function(t)["Environment"]["Variables"][name]]


def server_errors_alarm(template: dict) -> list[Any]:
    (alarm,) = [r["Properties"] for k, r in resources(template, "AWS::CloudWatch::Alarm").items() if "ServerErrors" in k]
    return [alarm["Threshold"], alarm["AlarmDescription"]]


Where = Callable[[dict], list[Any]]
#: name -> (the class or method, its props, how to build it with one prop given, (prop, kind) -> the template
#: values that must each hold the parameter). Every other (prop, kind) is refused, naming the prop.
TABLE: dict[str, tuple[Callable[..., Any], tuple[str, ...], Callable[..., Any], dict[tuple[str, str], Where]]] = {
    "AnswerStore": (
        AnswerStore,
        ("table", "encryption_key", "answer_ttl"),
        store_and_router,
        {("answer_ttl", "duration"): env("ANSWER_TTL_SECONDS")},
    ),
    "AnswerRouter": (
        AnswerRouter,
        ("answer_store", "model", "prompts", "system_prompt", "max_age", "write_back", "coalesce_wait", "service_tier",
         "max_output_tokens", "timeout", "memory_size", "reserved_concurrency", "function_url", "encryption_key",
         "log_retention", "server_error_threshold", "alarm_actions"),
        router,
        {
            ("system_prompt", "string"): env("SYSTEM_PROMPT"),
            ("service_tier", "string"): env("SERVICE_TIER"),
            ("max_age", "duration"): env("MAX_AGE_SECONDS"),
            ("coalesce_wait", "duration"): env("COALESCE_WAIT_SECONDS"),
            ("max_output_tokens", "number"): env("MAX_OUTPUT_TOKENS"),
            ("timeout", "duration"): lambda t: [function(t)["Timeout"]],
            ("memory_size", "number"): lambda t: [function(t)["MemorySize"]],
            ("reserved_concurrency", "number"): lambda t: [function(t)["ReservedConcurrentExecutions"]],
            ("server_error_threshold", "number"): server_errors_alarm,
        },
    ),
}
CASES = [(name, prop, kind) for name, (_, props, *_rest) in TABLE.items() for prop in props for kind in KINDS]


@pytest.mark.parametrize(("name", "prop", "kind"), CASES, ids=["-".join(case) for case in CASES])
def test_every_prop_given_every_kind_of_token_reaches_the_template_or_is_refused_by_name(name, prop, kind):
    check_token_case(TABLE, name, prop, kind)


def test_the_table_counts():
    assert len(CASES) == 4 * (3 + 17)
    assert sum(len(passes) for *_rest, passes in TABLE.values()) == 10


# ---- the logic each passing token keeps ----------------------------------------------------------------


def test_a_deploy_time_server_error_threshold_is_named_in_the_alarm_description():
    stack = new_stack()
    router(stack, server_error_threshold=token_of(stack, "number"))
    _, description = server_errors_alarm(Template.from_stack(stack).to_json())
    parts = description["Fn::Join"][1]
    assert parts[0].endswith("more than ") and parts[1] == {"Ref": "Param"} and parts[2].startswith(" answers in 5 minutes")


def test_a_deploy_time_ttl_reaches_every_router_as_the_parameter():
    stack = new_stack()
    store = AnswerStore(stack, "Store", answer_ttl=token_of(stack, "duration"))
    AnswerRouter(stack, "Router", answer_store=store, model=NOVA, prompts=PROMPTS)
    AnswerRouter(stack, "ReadOnly", answer_store=store, model=NOVA, write_back=False)
    template = Template.from_stack(stack)

    def functions_with_ttl(value: Any) -> None:
        template.resource_properties_count_is(
            "AWS::Lambda::Function", {"Environment": {"Variables": {"ANSWER_TTL_SECONDS": value}}}, 2)

    functions_with_ttl(Match.any_value())
    functions_with_ttl({"Ref": "Param"})  # both routers, and no other value
    template.has_resource_properties("AWS::DynamoDB::Table", {"TimeToLiveSpecification": {"AttributeName": "expires_at"}})
