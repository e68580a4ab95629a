"""The Step Functions facts the orchestration constructs rely on, read back from botocore's
stepfunctions model and cfn-lint's Amazon States Language schema (both installed with the dev
tools). A drift in either fails here, next to the constant it contradicts."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import botocore.loaders
import cfnlint
import pytest
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import BedrockModel, BoundedMap, ConverseRequest
from genai_pacer.step_functions import model_tasks, orchestration
from helpers import definition, new_stack, only, template_of

ASL_SCHEMA = Path(cfnlint.__file__).parent / "data" / "schemas" / "other" / "step_functions" / "statemachine.json"


@cache
def stepfunctions() -> dict:
    return botocore.loaders.Loader().load_service_model("stepfunctions", "service-2")


@cache
def asl() -> dict:
    return json.loads(ASL_SCHEMA.read_text())


def input_limit(operation: str) -> int:
    model = stepfunctions()
    request = model["shapes"][model["operations"][operation]["input"]["shape"]]
    return model["shapes"][request["members"]["input"]["shape"]]["max"]


@pytest.mark.parametrize("operation", ["StartExecution", "StartSyncExecution"])
def test_the_state_payload_limit_is_the_execution_input_limit(operation):
    """The Map output estimate warns against 256 KiB: the largest input an execution accepts."""
    assert input_limit(operation) == orchestration.STATE_PAYLOAD_LIMIT_BYTES


def test_map_max_concurrency_is_a_non_negative_number_in_the_states_language():
    """0 means unbounded (refused unless allow_unbounded); the constructs' caps stay in the schema's range."""
    max_concurrency = asl()["definitions"]["map"]["properties"]["MaxConcurrency"]
    assert max_concurrency["minimum"] == 0
    assert 1 <= orchestration.INLINE_MAP_LIMIT <= orchestration.DISTRIBUTED_MAP_LIMIT


def test_retry_fields_the_construct_writes_exist_in_the_states_language():
    retrier = asl()["definitions"]["task"]["properties"]["Retry"]["items"]["properties"]
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=4, model=BedrockModel.foundation("amazon.nova-lite-v1:0"),
               request=ConverseRequest(prompt="p", max_tokens=5))
    states = definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine"))
    (written,) = states["States"]["Map"]["ItemProcessor"]["States"]["InvokeModel"]["Retry"]
    # cfn-lint 1.58's schema predates JitterStrategy and MaxDelaySeconds (aws-cdk-lib writes them from
    # its RetryProps): only the fields it knows are checked here; those two rely on aws-cdk-lib.
    assert set(written) - set(retrier) == {"JitterStrategy", "MaxDelaySeconds"}
    assert written["ErrorEquals"] == list(model_tasks.DEFAULT_RETRY_ERRORS)
    for field in ("MaxAttempts", "IntervalSeconds", "BackoffRate"):
        assert written[field] >= retrier[field]["minimum"]


def test_the_model_task_is_the_sdk_integration_resource_the_retry_names_assume():
    """BedrockRuntime.<Error> names belong to `aws-sdk:bedrockruntime:...` tasks."""
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=4, model=BedrockModel.foundation("amazon.nova-lite-v1:0"),
               request=ConverseRequest(prompt="p", max_tokens=5))
    states = definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine"))
    resource = states["States"]["Map"]["ItemProcessor"]["States"]["InvokeModel"]["Resource"]
    assert resource.endswith(":states:::aws-sdk:bedrockruntime:converse")


def test_an_express_parent_is_a_type_step_functions_knows():
    types = stepfunctions()["shapes"]["StateMachineType"]["enum"]
    assert {sfn.StateMachineType.STANDARD.value, sfn.StateMachineType.EXPRESS.value} <= set(types)
