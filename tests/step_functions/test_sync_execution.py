"""SyncExecutionUrl: a signed function URL that waits for an EXPRESS workflow, and its handler."""

from __future__ import annotations

import base64
import importlib
import json
import sys

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Annotations, Match
from botocore.stub import Stubber
from genai_pacer import InvalidPropsError, ParallelPrompts, StateMachineOptions, SyncExecutionUrl
from genai_pacer.models import BedrockModel
from genai_pacer.step_functions.model_tasks import ConverseRequest
from genai_pacer.step_functions.sync_execution import URL_INVOKE_ACTIONS
from helpers import new_stack, only, policy_statements, resources, template_of

NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
EXPRESS = StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)


def express_prompts(stack: cdk.Stack, options: StateMachineOptions = EXPRESS) -> ParallelPrompts:
    request = ConverseRequest(prompt="hi", max_tokens=10)
    return ParallelPrompts(stack, "P", model=NOVA, prompts={"A": request, "B": request}, state_machine_options=options)


@pytest.fixture(scope="module")
def synced():
    stack = new_stack()
    url = SyncExecutionUrl(stack, "Url", state_machine=express_prompts(stack).state_machine)
    return url, template_of(stack).to_json()


def test_url_uses_iam_auth_and_the_function_may_only_start_that_machine(synced):
    _, template = synced
    assert only(template, "AWS::Lambda::Url")["Properties"]["AuthType"] == "AWS_IAM"
    function = only(template, "AWS::Lambda::Function")["Properties"]
    # the EXPRESS limit (the workflow's timeout) + 5 s read margin + 10 s for refused starts' retries
    assert (function["Runtime"], function["Architectures"], function["Timeout"]) == ("python3.14", ["arm64"], 315)
    assert function["Handler"] == "sync_execution.handler.handler"
    variables = function["Environment"]["Variables"]
    assert (variables["WAIT_SECONDS"], variables["READ_MARGIN_SECONDS"]) == ("300", "5")
    start = [s for s in policy_statements(template) if s["Action"] == "states:StartSyncExecution"]
    (statement,) = start
    assert statement["Resource"]["Ref"].startswith("PStateMachine")


def test_callers_are_granted_both_actions_a_function_url_needs():
    """Function URLs created since October 2025 need lambda:InvokeFunctionUrl and lambda:InvokeFunction."""
    from aws_cdk import aws_iam as iam

    stack = new_stack()
    url = SyncExecutionUrl(stack, "Url", state_machine=express_prompts(stack).state_machine)
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    url.grant_invoke_url(caller)
    granted = {s["Action"]: s for s in policy_statements(template_of(stack).to_json()) if s["Action"] in URL_INVOKE_ACTIONS}
    assert set(granted) == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}
    assert granted["lambda:InvokeFunctionUrl"]["Condition"] == {"StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}}
    # InvokeFunction only through the URL: the grant does not open the function to direct invocation
    assert granted["lambda:InvokeFunction"]["Condition"] == {"Bool": {"lambda:InvokedViaFunctionUrl": True}}
    assert all(s["Resource"]["Fn::GetAtt"][0].startswith("UrlFunction") for s in granted.values())


def test_a_standard_machine_is_refused_with_the_fix():
    stack = new_stack()
    machine = express_prompts(stack, StateMachineOptions()).state_machine
    with pytest.raises(InvalidPropsError, match="is STANDARD; StartSyncExecution runs EXPRESS workflows only"):
        SyncExecutionUrl(stack, "Url", state_machine=machine)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(wait=cdk.Duration.minutes(6)), "wait=6 minutes exceeds the maximum of 5 minutes"),
        (dict(wait=30), "wait=30 is an int; pass a cdk.Duration"),
        (dict(state_machine="arn:aws:states:::x"), "state_machine='arn:aws:states:::x' is a str"),
        (dict(log_retention=7), "log_retention=7 is an int"),
        (dict(max_concurrent_executions=0), "max_concurrent_executions=0 is below the minimum of 1"),
        (dict(max_concurrent_executions=2.5), "max_concurrent_executions=2.5 is not a whole number"),
    ],
)
def test_bad_input_is_refused(kwargs, message):
    stack = new_stack()
    props = dict(state_machine=express_prompts(stack).state_machine) | kwargs
    with pytest.raises(InvalidPropsError, match=message):
        SyncExecutionUrl(stack, "Url", **props)


def test_max_concurrent_executions_reserves_the_functions_concurrency():
    stack = new_stack()
    SyncExecutionUrl(stack, "Url", state_machine=express_prompts(stack).state_machine, max_concurrent_executions=2)
    function = only(template_of(stack).to_json(), "AWS::Lambda::Function")["Properties"]
    assert function["ReservedConcurrentExecutions"] == 2


def test_wait_sets_the_read_timeout_and_the_function_timeout():
    stack = new_stack()
    SyncExecutionUrl(stack, "Url", state_machine=express_prompts(stack).state_machine, wait=cdk.Duration.seconds(50))
    function = only(template_of(stack).to_json(), "AWS::Lambda::Function")["Properties"]
    assert function["Timeout"] == 65  # 50 + 5 s read margin + 10 s for refused starts
    assert function["Environment"]["Variables"]["WAIT_SECONDS"] == "50"
    assert len(resources(template_of(stack).to_json(), "AWS::Logs::LogGroup")) == 2  # the machine's and the function's


def test_the_wait_defaults_to_the_workflows_own_timeout():
    stack = new_stack()
    options = StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS, timeout=cdk.Duration.seconds(90))
    SyncExecutionUrl(stack, "Url", state_machine=express_prompts(stack, options).state_machine)
    function = only(template_of(stack).to_json(), "AWS::Lambda::Function")["Properties"]
    assert (function["Timeout"], function["Environment"]["Variables"]["WAIT_SECONDS"]) == (105, "90")


def test_a_wait_shorter_than_the_workflow_warns():
    stack = new_stack()
    machine = express_prompts(stack).state_machine  # 5-minute timeout
    SyncExecutionUrl(stack, "Url", state_machine=machine, wait=cdk.Duration.seconds(30))
    Annotations.from_stack(stack).has_warning(
        "/Test/Url", Match.string_like_regexp("wait=30 seconds is shorter than the workflow's timeout of 5 minutes")
    )


def test_a_deploy_time_wait_keeps_its_margin():
    """The margin is added by the handler to the wait it reads; the function is sized for the longest wait."""
    stack = new_stack()
    seconds = cdk.CfnParameter(stack, "WaitSeconds", type="Number", min_value=1, max_value=300)
    SyncExecutionUrl(
        stack, "Url", state_machine=express_prompts(stack).state_machine,
        wait=cdk.Duration.seconds(seconds.value_as_number),
    )
    function = only(template_of(stack).to_json(), "AWS::Lambda::Function")["Properties"]
    assert function["Environment"]["Variables"]["WAIT_SECONDS"] == {"Ref": "WaitSeconds"}
    assert function["Environment"]["Variables"]["READ_MARGIN_SECONDS"] == "5"
    assert function["Timeout"] == 315


def test_a_deploy_time_wait_in_minutes_is_refused_with_the_fix():
    stack = new_stack()
    minutes = cdk.CfnParameter(stack, "WaitMinutes", type="Number")
    with pytest.raises(InvalidPropsError, match=r"wait is a deploy-time value in a unit other than seconds.*Duration\.seconds"):
        SyncExecutionUrl(
            stack, "Url", state_machine=express_prompts(stack).state_machine,
            wait=cdk.Duration.minutes(minutes.value_as_number),
        )


# --- handler ----------------------------------------------------------------------------------------

ARN = "arn:aws:states:us-east-1:111122223333:stateMachine:Digest"


@pytest.fixture
def handler(monkeypatch):
    monkeypatch.setenv("STATE_MACHINE_ARN", ARN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    sys.modules.pop("sync_execution.handler", None)
    module = importlib.import_module("sync_execution.handler")
    module.STEP_FUNCTIONS = boto3.client("stepfunctions", region_name="us-east-1")
    with Stubber(module.STEP_FUNCTIONS) as stubber:
        yield module, stubber


def sync_response(status: str, **fields) -> dict:
    return {"executionArn": ARN + ":x", "startDate": "2026-01-01T00:00:00Z", "stopDate": "2026-01-01T00:00:01Z",
            "status": status, **fields}


def test_handler_returns_the_output_of_a_succeeded_execution(handler):
    module, stubber = handler
    output = {"answers": {"A": "yes", "B": "no"}}
    stubber.add_response(
        "start_sync_execution", sync_response("SUCCEEDED", output=json.dumps(output)),
        {"stateMachineArn": ARN, "input": '{"review":"great"}'},  # compact JSON
    )
    body = base64.b64encode(b'{"review": "great"}').decode()
    reply = module.handler({"body": body, "isBase64Encoded": True})
    assert (reply["statusCode"], json.loads(reply["body"])) == (200, output)


@pytest.mark.parametrize(("status", "code"), [("FAILED", 502), ("TIMED_OUT", 504)])
def test_handler_reports_a_failed_or_timed_out_execution(handler, status, code):
    module, stubber = handler
    stubber.add_response("start_sync_execution", sync_response(status, error="States.Timeout", cause="slow"))
    reply = module.handler({"body": "{}"})
    assert reply["statusCode"] == code
    assert json.loads(reply["body"])["error"] == "States.Timeout"


@pytest.mark.parametrize("body", ["not json", "[1, 2]", ""])
def test_handler_refuses_a_body_that_is_not_a_json_object(handler, body):
    module, _ = handler
    reply = module.handler({"body": body})
    assert reply["statusCode"] == 400 and json.loads(reply["body"])["error"] == "InvalidRequest"
