"""Queue-driven inference: SQS -> Lambda with the event source's maximum concurrency as the throttle.

The event source mapping's maximum concurrency caps how many invocations the queue drives, so
excess messages simply wait in the queue. Reserved concurrency alone is weaker: the poller keeps
pulling, Lambda throttles, and messages bounce back and can land in the dead-letter queue.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs

from constructs import Construct

from .._internal.alarms import threshold_alarm
from .._internal.assets import handler_code
from .._internal.checks import (
    Checks,
    deploy_time_duration,
    duration_in,
    fit_concurrency,
    in_unit,
    is_token,
    shown,
    warn,
    warn_above_reservable_concurrency,
)
from .._internal.docs import constructor_doc
from .._internal.metrics import model_function_metric
from .._internal.runtime_constants import metrics_constants
from .._internal.secure import encrypted_log_group, log_key
from ..models import BedrockModel, as_bedrock_model
from ..precompute.store import AnswerStore
from ..quota import planning
from ..quota.ledger import _CONSUMER_LIMIT, QuotaLedger
from ..quota.model_quota import PACER_ENVIRONMENT
from ..step_functions.model_tasks import SERVICE_TIER_VARIABLE, ServiceTier, check_service_tier

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_OUTPUT_TOKENS_PER_SECOND",
    "DEFAULT_TIME_TO_FIRST_TOKEN_SECONDS",
    "LEDGER_SECONDS",
    "PROCESSES_VARIABLE",
    "QUEUE_URL_VARIABLE",
    "STORE_SECONDS",
    "MAX_BEDROCK_ATTEMPTS",
    "VISIBILITY_FACTOR",
    "QueuedInference",
    "sdk_backoff_seconds",
    "worst_case_call_seconds",
]

#: AWS's guidance for SQS event sources: visibility timeout at least six times the function timeout,
#: so a batch retried by the poller is not redelivered while the first attempt still runs.
VISIBILITY_FACTOR = 6
#: ScalingConfig.MaximumConcurrency: 2..1000 (AWS::Lambda::EventSourceMapping schema, cfn-lint).
MIN_EVENT_SOURCE_CONCURRENCY, MAX_EVENT_SOURCE_CONCURRENCY = 2, 1000
#: A standard Lambda function's timeout limit (AWS::Lambda::Function Timeout: "the maximum allowed value is
#: 900 seconds"; the schema's 5,400 applies to Lambda Managed Instances only).
MAX_LAMBDA_TIMEOUT_SECONDS = 900
#: SQS VisibilityTimeout: 0..43,200 s (AWS::SQS::Queue schema, cfn-lint).
MAX_VISIBILITY_TIMEOUT_SECONDS = 12 * 3600
#: The DynamoDB work around one call (claim, read, write, release). Equal to STORE_SECONDS in
#: lambda/queued_worker/handler.py, which reserves the same time before each message.
STORE_SECONDS = 2
#: The ledger work around one call with QueuedInference(ledger=...): a reservation and its settlement,
#: each with the worker's bounded DynamoDB retries (lambda/queued_worker/handler.py LEDGER_SECONDS,
#: kept equal by a test).
LEDGER_SECONDS = 2
#: Environment variables QueuedInference(ledger=...) sets for the worker beside the ledger's own
#: (quota.ledger.LEDGER_ENVIRONMENT and the quota's burndown, PACER_ENVIRONMENT): the queue a refused
#: message is sent back to, and how many workers run at once (the event source's maximum
#: concurrency), which splits the consumer's floor into each process's fallback. The handler reads
#: the same names (a test keeps them equal).
QUEUE_URL_VARIABLE = "QUEUE_URL"
#: What a producer needs on a queue's customer-managed key to send to it: "kms:GenerateDataKey" and
#: "kms:Decrypt" (SQS developer guide, "Amazon SQS key management", sqs-key-management.html: the
#: producer's permissions; Decrypt lets SQS reuse a cached data key).
SEND_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
PROCESSES_VARIABLE = "MAX_CONCURRENCY"
#: An invocation's own start-up and bookkeeping, on top of its messages.
HANDLER_MARGIN_SECONDS = 3
#: botocore's standard retry mode waits up to min(2^i, 20) s before retry i+1 after a throttle
#: (botocore/retries/standard.py, ExponentialBackoff's _MAX_BACKOFF = 20).
SDK_MAX_BACKOFF_SECONDS = 20
DEFAULT_MAX_OUTPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS_PER_SECOND = 30
DEFAULT_TIME_TO_FIRST_TOKEN_SECONDS = 5
#: DynamoDB's item size limit, 400 KB (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/
#: ServiceQuotas.html#limits-items). Every token decodes to at least one byte, so an answer of more
#: tokens than this could never be stored: the ceiling of max_output_tokens.
MAX_ITEM_BYTES = 400 * 1024
#: Alarm thresholds are counts over 5 minutes; above this no worker's metric could ever reach them.
MAX_ALARM_COUNT = 1_000_000_000


def sdk_backoff_seconds(max_attempts: int) -> int:
    """The SDK's longest total backoff across `max_attempts` attempts: 1 + 2 + 4 + 8 + 16, then 20 s per
    retry. Closed form, so a huge count costs nothing to evaluate."""
    retries = max(max_attempts - 1, 0)
    doubling = 0
    while doubling < retries and 2**doubling < SDK_MAX_BACKOFF_SECONDS:
        doubling += 1
    return (2**doubling - 1) + SDK_MAX_BACKOFF_SECONDS * (retries - doubling)


def _max_bedrock_attempts() -> int:
    """The most attempts whose backoff alone (instant answers, no output) still fits one message in
    Lambda's 15 minutes: any more can never fit the time budget."""
    room = MAX_LAMBDA_TIMEOUT_SECONDS - STORE_SECONDS - HANDLER_MARGIN_SECONDS
    attempts = 1
    while sdk_backoff_seconds(attempts + 1) <= room:
        attempts += 1
    return attempts


#: bedrock_max_attempts' ceiling (49): more cannot fit one message into Lambda's timeout.
MAX_BEDROCK_ATTEMPTS = _max_bedrock_attempts()


def worst_case_call_seconds(
    *, max_output_tokens: int, output_tokens_per_second: float, time_to_first_token_seconds: float, max_attempts: int
) -> float:
    """How long one model call may take, SDK retries included.

    One attempt decodes the whole answer (time to first token + max_output_tokens / tokens per
    second); each retried attempt is a throttle, which Bedrock returns at admission (counted as one
    time-to-first-token), followed by the SDK's largest backoff for that retry.
    """
    return (
        max_attempts * time_to_first_token_seconds
        + max_output_tokens / output_tokens_per_second
        + sdk_backoff_seconds(max_attempts)
    )


@constructor_doc
class QueuedInference(Construct):
    """SQS queue + dead-letter queue -> Python worker that calls Bedrock Converse -> DynamoDB answers.

    model: the model or inference profile the worker calls; its role may invoke only that.
    max_concurrency: required; the event source's maximum concurrent invocations (2..1000), an int
        or a `planning.RatePlan` (fitted: a plan above 1000 uses 1000 with a warning, a plan below 2
        is refused). The worker makes one call at a time, so this is also the calls in flight.
    queue: an existing queue to consume. Default: a new SSE-encrypted, TLS-only queue with a
        dead-letter queue. An existing `sqs.Queue` must have a dead-letter queue and a visibility
        timeout of at least 6 x the function timeout; an imported queue gets a warning to check both.
    dead_letter_queue: the DLQ of a new queue. Default: a new encrypted, TLS-only queue (14 days),
        retained when the stack is deleted (the messages it holds are unanswered work).
    max_receive_count: deliveries before a message of a new queue moves to the DLQ (1..1000). Default: 3.
    batch_size: messages per invocation: 1..10, or 1..10,000 with max_batching_window. Default: 5.
    max_batching_window: how long the poller gathers a batch (0..300 s). Default: none (lowest latency).
    timeout: the worker's timeout (1 s..15 min). Default: derived, batch_size x (a call's worst case
        + 2 s of DynamoDB work) + 3 s; a combination that cannot fit 15 minutes is refused.
    visibility_timeout: of a new queue (up to 12 h). Default: 6 x timeout; a smaller value is refused.
    reserved_concurrency: optional reserved concurrency of the worker; at least max_concurrency.
        Above 900 (a default account's 1,000 concurrent executions less the 100 Lambda keeps
        unreserved, an adjustable quota) a warning says how to check and raise the quota.
    memory_size: 128..10240 MB. Default: 256 MB (the worker waits on the network, not the CPU).
    answer_store: where answers and claims are written (an `AnswerStore`, which also accepts your
        own table); share one store with the router and pre-computation that serve the same keys.
        Default: a new AnswerStore (on-demand table, point-in-time recovery, TTL on `expires_at`,
        which also removes claims of crashed invocations).
    latency_optimized: request Bedrock latency-optimized inference. Default: False.
    service_tier: the Bedrock service tier of every call ("priority", "default", "flex" or
        "reserved"; docs/tiers.md): "flex" suits a queue, whose work can wait. A message cannot
        choose another (a body with serviceTier is refused as a bad message), and the worker's role
        is denied the other tiers (BedrockModel.tier_fence). A deploy-time string reaches the worker
        as it is, and the Deny then names the tier the role may use (docs/tiers.md). Default: none
        (Bedrock serves at default).
    bedrock_max_attempts: SDK attempts per call, the first included (>= 1). Default: 4.
    max_output_tokens: the longest answer a call may produce: the maxTokens a message gets when it
        sets none, and the most it may set. Sizes the time budget. Default: 1000.
    output_tokens_per_second: a conservative decode speed of the model, for the time budget.
        Default: 30 (about half of what current models sustain, so a slow period still fits).
    time_to_first_token: a conservative time to first token, for the time budget. Default: 5 s.
    encryption_key: KMS key for the worker's log group. Default: the construct's one KMS key, with
        rotation, retained on delete ($1 a month while it exists, AWS KMS pricing page;
        docs/security.md, "KMS keys").
    queue_encryption_key: customer-managed KMS key for a new queue. Default: SQS-managed encryption.
    dead_letter_queue_encryption_key: customer-managed KMS key for a new DLQ. Default: SQS-managed.
    log_retention: Default: one month.
    max_message_age: alarm when the oldest message waits longer (1 s..14 days). Default: 15 minutes.
    worker_error_threshold: alarm when more whole invocations than this fail in 5 minutes (>= 0).
        Default: 0 (per-message failures are retried; a failed invocation is a bug or a timeout).
    worker_throttle_threshold: alarm when Lambda throttles the worker more than this in 5 minutes
        (>= 0). Default: 0 (reserved or account concurrency is below the event source's maximum).
    dead_letter_threshold: alarm when the dead-letter queue holds more messages than this (>= 0).
        Default: 0 (each is an unanswered request).
    alarm_actions: actions for every alarm (e.g. an SNS topic action). Default: none.
    ledger: a `QuotaLedger` of the ModelQuota of this worker's model (refused for another model's,
        where both ids are known at synth): the worker then takes part in the quota's shared ledger.
        Before each call it holds the call's reservation (input + maxTokens x burndown, the
        QuotaPacer's hold) on the ledger and settles it after with the real usage (input + cache
        writes + output x burndown; cache reads are free); a call Bedrock never saw or throttled
        returns its hold at once. A message the ledger refuses waits in the queue, not in a throttle:
        the worker sends it back to its queue with a delay (the ledger's estimate of when there is
        room, 1..900 s) and deletes the delivery, so the wait never counts toward the DLQ's
        max_receive_count (its requestId and sequence ride along; a standard queue is needed). The
        worker's floor is the share it holds of the ledger's quota (max_concurrency=quota.share(...),
        or a share drawn under this construct's id before the worker is built); without one it only
        borrows (floor 0). Above its floor it borrows up to its share's burst_tpm
        (ModelQuota.share(..., burst_tpm=...); without one, the whole allocatable quota), and
        max_concurrency caps its calls in flight (given a share drawn with burst_tpm, at the calls the
        burst sustains: the event source's maximum concurrency). While DynamoDB throttles or cannot be reached, each
        worker process falls back to its part of the floor (floor / max_concurrency), never
        unbounded, and publishes LedgerFallbacks (pacer_runtime.metrics); without a floor, messages
        wait in the queue until the ledger answers. The worker gets UpdateItem and GetItem on the
        quota's item only (and the table's customer-managed key through DynamoDB), SendMessage on its
        queue, and the ledger's DynamoDB work joins each message's time budget (2 s). Default: none
        (the worker paces itself by max_concurrency alone).

    The worker gets the time budget as CALL_BUDGET_SECONDS (see `worst_case_call_seconds`) and
    stops taking messages when the invocation's remaining time cannot cover one more; the rest
    return to the queue unprocessed.

    Attributes: `queue`, `dead_letter_queue` (an existing queue's own DLQ when it can be read, else
    None), `function`, `answer_store`, `table` (its table), `event_source`, `log_group`, `alarms` (name -> Alarm),
    `call_budget_seconds`, `timeout`, `model_id`, `max_output_tokens` (what each call may reserve; ModelQuota
    plans its share with it), `ledger`, `ledger_consumer`, `ledger_floor_tpm` and `ledger_burst_tpm` (the
    worker's name, floor and burst cap in the ledger; None without one).

    Metrics: the worker publishes each call's tokens, reservation, latency and served latency mode
    (pacer_runtime.metrics) per model and function; `metric_input_tokens`, `metric_output_tokens`,
    `metric_reserved_tokens`, `metric_latency`, `metric_served_optimized`, `metric_served_standard`,
    `metric_latency_fallbacks` and `metric_model_throttles` read them for this worker only. The
    queue and function metrics: `metric_oldest_message_age`, `metric_dead_letters`,
    `metric_worker_errors`, `metric_worker_throttles`.
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
        max_receive_count: int | None = None,
        batch_size: int = 5,
        max_batching_window: cdk.Duration | None = None,
        timeout: cdk.Duration | None = None,
        visibility_timeout: cdk.Duration | None = None,
        reserved_concurrency: int | None = None,
        memory_size: int = 256,
        answer_store: AnswerStore | None = None,
        latency_optimized: bool = False,
        service_tier: ServiceTier | None = None,
        bedrock_max_attempts: int = 4,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        output_tokens_per_second: float = DEFAULT_OUTPUT_TOKENS_PER_SECOND,
        time_to_first_token: cdk.Duration | None = None,
        encryption_key: kms.IKey | None = None,
        queue_encryption_key: kms.IKey | None = None,
        dead_letter_queue_encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        max_message_age: cdk.Duration | None = None,
        worker_error_threshold: int = 0,
        worker_throttle_threshold: int = 0,
        dead_letter_threshold: int = 0,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        ledger: QuotaLedger | None = None,
    ) -> None:
        super().__init__(scope, id)
        model = as_bedrock_model(model)  # an aws_bedrock_alpha IBedrockInvokable too
        # The ledger's DynamoDB work joins each message's time budget (checked below with the rest).
        self._store_seconds = STORE_SECONDS + (LEDGER_SECONDS if ledger is not None else 0)
        ttft = time_to_first_token if time_to_first_token is not None else cdk.Duration.seconds(
            DEFAULT_TIME_TO_FIRST_TOKEN_SECONDS
        )
        with Checks("QueuedInference", scope=self) as check:
            check.instance("model", model, BedrockModel, "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')")
            cap = fit_concurrency(
                check, self, "max_concurrency", QuotaLedger.burst_plan(ledger, max_concurrency),
                minimum=MIN_EVENT_SOURCE_CONCURRENCY, maximum=MAX_EVENT_SOURCE_CONCURRENCY,
                limit="the SQS event source's maximum concurrency",
            )
            check_service_tier(check, "service_tier", service_tier)
            self._check_plain_props(
                check,
                memory_size=memory_size, latency_optimized=latency_optimized, log_retention=log_retention,
                max_message_age=max_message_age, alarm_actions=alarm_actions, encryption_key=encryption_key,
                queue_encryption_key=queue_encryption_key,
                dead_letter_queue_encryption_key=dead_letter_queue_encryption_key,
                queue=queue, dead_letter_queue=dead_letter_queue, answer_store=answer_store,
            )
            for name, value in (
                ("worker_error_threshold", worker_error_threshold),
                ("worker_throttle_threshold", worker_throttle_threshold),
                ("dead_letter_threshold", dead_letter_threshold),
            ):
                check.integer(name, value, minimum=0, maximum=MAX_ALARM_COUNT,
                              fix="a count the alarm tolerates; 0 alarms on the first one")
            reserved_ok = check.integer("reserved_concurrency", reserved_concurrency, minimum=1, optional=True)
            if reserved_ok:
                warn_above_reservable_concurrency(self, "reserved_concurrency", reserved_concurrency)
            if reserved_ok and reserved_concurrency is not None and isinstance(cap, int):
                check.rule(
                    reserved_concurrency >= cap,
                    f"reserved_concurrency={reserved_concurrency} is below max_concurrency={cap}: the poller would "
                    f"start {cap} invocations and Lambda would throttle all but {reserved_concurrency}, bouncing "
                    "messages back toward the DLQ; raise reserved_concurrency to at least max_concurrency or leave it unset",
                    id="reserved_concurrency.below-max-concurrency",
                )
            batch_ok = self._check_batch(check, batch_size, max_batching_window, queue)
            budget = self._check_budget(check, bedrock_max_attempts, max_output_tokens, output_tokens_per_second, ttft)
            timeout = self._check_timeout(check, timeout, budget, batch_size if batch_ok or is_token(batch_size) else None)
            self._check_new_resource_props(
                check, queue,
                dead_letter_queue=dead_letter_queue, max_receive_count=max_receive_count,
                visibility_timeout=visibility_timeout, queue_encryption_key=queue_encryption_key,
                dead_letter_queue_encryption_key=dead_letter_queue_encryption_key,
            )
            visibility_timeout = self._check_visibility(check, visibility_timeout, timeout, queue)
            self._check_existing_queue(check, queue, timeout)
            consumer = self._check_ledger(check, ledger, model, max_concurrency, queue)
        # Both are None only when a check above failed, and then Checks raised on leaving the block.
        self.call_budget_seconds = cast(int, budget)
        self.timeout = cast(cdk.Duration, timeout)
        self.model_id = model.model_id

        self.dead_letter_queue: sqs.IQueue | None = None
        if queue is None:
            self.dead_letter_queue = dead_letter_queue or sqs.Queue(
                self,
                "DeadLetterQueue",
                enforce_ssl=True,
                retention_period=cdk.Duration.days(14),
                removal_policy=cdk.RemovalPolicy.RETAIN,
                **_queue_encryption(dead_letter_queue_encryption_key),
            )
            queue = sqs.Queue(
                self,
                "Queue",
                enforce_ssl=True,
                visibility_timeout=visibility_timeout,
                dead_letter_queue=sqs.DeadLetterQueue(
                    queue=self.dead_letter_queue, max_receive_count=max_receive_count or 3
                ),
                **_queue_encryption(queue_encryption_key),
            )
        elif isinstance(queue, sqs.Queue) and queue.dead_letter_queue is not None:
            self.dead_letter_queue = queue.dead_letter_queue.queue
        self.queue = queue
        self.max_output_tokens = max_output_tokens

        self.answer_store = answer_store or AnswerStore(self, "Answers")
        self.table = self.answer_store.table

        self.log_group = encrypted_log_group(
            self, "WorkerLogs", key=log_key(self, "LogsKey", encryption_key), retention=log_retention
        )
        # An explicit role with inline grants only: the default role would attach the AWS managed
        # AWSLambdaBasicExecutionRole policy (cdk-nag IAM4) and allow any log group.
        role = iam.Role(self, "WorkerRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.log_group.grant_write(role)
        generation_seconds = ttft.to_seconds(integral=False) + max_output_tokens / output_tokens_per_second
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
                **self.answer_store.environment(),
                "BEDROCK_MAX_ATTEMPTS": str(bedrock_max_attempts),
                "MAX_POOL_CONNECTIONS": "2",
                "PERFORMANCE_LATENCY": "optimized" if latency_optimized else "",
                **({SERVICE_TIER_VARIABLE: service_tier} if service_tier is not None else {}),
                "CALL_BUDGET_SECONDS": str(budget),
                "MAX_OUTPUT_TOKENS": str(max_output_tokens),
                # One attempt may decode the longest answer at the conservative speed; slower is a hung call.
                "READ_TIMEOUT_SECONDS": str(math.ceil(generation_seconds)),
            },
        )
        model.grant_invoke(role)
        if service_tier is not None and (fence := model.tier_fence(self, service_tier)) is not None:
            role.add_to_principal_policy(fence)  # no other tier, whatever the code in the function sends
        self.answer_store.grant_write(role)  # answers and claims, on this table only
        self.ledger = ledger
        self.ledger_consumer: str | None = None
        self.ledger_floor_tpm: float | None = None
        self.ledger_burst_tpm: float | None = None
        if ledger is not None and consumer is not None:
            self._take_part(ledger, consumer, cap, role)

        self.event_source = sources.SqsEventSource(
            queue,
            max_concurrency=cap,
            report_batch_item_failures=True,
            batch_size=batch_size,
            max_batching_window=max_batching_window,
        )
        self.function.add_event_source(self.event_source)
        self.alarms = self._alarms(
            max_message_age or cdk.Duration.minutes(15),
            alarm_actions,
            errors=worker_error_threshold,
            throttles=worker_throttle_threshold,
            dead_letters=dead_letter_threshold,
        )

    # -- validation -------------------------------------------------------------------------------

    @staticmethod
    def _check_plain_props(check: Checks, **props: Any) -> None:
        """Props checked on their own (type and range)."""
        check.integer("memory_size", props["memory_size"], minimum=128, maximum=10_240, fix="Lambda allows 128..10240 MB")
        check.instance("latency_optimized", props["latency_optimized"], bool, "True or False")
        check.instance("log_retention", props["log_retention"], logs.RetentionDays, "a logs.RetentionDays, e.g. logs.RetentionDays.ONE_MONTH")
        check.duration(
            "max_message_age", props["max_message_age"], minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.days(14),
            optional=True, fix="SQS keeps a message at most 14 days",
        )
        in_unit(check, "max_message_age", props["max_message_age"], "seconds", why="the oldest-message alarm's threshold is")
        check.alarm_actions("alarm_actions", props["alarm_actions"])
        for name in ("encryption_key", "queue_encryption_key", "dead_letter_queue_encryption_key"):
            check.instance(name, props[name], kms.IKey, "a kms.IKey", optional=True)
        check.instance("queue", props["queue"], sqs.IQueue, "an sqs.IQueue", optional=True)
        check.instance("dead_letter_queue", props["dead_letter_queue"], sqs.IQueue, "an sqs.IQueue", optional=True)
        check.instance("answer_store", props["answer_store"], AnswerStore, "an AnswerStore (AnswerStore(scope, id, table=...) for your own table)", optional=True)

    @staticmethod
    def _check_batch(check: Checks, batch_size: Any, window: Any, queue: Any) -> bool:
        """The SQS event source's rules, in our words: 1..10 messages, or up to 10,000 with a batching window."""
        has_window = window is not None
        check.duration(
            "max_batching_window", window, minimum=cdk.Duration.seconds(0), maximum=cdk.Duration.seconds(300),
            optional=True, fix="the SQS event source gathers a batch for at most 300 s",
        )
        in_unit(check, "max_batching_window", window, "seconds", why="the event source's MaximumBatchingWindowInSeconds is")
        maximum = 10_000 if has_window else 10
        rule = (
            "an SQS event source with max_batching_window takes 1..10000 messages per batch"
            if has_window
            else "an SQS event source without max_batching_window takes 1..10 messages per batch; "
            "set max_batching_window to allow up to 10000"
        )
        ok = check.integer("batch_size", batch_size, minimum=1, maximum=maximum, fix=rule)
        if has_window and queue is not None and getattr(queue, "fifo", False) is True:
            check.fail("max_batching_window is set but the queue is FIFO, which the SQS event source cannot batch by time; remove it", id="max_batching_window.fifo-queue")
        return ok

    def _check_budget(self, check: Checks, attempts: Any, max_output: Any, otps: Any, ttft: Any) -> int | None:
        """A call's worst case in whole seconds, from props that must be known at synth."""
        ok = [
            check.integer(
                "bedrock_max_attempts", attempts, minimum=1, maximum=MAX_BEDROCK_ATTEMPTS,
                fix=f"1 makes one attempt and no retry; each retry past the fifth waits up to {SDK_MAX_BACKOFF_SECONDS} s "
                f"(the SDK's standard mode), so more than {MAX_BEDROCK_ATTEMPTS} attempts cannot fit Lambda's 15 minutes",
            ),
            check.integer(
                "max_output_tokens", max_output, minimum=1, maximum=MAX_ITEM_BYTES,
                fix=f"the longest answer a message may ask for; a longer one than DynamoDB's {MAX_ITEM_BYTES:,}-byte item "
                "could never be stored",
            ),
            check.number("output_tokens_per_second", otps, above=0, fix="a conservative decode speed, e.g. 30"),
            check.duration("time_to_first_token", ttft, minimum=cdk.Duration.seconds(0), maximum=cdk.Duration.minutes(15)),
        ]
        for name, value in (
            ("bedrock_max_attempts", attempts),
            ("max_output_tokens", max_output),
            ("output_tokens_per_second", otps),
            ("time_to_first_token", ttft),
        ):
            if is_token(value):
                check.fail(f"{name} is a deploy-time token, but it sizes the worker's time budget at synth: pass a number", id=f"{name}.deploy-time-budget")
        if not all(ok):
            return None
        seconds = worst_case_call_seconds(
            max_output_tokens=max_output,
            output_tokens_per_second=otps,
            time_to_first_token_seconds=ttft.to_seconds(integral=False),
            max_attempts=attempts,
        )
        budget = math.ceil(seconds)
        per_message = budget + self._store_seconds
        self._budget_text = (
            f"{per_message:g} s per message (a call's worst case {budget:g} s = {attempts} attempts x "
            f"{_num(ttft.to_seconds(integral=False))} s to first token + {max_output} tokens / {_num(otps)} tokens per s + "
            f"{_num(seconds - attempts * ttft.to_seconds(integral=False) - max_output / otps)} s of retry backoff; "
            f"plus {self._store_seconds} s of DynamoDB work)"
        )
        if not check.rule(
            per_message + HANDLER_MARGIN_SECONDS <= MAX_LAMBDA_TIMEOUT_SECONDS,
            f"one message needs {self._budget_text}, more than Lambda's 15-minute limit: lower max_output_tokens "
            "or bedrock_max_attempts, or raise output_tokens_per_second if the model is faster",
            id="timeout.one-message-beyond-lambda-limit",
        ):
            return None
        return budget

    def _check_timeout(self, check: Checks, timeout: Any, budget: int | None, batch_size: Any) -> cdk.Duration | None:
        """The given timeout (checked against one message's budget) or one derived from the batch.

        batch_size is None when it is invalid (already reported): nothing is derived from it.
        """
        if timeout is not None:
            if not check.duration(
                "timeout", timeout, minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.minutes(15),
                fix="Lambda allows 1 s..15 min",
            ):
                # A deploy-time Duration (in seconds) reaches the function's Timeout; any other token was refused.
                if deploy_time_duration(timeout) and duration_in(check, "timeout", timeout, "seconds", why="a function's Timeout is") is not None:
                    return timeout
                return None
            if budget is None:
                return timeout
            seconds = timeout.to_seconds(integral=False)
            per_message = budget + self._store_seconds
            if not check.rule(
                seconds >= per_message + HANDLER_MARGIN_SECONDS,
                f"timeout={_num(seconds)} s cannot cover one message: it needs {self._budget_text} + "
                f"{HANDLER_MARGIN_SECONDS} s; every message would return unprocessed until it reached the DLQ. "
                f"Use at least {math.ceil(per_message + HANDLER_MARGIN_SECONDS)} s or leave timeout unset",
                id="timeout.below-one-message",
            ):
                return None
            if isinstance(batch_size, int) and not is_token(batch_size):
                fits = int((seconds - HANDLER_MARGIN_SECONDS) // per_message)
                needed = math.ceil(batch_size * per_message + HANDLER_MARGIN_SECONDS)
                if fits < batch_size:
                    warn(
                        self,
                        "timeout-below-batch",
                        f"timeout={_num(seconds)} s covers {fits} worst-case messages of {per_message:g} s but "
                        f"batch_size={batch_size}: when calls run near their worst case the worker returns the rest "
                        "unprocessed, and each return counts toward the queue's receive limit (then the DLQ). "
                        f"Use timeout >= {needed} s, a smaller batch_size, or leave timeout unset",
                    )
            return timeout
        if budget is None:
            return None
        if is_token(batch_size):
            check.fail("batch_size is a deploy-time token, so the timeout cannot be derived from it: pass timeout", id="batch_size.deploy-time-timeout")
            return None
        if batch_size is None:
            return None
        per_message = budget + self._store_seconds
        seconds = math.ceil(batch_size * per_message + HANDLER_MARGIN_SECONDS)
        fits = int((MAX_LAMBDA_TIMEOUT_SECONDS - HANDLER_MARGIN_SECONDS) // per_message)
        if not check.rule(
            seconds <= MAX_LAMBDA_TIMEOUT_SECONDS,
            f"batch_size={batch_size} x {self._budget_text} + {HANDLER_MARGIN_SECONDS} s = {seconds} s exceeds "
            f"Lambda's 15-minute limit ({MAX_LAMBDA_TIMEOUT_SECONDS} s): use batch_size <= {fits}, lower "
            "max_output_tokens, or pass a shorter timeout (the worker then takes what fits and returns the rest)",
            id="batch_size.beyond-lambda-limit",
        ):
            return None
        return cdk.Duration.seconds(seconds)

    def _check_ledger(self, check: Checks, ledger: Any, model: Any, max_concurrency: Any,
                      queue: Any) -> tuple[str, float, float | None] | None:
        """The worker's name, floor and burst cap in the ledger: the share it holds of the ledger's quota
        (given as max_concurrency=quota.share(...), or drawn under this construct's id) and the share's
        burst_tpm (None: the ledger's default, the allocatable quota), else a name of its own and no floor
        (it only borrows). None without a ledger or when a check failed."""
        if QuotaLedger.of_model(check, ledger, model, consumer="this worker") is None:
            return None
        quota = ledger.quota
        check.rule(
            getattr(queue, "fifo", False) is not True,
            "ledger= needs a standard queue: a message the ledger refuses is sent back to the queue with a delay "
            "(so the wait never counts toward the dead-letter queue's receive limit), and a FIFO queue cannot "
            "delay one message; use a standard queue or drop ledger",
            id="ledger.fifo-queue",
        )
        share = QuotaLedger.share_name(quota, max_concurrency)
        if share is None and self.node.id in quota.shares:
            share = self.node.id
        if share is None:
            # No share: the worker only borrows, under a name unique in the app.
            return cdk.Names.unique_resource_name(self, max_length=_CONSUMER_LIMIT), 0.0, None
        if not check.rule(
            "#" not in share and len(share) <= _CONSUMER_LIMIT,
            f"ledger: the worker's share {share!r} names it in the ledger's attribute names, which allow at most "
            f"{_CONSUMER_LIMIT} characters and no '#'; draw the share under such a name",
            id="ledger.share-name-too-long",
        ):
            return None
        return share, quota.shares[share].tpm, quota.shares[share].burst_tpm

    def _take_part(self, ledger: QuotaLedger, consumer: tuple[str, float, float | None], cap: Any,
                   role: iam.IRole) -> None:
        """The worker's grants and variables for the ledger: UpdateItem and GetItem on its quota's item
        (and the table's key), SendMessage on its own queue (a refused message goes back with a delay)."""
        name, floor, burst = consumer
        ledger.grant_use(role)
        # SendMessage alone, and the queue's own key with exactly what a producer needs:
        # queue.grant_send_messages adds GetQueueAttributes, GetQueueUrl and kms:ReEncrypt*/GenerateDataKey*.
        self.queue.grant(role, "sqs:SendMessage")
        if self.queue.encryption_master_key is not None:
            self.queue.encryption_master_key.grant(role, *SEND_KEY_ACTIONS)
        burndown = PACER_ENVIRONMENT[2]
        for variable, value in {
            **ledger.consumer_variables(name, floor, burst),
            burndown: f"{ledger.quota.burndown:g}",
            QUEUE_URL_VARIABLE: self.queue.queue_url,
            # a deploy-time cap reaches the worker as it is: it divides the floor at run time
            PROCESSES_VARIABLE: cdk.Token.as_string(cap) if is_token(cap) else str(cap),
        }.items():
            self.function.add_environment(variable, value)
        self.ledger_consumer, self.ledger_floor_tpm = name, floor
        self.ledger_burst_tpm = ledger.quota_tpm if burst is None else burst
        # A message that sets no maxTokens holds max_output_tokens x burndown (its prompt on top): if that
        # alone is more than the ledger can ever hold for this worker, every such message is refused at run
        # time. A warning, not a refusal: messages that send a smaller maxTokens still run. Judged at synth,
        # once the shares held outside every ledger are known (they shrink what the ledger can hold).
        if not is_token(self.max_output_tokens):
            held = ledger.hold(0, self.max_output_tokens)
            ledger.check_at_synth(lambda: self._warn_hold_never_admitted(ledger, held))

    def _warn_hold_never_admitted(self, ledger: QuotaLedger, held: int) -> None:
        """At synth (QuotaLedger.check_at_synth): `held` (max_output_tokens x burndown) against what the
        ledger can ever hold for this worker: its burst cap as the worker gets it, at most what the ledger's
        consumers share once the shares held outside every ledger are left free (min(burst, shared_tpm()),
        GENAI_PACER_LEDGER_BURST_TPM), and the day they share (shared_daily_tokens())."""
        burst = cast(float, self.ledger_burst_tpm)
        shared = ledger.shared_tpm()
        limits = [(min(burst, shared), "the worker's burst cap in the ledger" + (
                      f" (its {burst:,.0f} TPM less the shares held outside every ledger of the quota: "
                      f"{', '.join(f'{name!r} ({tpm:,.0f} TPM)' for name, tpm in ledger.outside_shares().items())})"
                      if shared < burst else ""), "TPM"),
                  (ledger.shared_daily_tokens(), "the ledger's whole day", "tokens")]
        for limit, what, unit in limits:
            if held > limit:
                warn(
                    self,
                    "ledger-hold-never-admitted",
                    f"max_output_tokens={self.max_output_tokens:,} x burndown {ledger.quota.burndown:g} = "
                    f"{held:,} tokens held per message before its prompt, more than {what} ({limit:,.0f} {unit}): "
                    "every message that sets no smaller maxTokens would be refused by the ledger and never "
                    "answered. Lower max_output_tokens, or raise the quota's limit",
                )
                break

    @staticmethod
    def _check_new_resource_props(check: Checks, queue: Any, **props: Any) -> None:
        """Props that configure a queue or DLQ the construct creates: refused beside an existing one."""
        if queue is not None:
            given = [
                name
                for name in ("dead_letter_queue", "max_receive_count", "visibility_timeout", "queue_encryption_key",
                             "dead_letter_queue_encryption_key")
                if props[name] is not None
            ]
            check.rule(
                not given,
                f"{', '.join(given)} configure{'s' if len(given) == 1 else ''} a new queue, but queue is an existing "
                "one: set them on your queue instead, or drop queue",
                id="queue.new-queue-props",
            )
        elif props["dead_letter_queue"] is not None and props["dead_letter_queue_encryption_key"] is not None:
            check.fail("dead_letter_queue_encryption_key configures a new DLQ, but dead_letter_queue is an existing one: encrypt your DLQ yourself", id="dead_letter_queue_encryption_key.existing-dlq")
        if props["max_receive_count"] is not None:
            check.integer("max_receive_count", props["max_receive_count"], minimum=1, maximum=1000, fix="SQS redrive allows 1..1000")

    @staticmethod
    def _check_visibility(check: Checks, visibility: Any, timeout: Any, queue: Any) -> cdk.Duration | None:
        """A new queue's visibility timeout: given (>= 6 x timeout, <= 12 h) or 6 x timeout."""
        if queue is not None:
            return None  # the existing queue keeps its own (checked in _check_existing_queue)
        if visibility is not None:
            if not check.duration(
                "visibility_timeout", visibility, minimum=cdk.Duration.seconds(0), maximum=cdk.Duration.hours(12),
                fix="SQS allows up to 12 hours",
            ):
                if deploy_time_duration(visibility) and duration_in(
                    check, "visibility_timeout", visibility, "seconds", why="the queue's VisibilityTimeout is"
                ) is not None:
                    return visibility
                return None
            if isinstance(timeout, cdk.Duration) and not timeout.is_unresolved():
                needed = timeout.to_seconds(integral=False) * VISIBILITY_FACTOR
                check.rule(
                    visibility.to_seconds(integral=False) >= needed,
                    f"visibility_timeout={_num(visibility.to_seconds(integral=False))} s is shorter than {VISIBILITY_FACTOR} x the "
                    f"function timeout ({_num(timeout.to_seconds(integral=False))} s) = {_num(needed)} s; messages would be "
                    f"redelivered while still being processed. Use at least {_num(needed)} s or leave it unset",
                    id="visibility_timeout.below-function-timeout",
                )
            return visibility
        if timeout is None:
            return None
        if timeout.is_unresolved():
            check.fail("timeout is a deploy-time token, so the queue's visibility timeout cannot be derived: pass visibility_timeout", id="timeout.deploy-time-visibility")
            return None
        seconds = timeout.to_seconds(integral=False) * VISIBILITY_FACTOR
        if not check.rule(
            seconds <= MAX_VISIBILITY_TIMEOUT_SECONDS,
            f"{VISIBILITY_FACTOR} x timeout = {_num(seconds)} s exceeds SQS's 12-hour visibility limit: lower timeout",
            id="timeout.beyond-visibility-limit",
        ):
            return None
        return cdk.Duration.seconds(math.ceil(seconds))

    def _check_existing_queue(self, check: Checks, queue: Any, timeout: Any) -> None:
        """A concrete queue's DLQ and visibility timeout are read and checked; an imported one is flagged."""
        if queue is None or not _is_queue(queue):
            return
        needed = (
            timeout.to_seconds(integral=False) * VISIBILITY_FACTOR
            if isinstance(timeout, cdk.Duration) and not timeout.is_unresolved()
            else None
        )
        if not isinstance(queue, sqs.Queue):
            needed_text = f"{_num(needed)} s" if needed is not None else f"{VISIBILITY_FACTOR} x the function timeout"
            warn(
                self,
                "queue-unverified",
                f"queue {queue.node.path} is imported, so its settings cannot be read: check that it has a "
                f"dead-letter queue (a redrive policy; without one a failing message is retried until it "
                f"expires) and a visibility timeout of at least {needed_text} (6 x the function timeout; "
                "shorter, a message is redelivered while the worker still runs it)",
            )
            return
        check.rule(
            queue.dead_letter_queue is not None,
            f"queue {queue.node.path} has no dead-letter queue: a message that keeps failing would be retried "
            "until it expires. Give it one: sqs.Queue(..., dead_letter_queue=sqs.DeadLetterQueue(queue=dlq, "
            "max_receive_count=3)), or omit queue to get one",
            id="queue.no-dead-letter-queue",
        )
        raw = queue.node.default_child.visibility_timeout  # type: ignore[union-attr]
        seconds = 30 if raw is None else raw  # SQS's default
        if needed is not None and not is_token(seconds):
            check.rule(
                seconds >= needed,
                f"queue {queue.node.path} has a visibility timeout of {_num(seconds)} s, under {VISIBILITY_FACTOR} x the "
                f"function timeout = {_num(needed)} s: a message would be redelivered while the worker still runs it "
                f"(a second paid call). Set visibility_timeout=cdk.Duration.seconds({math.ceil(needed)}) on the queue",
                id="queue.visibility-below-function-timeout",
            )

    def grant_send_messages(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a producer (a function, a role in another stack) enqueue prompts."""
        return self.queue.grant_send_messages(grantee)

    def metric_oldest_message_age(self, **props) -> cloudwatch.Metric:
        """How long the oldest message has waited, in seconds (Maximum over 1 minute by default)."""
        props.setdefault("period", cdk.Duration.minutes(1))
        props.setdefault("statistic", "Maximum")
        return self.queue.metric_approximate_age_of_oldest_message(**props)

    def metric_dead_letters(self, **props) -> cloudwatch.Metric | None:
        """Messages waiting in the dead-letter queue (Maximum over 1 minute); None when the DLQ is unknown
        (an imported queue's redrive policy cannot be read)."""
        if self.dead_letter_queue is None:
            return None
        props.setdefault("period", cdk.Duration.minutes(1))
        props.setdefault("statistic", "Maximum")
        return self.dead_letter_queue.metric_approximate_number_of_messages_visible(**props)

    def metric_worker_errors(self, **props) -> cloudwatch.Metric:
        """Invocations of the worker that failed as a whole (Sum over 5 minutes by default)."""
        props.setdefault("period", cdk.Duration.minutes(5))
        props.setdefault("statistic", "Sum")
        return self.function.metric_errors(**props)

    def metric_worker_throttles(self, **props) -> cloudwatch.Metric:
        """Invocations Lambda refused for lack of concurrency (Sum over 5 minutes by default)."""
        props.setdefault("period", cdk.Duration.minutes(5))
        props.setdefault("statistic", "Sum")
        return self.function.metric_throttles(**props)

    def metric(self, metric_name: str, **props) -> cloudwatch.Metric:
        """A metric the worker publishes (pacer_runtime.metrics), for this model and this function only."""
        props.setdefault("period", cdk.Duration.minutes(1))
        return model_function_metric(self.model_id, self.function.function_name, metric_name, **props)

    def metric_input_tokens(self, **props) -> cloudwatch.Metric:
        """Uncached input tokens of the worker's calls (Sum per minute by default)."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().INPUT_TOKENS, **props)

    def metric_output_tokens(self, **props) -> cloudwatch.Metric:
        """Output tokens of the worker's calls (Sum per minute by default)."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().OUTPUT_TOKENS, **props)

    def metric_reserved_tokens(self, **props) -> cloudwatch.Metric:
        """Quota tokens the worker's calls held when they started: input + cache + maxTokens (Sum per
        minute by default). Far above input + output, it says max_output_tokens is oversized."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().RESERVED_TOKENS, **props)

    def metric_latency(self, **props) -> cloudwatch.Metric:
        """A call's latency as the worker measured it, SDK retries included, in ms (p90 by default)."""
        props.setdefault("statistic", "p90")
        return self.metric(metrics_constants().LATENCY_MS, **props)

    def metric_served_optimized(self, **props) -> cloudwatch.Metric:
        """Calls served by latency-optimized inference (Sum)."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().SERVED_OPTIMIZED, **props)

    def metric_served_standard(self, **props) -> cloudwatch.Metric:
        """Calls served at standard latency (Sum)."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().SERVED_STANDARD, **props)

    def metric_latency_fallbacks(self, **props) -> cloudwatch.Metric:
        """Calls that asked for optimized latency and were served at standard (Sum): the optimized
        quota ran out; Bedrock bills them at standard rates and raises no error."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().OPTIMIZED_SERVED_STANDARD, **props)

    def metric_model_throttles(self, **props) -> cloudwatch.Metric:
        """Messages whose model call failed throttled after the SDK's retries (Sum); each returns to the queue."""
        props.setdefault("statistic", "Sum")
        return self.metric(metrics_constants().THROTTLES, **props)

    def _alarms(
        self,
        max_message_age: cdk.Duration,
        actions: Sequence[cloudwatch.IAlarmAction],
        *,
        errors: int,
        throttles: int,
        dead_letters: int,
    ) -> dict[str, cloudwatch.Alarm]:
        age_seconds = max_message_age.to_seconds()
        # A deploy-time age is named by its reference (in seconds); to_human_string would write "<token> seconds".
        age = f"{shown(age_seconds)} seconds" if max_message_age.is_unresolved() else max_message_age.to_human_string()
        specs: dict[str, tuple[cloudwatch.IMetric, float, str]] = {
            "OldestMessageAge": (
                self.metric_oldest_message_age(),
                age_seconds,
                f"messages wait longer than {age}: raise max_concurrency if the quota allows",
            ),
            "WorkerThrottles": (
                self.metric_worker_throttles(),
                throttles,
                f"Lambda throttled the worker{' ' + _more_than(throttles) + 'times in 5 minutes' if throttles else ''}: reserved or account "
                "concurrency is below the event source's maximum",
            ),
            "WorkerErrors": (
                self.metric_worker_errors(),
                errors,
                f"the worker failed {_more_than(errors)}whole invocations{' in 5 minutes' if errors else ''} "
                "(per-message failures are retried, these are not)",
            ),
        }
        dead_letter_metric = self.metric_dead_letters()
        if dead_letter_metric is not None:
            specs["DeadLetters"] = (
                dead_letter_metric,
                dead_letters,
                f"{_more_than(dead_letters)}messages reached the dead-letter "
                "queue: the worker logs why for each (reason field)",
            )
        return {
            name: threshold_alarm(
                self, f"{name}Alarm", metric=metric, threshold=threshold, description=description, actions=actions
            )
            for name, (metric, threshold, description) in specs.items()
        }




def _more_than(threshold: int) -> str:
    """'more than N ' for a threshold above zero; nothing for zero (the first occurrence alarms)."""
    return f"more than {threshold} " if threshold else ""


def _num(value: float) -> str:
    return f"{value:,.1f}".rstrip("0").rstrip(".")


def _queue_encryption(key: kms.IKey | None) -> dict[str, Any]:
    if key is None:
        return {"encryption": sqs.QueueEncryption.SQS_MANAGED}
    return {"encryption": sqs.QueueEncryption.KMS, "encryption_master_key": key}



def _is_queue(value: Any) -> bool:
    return hasattr(value, "queue_arn") and hasattr(value, "node")


