"""QueuedInference: the mapping, queues, worker, IAM and alarms in the synthesized template."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from genai_pacer import BedrockModel, QueuedInference, planning
from helpers import new_stack, only, policy_statements, resources, template_of

PROFILE = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")


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


def test_queue_redrives_to_an_encrypted_tls_only_dlq(default):
    _, template = default
    queues = resources(template, "AWS::SQS::Queue")
    main = next(q for k, q in queues.items() if "RedrivePolicy" in q["Properties"])["Properties"]
    dlq_id = main["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    assert main["RedrivePolicy"]["maxReceiveCount"] == 3
    assert main["VisibilityTimeout"] == 6 * 300
    for queue in queues.values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queues[dlq_id]["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    policies = resources(template, "AWS::SQS::QueuePolicy")
    assert len(policies) == 2
    for policy in policies.values():
        (deny,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_worker_runtime_code_and_logs(default):
    _, template = default
    function = only(template, "AWS::Lambda::Function")["Properties"]
    assert function["Runtime"] == "python3.14"
    assert function["Handler"] == "queued_worker.handler.handler"
    assert function["Timeout"] == 300 and function["MemorySize"] == 256
    assert function["Environment"]["Variables"]["MODEL_ID"] == PROFILE.model_id
    assert function["Environment"]["Variables"]["PERFORMANCE_LATENCY"] == ""
    assert "ReservedConcurrentExecutions" not in function
    assert function["Code"]["S3Key"].endswith(".zip")
    log_group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert "KmsKeyId" in log_group and log_group["RetentionInDays"] == 30
    role = resources(template, "AWS::IAM::Role")[function["Role"]["Fn::GetAtt"][0]]
    assert "ManagedPolicyArns" not in role["Properties"]


def test_worker_may_invoke_only_the_profile_and_its_models(default):
    _, template = default
    bedrock = [s for s in policy_statements(template) if "bedrock:InvokeModel" in str(s["Action"])]
    (statement,) = bedrock
    assert statement["Action"] == "bedrock:InvokeModel"
    text = str(statement["Resource"])
    assert "inference-profile/us.anthropic.claude-3-5-haiku" in text
    assert len(statement["Resource"]) == 4 and "*" not in text
    assert not any(s["Resource"] == "*" for s in policy_statements(template))


def test_table_has_pitr_and_the_worker_only_reads_and_writes_items(default):
    _, template = default
    table = only(template, "AWS::DynamoDB::Table")
    assert table["Properties"]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["Properties"]["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["DeletionPolicy"] == "Retain"
    (ddb,) = [s for s in policy_statements(template) if "dynamodb" in str(s["Action"])]
    assert sorted(ddb["Action"]) == ["dynamodb:GetItem", "dynamodb:PutItem"]


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
    sends = [s for s in policy_statements(template) if "sqs:SendMessage" in s["Action"]]
    assert len(sends) == 1


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
        timeout=cdk.Duration.minutes(1),
        visibility_timeout=cdk.Duration.minutes(10),
        max_receive_count=5,
        table=table,
        latency_optimized=True,
        bedrock_max_attempts=6,
        max_message_age=cdk.Duration.minutes(3),
        alarm_actions=[actions.SnsAction(topic)],
    )
    template = template_of(stack).to_json()
    mapping = only(template, "AWS::Lambda::EventSourceMapping")["Properties"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 50}
    assert (mapping["BatchSize"], mapping["MaximumBatchingWindowInSeconds"]) == (10, 2)
    function = only(template, "AWS::Lambda::Function")["Properties"]
    assert function["ReservedConcurrentExecutions"] == 60
    assert function["MemorySize"] == 512 and function["Timeout"] == 60
    log_group = only(template, "AWS::Logs::LogGroup")["Properties"]
    assert log_group["RetentionInDays"] == 7
    assert log_group["KmsKeyId"]["Fn::GetAtt"][0].startswith("MyKey")
    assert len(resources(template, "AWS::KMS::Key")) == 1
    metric = construct.metric_oldest_message_age()
    assert metric.metric_name == "ApproximateAgeOfOldestMessage"
    assert function["Environment"]["Variables"]["PERFORMANCE_LATENCY"] == "optimized"
    assert function["Environment"]["Variables"]["BEDROCK_MAX_ATTEMPTS"] == "6"
    assert construct.table is table and len(resources(template, "AWS::DynamoDB::Table")) == 1
    main = next(
        q for q in resources(template, "AWS::SQS::Queue").values() if "RedrivePolicy" in q["Properties"]
    )
    assert (
        main["Properties"]["VisibilityTimeout"] == 600
        and main["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 5
    )
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [
            {"Ref": next(iter(resources(template, "AWS::SNS::Topic")))}
        ]
    age = next(
        a
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "ApproximateAgeOfOldestMessage"
    )
    assert age["Properties"]["Threshold"] == 180


def test_an_existing_queue_is_consumed_as_is():
    stack = new_stack()
    dlq = sqs.Queue(stack, "MyDlq")
    queue = sqs.Queue(
        stack,
        "Mine",
        visibility_timeout=cdk.Duration.minutes(30),
        dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, max_receive_count=2),
    )
    construct = QueuedInference(stack, "Q", model=NOVA, max_concurrency=4, queue=queue)
    template = template_of(stack).to_json()
    assert construct.queue is queue and construct.dead_letter_queue is None
    assert len(resources(template, "AWS::SQS::Queue")) == 2
    assert "DeadLetters" not in construct.alarms
    with pytest.raises(ValueError, match="configure a new queue"):
        QueuedInference(
            new_stack(),
            "Q",
            model=NOVA,
            max_concurrency=4,
            queue=sqs.Queue(cdk.Stack(), "X"),
            visibility_timeout=cdk.Duration.hours(1),
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_concurrency=1), "max_concurrency=1 is outside the SQS event source range 2..1000"),
        (dict(max_concurrency=1001), "max_concurrency=1001 is outside"),
        (
            dict(max_concurrency=10, reserved_concurrency=5),
            "reserved_concurrency=5 is below max_concurrency=10",
        ),
        (
            dict(
                max_concurrency=10,
                timeout=cdk.Duration.minutes(2),
                visibility_timeout=cdk.Duration.minutes(5),
            ),
            "visibility_timeout=300s is shorter than 6 x the function timeout \\(120s\\) = 720s",
        ),
        (dict(max_concurrency=10, max_receive_count=0), "max_receive_count=0 must be >= 1"),
        (dict(max_concurrency=10, batch_size=0), "batch_size=0 must be within 1..10000"),
    ],
)
def test_bad_input_is_rejected_with_the_numbers(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QueuedInference(new_stack(), "Q", model=NOVA, **kwargs)


def test_missing_handler_code_is_reported(monkeypatch, tmp_path):
    from genai_pacer import _assets

    monkeypatch.setattr(_assets, "LAMBDA_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="handler code is missing"):
        QueuedInference(new_stack(), "Q", model=NOVA, max_concurrency=2)
