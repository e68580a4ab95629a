"""QueuedInference: the mapping, queues, worker, IAM and alarms in the synthesized template; every bad prop."""

from __future__ import annotations

import importlib
import math
import sys

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match
from genai_pacer import AnswerStore, BedrockModel, QueuedInference, planning
from genai_pacer.queue.inference import (
    MAX_BEDROCK_ATTEMPTS,
    STORE_SECONDS,
    sdk_backoff_seconds,
    worst_case_call_seconds,
)
from helpers import new_stack, only, policy_statements, resources, template_of

PROFILE = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
# Defaults: 4 attempts x 5 s to first token + 1000 tokens / 30 per s + 1 + 2 + 4 s of backoff = 60.3 s -> 61 s.
DEFAULT_BUDGET = 61
DEFAULT_TIMEOUT = math.ceil(5 * (DEFAULT_BUDGET + STORE_SECONDS) + 3)  # 318 s


@pytest.fixture(scope="module")
def default():
    stack = new_stack()
    construct = QueuedInference(stack, "Q", model=PROFILE, max_concurrency=8)
    producer = iam.Role(stack, "Producer", assumed_by=iam.AccountRootPrincipal())
    construct.grant_send_messages(producer)
    return construct, template_of(stack).to_json()


def test_mapping_caps_concurrency_and_reports_item_failures(default):
    _, template = default
    mapping = only(template, "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 8}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BatchSize"] == 5
    assert "MaximumBatchingWindowInSeconds" not in mapping


def test_queue_redrives_to_a_retained_encrypted_tls_only_dlq(default):
    _, template = default
    queues = resources(template, "AWS::SQS::Queue")
    main_id, main = next((k, q) for k, q in queues.items() if "RedrivePolicy" in q["Properties"])
    dlq_id = main["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    assert main["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 3
    assert main["Properties"]["VisibilityTimeout"] == 6 * DEFAULT_TIMEOUT
    for queue in queues.values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    dlq = queues[dlq_id]
    assert dlq["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    assert (dlq["DeletionPolicy"], dlq["UpdateReplacePolicy"]) == ("Retain", "Retain")  # unanswered work survives
    assert queues[main_id]["DeletionPolicy"] == "Delete"
    policies = resources(template, "AWS::SQS::QueuePolicy")
    assert len(policies) == 2
    for policy in policies.values():
        (deny,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_worker_runtime_budget_code_and_logs(default):
    construct, template = default
    function = only(template, "AWS::Lambda::Function")["Properties"]
    assert function["Runtime"] == "python3.14"
    assert function["Handler"] == "queued_worker.handler.handler"
    assert function["Timeout"] == DEFAULT_TIMEOUT and function["MemorySize"] == 256
    env = function["Environment"]["Variables"]
    assert env["MODEL_ID"] == PROFILE.model_id and env["PERFORMANCE_LATENCY"] == ""
    assert (env["CALL_BUDGET_SECONDS"], env["MAX_OUTPUT_TOKENS"], env["READ_TIMEOUT_SECONDS"]) == (
        str(DEFAULT_BUDGET), "1000", "39",  # 5 s + 1000 / 30 s, rounded up
    )
    assert construct.call_budget_seconds == DEFAULT_BUDGET
    assert construct.timeout.to_seconds() == DEFAULT_TIMEOUT
    assert "ReservedConcurrentExecutions" not in function
    assert function["Code"]["S3Key"].endswith(".zip")
    log_group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert "KmsKeyId" in log_group and log_group["RetentionInDays"] == 30
    role = resources(template, "AWS::IAM::Role")[function["Role"]["Fn::GetAtt"][0]]
    assert "ManagedPolicyArns" not in role["Properties"]


def test_the_store_time_matches_the_worker(monkeypatch):
    """The construct sizes the timeout with the same per-message DynamoDB time the worker reserves."""
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1", "MODEL_ID": "m", "ANSWER_TABLE": "t",
        "CALL_BUDGET_SECONDS": "61", "MAX_OUTPUT_TOKENS": "1000",
    }.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("queued_worker.handler", None)
    worker = importlib.import_module("queued_worker.handler")
    assert worker.STORE_SECONDS == STORE_SECONDS


def test_worker_may_invoke_only_the_profile_and_the_models_it_routes_to(default):
    _, template = default
    profile, routed = [s for s in policy_statements(template) if "bedrock:InvokeModel" in str(s["Action"])]
    assert profile["Action"] == routed["Action"] == "bedrock:InvokeModel"
    assert "inference-profile/us.anthropic.claude-3-5-haiku" in str(profile["Resource"])
    # The foundation models only through this profile, in the Regions it routes to.
    assert list(routed["Condition"]["StringEquals"]) == ["bedrock:InferenceProfileArn"]
    assert len(routed["Resource"]) == 3 and "foundation-model/anthropic.claude-3-5-haiku" in str(routed["Resource"])
    assert not any("*" in str(s["Resource"]) for s in policy_statements(template))


def test_table_has_pitr_ttl_and_the_worker_reads_writes_and_releases_on_it_only(default):
    _, template = default
    table_id, table = next(iter(resources(template, "AWS::DynamoDB::Table").items()))
    assert table["Properties"]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["Properties"]["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["Properties"]["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True}  # AWS-managed by default
    assert table["DeletionPolicy"] == "Retain"
    (ddb,) = [s for s in policy_statements(template) if "dynamodb" in str(s["Action"])]
    assert sorted(ddb["Action"]) == ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem"]
    assert ddb["Resource"] == [{"Fn::GetAtt": [table_id, "Arn"]}]
    assert not [s for s in policy_statements(template) if "kms:" in str(s["Action"])]


def test_alarms_cover_dlq_age_throttles_and_errors(default):
    construct, template = default
    assert sorted(construct.alarms) == ["DeadLetters", "OldestMessageAge", "WorkerErrors", "WorkerThrottles"]
    alarms = {
        a["Properties"]["MetricName"]: a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
    }
    assert alarms["ApproximateAgeOfOldestMessage"]["Threshold"] == 900
    assert alarms["ApproximateNumberOfMessagesVisible"]["Threshold"] == 0
    assert alarms["Throttles"]["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarms["Errors"]["TreatMissingData"] == "notBreaching"


def test_producers_can_be_granted_send(default):
    _, template = default
    (send,) = [s for s in policy_statements(template) if "sqs:SendMessage" in s["Action"]]
    queue_id = next(k for k, q in resources(template, "AWS::SQS::Queue").items() if "RedrivePolicy" in q["Properties"])
    assert send["Resource"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    # the principal: the statement sits in the producer role's policy and no other
    (holder,) = [
        policy for policy in resources(template, "AWS::IAM::Policy").values()
        if send in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    (role_ref,) = holder["Properties"]["Roles"]
    assert role_ref["Ref"].startswith("Producer")


def test_props_reach_the_template():
    stack = new_stack()
    topic = sns.Topic(stack, "Pager")
    table = dynamodb.Table(
        stack, "Mine", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING)
    )
    key = kms.Key(stack, "MyKey")
    construct = QueuedInference(
        stack,
        "Q",
        model=NOVA,
        max_concurrency=planning.RatePlan(600, "tpm", 50, 5),
        memory_size=512,
        encryption_key=key,
        log_retention=logs.RetentionDays.ONE_WEEK,
        reserved_concurrency=60,
        batch_size=10,
        max_batching_window=cdk.Duration.seconds(2),
        timeout=cdk.Duration.minutes(2),
        visibility_timeout=cdk.Duration.minutes(15),
        max_receive_count=5,
        answer_store=AnswerStore(stack, "Store", table=table),
        latency_optimized=True,
        bedrock_max_attempts=2,
        max_output_tokens=400,
        output_tokens_per_second=80,
        time_to_first_token=cdk.Duration.seconds(2),
        max_message_age=cdk.Duration.minutes(3),
        alarm_actions=[actions.SnsAction(topic)],
    )
    template = template_of(stack).to_json()
    mapping = only(template, "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 50}
    assert (mapping["BatchSize"], mapping["MaximumBatchingWindowInSeconds"]) == (10, 2)
    function = only(template, "AWS::Lambda::Function")["Properties"]
    assert function["ReservedConcurrentExecutions"] == 60
    assert function["MemorySize"] == 512 and function["Timeout"] == 120
    env = function["Environment"]["Variables"]
    # 2 attempts x 2 s + 400 / 80 s + 1 s of backoff = 10 s; one attempt decodes in 2 + 5 = 7 s.
    assert (env["CALL_BUDGET_SECONDS"], env["MAX_OUTPUT_TOKENS"], env["READ_TIMEOUT_SECONDS"]) == ("10", "400", "7")
    assert env["PERFORMANCE_LATENCY"] == "optimized" and env["BEDROCK_MAX_ATTEMPTS"] == "2"
    log_group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert log_group["RetentionInDays"] == 7
    assert log_group["KmsKeyId"]["Fn::GetAtt"][0].startswith("MyKey")
    assert len(resources(template, "AWS::KMS::Key")) == 1
    assert construct.metric_oldest_message_age().metric_name == "ApproximateAgeOfOldestMessage"
    assert construct.table is table and len(resources(template, "AWS::DynamoDB::Table")) == 1
    main = next(q for q in resources(template, "AWS::SQS::Queue").values() if "RedrivePolicy" in q["Properties"])
    assert main["Properties"]["VisibilityTimeout"] == 900
    assert main["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 5
    topic_id = next(iter(resources(template, "AWS::SNS::Topic")))
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
    age = next(
        a for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "ApproximateAgeOfOldestMessage"
    )
    assert age["Properties"]["Threshold"] == 180
    # 120 s holds (120 - 3) // 12 = 9 worst-case messages of 12 s, one short of the batch of 10.
    Annotations.from_stack(stack).has_warning(
        "/Test/Q", Match.string_like_regexp(r"timeout=120 s covers 9 worst-case messages of 12 s but batch_size=10")
    )


# -- the time budget ---------------------------------------------------------------------------------


def test_the_call_budget_counts_one_decode_and_fast_throttled_retries():
    assert worst_case_call_seconds(
        max_output_tokens=1000, output_tokens_per_second=30, time_to_first_token_seconds=5, max_attempts=4
    ) == pytest.approx(20 + 1000 / 30 + 1 + 2 + 4)
    # botocore caps each backoff at 20 s: the 6th and 7th retries wait 20 s, not 32 and 64.
    assert worst_case_call_seconds(
        max_output_tokens=0, output_tokens_per_second=1, time_to_first_token_seconds=0, max_attempts=8
    ) == 1 + 2 + 4 + 8 + 16 + 20 + 20


def test_the_default_timeout_covers_the_issue_example():
    """Five 4,000-token answers at 60 tokens/s needed 342 s against a fixed 300 s timeout."""
    stack = new_stack()
    QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, max_output_tokens=4000, output_tokens_per_second=60)
    function = only(template_of(stack).to_json(), "AWS::Lambda::Function")["Properties"]
    budget = math.ceil(4 * 5 + 4000 / 60 + 7)  # 94 s
    assert function["Environment"]["Variables"]["CALL_BUDGET_SECONDS"] == str(budget)
    assert function["Timeout"] == 5 * (budget + 2) + 3 == 483


def test_a_batch_that_cannot_fit_fifteen_minutes_is_refused_with_the_numbers():
    with pytest.raises(ValueError) as caught:
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=4, batch_size=10, max_output_tokens=4000)
    message = str(caught.value)
    # 4 x 5 s + 4000 / 30 s + 7 s = 160.3 -> 161 s per call, 163 s per message, 10 of them + 3 s = 1633 s.
    assert "batch_size=10 x 163 s per message (a call's worst case 161 s = 4 attempts x 5 s to first token" in message
    assert "+ 4000 tokens / 30 tokens per s + 7 s of retry backoff; plus 2 s of DynamoDB work) + 3 s = 1633 s" in message
    assert "use batch_size <= 5" in message


def test_an_explicit_timeout_that_cannot_cover_one_message_is_refused():
    with pytest.raises(ValueError, match=r"timeout=60 s cannot cover one message: it needs 63 s per message .* Use at least 66 s"):
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=4, timeout=cdk.Duration.minutes(1))


def test_a_single_message_beyond_fifteen_minutes_is_refused():
    with pytest.raises(ValueError, match="more than Lambda's 15-minute limit: lower max_output_tokens"):
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=4, max_output_tokens=64_000, batch_size=1)


# -- every prop's bad values -------------------------------------------------------------------------

NUMBER = cdk.Token.as_number({"Ref": "Attempts"})  # a deploy-time number
LONG = {"timeout": cdk.Duration.minutes(15)}  # room for any batch, so batch_size rows test batch rules only

BAD = [
    # (kwargs, expected message fragment)
    (dict(model="amazon.nova-lite-v1:0"), "model='amazon.nova-lite-v1:0' is a str; pass a BedrockModel"),
    (dict(model=None), "model is required: pass a BedrockModel"),
    (dict(max_concurrency=None), "max_concurrency is required"),
    (dict(max_concurrency="8"), "max_concurrency='8' is a str"),
    (dict(max_concurrency=1), "max_concurrency=1 is below the minimum of 2; the SQS event source's maximum concurrency allows 2..1000"),
    (dict(max_concurrency=0), "max_concurrency=0 is below the minimum of 2"),
    (dict(max_concurrency=-3), "max_concurrency=-3 is below the minimum of 2"),
    (dict(max_concurrency=1001), "max_concurrency=1001 exceeds the maximum of 1,000"),
    (dict(max_concurrency=2.5), "max_concurrency=2.5 is not a whole number"),
    (dict(max_concurrency=math.nan), "max_concurrency=nan is not a finite number"),
    (dict(max_concurrency=math.inf), "max_concurrency=inf is not a finite number"),
    (dict(max_concurrency=True), "max_concurrency=True is a bool"),
    (dict(batch_size=0), "batch_size=0 is below the minimum of 1; an SQS event source without max_batching_window takes 1..10"),
    (dict(batch_size=11), "batch_size=11 exceeds the maximum of 10; an SQS event source without max_batching_window takes 1..10 messages per batch; set max_batching_window to allow up to 10000"),
    (dict(batch_size=10_001, max_batching_window=cdk.Duration.seconds(1), **LONG), "batch_size=10001 exceeds the maximum of 10,000; an SQS event source with max_batching_window takes 1..10000"),
    (dict(batch_size=None), "batch_size is required"),
    (dict(batch_size=2.5), "batch_size=2.5 is not a whole number"),
    (dict(batch_size=math.nan), "batch_size=nan is not a finite number"),
    (dict(batch_size="5"), "batch_size='5' is a str"),
    (dict(max_batching_window=cdk.Duration.seconds(301)), "max_batching_window=5 minutes 1 second exceeds the maximum of 5 minutes"),
    (dict(max_batching_window=2), "max_batching_window=2 is an int; pass a cdk.Duration such as cdk.Duration.seconds(2)"),
    (dict(timeout=cdk.Duration.minutes(16)), "timeout=16 minutes exceeds the maximum of 15 minutes"),
    (dict(timeout=cdk.Duration.millis(500)), "timeout=500 millis is below the minimum of 1 second"),
    (dict(timeout=300), "timeout=300 is an int; pass a cdk.Duration such as cdk.Duration.seconds(300)"),
    (dict(memory_size=127), "memory_size=127 is below the minimum of 128"),
    (dict(memory_size=10_241), "memory_size=10241 exceeds the maximum of 10,240"),
    (dict(memory_size=256.5), "memory_size=256.5 is not a whole number"),
    (dict(memory_size=None), "memory_size is required"),
    (dict(memory_size=math.inf), "memory_size=inf is not a finite number"),
    (dict(reserved_concurrency=0), "reserved_concurrency=0 is below the minimum of 1"),
    (dict(reserved_concurrency=-1), "reserved_concurrency=-1 is below the minimum of 1"),
    (dict(reserved_concurrency=3), "reserved_concurrency=3 is below max_concurrency=4: the poller would start 4"),
    (dict(reserved_concurrency=4.5), "reserved_concurrency=4.5 is not a whole number"),
    (dict(max_receive_count=0), "max_receive_count=0 is below the minimum of 1; SQS redrive allows 1..1000"),
    (dict(max_receive_count=1001), "max_receive_count=1001 exceeds the maximum of 1,000"),
    (dict(max_receive_count=math.nan), "max_receive_count=nan is not a finite number"),
    (dict(bedrock_max_attempts=0), "bedrock_max_attempts=0 is below the minimum of 1; 1 makes one attempt and no retry"),
    (dict(bedrock_max_attempts=-1), "bedrock_max_attempts=-1 is below the minimum of 1"),
    (dict(bedrock_max_attempts=2.5), "bedrock_max_attempts=2.5 is not a whole number"),
    (dict(bedrock_max_attempts=None), "bedrock_max_attempts is required"),
    (dict(bedrock_max_attempts=NUMBER), "bedrock_max_attempts is a deploy-time token, but it sizes the worker's time budget"),
    # Synth once ran for minutes on 10**6 (2**i for every retry); 50 cannot fit 15 minutes even with instant answers.
    (dict(bedrock_max_attempts=10**6), "bedrock_max_attempts=1000000 exceeds the maximum of 49; 1 makes one attempt"),
    (dict(bedrock_max_attempts=50), "bedrock_max_attempts=50 exceeds the maximum of 49"),
    (dict(max_output_tokens=409_601), "max_output_tokens=409601 exceeds the maximum of 409,600; the longest answer"),
    (dict(worker_error_threshold=10**9 + 1), "worker_error_threshold=1000000001 exceeds the maximum of 1,000,000,000"),
    (dict(max_output_tokens=0), "max_output_tokens=0 is below the minimum of 1"),
    (dict(max_output_tokens=math.inf), "max_output_tokens=inf is not a finite number"),
    (dict(max_output_tokens="1000"), "max_output_tokens='1000' is a str"),
    (dict(output_tokens_per_second=0), "output_tokens_per_second=0 must be greater than 0"),
    (dict(output_tokens_per_second=-30), "output_tokens_per_second=-30 must be greater than 0"),
    (dict(output_tokens_per_second=math.nan), "output_tokens_per_second=nan is not a finite number"),
    (dict(time_to_first_token=5), "time_to_first_token=5 is an int; pass a cdk.Duration"),
    (dict(time_to_first_token=cdk.Duration.minutes(16)), "time_to_first_token=16 minutes exceeds the maximum of 15 minutes"),
    (dict(visibility_timeout=cdk.Duration.hours(13)), "visibility_timeout=13 hours exceeds the maximum of 12 hours"),
    (dict(visibility_timeout=cdk.Duration.minutes(5)), "visibility_timeout=300 s is shorter than 6 x the function timeout (318 s) = 1,908 s"),
    (dict(visibility_timeout=1800), "visibility_timeout=1800 is an int; pass a cdk.Duration"),
    (dict(timeout=cdk.Duration.minutes(15), visibility_timeout=None, max_output_tokens=100), None),  # valid: 5400 s visibility
    (dict(log_retention=30), "log_retention=30 is an int; pass a logs.RetentionDays"),
    (dict(latency_optimized="yes"), "latency_optimized='yes' is a str; pass True or False"),
    (dict(max_message_age=cdk.Duration.days(15)), "max_message_age=15 days exceeds the maximum of 14 days"),
    (dict(max_message_age=900), "max_message_age=900 is an int; pass a cdk.Duration"),
    (dict(alarm_actions=["arn:aws:sns:us-east-1:111122223333:pager"]), "alarm_actions[0]='arn:aws:sns:us-east-1:111122223333:pager' is a str; pass an alarm action"),
    (dict(alarm_actions="topic"), "alarm_actions='topic' is a str; pass a list"),
    (dict(encryption_key="alias/mine"), "encryption_key='alias/mine' is a str; pass a kms.IKey"),
    (dict(queue_encryption_key="alias/mine"), "queue_encryption_key='alias/mine' is a str; pass a kms.IKey"),
    (dict(queue="https://sqs.us-east-1.amazonaws.com/111122223333/q"), "queue='https://sqs.us-east-1.amazonaws.com/111122223333/q' is a str"),
    (dict(answer_store="answers"), "answer_store='answers' is a str; pass an AnswerStore"),
    (dict(dead_letter_queue="dlq"), "dead_letter_queue='dlq' is a str; pass an sqs.IQueue"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD, ids=[f"{i}-{next(iter(k))}" for i, (k, _) in enumerate(BAD)])
def test_every_bad_prop_is_refused_with_its_value_rule_and_fix(kwargs, message):
    props = {"model": NOVA, "max_concurrency": 4, **kwargs}
    if message is None:
        QueuedInference(new_stack(), "Q", **props)
        return
    with pytest.raises(ValueError) as caught:
        QueuedInference(new_stack(), "Q", **props)
    assert message in str(caught.value)
    assert str(caught.value).startswith("QueuedInference at Test/Q: [QueuedInference.")  # the construct, its path, the rule


def test_limits_of_the_form_at_least_x_accept_x_itself():
    """reserved_concurrency == max_concurrency and visibility_timeout == 6 x timeout are what the error
    messages recommend: a stricter rule would refuse its own advice."""
    stack = new_stack()
    QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, reserved_concurrency=4,
                    timeout=cdk.Duration.seconds(100), visibility_timeout=cdk.Duration.seconds(600))
    template = template_of(stack).to_json()
    assert only(template, "AWS::Lambda::Function")["Properties"]["ReservedConcurrentExecutions"] == 4
    main = next(q for q in resources(template, "AWS::SQS::Queue").values() if "RedrivePolicy" in q["Properties"])
    assert main["Properties"]["VisibilityTimeout"] == 600
    with pytest.raises(ValueError, match=r"visibility_timeout=599 s is shorter than 6 x the function timeout \(100 s\)"):
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=4,
                        timeout=cdk.Duration.seconds(100), visibility_timeout=cdk.Duration.seconds(599))


def test_the_most_attempts_that_can_fit_fifteen_minutes_are_accepted():
    """49 attempts: 1 + 2 + 4 + 8 + 16 + 43 x 20 = 891 s of backoff + 2 s of DynamoDB + 3 s = 896 s <= 900 s."""
    assert sdk_backoff_seconds(MAX_BEDROCK_ATTEMPTS) == 891 and MAX_BEDROCK_ATTEMPTS == 49
    assert sdk_backoff_seconds(10**9) == 31 + 20 * (10**9 - 6)  # closed form: instant for any count
    assert [sdk_backoff_seconds(n) for n in (0, 1, 2, 6, 7)] == [0, 0, 1, 31, 51]
    stack = new_stack()
    construct = QueuedInference(
        stack, "Q", model=NOVA, max_concurrency=4, batch_size=1, bedrock_max_attempts=MAX_BEDROCK_ATTEMPTS,
        time_to_first_token=cdk.Duration.seconds(0), max_output_tokens=1, output_tokens_per_second=1000,
    )
    assert construct.call_budget_seconds == 892 and construct.timeout.to_seconds() == 897


def test_all_problems_are_reported_at_once():
    with pytest.raises(ValueError) as caught:
        QueuedInference(new_stack(), "Q", model="nova", max_concurrency=0, memory_size=64, batch_size=50)
    assert caught.value.problems[:3] == [  # type: ignore[attr-defined]
        "model='nova' is a str; pass a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')",
        "max_concurrency=0 is below the minimum of 2; the SQS event source's maximum concurrency allows 2..1000; "
        "size it with genai_pacer.planning.sustainable_rate(...)",
        "memory_size=64 is below the minimum of 128; Lambda allows 128..10240 MB",
    ]
    # batch_size is wrong, so no timeout is derived from it: one problem, not a second about 15 minutes.
    assert len(caught.value.problems) == 4 and "batch_size=50" in caught.value.problems[3]  # type: ignore[attr-defined]


def test_deploy_time_tokens_are_accepted_where_cloudformation_takes_them():
    stack = new_stack()
    number = cdk.CfnParameter(stack, "N", type="Number").value_as_number
    QueuedInference(
        stack, "Q", model=NOVA, max_concurrency=number, batch_size=number, reserved_concurrency=number,
        max_receive_count=number, memory_size=number, timeout=cdk.Duration.minutes(10),
    )
    mapping = only(template_of(stack).to_json(), "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["BatchSize"] == {"Ref": "N"} and mapping["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "N"}}


def test_a_token_batch_needs_an_explicit_timeout():
    stack = new_stack()
    number = cdk.CfnParameter(stack, "N", type="Number").value_as_number
    with pytest.raises(ValueError, match="batch_size is a deploy-time token, so the timeout cannot be derived from it: pass timeout"):
        QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, batch_size=number)


# -- RatePlans ---------------------------------------------------------------------------------------


def test_a_plan_above_the_event_source_limit_is_clamped_with_a_warning():
    stack = new_stack()
    QueuedInference(stack, "Q", model=NOVA, max_concurrency=planning.RatePlan(60_000, "tpm", 5000, 5))
    mapping = only(template_of(stack).to_json(), "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 1000}
    Annotations.from_stack(stack).has_warning(
        "/Test/Q",
        Match.string_like_regexp("the plan sustains 5000 calls at once but the SQS event source's maximum concurrency allows at most 1000"),
    )
    Annotations.from_stack(stack).has_warning("/Test/Q", Match.string_like_regexp(r"\[ack: genai-pacer:max-concurrency-clamped\]"))


def test_a_plan_below_the_event_source_minimum_is_refused_with_the_numbers():
    with pytest.raises(ValueError) as caught:
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=planning.RatePlan(12.0, "tpm", 1, 5))
    assert "the plan sustains 1 calls at once (12.0 requests per minute), below the SQS event source's maximum concurrency's minimum of 2" in str(caught.value)
    assert "raising the cap would overdraw the quota" in str(caught.value)


def test_reserved_concurrency_above_what_a_default_account_can_reserve_is_warned():
    """Issue 35.5: reserved_concurrency=10**6 passed silently; the deployment fails unless the account's
    adjustable concurrency quota is raised, so it is a warning that says how, not a refusal."""
    stack = new_stack()
    QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, reserved_concurrency=10**6)
    Annotations.from_stack(stack).has_warning("/Test/Q", Match.string_like_regexp(
        "reserved_concurrency=1,000,000 is above the 900 a default account can reserve: Lambda's concurrent "
        "executions quota is 1,000 per Region by default.*at least 1,000,100.*'Concurrent executions' quota"))
    quiet = new_stack()
    QueuedInference(quiet, "Q", model=NOVA, max_concurrency=4, reserved_concurrency=900)
    assert not Annotations.from_stack(quiet).find_warning("*", Match.string_like_regexp("can reserve"))


# -- bring your own queue and table ------------------------------------------------------------------


def test_an_existing_queue_with_a_dlq_is_consumed_and_its_dlq_alarmed():
    stack = new_stack()
    dlq = sqs.Queue(stack, "MyDlq")
    queue = sqs.Queue(
        stack, "Mine", visibility_timeout=cdk.Duration.minutes(32),
        dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=2),
    )
    construct = QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, queue=queue)
    template = template_of(stack).to_json()
    assert construct.queue is queue and construct.dead_letter_queue is dlq
    assert len(resources(template, "AWS::SQS::Queue")) == 2
    (alarm,) = [
        a for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    ]
    assert alarm["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0].startswith("MyDlq")


def test_an_existing_queue_without_a_dlq_or_with_a_short_visibility_is_refused():
    stack = new_stack()
    bare = sqs.Queue(stack, "Bare", visibility_timeout=cdk.Duration.hours(1))
    with pytest.raises(ValueError, match="queue Test/Bare has no dead-letter queue: a message that keeps failing"):
        QueuedInference(stack, "A", model=NOVA, max_concurrency=4, queue=bare)
    short = sqs.Queue(stack, "Short", dead_letter_queue=sqs.DeadLetterQueue(queue=sqs.Queue(stack, "D"), max_receive_count=3))
    with pytest.raises(ValueError) as caught:
        QueuedInference(stack, "B", model=NOVA, max_concurrency=4, queue=short)
    assert (
        "queue Test/Short has a visibility timeout of 30 s, under 6 x the function timeout = 1,908 s: a message would "
        "be redelivered while the worker still runs it (a second paid call). Set visibility_timeout=cdk.Duration.seconds(1908)"
    ) in str(caught.value)


def test_new_queue_props_beside_an_existing_queue_are_refused():
    stack = new_stack()
    queue = sqs.Queue.from_queue_arn(stack, "Imported", "arn:aws:sqs:us-east-1:111122223333:work")
    with pytest.raises(ValueError, match="max_receive_count, visibility_timeout, queue_encryption_key configure a new queue"):
        QueuedInference(
            stack, "Q", model=NOVA, max_concurrency=4, queue=queue, max_receive_count=3,
            visibility_timeout=cdk.Duration.hours(1), queue_encryption_key=kms.Key(stack, "K"),
        )


def test_an_imported_queue_gets_a_warning_saying_what_to_check():
    stack = new_stack()
    queue = sqs.Queue.from_queue_arn(stack, "Imported", "arn:aws:sqs:us-east-1:111122223333:work")
    QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, queue=queue)
    Annotations.from_stack(stack).has_warning(
        "/Test/Q",
        Match.string_like_regexp(
            "queue Test/Imported is imported, so its settings cannot be read: check that it has a dead-letter queue "
            r".* and a visibility timeout of at least 1,908 s"
        ),
    )


def test_a_fifo_queue_cannot_batch_by_time():
    stack = new_stack()
    fifo = sqs.Queue(
        stack, "Fifo", fifo=True, visibility_timeout=cdk.Duration.hours(1),
        dead_letter_queue=sqs.DeadLetterQueue(queue=sqs.Queue(stack, "D", fifo=True), max_receive_count=3),
    )
    with pytest.raises(ValueError, match="max_batching_window is set but the queue is FIFO"):
        QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, queue=fifo, max_batching_window=cdk.Duration.seconds(1))


def _id(template: dict, prefix: str) -> str:
    (found,) = [k for k in template["Resources"] if k.startswith(prefix)]
    return found


@pytest.fixture(scope="module")
def customer_keys():
    stack = new_stack()
    keys = {name: kms.Key(stack, name, enable_key_rotation=True) for name in ("QueueKey", "DlqKey", "TableKey")}
    construct = QueuedInference(
        stack, "Q", model=NOVA, max_concurrency=4, queue_encryption_key=keys["QueueKey"],
        dead_letter_queue_encryption_key=keys["DlqKey"],
        answer_store=AnswerStore(stack, "Store", encryption_key=keys["TableKey"]),
    )
    producer = iam.Role(stack, "Producer", assumed_by=iam.AccountRootPrincipal())
    construct.grant_send_messages(producer)
    return template_of(stack).to_json()


def test_customer_managed_keys_encrypt_the_queue_dlq_and_table(customer_keys):
    template = customer_keys
    queues = resources(template, "AWS::SQS::Queue")
    main = next(q for q in queues.values() if "RedrivePolicy" in q["Properties"])["Properties"]
    dlq = next(q for q in queues.values() if "RedrivePolicy" not in q["Properties"])
    assert main["KmsMasterKeyId"] == {"Fn::GetAtt": [_id(template, "QueueKey"), "Arn"]}
    assert dlq["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [_id(template, "DlqKey"), "Arn"]}
    assert dlq["DeletionPolicy"] == "Retain"
    sse = only(template, "AWS::DynamoDB::Table")["Properties"]["SSESpecification"]
    assert sse == {
        "KMSMasterKeyId": {"Fn::GetAtt": [_id(template, "TableKey"), "Arn"]}, "SSEEnabled": True, "SSEType": "KMS",
    }


def test_the_worker_and_producers_get_exactly_the_key_actions_they_need(customer_keys):
    template = customer_keys
    worker_policy = next(
        p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("QWorkerRole")
    )["Properties"]["PolicyDocument"]["Statement"]
    on_key = {
        name: sorted(a for s in worker_policy if s["Resource"] == {"Fn::GetAtt": [_id(template, name), "Arn"]}
                     for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
        for name in ("QueueKey", "DlqKey", "TableKey")
    }
    # The table key: only what a store writer needs, and only through DynamoDB (issue 27).
    assert on_key["TableKey"] == ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
    (table_key,) = [s for s in worker_policy if s["Resource"] == {"Fn::GetAtt": [_id(template, "TableKey"), "Arn"]}]
    assert table_key["Condition"] == {"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}}
    assert "kms:Decrypt" in on_key["QueueKey"]  # the event source reads the encrypted queue
    assert on_key["DlqKey"] == []  # SQS moves messages to the DLQ itself; the worker never touches it
    producer = next(
        p for k, p in resources(template, "AWS::IAM::Policy").items() if k.startswith("Producer")
    )["Properties"]["PolicyDocument"]["Statement"]
    assert any("kms:GenerateDataKey*" in s["Action"] for s in producer if "QueueKey" in str(s["Resource"]))


def test_key_props_for_resources_the_construct_does_not_create_are_refused():
    stack = new_stack()
    with pytest.raises(ValueError) as caught:
        QueuedInference(
            stack, "Q", model=NOVA, max_concurrency=4,
            dead_letter_queue=sqs.Queue(stack, "D"), dead_letter_queue_encryption_key=kms.Key(stack, "K2"),
        )
    assert "dead_letter_queue_encryption_key configures a new DLQ, but dead_letter_queue is an existing one" in str(caught.value)


def test_missing_handler_code_is_reported(monkeypatch, tmp_path):
    from genai_pacer._internal import assets as _assets

    monkeypatch.setattr(_assets, "LAMBDA_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="handler code is missing"):
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=2)


# --- alarm thresholds as props, and the worker's metrics ------------------------------------------

THRESHOLD_BAD = [
    (name, value, message)
    for name in ("worker_error_threshold", "worker_throttle_threshold", "dead_letter_threshold")
    for value, message in (
        (-1, f"{name}=-1 is below the minimum of 0; a count the alarm tolerates; 0 alarms on the first one"),
        (2.5, f"{name}=2.5 is not a whole number"),
        (math.nan, f"{name}=nan is not a finite number"),
        (math.inf, f"{name}=inf is not a finite number"),
        (True, f"{name}=True is a bool"),
        ("3", f"{name}='3' is a str"),
        (None, f"{name} is required"),
        (10**10, f"{name}=10000000000 exceeds the maximum of 1,000,000,000"),
    )
]


@pytest.mark.parametrize(("name", "value", "message"), THRESHOLD_BAD, ids=[f"{n}={v!r}" for n, v, _ in THRESHOLD_BAD])
def test_alarm_thresholds_are_checked(name, value, message):
    with pytest.raises(ValueError) as caught:
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=4, **{name: value})
    assert message in str(caught.value)


def test_alarm_thresholds_reach_the_alarms_and_their_descriptions():
    stack = new_stack()
    construct = QueuedInference(
        stack, "Q", model=NOVA, max_concurrency=4,
        worker_error_threshold=2, worker_throttle_threshold=5, dead_letter_threshold=10,
    )
    alarms = {a["Properties"]["MetricName"]: a["Properties"] for a in resources(template_of(stack), "AWS::CloudWatch::Alarm").values()}
    assert (alarms["Errors"]["Threshold"], alarms["Throttles"]["Threshold"]) == (2, 5)
    assert alarms["ApproximateNumberOfMessagesVisible"]["Threshold"] == 10
    assert alarms["Errors"]["AlarmDescription"].startswith("the worker failed more than 2 whole invocations in 5 minutes")
    assert alarms["Throttles"]["AlarmDescription"].startswith("Lambda throttled the worker more than 5 times in 5 minutes")
    assert alarms["ApproximateNumberOfMessagesVisible"]["AlarmDescription"].startswith("more than 10 messages reached")
    assert sorted(construct.alarms) == ["DeadLetters", "OldestMessageAge", "WorkerErrors", "WorkerThrottles"]


def test_a_deploy_time_threshold_is_accepted():
    stack = new_stack()
    QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, worker_error_threshold=cdk.Token.as_number({"Ref": "T"}))
    alarms = {a["Properties"]["MetricName"]: a["Properties"] for a in resources(template_of(stack), "AWS::CloudWatch::Alarm").values()}
    assert alarms["Errors"]["Threshold"] == {"Ref": "T"}


def test_metric_methods_read_the_names_the_worker_writes(default):
    import pacer_runtime.metrics as written

    construct, _ = default
    stack = cdk.Stack.of(construct)
    cases = {
        "metric_input_tokens": (written.INPUT_TOKENS, "Sum"),
        "metric_output_tokens": (written.OUTPUT_TOKENS, "Sum"),
        "metric_reserved_tokens": (written.RESERVED_TOKENS, "Sum"),
        "metric_latency": (written.LATENCY_MS, "p90"),
        "metric_served_optimized": (written.SERVED_OPTIMIZED, "Sum"),
        "metric_served_standard": (written.SERVED_STANDARD, "Sum"),
        "metric_latency_fallbacks": (written.OPTIMIZED_SERVED_STANDARD, "Sum"),
        "metric_model_throttles": (written.THROTTLES, "Sum"),
    }
    for method, (name, statistic) in cases.items():
        metric = getattr(construct, method)()
        assert (metric.namespace, metric.metric_name, metric.statistic) == (written.NAMESPACE, name, statistic), method
        assert metric.period.to_seconds() == 60
        dimensions = stack.resolve(metric.dimensions)
        assert dimensions == {
            written.MODEL_DIMENSION: PROFILE.model_id,
            written.FUNCTION_DIMENSION: stack.resolve(construct.function.function_name),
        }, method
    assert construct.metric_latency(statistic="p99").statistic == "p99"  # defaults, not fixed values


def test_queue_and_function_metrics(default):
    construct, _ = default
    stack = cdk.Stack.of(construct)
    age = construct.metric_oldest_message_age()
    assert (age.metric_name, age.statistic, age.period.to_seconds()) == ("ApproximateAgeOfOldestMessage", "Maximum", 60)
    dead = construct.metric_dead_letters()
    assert (dead.metric_name, dead.statistic) == ("ApproximateNumberOfMessagesVisible", "Maximum")
    assert stack.resolve(dead.dimensions)["QueueName"] == stack.resolve(construct.dead_letter_queue.queue_name)
    errors, throttles = construct.metric_worker_errors(), construct.metric_worker_throttles()
    assert (errors.metric_name, errors.statistic, errors.period.to_seconds()) == ("Errors", "Sum", 300)
    assert (throttles.metric_name, throttles.statistic) == ("Throttles", "Sum")


def test_an_imported_queue_has_no_dead_letter_metric():
    stack = new_stack()
    queue = sqs.Queue.from_queue_arn(stack, "Imported", "arn:aws:sqs:us-east-1:111122223333:work")
    construct = QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, queue=queue, timeout=cdk.Duration.minutes(5))
    assert construct.metric_dead_letters() is None
    assert "DeadLetters" not in construct.alarms
