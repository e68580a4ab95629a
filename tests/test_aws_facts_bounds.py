"""The limits behind the counts issue 35.5 bounded, read back from botocore's service models and the
CloudFormation schemas cfn-lint ships (both installed with the dev tools). Where the API and the schema
give no maximum, the limit is an account quota or a model's own: the construct warns, and these tests
fail if a maximum appears (the warning should then become a refusal naming it)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import aws_cdk as cdk
import botocore.loaders
import cfnlint
from aws_cdk import aws_scheduler as scheduler
from aws_cdk.assertions import Template
from genai_pacer import (
    AnswerStore,
    BedrockModel,
    ConverseRequest,
    ScheduledPrecompute,
    _checks,
    precompute,
)
from genai_pacer.step_functions import model_tasks, orchestration
from helpers import all_states, definition, new_stack, only

SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"


@cache
def service(name: str) -> dict:
    return botocore.loaders.Loader().load_service_model(name, "service-2")


def member_limits(service_name: str, operation: str, member: str) -> dict:
    model = service(service_name)
    request = model["shapes"][model["operations"][operation]["input"]["shape"]]
    return model["shapes"][request["members"][member]["shape"]]


def resource_schema(type_name: str) -> dict:
    providers = json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text())
    return json.loads((SCHEMAS / "resources" / f"{providers[type_name]}.json").read_text())


def test_reserved_concurrency_has_no_maximum_but_the_accounts_quota():
    """PutFunctionConcurrency and AWS::Lambda::Function take any count >= 0: the bound is the account's
    concurrent executions (1,000 by default, adjustable) less the 100 Lambda keeps unreserved, so
    AnswerRouter and QueuedInference warn above 900 instead of refusing."""
    api = member_limits("lambda", "PutFunctionConcurrency", "ReservedConcurrentExecutions")
    schema = resource_schema("AWS::Lambda::Function")["properties"]["ReservedConcurrentExecutions"]
    assert (api.get("min"), api.get("max")) == (0, None)
    assert (schema.get("minimum"), schema.get("maximum")) == (0, None)
    assert _checks.LAMBDA_DEFAULT_RESERVABLE_CONCURRENCY == 1_000 - 100


def test_converse_max_tokens_has_no_maximum_but_the_models():
    """InferenceConfiguration.maxTokens has a minimum only; each model refuses more than its own limit,
    so ConverseRequest warns above the largest documented one instead of refusing."""
    model = service("bedrock-runtime")
    shape = model["shapes"][model["shapes"]["InferenceConfiguration"]["members"]["maxTokens"]["shape"]]
    assert (shape.get("min"), shape.get("max")) == (model_tasks.MIN_MAX_TOKENS, None)
    assert model_tasks.LARGEST_DOCUMENTED_MAX_OUTPUT_TOKENS == 128_000


def test_the_inline_item_and_failed_key_bounds_follow_the_state_payload_limit():
    """expected_items and tolerated_failed_keys are refused above what a 256 KiB state can hold: the
    execution input limit of StartExecution, the same as every state's."""
    payload = member_limits("stepfunctions", "StartExecution", "input")["max"]
    assert payload == orchestration.STATE_PAYLOAD_LIMIT_BYTES
    assert payload // len("0,") == orchestration.MAX_INLINE_MAP_ITEMS
    smallest_failed_key = json.dumps({"key": "k", "error": "E"}, separators=(",", ":")) + ","
    assert len(smallest_failed_key) == precompute.MIN_FAILED_KEY_BYTES
    assert precompute.MAX_TOLERATED_FAILED_KEYS == payload // len(smallest_failed_key) == 10_922


def test_a_failed_key_is_listed_with_exactly_the_fields_the_bound_counts():
    """The bound assumes each failed key is {"key", "error"}: the states that end a key with an error."""
    stack = new_stack()
    ScheduledPrecompute(
        stack, "Pre", answer_store=AnswerStore(stack, "Store"), model=BedrockModel.foundation("amazon.nova-lite-v1:0"),
        request=ConverseRequest(prompt="p", max_tokens=5), max_concurrency=2, items=[{"key": "k"}],
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_LONDON),
    )
    states = all_states(definition(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))
    failed = [s["Parameters"] for s in states.values()
              if s.get("Type") == "Pass" and any(k.startswith("error") for k in s.get("Parameters", {}))]
    assert failed and all({k.removesuffix(".$") for k in p} == {"key", "error"} for p in failed)
