"""Queue-driven inference: SQS -> Lambda with the event source's maximum concurrency as the throttle.

The event source mapping's maximum concurrency caps how many invocations the queue drives, so
excess messages simply wait in the queue. Reserved concurrency alone is weaker: the poller keeps
pulling, Lambda throttles, and messages bounce back and can land in the dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs

from constructs import Construct

from . import planning
from ._assets import handler_code
from ._secure import encrypted_log_group, log_key
from .models import BedrockModel

__all__ = ["QueuedInference", "VISIBILITY_FACTOR"]

#: AWS's guidance for SQS event sources: visibility timeout at least six times the function timeout,
#: so a batch retried by the poller is not redelivered while the first attempt still runs.
VISIBILITY_FACTOR = 6
MIN_EVENT_SOURCE_CONCURRENCY, MAX_EVENT_SOURCE_CONCURRENCY = 2, 1000


class QueuedInference(Construct):
    """SQS queue + dead-letter queue -> Python worker that calls Bedrock Converse -> DynamoDB answers.

    model: the model or inference profile the worker calls; its role may invoke only that.
    max_concurrency: required; the event source's maximum concurrent invocations (2..1000), an int
        or a `planning.RatePlan` (its max_concurrency; the worker makes one call at a time, so this
        is also the number of model calls in flight).
    queue: an existing queue to consume. Default: a new SSE-encrypted, TLS-only queue with a
        dead-letter queue. Give an existing queue its own DLQ: nothing here can add one to it.
    dead_letter_queue: the DLQ of a new queue. Default: a new encrypted, TLS-only queue (14 days).
    max_receive_count: deliveries before a message moves to the DLQ. Default: 3.
    batch_size: messages per invocation. Default: 5.
    max_batching_window: how long the poller gathers a batch. Default: none (lowest latency).
    timeout: the worker's timeout. Default: 5 minutes (a batch of slow, retried model calls).
    visibility_timeout: of a new queue. Default: 6 x timeout; a smaller value is rejected.
    reserved_concurrency: optional reserved concurrency of the worker; at least max_concurrency.
    memory_size: Default: 256 MB (the worker waits on the network, not the CPU).
    table: an existing DynamoDB table (string partition key "pk") for the answers. Default: a new
        on-demand table with point-in-time recovery.
    latency_optimized: request Bedrock latency-optimized inference. Default: False.
    bedrock_max_attempts: SDK attempts per call, first included. Default: 4.
    encryption_key: KMS key for the worker's log group. Default: a new key with rotation.
    log_retention: Default: one month.
    max_message_age: alarm when the oldest message waits longer. Default: 15 minutes.
    alarm_actions: actions for every alarm (e.g. an SNS topic action). Default: none.

    Attributes: `queue`, `dead_letter_queue` (None for an existing queue), `function`, `table`,
    `event_source`, `log_group`, `alarms` (name -> Alarm).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: BedrockModel,
        max_concurrency: int | planning.RatePlan,
        queue: sqs.IQueue | None = None,
        dead_letter_queue: sqs.IQueue | None = None,
        max_receive_count: int = 3,
        batch_size: int = 5,
        max_batching_window: cdk.Duration | None = None,
        timeout: cdk.Duration | None = None,
        visibility_timeout: cdk.Duration | None = None,
        reserved_concurrency: int | None = None,
        memory_size: int = 256,
        table: dynamodb.ITable | None = None,
        latency_optimized: bool = False,
        bedrock_max_attempts: int = 4,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        max_message_age: cdk.Duration | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, id)
        cap = planning.as_max_concurrency(max_concurrency)
        timeout = timeout or cdk.Duration.minutes(5)
        _validate(
            cap, reserved_concurrency, max_receive_count, batch_size, timeout, visibility_timeout, queue
        )

        self.dead_letter_queue: sqs.IQueue | None = None
        if queue is None:
            self.dead_letter_queue = dead_letter_queue or sqs.Queue(
                self,
                "DeadLetterQueue",
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                retention_period=cdk.Duration.days(14),
            )
            queue = sqs.Queue(
                self,
                "Queue",
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                visibility_timeout=visibility_timeout
                or cdk.Duration.seconds(timeout.to_seconds() * VISIBILITY_FACTOR),
                dead_letter_queue=sqs.DeadLetterQueue(
                    queue=self.dead_letter_queue, max_receive_count=max_receive_count
                ),
            )
        elif dead_letter_queue is not None or visibility_timeout is not None:
            raise ValueError(
                "dead_letter_queue and visibility_timeout configure a new queue; set them on your existing queue instead"
            )
        self.queue = queue

        self.table = table or dynamodb.Table(
            self,
            "Answers",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )

        self.log_group = encrypted_log_group(
            self, "WorkerLogs", key=log_key(self, "LogsKey", encryption_key), retention=log_retention
        )
        # An explicit role with inline grants only: the default role would attach the AWS managed
        # AWSLambdaBasicExecutionRole policy (cdk-nag IAM4) and allow any log group.
        role = iam.Role(self, "WorkerRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.log_group.grant_write(role)
        self.function = lambda_.Function(
            self,
            "Worker",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler="queued_worker.handler.handler",
            code=handler_code(),
            role=role,
            log_group=self.log_group,
            timeout=timeout,
            memory_size=memory_size,
            reserved_concurrent_executions=reserved_concurrency,
            environment={
                "MODEL_ID": model.model_id,
                "RESULT_TABLE": self.table.table_name,
                "BEDROCK_MAX_ATTEMPTS": str(bedrock_max_attempts),
                "MAX_POOL_CONNECTIONS": "2",
                "PERFORMANCE_LATENCY": "optimized" if latency_optimized else "",
            },
        )
        model.grant_invoke(role)
        self.table.grant(role, "dynamodb:GetItem", "dynamodb:PutItem")

        self.event_source = sources.SqsEventSource(
            queue,
            max_concurrency=cap,
            report_batch_item_failures=True,
            batch_size=batch_size,
            max_batching_window=max_batching_window,
        )
        self.function.add_event_source(self.event_source)
        self.alarms = self._alarms(max_message_age or cdk.Duration.minutes(15), alarm_actions)

    def grant_send_messages(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a producer (a function, a role in another stack) enqueue prompts."""
        return self.queue.grant_send_messages(grantee)

    def metric_oldest_message_age(self, **props) -> cloudwatch.Metric:
        return self.queue.metric_approximate_age_of_oldest_message(**props)

    def _alarms(
        self, max_message_age: cdk.Duration, actions: Sequence[cloudwatch.IAlarmAction]
    ) -> dict[str, cloudwatch.Alarm]:
        five_minutes = cdk.Duration.minutes(5)
        specs: dict[str, tuple[cloudwatch.IMetric, float, str]] = {
            "OldestMessageAge": (
                self.queue.metric_approximate_age_of_oldest_message(
                    period=cdk.Duration.minutes(1), statistic="Maximum"
                ),
                max_message_age.to_seconds(),
                f"messages wait longer than {max_message_age.to_human_string()}: raise max_concurrency if the quota allows",
            ),
            "WorkerThrottles": (
                self.function.metric_throttles(period=five_minutes, statistic="Sum"),
                0,
                "Lambda throttled the worker: reserved or account concurrency is below the event source's maximum",
            ),
            "WorkerErrors": (
                self.function.metric_errors(period=five_minutes, statistic="Sum"),
                0,
                "the worker failed whole invocations (per-message failures are retried, these are not)",
            ),
        }
        if self.dead_letter_queue is not None:
            specs["DeadLetters"] = (
                self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    period=cdk.Duration.minutes(1), statistic="Maximum"
                ),
                0,
                "messages reached the dead-letter queue: the worker logs why for each (reason field)",
            )
        alarms = {}
        for name, (metric, threshold, description) in specs.items():
            alarm = cloudwatch.Alarm(
                self,
                f"{name}Alarm",
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=description,
            )
            for action in actions:
                alarm.add_alarm_action(action)
            alarms[name] = alarm
        return alarms


def _validate(
    cap: int,
    reserved: int | None,
    max_receive_count: int,
    batch_size: int,
    timeout: cdk.Duration,
    visibility_timeout: cdk.Duration | None,
    queue: sqs.IQueue | None,
) -> None:
    if (
        not cdk.Token.is_unresolved(cap)
        and not MIN_EVENT_SOURCE_CONCURRENCY <= cap <= MAX_EVENT_SOURCE_CONCURRENCY
    ):
        raise ValueError(
            f"max_concurrency={cap} is outside the SQS event source range {MIN_EVENT_SOURCE_CONCURRENCY}.."
            f"{MAX_EVENT_SOURCE_CONCURRENCY}; size it with genai_pacer.planning.sustainable_rate(...).max_concurrency"
        )
    if reserved is not None and not cdk.Token.is_unresolved(cap) and reserved < cap:
        raise ValueError(
            f"reserved_concurrency={reserved} is below max_concurrency={cap}: the poller would start {cap} invocations "
            f"and Lambda would throttle all but {reserved}, bouncing messages back toward the DLQ; raise "
            "reserved_concurrency to at least max_concurrency or leave it unset"
        )
    if max_receive_count < 1:
        raise ValueError(f"max_receive_count={max_receive_count} must be >= 1")
    if not 1 <= batch_size <= 10_000:
        raise ValueError(f"batch_size={batch_size} must be within 1..10000")
    if visibility_timeout is not None and queue is None:
        needed = timeout.to_seconds() * VISIBILITY_FACTOR
        if visibility_timeout.to_seconds() < needed:
            raise ValueError(
                f"visibility_timeout={visibility_timeout.to_seconds()}s is shorter than {VISIBILITY_FACTOR} x the "
                f"function timeout ({timeout.to_seconds()}s) = {needed}s; messages would be redelivered while "
                f"still being processed. Use at least {needed}s or leave it unset"
            )
