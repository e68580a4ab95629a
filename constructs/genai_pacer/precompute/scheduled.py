"""ScheduledPrecompute: answers to predictable queries generated before the peak, one model call per key.

EventBridge Scheduler starts a Step Functions run at a cron time in your time zone (weekdays 06:00
before a 09:00 peak); the run calls the model once per key, at most MaxConcurrency calls at once
with a Retry on throttling, and writes each answer to the AnswerStore with a DynamoDB task. The
router then serves those keys by lookup, with no model call on the user's path.

The run, state by state:

1. Prepare run (Lambda, one call): the run's clock and the inline keys. Step Functions' JSONPath
   can neither read the time as a number nor change a string's case, and both matter: answers are
   ordered by `sequence` (epoch milliseconds, as the queue worker and the router write them), and
   stored keys must be `answers.normalize_key(key)` or the router, which normalizes every lookup,
   never finds them. The writes are DynamoDB tasks; the same function takes the second look below.
2. Take the run lock: a conditional PutItem of a claim (`claim#precompute-run#<state machine
   name>`, the answer schema's claim item) that succeeds only when no unexpired claim exists.
   Runs never overlap: a run that starts while another holds the lock ends at once, successfully,
   with {"skipped": true} (it skips; it does not queue), because two runs at once would double the
   calls in flight the plan allows. The lock is released when the run ends and expires on its own
   after the state machine's timeout, so a run that died never blocks the next one for longer.
3. Map over the keys: the inline list from the run input ($.items, at most 40 calls at once), or
   an S3 JSON/JSONL object read by a distributed Map (up to 10,000 at once). Per key: a Converse
   call with BedrockRetry (full jitter), then a PutItem that writes exactly the attributes
   `Answer.to_item` writes, under put_answer's condition (an older answer never replaces a newer
   one). That condition cannot see a fractional number or a malformed time in the stored item, so
   when it fails, "Check stored answer" hands the same item to the prepare function, where
   put_answer judges the stored item with `answers.check_item` (the readers' rule) and replaces
   exactly an invalid one, never a valid newer answer: a corrupt item is repaired by the run
   itself, not left for another writer. (Step Functions cannot apply that rule: no arithmetic or
   date parsing in JSONPath or in DynamoDB conditions, hence a Lambda step, and only on this path.)
   Each key catches its own failure, so a failed key never loses the others.
4. Summarize: counts of written, superseded (a valid newer answer was already stored) and failed keys,
   the failed keys themselves, the PrecomputeFailedKeys metric (CloudWatch, namespace GenaiPacer),
   the lock released; then the run fails if more keys failed than `tolerated_failed_keys`.

Execution output: {"keys", "written", "superseded", "failed", "failedKeys": [{"key", "error"}],
"invalidKeys": [{"key", "error", "cause"}], "sequence"}. A failed run carries the same summary as
its cause. Each key's result stays in the Map's output (a few bytes, plus each failed key), which
Step Functions limits to 256 KiB, and an inline run's history stops near 1,400 keys (25,000 events). Larger sets with
hours of slack belong to a Bedrock batch inference job (BatchPrecompute), cheaper and off the
on-demand quota.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, cast

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct, IConstruct

from .._internal.alarms import execution_alarms, threshold_alarm
from .._internal.assets import LAMBDA_DIR
from .._internal.checks import Checks, duration_in, in_unit, is_token, token_kind, warn
from .._internal.docs import constructor_doc
from .._internal.metrics import STATE_MACHINE_DIMENSION, state_machine_metric
from .._internal.nag import (
    acknowledge_exact_resources,
    acknowledge_exact_resources_at_validation,
    acknowledge_wildcard_resources,
    flattened,
    principal_policy,
)
from .._internal.runtime_constants import metrics_constants as metrics
from .._internal.s3 import KMS_READ_ACTIONS, bucket_key, check_key_bytes, grant_keys
from .._internal.secure import handler_function, log_key
from .._internal.sfn_dynamodb import (
    CONDITIONAL_CHECK_FAILED,
    DYNAMODB_RETRY_ERRORS,
)
from .._internal.sfn_dynamodb import (
    DYNAMODB_ERROR_PREFIX as DYNAMODB_ERROR_PREFIX,  # tests and users read it here too
)
from .._internal.sfn_dynamodb import (
    DYNAMODB_TRANSIENT_ERRORS as DYNAMODB_TRANSIENT_ERRORS,
)
from ..models import BedrockModel, as_bedrock_model
from ..quota import planning
from ..quota.ledger import QuotaLedger
from ..step_functions.ledger_steps import (
    FALLBACK_CALL_SUFFIX,
    LedgerCall,
    check_ledger_request,
    ledger_consumer,
)
from ..step_functions.model_tasks import (
    SERVED_TIER_PATH,
    SERVED_TIERS,
    BedrockRetry,
    ConverseRequest,
    TaskOptions,
    model_call,
)
from ..step_functions.orchestration import (
    DISTRIBUTED_MAP_LIMIT,
    INLINE_MAP_LIMIT,
    STATE_PAYLOAD_LIMIT_BYTES,
    _cap,
)
from ..step_functions.state_machine import StateMachineOptions, model_state_machine
from .store import AnswerStore

__all__ = [
    "CONDITIONAL_CHECK_FAILED",
    "DYNAMODB_RETRY_ERRORS",
    "FAILED_KEYS_DIMENSION",
    "LAMBDA_THROTTLED",
    "RUN_LOCK_PREFIX",
    "ScheduledPrecompute",
]

#: The run lock's claim id: claim#precompute-run#<state machine name>.
RUN_LOCK_PREFIX = "precompute-run#"
#: The dimension of the PrecomputeFailedKeys metric: the state machine's name.
FAILED_KEYS_DIMENSION = STATE_MACHINE_DIMENSION
#: Scheduler's RetryPolicy: MaximumRetryAttempts 0..185, MaximumEventAgeInSeconds 60..86,400 (botocore
#: scheduler 2021-06-30 model).
MAX_SCHEDULE_RETRIES = 185
MIN_SCHEDULE_EVENT_AGE_SECONDS, MAX_SCHEDULE_EVENT_AGE_SECONDS = 60, 86_400
_DEFAULT_TIMEOUT = cdk.Duration.hours(6)
#: The run input, sent as the schedule target's Input: "The maximum size of the Input field is 256 KB"
#: (botocore scheduler model, Target.Input), and StartExecution's input holds at most 262,144 UTF-8 bytes
#: (botocore stepfunctions model). Whether Scheduler's KB is 1,000 or 1,024 bytes is not stated, so the
#: smaller reading is the limit: an input that fits it fits both.
MAX_INLINE_INPUT_BYTES = 256_000

#: Lambda's throttle as Step Functions names it: "When Lambda hits the maximum number of invocations, the
#: error is Lambda.TooManyRequestsException" (https://docs.aws.amazon.com/step-functions/latest/dg/
#: bp-lambda-serviceexception.html). aws-cdk-lib's LambdaInvoke retries the page's other four only.
LAMBDA_THROTTLED = "Lambda.TooManyRequestsException"
#: History events one inline key adds (task, retries, choice, write, their entered/exited events),
#: measured offline; Step Functions stops a run at 25,000. A key whose write fails its condition adds 5
#: more ("Check stored answer": a Lambda task's entered, scheduled, started, succeeded, exited), so even
#: MAX_INLINE_KEYS such keys stay under the cap.
EVENTS_PER_KEY = 18
MAX_INLINE_KEYS = 1_000
#: A run's summary lists each failed key as {"key", "error"} (at least 24 bytes of JSON) in a state of at
#: most STATE_PAYLOAD_LIMIT_BYTES, so a run fails with States.DataLimitExceeded before more keys fail than
#: fit: tolerated_failed_keys above that never applies (a hard limit). Inline, the run's own keys bound it.
MIN_FAILED_KEY_BYTES = len('{"key":"k","error":"E"},')
MAX_TOLERATED_FAILED_KEYS = STATE_PAYLOAD_LIMIT_BYTES // MIN_FAILED_KEY_BYTES
_MODEL_HINT = "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')"
_ERROR = "$.error"
#: Where a key's ledger hold (its slot) and settlement (its charge) are kept (ledger=).
_LEDGER = "$.ledger"


@dataclass(frozen=True)
class _AnswerSchema:
    """The constants of pacer_runtime/answers.py a Step Functions writer needs."""

    partition_key: str
    ttl_attribute: str
    claim_prefix: str
    newer_than_stored: str  # put_answer's ConditionExpression
    newer_than_stored_names: dict[str, str]  # its ExpressionAttributeNames
    newer_than_stored_constants: dict[str, dict[str, str]]  # its constant ExpressionAttributeValues


@cache
def answer_schema() -> _AnswerSchema:
    """The answer schema's constants, read from answers.py's source with `ast`: that module imports
    botocore at load time, which a CDK app need not have, and a second copy of the strings could
    drift from the handlers'."""
    path = LAMBDA_DIR / "pacer_runtime" / "answers.py"
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:  # not a literal
                continue
    wanted = {"partition_key": "PARTITION_KEY", "ttl_attribute": "TTL_ATTRIBUTE",
              "claim_prefix": "CLAIM_PREFIX", "newer_than_stored": "_NEWER_THAN_STORED"}
    missing = sorted(name for name in wanted.values() if not isinstance(values.get(name), str))
    tables = {"newer_than_stored_names": "_NEWER_THAN_STORED_NAMES", "newer_than_stored_constants": "_NEWER_THAN_STORED_CONSTANTS"}
    missing += sorted(name for name in tables.values() if not isinstance(values.get(name), dict))
    if missing:
        raise RuntimeError(f"{path} no longer assigns {missing} as literals; ScheduledPrecompute reads them there")
    return _AnswerSchema(**{field: values[name] for field, name in {**wanted, **tables}.items()})


@constructor_doc
class ScheduledPrecompute(Construct):
    """Generate answers for a known list of keys on a schedule and store them in an AnswerStore.

    answer_store: required; the AnswerStore the answers go to (and the router reads).
    model: required; the model every key calls.
    request: required; a ConverseRequest whose JsonPath references read the key's item under
        `$.item`, e.g. prompt=sfn.JsonPath.format("Morning note for {}", sfn.JsonPath.string_at("$.item.ticker")).
        latency="optimized" is refused: nobody waits for a pre-computed answer, and the optimized
        mode's own quota and price are better spent on the user's path.
    max_concurrency: required; an int or a planning.RatePlan (fitted): at most 40 with inline
        items, 10,000 with items in S3. Two runs never overlap, so this is the run's whole draw on
        the quota.
    schedule: required; when runs start, e.g. scheduler.ScheduleExpression.cron(minute="0",
        hour="6", week_day="MON-FRI", time_zone=cdk.TimeZone.EUROPE_LONDON). A cron without a time
        zone runs in UTC (warned: it shifts by an hour at each daylight-saving change).
    items: the inline key list, sent as the schedule's input: objects each with a "key" (normalized
        by the run) and the fields the request reads. Exactly one of items or items_bucket.
    items_bucket / items_key / items_format: instead of items, an S3 object listing the items
        ("jsonl": one object per line, or "json": an array), read by a distributed Map. Its keys
        must already be normalized (answers.normalize_key / check_key when you write the object).
        Default format: "jsonl".
    items_bucket_key: the KMS key of an SSE-KMS items_bucket that does not know it (imported with
        s3.Bucket.from_bucket_name or from_bucket_arn); the state machine role gets kms:Decrypt on
        it, since the Map reads the items with that role. Default: items_bucket's own encryption_key
        (an s3.Bucket built with a key, or from_bucket_attributes(encryption_key=...)); none for a
        bucket imported by name, which is then taken as SSE-S3. Refused without items_bucket or
        beside a bucket that knows another key.
    tolerated_failed_keys: failed keys a run may have and still succeed, at most the inline keys (or
        10,922, the failed keys a run's 256 KiB state can list). Default: 0 (any failed key fails the
        run, after every other key was written and the failed ones listed).
    retry: the Retry of each model call. Default: BedrockRetry().
    schedule_retry_attempts: how often Scheduler retries a start that failed (StartExecution
        throttled, say), 0..185. Default: 3.
    schedule_max_event_age: how long after the scheduled time Scheduler keeps trying, 1 min..24 h.
        Default: 1 hour (a start later than that misses the peak it was meant for).
    dead_letter_queue: where Scheduler puts a start it gave up on. Default: a new encrypted queue.
    state_machine_options: Default: encrypted logs, X-Ray, STANDARD type, 6-hour timeout (the run
        lock expires with the timeout).
    alarm_actions: actions for the alarms (`alarms`): FailedExecutions and TimedOutExecutions (any
        in 5 minutes: a failed run leaves keys unanswered, and nothing runs it again before the next
        schedule), MissedStarts (a start in the dead-letter queue: that run never happened).
        Default: none.
    ledger: a `QuotaLedger` of the model's ModelQuota: each key's call reserves and settles in the
        quota's shared ledger beside the quota's other consumers (step_functions.ledger_steps), so a
        nightly run takes what the day's traffic leaves instead of a static share. A refusal waits and
        tries again (about 10 minutes at most, then the key fails and is listed); a failed
        call returns its hold; a reservation DynamoDB keeps failing falls back to the share's floor
        (LedgerFallbacks published, a wait fixed at synth, the call without the ledger). Needs the run's share (max_concurrency=quota.share(...), or a share
        named after this construct); given one drawn with burst_tpm, the Map's MaxConcurrency is the
        calls the burst sustains, and the ledger decides how many run. Default: none.

    Attributes: `state_machine`, `schedule`, `dead_letter_queue`, `prepare_function`, `map_state`,
    `alarms`, `ledger_consumer`.
    Metrics: `metric_failed_keys()`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        answer_store: AnswerStore,
        model: BedrockModel,
        request: ConverseRequest,
        max_concurrency: int | planning.RatePlan,
        schedule: scheduler.ScheduleExpression,
        items: Sequence[Mapping[str, Any]] | None = None,
        items_bucket: s3.IBucket | None = None,
        items_key: str | None = None,
        items_format: Literal["jsonl", "json"] = "jsonl",
        items_bucket_key: kms.IKey | None = None,
        tolerated_failed_keys: int = 0,
        retry: BedrockRetry | None = None,
        schedule_retry_attempts: int = 3,
        schedule_max_event_age: cdk.Duration | None = None,
        dead_letter_queue: sqs.IQueue | None = None,
        state_machine_options: StateMachineOptions | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        ledger: QuotaLedger | None = None,
    ) -> None:
        super().__init__(scope, id)
        store = answer_store
        model = as_bedrock_model(model)  # an aws_bedrock_alpha IBedrockInvokable too
        schedule_max_event_age = schedule_max_event_age or cdk.Duration.hours(1)
        options = state_machine_options or StateMachineOptions()
        distributed = items_bucket is not None
        lock_seconds: Any = None
        with Checks("ScheduledPrecompute", scope=self) as check:
            check.instance("answer_store", answer_store, AnswerStore, "an AnswerStore")
            check.instance("model", model, BedrockModel, _MODEL_HINT)
            if check.instance(
                "request", request, ConverseRequest,
                "ConverseRequest(prompt=..., max_tokens=...); a native body has no text for the store to hold",
            ):
                check.rule(
                    request.latency != "optimized",
                    "request.latency='optimized' spends latency-optimized inference (its own quota, a higher price) on "
                    "answers nobody waits for: pre-computation is off the user's path; drop latency",
                    id="request.latency-optimized",
                )
            if check.instance("schedule", schedule, scheduler.ScheduleExpression, "scheduler.ScheduleExpression.cron(...)"):
                self._warn_about_schedule(schedule)
            check.rule(
                (items is None) != (items_bucket is None),
                "pass exactly one of items (an inline list of {'key': ...} objects) or items_bucket with items_key "
                "(an S3 object read by a distributed Map)",
                id="items.one-of-items-or-bucket",
            )
            if token_kind(items) is not None:
                check.fail(
                    f"items is a deploy-time {token_kind(items)}, but the items are checked (each needs a key) and "
                    "written into the schedule's input at synth: pass a list of {'key': ...} objects, or put them in S3 "
                    "and pass items_bucket with items_key (which may be a deploy-time string)", id="items.deploy-time"
                )
            elif items is not None:
                self._check_items(check, items)
            check.instance("items_bucket", items_bucket, s3.IBucket, "an s3 bucket", optional=True)
            items_kms = bucket_key(
                check, bucket_name="items_bucket", bucket=items_bucket, key_name="items_bucket_key", key=items_bucket_key,
                without="items_bucket_key is set without items_bucket; inline items are in the schedule's input, not "
                "in S3: drop items_bucket_key, or pass items_bucket and items_key",
            )
            if distributed:
                if check.text("items_key", items_key, fix="the key of the JSONL or JSON object that lists the items"):
                    check_key_bytes(check, "items_key", items_key, "the key of the object that lists the items")
            else:
                check.rule(items_key is None, "items_key is set without items_bucket; it would be ignored: pass both", id="items_key.without-items-bucket")
            if token_kind(items_format) is not None:
                check.fail(
                    f"items_format is a deploy-time {token_kind(items_format)}, but it chooses the Map's item reader (JSONL or JSON) at "
                    "synth: pass 'jsonl' or 'json'", id="items_format.deploy-time"
                )
            else:
                check.one_of("items_format", items_format, ("jsonl", "json"))
            check.rule(
                distributed or items_format == "jsonl",
                f"items_format={items_format!r} applies to items_bucket only; it would be ignored: drop it",
                id="items_format.without-items-bucket",
            )
            cap = _cap(
                self, check, QuotaLedger.burst_plan(ledger, max_concurrency), False,
                DISTRIBUTED_MAP_LIMIT if distributed else INLINE_MAP_LIMIT,
                "a distributed Map" if distributed else "an inline Map",
            )
            # A run cannot fail on more keys than it has, nor list more failed keys than its state holds.
            inline_keys = len(items) if isinstance(items, list | tuple) and items else None
            most = MAX_TOLERATED_FAILED_KEYS if inline_keys is None else min(inline_keys, MAX_TOLERATED_FAILED_KEYS)
            why = (f"the run's {most:,} inline keys" if most == inline_keys else "a run lists its failed keys in its "
                   f"state, which Step Functions limits to 256 KiB, {MIN_FAILED_KEY_BYTES} bytes a key at the least")
            check.integer(
                "tolerated_failed_keys", tolerated_failed_keys, minimum=0, maximum=most,
                fix=f"0 fails the run on any failed key; raise it to accept a few, at most {most:,} ({why})",
            )
            check.instance("retry", retry, BedrockRetry, "BedrockRetry(...)", optional=True)
            check.integer(
                "schedule_retry_attempts", schedule_retry_attempts, minimum=0, maximum=MAX_SCHEDULE_RETRIES,
                fix="EventBridge Scheduler retries a failed start 0..185 times",
            )
            check.duration(
                "schedule_max_event_age", schedule_max_event_age,
                minimum=cdk.Duration.seconds(MIN_SCHEDULE_EVENT_AGE_SECONDS),
                maximum=cdk.Duration.seconds(MAX_SCHEDULE_EVENT_AGE_SECONDS),
                fix="EventBridge Scheduler keeps a start for 60 s..24 h",
            )
            in_unit(check, "schedule_max_event_age", schedule_max_event_age, "seconds",
                    why="EventBridge Scheduler's MaximumEventAgeInSeconds is")
            check.instance("dead_letter_queue", dead_letter_queue, sqs.IQueue, "an sqs.Queue", optional=True)
            # M, the fallback's calls at once: the Map's MaxConcurrency; one run at a time (the run lock)
            self.ledger_consumer = ledger_consumer(check, self, ledger, model=model, plan=max_concurrency,
                                                   calls_per_execution=cap, one_execution_at_a_time=True)
            check_ledger_request(check, self.ledger_consumer, request, None)
            check.instance("state_machine_options", options, StateMachineOptions, "StateMachineOptions(...)")
            check.alarm_actions("alarm_actions", alarm_actions)
            if isinstance(options, StateMachineOptions):
                check.rule(
                    options.state_machine_type != sfn.StateMachineType.EXPRESS,
                    "state_machine_type=EXPRESS stops a run after 5 minutes, and an Express workflow runs at least "
                    "once, so a key's answer may be written twice: use STANDARD (the default)",
                    id="state_machine_type.express",
                )
                # The run lock expires with the state machine's timeout: its seconds go to the prepare function.
                lock_seconds = duration_in(
                    check, "state_machine_options.timeout", options.timeout or _DEFAULT_TIMEOUT, "seconds",
                    why="the run lock's expiry is set from it",
                )
        retry = retry or BedrockRetry()
        schema = answer_schema()
        self.answer_store = store
        self.tolerated_failed_keys = tolerated_failed_keys

        # The construct's one key, for both log groups, under the id its state machine's key always had.
        log_key(self, "LogsKey", options.encryption_key)
        self.prepare_function = handler_function(
            self,
            "PrepareRun",
            handler="scheduled_precompute.handler.handler",
            environment={
                **store.environment(),  # ANSWER_TABLE for the second look at a superseded key (below)
                # a deploy-time timeout in seconds reaches the function as the text it resolves to
                "LOCK_SECONDS": cdk.Token.as_string(lock_seconds) if is_token(lock_seconds) else str(int(lock_seconds)),
            },
            timeout=cdk.Duration.seconds(30),
            encryption_key=options.encryption_key,
            log_retention=options.log_retention,
        )
        store.grant_put(self.prepare_function)  # put_answer's conditional writes, for the second look
        prepare = tasks.LambdaInvoke(
            self, "Prepare run",
            lambda_function=self.prepare_function,
            payload=sfn.TaskInput.from_object({} if distributed else {"items": sfn.JsonPath.list_at("$.items")}),
            payload_response_only=True,
            result_path="$.run",
        )

        lock_id = sfn.JsonPath.format(f"{schema.claim_prefix}{RUN_LOCK_PREFIX}{{}}", sfn.JsonPath.string_at("$$.StateMachine.Name"))
        take_lock = tasks.DynamoPutItem(
            self, "Take run lock",
            table=store.table,
            item={
                schema.partition_key: tasks.DynamoAttributeValue.from_string(lock_id),
                "request_id": tasks.DynamoAttributeValue.from_string(
                    sfn.JsonPath.format(f"{RUN_LOCK_PREFIX}{{}}", sfn.JsonPath.string_at("$$.StateMachine.Name"))
                ),
                "owner": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.Execution.Name")),
                "claimed_at": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.State.EnteredTime")),
                schema.ttl_attribute: tasks.DynamoAttributeValue.number_from_string(sfn.JsonPath.string_at("$.run.lockExpiresAt")),
            },
            # answers.claim's condition: no claim, or an expired one.
            condition_expression="attribute_not_exists(#pk) OR #exp < :now",
            expression_attribute_names={"#pk": schema.partition_key, "#exp": schema.ttl_attribute},
            expression_attribute_values={":now": tasks.DynamoAttributeValue.number_from_string(sfn.JsonPath.string_at("$.run.now"))},
            result_path=sfn.JsonPath.DISCARD,
        )
        skipped = sfn.Pass(
            self, "Skipped: another run holds the lock",
            parameters={
                "skipped": True,
                "reason": "another run of this state machine holds the run lock; runs never overlap, so this one ends",
                "sequence.$": "$.run.sequence",
            },
        ).next(sfn.Succeed(self, "Skipped"))
        _retry_store(take_lock)
        take_lock.add_catch(skipped, errors=[CONDITIONAL_CHECK_FAILED], result_path=sfn.JsonPath.DISCARD)

        processor = self._item_processor(store, model, request, retry)
        item_selector = {
            "item": sfn.JsonPath.string_at("$$.Map.Item.Value"),
            "index": sfn.JsonPath.number_at("$$.Map.Item.Index"),
            "sequence": sfn.JsonPath.string_at("$.run.sequence"),
            "maxSequence": sfn.JsonPath.string_at("$.run.maxSequence"),
            "maxGeneratedAt": sfn.JsonPath.string_at("$.run.maxGeneratedAt"),
            "requestId": sfn.JsonPath.format("precompute#{}", sfn.JsonPath.string_at("$$.Execution.Name")),
            "usageDefaults": {"CacheReadInputTokens": 0, "CacheWriteInputTokens": 0},
        }
        if store.answer_ttl is not None:
            item_selector["expiresAt"] = sfn.JsonPath.string_at("$.run.expiresAt")
        tally = {
            "written.$": "States.ArrayLength($[?(@.written)])",
            "superseded.$": "States.ArrayLength($[?(@.superseded)])",
            "failedKeys.$": "$[?(@.error)]",
        }
        self.map_state: sfn.MapBase
        if distributed:
            reader_cls = sfn.S3JsonLItemReader if items_format == "jsonl" else sfn.S3JsonItemReader
            self.map_state = sfn.DistributedMap(
                self, "Keys",
                max_concurrency=cap,
                item_reader=reader_cls(bucket=items_bucket, key=items_key),  # type: ignore[arg-type]
                item_selector=item_selector,
                map_execution_type=sfn.StateMachineType.STANDARD,
                result_selector=tally,
                result_path="$.tally",
            )
        else:
            self.map_state = sfn.Map(
                self, "Keys",
                max_concurrency=cap,
                items_path="$.run.items",
                item_selector=item_selector,
                result_selector=tally,
                result_path="$.tally",
            )
        self.map_state.item_processor(processor)

        summarize = sfn.Pass(
            self, "Summarize",
            parameters={
                "keys.$": "States.MathAdd(States.MathAdd($.tally.written, $.tally.superseded), "
                "States.MathAdd(States.ArrayLength($.tally.failedKeys), States.ArrayLength($.run.invalid)))",
                "written.$": "$.tally.written",
                "superseded.$": "$.tally.superseded",
                "failed.$": "States.MathAdd(States.ArrayLength($.tally.failedKeys), States.ArrayLength($.run.invalid))",
                "failedKeys.$": "$.tally.failedKeys",
                "invalidKeys.$": "$.run.invalid",
                "sequence.$": "$.run.sequence",
            },
            result_path="$.summary",
        )
        names = metrics()
        metric_policy = iam.Policy(
            self, "FailedKeysMetricPolicy",
            statements=[
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": names.NAMESPACE}},
                )
            ],
        )
        count_failed = sfn.CustomState(
            self, "Count failed keys",
            state_json={
                "Type": "Task",
                "Resource": f"arn:{cdk.Aws.PARTITION}:states:::aws-sdk:cloudwatch:putMetricData",
                "Parameters": {
                    "Namespace": names.NAMESPACE,
                    "MetricData": [
                        {
                            "MetricName": names.PRECOMPUTE_FAILED_KEYS,
                            "Unit": names.UNITS[names.PRECOMPUTE_FAILED_KEYS],
                            "Value.$": "$.summary.failed",
                            "Dimensions": [{"Name": FAILED_KEYS_DIMENSION, "Value.$": "$$.StateMachine.Name"}],
                        }
                    ],
                },
                "ResultPath": "$.metric",  # None would be dropped (jsii), and the result would replace the state
                "Retry": [
                    {"ErrorEquals": ["CloudWatch.ThrottlingException", "CloudWatch.InternalServiceException"],
                     "IntervalSeconds": 1, "MaxAttempts": 3, "BackoffRate": 2, "JitterStrategy": "FULL"}
                ],
            },
        )
        release, released = self._release_lock("Release run lock", store, lock_id)
        # A metric that cannot be written must not keep the lock or hide the summary.
        count_failed.add_catch(release, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
        too_many = sfn.Fail(
            self, "Too many failed keys",
            error="PrecomputeFailedKeys",
            cause_path="States.JsonToString($.summary)",
        )
        verdict = (
            sfn.Choice(self, "Within tolerated failures?")
            .when(sfn.Condition.number_greater_than("$.summary.failed", tolerated_failed_keys), too_many)
            .otherwise(sfn.Succeed(self, "Done", output_path="$.summary"))
        )
        release_after_error, released_after_error = self._release_lock("Release run lock after an error", store, lock_id)
        released_after_error.next(
            sfn.Fail(
                self, "Run failed",
                error="PrecomputeRunFailed",
                cause_path="States.Format('{}: {}', $.error.Error, $.error.Cause)",
            )
        )
        self.map_state.add_catch(release_after_error, errors=["States.ALL"], result_path=_ERROR)
        released.next(verdict)

        definition = prepare.next(take_lock).next(self.map_state).next(summarize).next(count_failed).next(release)
        self.state_machine = model_state_machine(
            self, definition=definition, models=[model], options=options, default_timeout=_DEFAULT_TIMEOUT,
        )
        store.grant_write(self.state_machine)  # the lock and the answers; KMS too for a customer-managed key
        grant_keys(self.state_machine, (items_kms, KMS_READ_ACTIONS))  # the distributed Map reads the items with the role
        self.state_machine.role.attach_inline_policy(metric_policy)
        cdk.Validations.of(metric_policy).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason="cloudwatch:PutMetricData supports no resource-level permissions; the statement is limited "
                "to the GenaiPacer namespace by the cloudwatch:namespace condition",
            )
        )
        role_policy = principal_policy(self.state_machine.role)
        if role_policy is not None:
            acknowledge_exact_resources(
                role_policy,
                resources=[flattened(self, f"{self.prepare_function.function_arn}:*")],
                reason="aws-cdk-lib's LambdaInvoke grants the function and its versions and aliases (function:*); "
                "the grant names this construct's own prepare function only",
            )
        if distributed:
            self._acknowledge_distributed_map(cast(s3.IBucket, items_bucket), role_policy)

        self.dead_letter_queue = dead_letter_queue or self._dead_letter_queue()
        self.schedule = scheduler.Schedule(
            self, "Schedule",
            schedule=schedule,
            time_window=scheduler.TimeWindow.off(),
            description=f"genai-pacer ScheduledPrecompute {self.node.path}: generates answers before the peak",
            target=scheduler_targets.StepFunctionsStartExecution(
                self.state_machine,
                input=scheduler.ScheduleTargetInput.from_object({} if distributed else {"items": list(items or [])}),
                # aws-cdk-lib compares these with its limits, a token's encoding included: a deploy-time value is
                # set on the CfnSchedule below instead (the limits were checked above for a literal)
                retry_attempts=None if is_token(schedule_retry_attempts) else schedule_retry_attempts,
                max_event_age=None if schedule_max_event_age.is_unresolved() else schedule_max_event_age,
                dead_letter_queue=self.dead_letter_queue,
            ),
        )
        cfn_schedule = cast(scheduler.CfnSchedule, self.schedule.node.default_child)
        if is_token(schedule_retry_attempts):
            cfn_schedule.add_property_override("Target.RetryPolicy.MaximumRetryAttempts", schedule_retry_attempts)
        if schedule_max_event_age.is_unresolved():
            cfn_schedule.add_property_override(
                "Target.RetryPolicy.MaximumEventAgeInSeconds", schedule_max_event_age.to_seconds()
            )
        if self.ledger_consumer is not None:  # PutMetricData in the namespace: FailedKeysMetricPolicy grants it
            self.ledger_consumer.grant(self.state_machine, metric=False)
        self.alarms = {
            **execution_alarms(self, self.state_machine, alarm_actions, what=f"ScheduledPrecompute {id}"),
            "MissedStarts": threshold_alarm(
                self, "MissedStarts",
                metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    statistic="Maximum", period=cdk.Duration.minutes(5)),
                threshold=0, actions=alarm_actions,
                description=f"ScheduledPrecompute {id}: Scheduler gave up starting a run (its start is in the dead-letter "
                            "queue): that run's answers were not generated. Start the state machine by hand with the "
                            "message's input, then delete the message.",
            ),
        }

    # ---- the per-key chain -------------------------------------------------------------------
    def _item_processor(
        self, store: AnswerStore, model: BedrockModel, request: ConverseRequest, retry: BedrockRetry
    ) -> sfn.IChainable:
        """Has key? -> Converse (Retry) -> has text? -> PutItem (put_answer's condition) -> on a failed
        condition, put_answer's second look; every failure ends the key as {"key", "error"}, a valid newer
        stored answer as {"superseded": 1}."""
        schema = answer_schema()
        key_failed = sfn.Pass(
            self, "Key failed",
            parameters={"key.$": "$.item.key", "error.$": "$.error.Error"},
        )
        no_key = sfn.Pass(
            self, "Item has no key",
            parameters={"key.$": "States.Format('items[{}]', $.index)", "error": "MissingKey"},
        )
        tiered = request.service_tier is not None
        options = TaskOptions(
            result_selector={
                "texts.$": "$.Output.Message.Content[?(@.Text)].Text",
                "stopReason.$": "$.StopReason",
                "usage.$": "$.Usage",
                **({SERVED_TIERS + ".$": SERVED_TIER_PATH} if tiered else {}),
            },
            result_path="$.response",
        )
        call, _ = model_call(self, "Call model", model=model, request=request, retry=retry, options=options)
        ledger = None
        if self.ledger_consumer is not None:  # step_functions.ledger_steps, its slot and charge under $.ledger
            ledger = LedgerCall(self.ledger_consumer, self, "Call model", int(request.max_tokens),  # type: ignore[arg-type]
                                slot_path=f"{_LEDGER}.slot", charge_path=f"{_LEDGER}.charge")
            release = ledger.release()  # the call failed: its hold comes back, then the key fails as before
            release.add_catch(key_failed, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
            release.next(key_failed)
            call.add_catch(release, errors=["States.ALL"], result_path=_ERROR)
        else:
            call.add_catch(key_failed, errors=["States.ALL"], result_path=_ERROR)
        empty = sfn.Pass(self, "Answer is empty", parameters={"key.$": "$.item.key", "error": "EmptyAnswer"})
        answer = sfn.Pass(
            self, "Answer",
            parameters={
                "text.$": "States.ArrayGetItem($.response.texts, 0)",
                "stopReason.$": "$.response.stopReason",
                # Converse reports cache tokens only when a cache point was used.
                "usage.$": "States.JsonMerge($.usageDefaults, $.response.usage, false)",
            },
            result_path="$.answer",
        )
        number = tasks.DynamoAttributeValue.number_from_string
        text = tasks.DynamoAttributeValue.from_string
        attributes: dict[str, tasks.DynamoAttributeValue] = {
            schema.partition_key: text(sfn.JsonPath.string_at("$.item.key")),
            "answer": text(sfn.JsonPath.string_at("$.answer.text")),
            "model_id": text(model.model_id),
            "request_id": text(sfn.JsonPath.string_at("$.requestId")),
            "sequence": number(sfn.JsonPath.string_at("$.sequence")),
            "stop_reason": text(sfn.JsonPath.string_at("$.answer.stopReason")),
            "input_tokens": number(sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.answer.usage.InputTokens"))),
            "output_tokens": number(sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.answer.usage.OutputTokens"))),
            "cache_read_tokens": number(sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.answer.usage.CacheReadInputTokens"))),
            "cache_write_tokens": number(sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.answer.usage.CacheWriteInputTokens"))),
            "served_latency": text("standard"),  # latency="optimized" is refused above
            **({
                # the tier asked for, and the tier the response named ("" when it named none): answers.Answer
                "requested_tier": text(cast(str, request.service_tier)),
                "served_tier": text(sfn.JsonPath.string_at("$.tier.served")),
            } if tiered else {}),
            "generated_at": text(sfn.JsonPath.string_at("$$.State.EnteredTime")),
        }
        if store.answer_ttl is not None:
            attributes[schema.ttl_attribute] = number(sfn.JsonPath.string_at("$.expiresAt"))
        write = tasks.DynamoPutItem(
            self, "Write answer",
            table=store.table,
            item=attributes,
            condition_expression=schema.newer_than_stored,
            expression_attribute_names=schema.newer_than_stored_names,
            expression_attribute_values={
                **{
                    name: number(value["N"]) if "N" in value else text(value["S"])
                    for name, value in schema.newer_than_stored_constants.items()
                },
                ":seq": number(sfn.JsonPath.string_at("$.sequence")),
                ":rid": text(sfn.JsonPath.string_at("$.requestId")),
                ":maxSeq": number(sfn.JsonPath.string_at("$.maxSequence")),
                ":maxGen": text(sfn.JsonPath.string_at("$.maxGeneratedAt")),
            },
            result_selector={"written": 1},
        )
        _retry_store(write)
        # The condition cannot see a fractional number or a malformed time in the stored item, so a failed
        # condition is judged again by put_answer (answers.check_item, the readers' rule) in the prepare
        # function: it replaces exactly an invalid item and reports a valid newer one superseded.
        second_look = tasks.LambdaInvoke(
            self, "Check stored answer",
            lambda_function=self.prepare_function,
            payload=sfn.TaskInput.from_object({"answer": {name: value.to_object() for name, value in attributes.items()}}),
            output_path="$.Payload",  # {"written": 1} or {"superseded": 1}
        )
        second_look.add_retry(  # a distributed Map's keys may reach the account's concurrency at once
            errors=[LAMBDA_THROTTLED], interval=cdk.Duration.seconds(1), max_attempts=6, backoff_rate=2,
            jitter_strategy=sfn.JitterType.FULL,
        )
        second_look.add_catch(key_failed, errors=["States.ALL"], result_path=_ERROR)
        write.add_catch(second_look, errors=[CONDITIONAL_CHECK_FAILED], result_path=_ERROR)
        write.add_catch(key_failed, errors=["States.ALL"], result_path=_ERROR)
        answered: sfn.IChainable = answer.next(write)
        if tiered:  # the tier the response named, or "" (model_tasks.SERVED_TIER_PATH: a list, [] when none)
            served = sfn.Pass(
                self, "Served tier", result_path="$.tier",
                parameters={"requested": request.service_tier,
                            "served.$": f"States.ArrayGetItem($.response.{SERVED_TIERS}, 0)"},
            )
            unreported = sfn.Pass(self, "Served tier unreported", result_path="$.tier",
                                  parameters={"requested": request.service_tier, "served": ""})
            served.next(answer)
            unreported.next(answer)
            answered = (
                sfn.Choice(self, "Served tier?")
                .when(sfn.Condition.is_present(f"$.response.{SERVED_TIERS}[0]"), served)
                .otherwise(unreported)
            )
        has_text = (
            sfn.Choice(self, "Has text?")
            .when(sfn.Condition.is_present("$.response.texts[0]"), answered)
            .otherwise(empty)
        )
        start: sfn.IChainable = call
        if ledger is None:
            call.next(has_text)
        else:
            # reserve (a refusal waits and tries again in a new slot; one that never fits fails the key) -> call
            # -> settle
            # DynamoDB failing the reservation past its tries: the same call without the ledger, after the
            # floor's wait (ledger_steps, "When DynamoDB fails"), nothing to settle or release
            fallback_call = model_call(self, f"Call model{FALLBACK_CALL_SUFFIX}", model=model, request=request,
                                       retry=retry, options=options)[0] if ledger.consumer.falls_back else None
            fallback = ledger.fallback(fallback_call, failed=key_failed, error_path=_ERROR, then=has_text)
            slot, reserve = ledger.admission(key_failed, _ERROR, fallback)
            reserve.add_catch(key_failed, errors=["States.ALL"], result_path=_ERROR)
            settle = ledger.settle()
            # A slot that left the window, or DynamoDB failing past its Retry: the answer is paid for and is
            # written; the hold then counts until its window passes (never less).
            settle.add_catch(has_text, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
            settle.next(has_text)
            call.next(ledger.charge("$.response.usage", settle))
            reserve.next(call)
            start = slot
        return (
            sfn.Choice(self, "Has key?")
            .when(
                sfn.Condition.and_(sfn.Condition.is_present("$.item.key"), sfn.Condition.is_string("$.item.key")),
                start,
            )
            .otherwise(no_key)
        )

    def _release_lock(self, id: str, store: AnswerStore, lock_id: str) -> tuple[tasks.DynamoDeleteItem, sfn.Pass]:
        """answers.release: delete the lock only while this run still owns it (it may have expired).
        Returns the task and the state after it, which the caller continues from."""
        schema = answer_schema()
        release = tasks.DynamoDeleteItem(
            self, id,
            table=store.table,
            key={schema.partition_key: tasks.DynamoAttributeValue.from_string(lock_id)},
            condition_expression="#owner = :owner",
            expression_attribute_names={"#owner": "owner"},
            expression_attribute_values={
                ":owner": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$$.Execution.Name"))
            },
            result_path=sfn.JsonPath.DISCARD,
        )
        # Whether or not the lock could be deleted, the run's outcome stands; an unreleased lock expires,
        # but only with the state machine's timeout, so a throttled release is retried first.
        _retry_store(release)
        after = sfn.Pass(self, f"{id} done")
        release.add_catch(after, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
        release.next(after)
        return release, after

    # ---- checks and settings -----------------------------------------------------------------
    def _check_items(self, check: Checks, items: Any) -> None:
        if not check.each("items", items, lambda n, v: check.instance(n, v, Mapping, "an object such as {'key': 'ticker-morning#AAPL', 'ticker': 'AAPL'}")):
            return
        check.rule(bool(items), "items is empty; a run would call nothing: list at least one {'key': ...} object", id="items.empty")
        for index, item in enumerate(items):
            key = item.get("key")
            check.rule(
                isinstance(key, str) and bool(key.strip()),
                f"items[{index}] has no 'key' string; each item needs the key its answer is stored under",
                id="items.no-key",
            )
        size = len(json.dumps({"items": list(items)}, default=str).encode())
        check.rule(
            size <= MAX_INLINE_INPUT_BYTES,
            f"items make a {size:,}-byte run input, above the 256 KiB that EventBridge Scheduler sends and Step "
            "Functions accepts; put the items in S3 and pass items_bucket and items_key (a distributed Map)",
            id="items.input-too-large",
        )
        if len(items) > MAX_INLINE_KEYS:
            warn(
                self,
                "precompute-history",
                f"{len(items):,} inline items: each key adds about {EVENTS_PER_KEY} events to the run's history, which "
                f"Step Functions caps at 25,000, so a run stops near {25_000 // EVENTS_PER_KEY:,} keys; above "
                f"{MAX_INLINE_KEYS:,}, put the items in S3 (items_bucket), where each key runs in a child execution",
            )

    def _warn_about_schedule(self, schedule: scheduler.ScheduleExpression) -> None:
        expression = schedule.expression_string
        if is_token(expression):
            return
        zone = schedule.time_zone.timezone_name if schedule.time_zone is not None else "Etc/UTC"
        if expression.startswith("cron(") and zone in ("Etc/UTC", "UTC"):
            # aws-cdk-lib fills in Etc/UTC when no time zone is given, so the two cannot be told apart.
            warn(
                self,
                "schedule-utc",
                f"schedule {expression} runs in UTC (no time zone given, or Etc/UTC), so against local time it "
                "moves by an hour at each daylight-saving change; pass time_zone=cdk.TimeZone.<your zone> so runs "
                "stay before the local peak (acknowledge this warning if the peak really follows UTC)",
            )
        elif expression.startswith("rate("):
            warn(
                self,
                "schedule-rate",
                f"schedule {expression} runs at a fixed rate, not before a known peak; a cron in your time zone "
                "(e.g. weekdays 06:00) generates answers when they are about to be asked for",
            )

    def _dead_letter_queue(self) -> sqs.Queue:
        queue = sqs.Queue(
            self, "ScheduleDeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        cdk.Validations.of(queue).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-SQS3",
                reason="this queue is the schedule's dead-letter queue (EventBridge Scheduler's DeadLetterConfig, "
                "which cdk-nag does not recognize); a dead-letter queue needs none of its own",
            )
        )
        return queue

    def _acknowledge_distributed_map(self, items_bucket: s3.IBucket, role_policy: IConstruct | None) -> None:
        machine = self.state_machine
        child_policy = machine.node.try_find_child("DistributedMapPolicy")
        if child_policy is not None:
            acknowledge_wildcard_resources(
                cast(Construct, child_policy),
                matches=lambda arn: ":execution:" in arn,
                reason="a distributed Map starts, describes and stops child executions whose names Step Functions "
                "generates; the grant is scoped to this state machine's executions",
            )
        if role_policy is None:
            return
        # Exactly the items bucket's objects, so a user's own bucket/* on a role they pass in stays their
        # finding; computed at validation, after a bucket of another stack has become an import, the
        # form cdk-nag names the finding by. The reader writes the ARN from the bucket's name, other
        # grants from its ARN.
        acknowledge_exact_resources_at_validation(
            role_policy,
            resources=lambda: [
                flattened(self, items_bucket.arn_for_objects("*")),
                flattened(self, f"arn:{cdk.Aws.PARTITION}:s3:::{items_bucket.bucket_name}/*"),
            ],
            reason="aws-cdk-lib's item reader grants every object of the items bucket (bucket/*): the Map reads "
            "the items object; pass your own role to narrow it",
        )

    # ---- metrics -------------------------------------------------------------------------------
    def metric_failed_keys(self, **props: Any) -> cloudwatch.Metric:
        """Keys a run could not answer (PrecomputeFailedKeys, one data point per run). Default: Sum over 1 day."""
        return state_machine_metric(self.state_machine.state_machine_name, metrics().PRECOMPUTE_FAILED_KEYS,
                                    **{"statistic": "Sum", "period": cdk.Duration.days(1), **props})


def _retry_store(task: sfn.TaskStateBase) -> None:
    """Retry a DynamoDB task on throttles and server errors, with full jitter (about 15 s at most)."""
    task.add_retry(
        errors=list(DYNAMODB_RETRY_ERRORS),
        interval=cdk.Duration.seconds(1), max_attempts=4, backoff_rate=2, jitter_strategy=sfn.JitterType.FULL,
    )
