"""BedrockRetry, BoundedMap and ParallelPrompts: every prop path and default, read from the template."""

from __future__ import annotations

import json
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
from genai_pacer import (
    DEFAULT_RETRY_ERRORS,
    BedrockModel,
    BedrockRetry,
    BoundedMap,
    ParallelPrompts,
    StateMachineOptions,
    planning,
)
from genai_pacer._nag import flatten_reference
from helpers import all_states, definition, new_stack, only, policy_statements, resources, template_of

PROFILE = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
BODY = {"messages": [{"role": "user", "content": sfn.JsonPath.string_at("$.prompt")}], "max_tokens": 400}


def bedrock_resources(template) -> list:
    found = []
    for statement in policy_statements(template):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(a.startswith("bedrock:") for a in actions):
            found.extend(
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
    return found


def arn_text(arn) -> str:
    """An Fn::Join ARN as text with pseudo parameters named."""
    if isinstance(arn, str):
        return arn
    return "".join(p if isinstance(p, str) else "<" + p.get("Ref", "?") + ">" for p in arn["Fn::Join"][1])


# --- BedrockRetry -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inline_map():
    stack = new_stack()
    construct = BoundedMap(stack, "Map", max_concurrency=8, model=PROFILE, body=BODY)
    template = template_of(stack)
    return construct, template.to_json()


def test_retry_defaults_on_every_model_task(inline_map):
    _, template = inline_map
    asl = definition(only(template, "AWS::StepFunctions::StateMachine"))
    (retry,) = all_states(asl)["InvokeModel"]["Retry"]
    assert retry == {
        "ErrorEquals": list(DEFAULT_RETRY_ERRORS),
        "IntervalSeconds": 2,
        "BackoffRate": 2,
        "MaxAttempts": 6,
        "MaxDelaySeconds": 30,
        "JitterStrategy": "FULL",
    }
    assert "Bedrock.ThrottlingException" in retry["ErrorEquals"]
    assert "BedrockRuntime.ThrottlingException" in retry["ErrorEquals"]


def test_retry_is_overridable():
    stack = new_stack()
    retry = BedrockRetry(
        errors=("Bedrock.ThrottlingException",),
        interval=cdk.Duration.seconds(1),
        backoff_rate=3,
        max_attempts=4,
        max_delay=cdk.Duration.seconds(10),
    )
    BoundedMap(stack, "Map", max_concurrency=4, model=NOVA, body=BODY, retry=retry)
    asl = definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine"))
    assert all_states(asl)["InvokeModel"]["Retry"] == [
        {
            "ErrorEquals": ["Bedrock.ThrottlingException"],
            "IntervalSeconds": 1,
            "BackoffRate": 3,
            "MaxAttempts": 4,
            "MaxDelaySeconds": 10,
            "JitterStrategy": "FULL",
        }
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(errors=()), "errors=\\(\\) retries nothing"),
        (dict(max_attempts=0), "max_attempts=0 never retries"),
        (dict(backoff_rate=0.5), "backoff_rate=0.5 shrinks the wait"),
        (
            dict(interval=cdk.Duration.seconds(20), max_delay=cdk.Duration.seconds(5)),
            "max_delay=5 seconds is shorter",
        ),
    ],
)
def test_retry_rejects_settings_that_defeat_it(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BedrockRetry(**kwargs)


# --- BoundedMap: inline ---------------------------------------------------------------------------------


def test_inline_map_caps_concurrency_and_reads_items(inline_map):
    _, template = inline_map
    asl = definition(only(template, "AWS::StepFunctions::StateMachine"))
    state = asl["States"]["Map"]
    assert state["MaxConcurrency"] == 8
    assert state["ItemsPath"] == "$.items"
    assert state["ItemProcessor"]["ProcessorConfig"]["Mode"] == "INLINE"
    assert asl["TimeoutSeconds"] == 24 * 3600


def test_state_machine_is_logged_traced_and_encrypted(inline_map):
    _, template = inline_map
    machine = only(template, "AWS::StepFunctions::StateMachine")["Properties"]
    assert machine["TracingConfiguration"] == {"Enabled": True}
    assert machine["LoggingConfiguration"]["Level"] == "ALL"
    assert machine["LoggingConfiguration"]["IncludeExecutionData"] is False
    log_group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert "KmsKeyId" in log_group and log_group["RetentionInDays"] == 30
    assert only(template, "AWS::KMS::Key")["Properties"]["EnableKeyRotation"] is True


def test_profile_role_invokes_only_the_profile_and_its_regional_models(inline_map):
    _, template = inline_map
    arns = sorted(arn_text(a) for a in bedrock_resources(template))
    assert arns == sorted(
        [
            "arn:<AWS::Partition>:bedrock:us-east-1:111122223333:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0",
        ]
        + [
            f"arn:<AWS::Partition>:bedrock:{r}::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0"
            for r in ("us-east-1", "us-east-2", "us-west-2")
        ]
    )
    for statement in policy_statements(template):
        if statement["Resource"] == "*":
            assert all(a.startswith(("xray:", "logs:")) for a in statement["Action"])


def test_foundation_model_role_invokes_only_that_model():
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=planning.RatePlan(300, "tpm", 12, 5), model=NOVA, body=BODY)
    template = template_of(stack).to_json()
    assert [arn_text(a) for a in bedrock_resources(template)] == [
        "arn:<AWS::Partition>:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0"
    ]
    assert (
        definition(only(template, "AWS::StepFunctions::StateMachine"))["States"]["Map"]["MaxConcurrency"]
        == 12
    )


def test_existing_log_group_role_and_options_are_used():
    stack = new_stack()
    group = logs.LogGroup(stack, "Mine")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("states.amazonaws.com"))
    BoundedMap(
        stack,
        "Map",
        max_concurrency=5,
        model=NOVA,
        body=BODY,
        state_machine_options=StateMachineOptions(
            log_group=group,
            role=role,
            log_execution_data=True,
            state_machine_name="tickers",
            state_machine_type=sfn.StateMachineType.EXPRESS,
            timeout=cdk.Duration.minutes(5),
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
    assert definition(only(template, "AWS::StepFunctions::StateMachine"))["TimeoutSeconds"] == 300


def test_one_at_a_time_synthesizes_with_a_warning():
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=1, model=NOVA, body=BODY)
    Annotations.from_stack(stack).has_warning(
        "/Test/Map", Match.string_like_regexp("runs every call in sequence")
    )


def test_unbounded_only_when_allowed():
    with pytest.raises(ValueError, match="max_concurrency=0 leaves the Map unbounded.*planning"):
        BoundedMap(new_stack(), "Map", max_concurrency=0, model=NOVA, body=BODY)
    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=0, allow_unbounded=True, model=NOVA, body=BODY)
    state = definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine"))["States"][
        "Map"
    ]
    assert state.get("MaxConcurrency", 0) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(max_concurrency=41),
            "max_concurrency=41 exceeds the inline Map limit of 40.*mode='distributed'",
        ),
        (dict(max_concurrency=-2), "max_concurrency=-2 is negative"),
        (dict(max_concurrency=5, mode="fast"), "mode='fast' must be 'inline' or 'distributed'"),
        (dict(max_concurrency=5, model=None), "exactly one of model"),
        (dict(max_concurrency=5, body=None), "body is not"),
        (dict(max_concurrency=5, items_key="x.jsonl"), "items_key applies to mode='distributed' only"),
        (dict(max_concurrency=5, mode="distributed"), "pass items_bucket and items_key"),
    ],
)
def test_bounded_map_rejects_bad_input(kwargs, message):
    props = dict(model=NOVA, body=BODY) | kwargs
    with pytest.raises(ValueError, match=message):
        BoundedMap(new_stack(), "Map", **props)


def test_both_model_and_processor_is_rejected():
    stack = new_stack()
    with pytest.raises(ValueError, match="exactly one of model"):
        BoundedMap(
            stack, "Map", max_concurrency=2, model=NOVA, body=BODY, item_processor=sfn.Pass(stack, "P")
        )


# --- BoundedMap: distributed ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def distributed_map():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Items")
    results = s3.Bucket(stack, "Results")
    construct = BoundedMap(
        stack,
        "Map",
        mode="distributed",
        max_concurrency=500,
        model=NOVA,
        body=BODY,
        items_bucket=bucket,
        items_key="in/items.jsonl",
        results_bucket=results,
        results_prefix="out/",
        tolerated_failure_percentage=2.5,
    )
    return construct, template_of(stack).to_json()


def test_distributed_map_reads_s3_and_writes_results(distributed_map):
    machine = only(distributed_map[1], "AWS::StepFunctions::StateMachine")
    state = definition(machine)["States"]["Map"]
    assert state["MaxConcurrency"] == 500
    assert state["ItemReader"]["ReaderConfig"]["InputType"] == "JSONL"
    assert state["ItemReader"]["Parameters"]["Key"] == "in/items.jsonl"
    assert state["ResultWriter"]["Parameters"]["Prefix"] == "out/"
    assert state["ToleratedFailurePercentage"] == 2.5
    assert state["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert state["ItemProcessor"]["States"]["InvokeModel"]["Retry"][0]["JitterStrategy"] == "FULL"
    joined = str(machine["Properties"]["DefinitionString"])
    assert "Results" in joined  # the results bucket, not the items bucket, receives the output


def acknowledged(construct) -> set[str]:
    """The rule ids acknowledged on a construct itself (not inherited)."""
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    return {
        rule.removeprefix("Annotation::")
        for entry in construct.node.metadata
        if entry.type == key
        for rule in entry.data
    }


def test_distributed_map_acknowledges_exactly_its_generated_names(distributed_map):
    machine = distributed_map[0].state_machine
    stack = cdk.Stack.of(machine)
    logical_id = stack.resolve(stack.get_logical_id(machine.node.default_child))
    machine_ref = json.dumps(
        {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": logical_id}]}]}, separators=(",", ":")
    )
    executions = f"arn:<AWS::Partition>:states:us-east-1:111122223333:execution:{machine_ref}"
    assert acknowledged(machine.node.find_child("DistributedMapPolicy")) == {
        f"AwsSolutions-IAM5[Resource::{executions}:*]",
        f"AwsSolutions-IAM5[Resource::{executions}/*:*]",
    }
    s3_findings = sorted(acknowledged(machine.role.node.find_child("DefaultPolicy")))
    # objects of the items bucket (reader) and of the results bucket (writer), nothing else
    assert [re.sub(r"[0-9A-F]{8}>", ">", f) for f in s3_findings] == [
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::<Items>/*]",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::<Results>/*]",
    ]
    assert acknowledged(machine.role) == {"AwsSolutions-IAM5[Resource::*]"}
    for statement in policy_statements(distributed_map[1]):
        if statement["Resource"] == "*":
            assert all(a.startswith(("xray:", "logs:")) for a in statement["Action"])


@pytest.mark.parametrize(
    ("reference", "flat"),
    [
        ("arn:${AWS::Partition}:s3:::b/*", "arn:<AWS::Partition>:s3:::b/*"),
        ({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":x/*"]]}, "arn:<AWS::Partition>:x/*"),
        ({"Fn::GetAtt": ["Bucket1", "Arn"]}, "<Bucket1.Arn>"),
        ({"Fn::Sub": "${Bucket}/*"}, "<Bucket>/*"),
        ({"Fn::Select": [0, ["a"]]}, '{"Fn::Select":[0,["a"]]}'),
    ],
)
def test_flatten_reference_names_findings_as_cdk_nag_does(reference, flat):
    assert flatten_reference(reference) == flat


def test_distributed_json_items_with_batching_in_a_custom_processor():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Items")
    own = tasks.BedrockInvokeModel(
        stack,
        "Summarize",
        model=NOVA.as_imodel(stack, "Nova"),
        body=sfn.TaskInput.from_object({"items": sfn.JsonPath.object_at("$.Items")}),
    )
    BoundedMap(
        stack,
        "Map",
        mode="distributed",
        max_concurrency=20,
        item_processor=own,
        items_bucket=bucket,
        items_key="items.json",
        items_format="json",
        batch_max_items=25,
        child_execution_type=sfn.StateMachineType.EXPRESS,
    )
    state = definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine"))["States"][
        "Map"
    ]
    assert state["ItemReader"]["ReaderConfig"]["InputType"] == "JSON"
    assert state["ItemBatcher"] == {"MaxItemsPerBatch": 25}
    assert state["ItemProcessor"]["ProcessorConfig"]["ExecutionType"] == "EXPRESS"
    assert state["ItemProcessor"]["States"]["Summarize"]["Retry"][0]["ErrorEquals"] == list(
        DEFAULT_RETRY_ERRORS
    )
    assert state["ResultWriter"]["Parameters"]["Prefix"] == "genai-pacer-results/"


def test_batching_a_per_item_request_is_rejected():
    stack = new_stack()
    with pytest.raises(ValueError, match="batch_max_items=10 hands each child a list"):
        BoundedMap(
            stack,
            "Map",
            mode="distributed",
            max_concurrency=5,
            model=NOVA,
            body=BODY,
            items_bucket=s3.Bucket(stack, "B"),
            items_key="k",
            batch_max_items=10,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_concurrency=10_001), "max_concurrency=10001 exceeds the distributed Map limit of 10000"),
        (dict(max_concurrency=5, tolerated_failure_percentage=150), "tolerated_failure_percentage=150"),
        (dict(max_concurrency=5, items_format="csv"), "items_format='csv'"),
    ],
)
def test_distributed_map_rejects_bad_input(kwargs, message):
    stack = new_stack()
    with pytest.raises(ValueError, match=message):
        BoundedMap(
            stack,
            "Map",
            mode="distributed",
            model=NOVA,
            body=BODY,
            items_bucket=s3.Bucket(stack, "B"),
            items_key="k",
            **kwargs,
        )


# --- ParallelPrompts ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parallel():
    stack = new_stack()
    ParallelPrompts(
        stack,
        "Digest",
        model=PROFILE,
        prompts={name: BODY for name in ("Summary", "Sentiment", "Issues", "Tags")},
        synthesis={
            "messages": [
                {"role": "user", "content": sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$"))}
            ]
        },
        synthesis_model=NOVA,
    )
    return template_of(stack).to_json()


def test_prompts_run_as_parallel_branches_then_synthesis(parallel):
    asl = definition(only(parallel, "AWS::StepFunctions::StateMachine"))
    prompts = asl["States"]["Prompts"]
    assert prompts["Type"] == "Parallel"
    assert [b["StartAt"] for b in prompts["Branches"]] == ["Summary", "Sentiment", "Issues", "Tags"]
    assert prompts["Next"] == "Synthesis"
    for branch in prompts["Branches"]:
        (task,) = branch["States"].values()
        assert task["Retry"][0]["JitterStrategy"] == "FULL"
        assert task["ResultSelector"] == {"prompt": branch["StartAt"], "response.$": "$.Body"}
    assert asl["States"]["Synthesis"]["Retry"][0]["MaxDelaySeconds"] == 30
    assert asl["States"]["Synthesis"]["End"] is True
    assert asl["TimeoutSeconds"] == 900


def test_parallel_role_covers_both_models_and_nothing_else(parallel):
    arns = {arn_text(a) for a in bedrock_resources(parallel)}
    assert "arn:<AWS::Partition>:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0" in arns
    assert any("inference-profile/us.anthropic" in a for a in arns)
    assert len(arns) == 5  # profile + 3 routed regions + the synthesis model
    machine = only(parallel, "AWS::StepFunctions::StateMachine")["Properties"]
    assert machine["TracingConfiguration"] == {"Enabled": True}


def test_without_synthesis_the_parallel_state_ends():
    stack = new_stack()
    ParallelPrompts(stack, "P", model=NOVA, prompts={"A": BODY, "B": BODY})
    asl = definition(only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine"))
    assert asl["States"]["Prompts"]["End"] is True and "Synthesis" not in asl["States"]


def test_single_prompt_warns_and_bad_input_is_rejected():
    stack = new_stack()
    ParallelPrompts(stack, "P", model=NOVA, prompts={"Only": BODY})
    Annotations.from_stack(stack).has_warning("/Test/P", Match.string_like_regexp("only saves time with two"))
    with pytest.raises(ValueError, match="prompts is empty"):
        ParallelPrompts(new_stack(), "P", model=NOVA, prompts={})
    with pytest.raises(ValueError, match="prompt name 'a/b' cannot be a Step Functions state name"):
        ParallelPrompts(new_stack(), "P", model=NOVA, prompts={"a/b": BODY})
    with pytest.raises(ValueError, match="body='hello' is not a request"):
        ParallelPrompts(new_stack(), "P", model=NOVA, prompts={"A": "hello"})


# --- BedrockModel ---------------------------------------------------------------------------------------


def test_model_ids_are_recognized_and_validated():
    assert PROFILE.is_inference_profile and PROFILE.profile_regions == ("us-east-1", "us-east-2", "us-west-2")
    assert PROFILE.foundation_model_id == "anthropic.claude-3-5-haiku-20241022-v1:0"
    assert not NOVA.is_inference_profile
    custom = BedrockModel.from_id("global.amazon.nova-lite-v1:0", regions=["us-east-1", "eu-west-1"])
    assert custom.profile_regions == ("us-east-1", "eu-west-1")
    with pytest.raises(ValueError, match="prefix 'global', whose routing Regions genai-pacer does not know"):
        BedrockModel.inference_profile("global.amazon.nova-lite-v1:0")
    with pytest.raises(ValueError, match="model_id='not a model' is not a Bedrock model id"):
        BedrockModel.foundation("not a model")
    with pytest.raises(ValueError, match="regions contains 'moon-1', which is not an AWS Region"):
        BedrockModel.inference_profile("us.amazon.nova-lite-v1:0", regions=["moon-1"])


def test_global_profile_needs_its_regions_listed():
    with pytest.raises(ValueError, match="prefix 'global'.*pass regions="):
        BedrockModel.from_id("global.anthropic.claude-sonnet-4-5-20250929-v1:0")


def test_new_log_key_serves_only_this_accounts_log_groups(inline_map):
    _, template = inline_map
    key = only(template, "AWS::KMS::Key")["Properties"]["KeyPolicy"]["Statement"]
    (logs_statement,) = [s for s in key if "Service" in s["Principal"]]
    condition = logs_statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert ":logs:us-east-1:111122223333:log-group:*" in arn_text(condition)


def test_state_machine_options_key_and_retention():
    stack = new_stack()
    key = kms.Key(stack, "Shared")
    ParallelPrompts(
        stack,
        "P",
        model=NOVA,
        prompts={"A": BODY, "B": BODY},
        retry=BedrockRetry(max_attempts=2),
        state_machine_options=StateMachineOptions(
            encryption_key=key, log_retention=logs.RetentionDays.ONE_YEAR
        ),
    )
    template = template_of(stack).to_json()
    log_group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert log_group["RetentionInDays"] == 365
    assert log_group["KmsKeyId"]["Fn::GetAtt"][0].startswith("Shared")
    asl = definition(only(template, "AWS::StepFunctions::StateMachine"))
    assert {
        b["States"][b["StartAt"]]["Retry"][0]["MaxAttempts"] for b in asl["States"]["Prompts"]["Branches"]
    } == {2}


def test_grant_invoke_with_streaming_allows_the_stream_action():
    stack = new_stack()
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    PROFILE.grant_invoke(role, streaming=True)
    (statement,) = policy_statements(template_of(stack).to_json())
    assert statement["Action"] == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
    assert len(statement["Resource"]) == 4
