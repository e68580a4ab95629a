"""BatchPrecompute's AWS facts checked by machine against the installed botocore service models.

Facts only a document or a deploy can confirm (the event's detail fields, the quota values, the output
layout, the AWS/Bedrock/Batch metric names) are next to their constants with their sources, and the
code is built so that a wrong one is harmless; what can be checked offline is checked here.
"""

from __future__ import annotations

import importlib
import re
import sys

import aws_cdk as cdk
import botocore.session
import pytest
from genai_pacer import BedrockModel
from genai_pacer.precompute import batch
from helpers import all_states, definition, new_stack, only, template_of

SESSION = botocore.session.get_session()
BEDROCK = SESSION.get_service_model("bedrock")
DYNAMODB = SESSION.get_service_model("dynamodb")
SFN = SESSION.get_service_model("stepfunctions")


def errors_of(model, operation: str) -> set[str]:
    return {shape.name for shape in model.operation_model(operation).error_shapes}


def handler(name: str):
    sys.modules.pop(f"batch_precompute.{name}", None)
    return importlib.import_module(f"batch_precompute.{name}")


@pytest.fixture(scope="module")
def job_events():
    import os

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return handler("job_events")


def test_terminal_statuses_are_job_statuses_and_every_copy_agrees(job_events):
    from batch_precompute import records

    statuses = set(BEDROCK.shape_for("ModelInvocationJobStatus").enum)
    assert set(batch.TERMINAL_STATUSES) <= statuses
    assert set(batch.TERMINAL_STATUSES) == set(job_events.TERMINAL) == set(records.TERMINAL)
    assert statuses - set(batch.TERMINAL_STATUSES) == {"Submitted", "Validating", "Scheduled", "InProgress", "Stopping"}
    assert set(batch.LOADABLE_STATUSES) == set(records.LOADABLE) == {"Completed", "PartiallyCompleted"}


def test_the_job_timeout_range_is_the_apis():
    limits = BEDROCK.shape_for("ModelInvocationJobTimeoutDurationInHours").metadata
    assert (limits["min"], limits["max"]) == batch.JOB_TIMEOUT_HOURS_RANGE


def test_generated_job_names_fit_the_apis_pattern_and_length():
    shape = BEDROCK.shape_for("ModelInvocationJobName").metadata
    pattern = re.compile(shape["pattern"])
    longest_prefix = "a" * 39 + "z"  # job_name_prefix allows 40 characters
    for prefix in (longest_prefix, "reviews-nightly", "gp0123456789"):
        name = f"{prefix}-0123abcd-0399"  # prepare's <prefix>-<run hash>-<job number>
        assert pattern.fullmatch(name) and len(name) <= shape["max"], name


def test_the_job_request_uses_only_members_the_api_has():
    stack = new_stack()
    batch.BatchPrecompute(stack, "Batch", model=BedrockModel.foundation("amazon.nova-lite-v1:0"), max_tokens=100)
    submit = all_states(definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine")))["Submit job"]

    def check(shape, parameters: dict, where: str) -> None:
        members = {name.lower(): name for name in shape.members}
        for given, value in parameters.items():
            name = given.removesuffix(".$")
            assert name.lower() in members, f"{where}.{name} is not a member of {shape.name}"
            if isinstance(value, dict) and shape.members[members[name.lower()]].type_name == "structure":
                check(shape.members[members[name.lower()]], value, f"{where}.{name}")

    request = BEDROCK.operation_model("CreateModelInvocationJob").input_shape
    check(request, submit["Parameters"], "CreateModelInvocationJob")
    assert submit["Parameters"]["ModelInvocationType"] in BEDROCK.shape_for("ModelInvocationType").enum
    assert submit["Parameters"]["InputDataConfig"]["S3InputDataConfig"]["S3InputFormat"] in BEDROCK.shape_for("S3InputFormat").enum
    assert {m.lower() for m in request.required_members} <= {name.removesuffix(".$").lower() for name in submit["Parameters"]}


def test_the_job_events_function_reads_members_get_model_invocation_job_has(job_events):
    operation = BEDROCK.operation_model("GetModelInvocationJob")
    assert list(operation.input_shape.members) == ["jobIdentifier"]
    assert {"jobArn", "jobName", "status", "message"} <= set(operation.output_shape.members)
    assert errors_of(BEDROCK, "GetModelInvocationJob") >= job_events.NOT_OURS


def test_tokens_step_functions_no_longer_knows_are_send_task_successs_errors(job_events):
    assert errors_of(SFN, "SendTaskSuccess") >= job_events.GONE


def test_retried_error_names_are_the_apis_errors_with_the_integrations_prefix():
    create = errors_of(BEDROCK, "CreateModelInvocationJob")
    for name in batch.SUBMIT_RETRY_ERRORS:
        service, _, error = name.partition(".")
        assert service == "Bedrock" and (error in create or error == "ServiceUnavailableException"), name
    get = errors_of(BEDROCK, "GetModelInvocationJob")
    assert all(name.split(".", 1)[1] in get for name in batch.CHECK_RETRY_ERRORS)
    put = errors_of(DYNAMODB, "PutItem")
    for name in batch._TOKEN_TABLE_ERRORS:
        service, _, error = name.partition(".")
        assert service in ("DynamoDb", "DynamoDB")
        # Step Functions adds "Exception" where the service's own name lacks it.
        assert error in put or error.removesuffix("Exception") in put, name


def test_the_loaders_permanent_write_errors_are_not_putitems_transient_ones():
    from batch_precompute import load

    transient = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded", "InternalServerError"}
    assert transient <= errors_of(DYNAMODB, "PutItem") and not (load.PERMANENT_WRITE_ERRORS & transient)
    assert load.MAX_ITEM_BYTES == 400 * 1024


def test_the_rule_matches_only_the_documented_fields():
    stack = new_stack()
    batch.BatchPrecompute(stack, "Batch", model=BedrockModel.foundation("amazon.nova-lite-v1:0"), max_tokens=100)
    rules = template_of(stack).find_resources("AWS::Events::Rule")
    [pattern] = [r["Properties"]["EventPattern"] for r in rules.values() if "EventPattern" in r["Properties"]]
    assert pattern == {"source": [batch.EVENT_SOURCE], "detail-type": [batch.JOB_STATE_CHANGE],
                       "detail": {batch.JOB_STATE_CHANGE_STATUS_FIELD: list(batch.TERMINAL_STATUSES)}}


def test_the_status_check_stays_far_below_the_execution_history_limit():
    # A job loops wait -> check at most once per LAST_RESORT_CHECK; about 15 history events a loop.
    loops = batch.JOB_TIMEOUT_HOURS_RANGE[1] * 3600 / batch.LAST_RESORT_CHECK.to_seconds()
    assert loops * 15 * batch.INLINE_MAP_LIMIT < 25_000
    assert batch.DEFAULT_STATUS_CHECK_INTERVAL.to_minutes() <= 5


def test_the_synthesized_template_passes_cfn_lint():
    import json

    from cfnlint.api import ManualArgs, lint

    stack = new_stack()
    batch.BatchPrecompute(stack, "Batch", model=BedrockModel.foundation("amazon.nova-lite-v1:0"), max_tokens=100,
                          status_check_interval=cdk.Duration.minutes(cdk.CfnParameter(stack, "Minutes", type="Number").value_as_number))
    findings = lint(json.dumps(template_of(stack).to_json()), config=ManualArgs(regions=["us-east-1"]))
    assert [f"{m.rule.id} {m.message}" for m in findings if m.rule.id.startswith("E")] == []
