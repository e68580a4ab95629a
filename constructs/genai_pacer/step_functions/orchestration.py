"""Throttle-safe Step Functions: bounded Map fan-out and Parallel prompts, each call retried with jitter.

Bedrock rejects a throttled call at once rather than queuing it, so only two settings change how
often a workflow throttles: a MaxConcurrency the quota sustains, and a Retry on throttling with
exponential backoff and jitter. Every model call these constructs build gets both.

`BoundedMap` (inline: items from the state input, at most 40 at once) and `BoundedDistributedMap`
(items from S3, up to 10,000 at once, results written to S3) are two constructs, as aws-cdk-lib
has Map and DistributedMap, so no prop of one is silently ignored by the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct

from .._internal.alarms import execution_alarms
from .._internal.checks import Checks, _show, fit_concurrency, is_token, token_kind, warn
from .._internal.docs import constructor_doc
from .._internal.nag import (
    acknowledge_exact_resources,
    acknowledge_exact_resources_at_validation,
    flattened,
    principal_policy,
)
from .._internal.s3 import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    S3_MAX_KEY_BYTES,
    bucket_key,
    check_key_bytes,
    grant_keys,
)
from ..models import BedrockModel, as_bedrock_model
from ..quota import planning
from ..quota.ledger import QuotaLedger
from .ledger_steps import FALLBACK_STATE_SUFFIXES, LedgerConsumer, check_ledger_request, ledger_consumer
from .model_tasks import (
    ANSWER_BYTES_OVERHEAD,
    DEFAULT_RETRY_ERRORS,
    TIER_BYTES_OVERHEAD,
    TIER_FIELD,
    TIER_STATE_SUFFIXES,
    BedrockRetry,
    ConverseRequest,
    ModelRequest,
    NativeRequest,
    TaskOptions,
    has_retry,
    model_call,
)
from .state_machine import StateMachineOptions, model_state_machine

__all__ = [
    "BoundedMap",
    "BoundedDistributedMap",
    "ParallelPrompts",
    "BedrockRetry",
    "ConverseRequest",
    "NativeRequest",
    "TaskOptions",
    "StateMachineOptions",
    "DEFAULT_RETRY_ERRORS",
    "INLINE_MAP_LIMIT",
    "DISTRIBUTED_MAP_LIMIT",
    "STATE_PAYLOAD_LIMIT_BYTES",
    "MAX_INLINE_MAP_ITEMS",
    "S3_MAX_KEY_BYTES",
]

#: Concurrent iterations of a Map: Inline "supports up to 40", Distributed "up to 10,000 parallel
#: child workflow executions": https://docs.aws.amazon.com/step-functions/latest/dg/state-map.html
INLINE_MAP_LIMIT = 40
DISTRIBUTED_MAP_LIMIT = 10_000
#: Step Functions' limit on a state's input or output, 256 KiB: the max length of StartExecution's
#: and StartSyncExecution's input in botocore's stepfunctions model (checked by
#: tests/step_functions/test_aws_facts_stepfunctions.py).
STATE_PAYLOAD_LIMIT_BYTES = 256 * 1024
#: The most items an inline Map can get: they arrive in a state of at most STATE_PAYLOAD_LIMIT_BYTES,
#: and the smallest item of a JSON array takes 2 bytes (a digit and its comma). A hard limit.
MAX_INLINE_MAP_ITEMS = STATE_PAYLOAD_LIMIT_BYTES // 2
#: Bytes per output token when estimating an answer's size (English text averages about 4).
BYTES_PER_TOKEN = 4

_MODEL_HINT = "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')"
_PLAN_HINT = "size it with planning.sustainable_rate(...) and pass the plan"


class _ExecutionMetrics:
    """Execution metrics of a construct's state machine (AWS/States, dimension StateMachineArn).

    A model call that stays throttled after its Retry fails the execution (or, in a Map, the item);
    the throttles themselves are in AWS/Bedrock's InvocationThrottles of the model.
    """

    state_machine: sfn.StateMachine

    def metric_failed_executions(self, **props: Any) -> cloudwatch.Metric:
        """Executions that failed (Sum over 5 minutes by default)."""
        return self.state_machine.metric_failed(**{"statistic": "Sum", **props})

    def metric_throttled_executions(self, **props: Any) -> cloudwatch.Metric:
        """Executions Step Functions throttled at start (Sum over 5 minutes by default)."""
        return self.state_machine.metric_throttled(**{"statistic": "Sum", **props})

    def metric_timed_out_executions(self, **props: Any) -> cloudwatch.Metric:
        """Executions that ran past the state machine's timeout (Sum over 5 minutes by default)."""
        return self.state_machine.metric_timed_out(**{"statistic": "Sum", **props})

    def metric_started_executions(self, **props: Any) -> cloudwatch.Metric:
        """Executions started (Sum over 5 minutes by default)."""
        return self.state_machine.metric_started(**{"statistic": "Sum", **props})

    def metric_execution_time(self, **props: Any) -> cloudwatch.Metric:
        """How long executions take, in ms (p90 over 5 minutes by default)."""
        return self.state_machine.metric_time(**{"statistic": "p90", **props})


class _MapBase(_ExecutionMetrics, Construct):
    """What both Map constructs share: the per-item processor, the Retry, and the state machine."""

    map_state: sfn.MapBase
    state_machine: sfn.StateMachine
    ledger_consumer: LedgerConsumer | None = None

    def _processor(
        self,
        check: Checks,
        *,
        model: BedrockModel | None,
        request: ModelRequest | None,
        item_processor: sfn.IChainable | None,
        retry: BedrockRetry,
        task_options: TaskOptions | None,
        ledger: QuotaLedger | None = None,
        plan: Any = None,
        cap: Any = None,
    ) -> tuple[sfn.IChainable | None, list[BedrockModel]]:
        model = as_bedrock_model(model)
        model_ok = check.instance("model", model, BedrockModel, _MODEL_HINT, optional=True)
        processor_ok = check.instance(
            "item_processor", item_processor, sfn.IChainable, "an sfn chain (a state or .next() chain)", optional=True
        )
        check.instance("task_options", task_options, TaskOptions, "TaskOptions(...)", optional=True)
        if (model is not None and not model_ok) or (item_processor is not None and not processor_ok):
            return None, []  # the type check named the prop; nothing below can use a wrong value
        if not check.rule(
            (model is None) != (item_processor is None),
            "pass exactly one of model (with request) for a model call per item, or item_processor for your own chain",
            id="model.one-of-model-or-item-processor",
        ):
            return None, []
        if item_processor is not None:
            check.rule(ledger is None, "ledger is set with item_processor; the ledger paces the model call the Map "
                       "builds from model and request: drop ledger, or pass model and request", id="ledger.with-item-processor")
            check.rule(request is None, "request is set with item_processor; the processor makes its own calls: drop request", id="request.with-item-processor")
            check.rule(task_options is None, "task_options is set with item_processor; set them on your own tasks instead", id="task_options.with-item-processor")
            # A user's own InvokeModel tasks get the Retry unless they already carry one.
            for state in sfn.State.find_reachable_states(item_processor.start_state):
                if isinstance(state, tasks.BedrockInvokeModel) and not has_retry(state):
                    retry.apply_to(state)
            return item_processor, []
        if not check.rule(request is not None, "model is set but request is not; pass ConverseRequest(prompt=..., max_tokens=...)", id="request.required-with-model"):
            return None, []
        if not check.instance(
            "request", request, (ConverseRequest, NativeRequest),
            "ConverseRequest(prompt=..., max_tokens=...) or NativeRequest(body=...)",
        ):
            return None, []
        # M, the fallback's calls at once: the Map's MaxConcurrency in each execution (ledger_steps)
        self.ledger_consumer = ledger_consumer(check, self, ledger, model=model, plan=plan, calls_per_execution=cap)
        if ledger is not None:
            check_ledger_request(check, self.ledger_consumer, request, task_options.result_selector if task_options else None)
        check.raise_if_any()  # model_call needs valid inputs
        _, chain = model_call(self, "InvokeModel", model=model, request=request, retry=retry, options=task_options,  # type: ignore[arg-type]
                              ledger=self.ledger_consumer)
        return chain, [model]


@constructor_doc
class BoundedMap(_MapBase):
    """An inline Map state whose MaxConcurrency the quota sustains, in a state machine of its own.

    Per item it calls `model` with `request` (JsonPath references such as `$.prompt` read the
    item), or runs your own `item_processor`. Each item's result is narrowed to the answer text,
    stop reason and token usage, so the Map's output stays under Step Functions' 256 KiB limit; a
    request that names a service tier adds the tier it asked for and the tier that served it
    ({"serviceTier": {"requested", "served"}}).

    max_concurrency: required; an int 1..40 or a `planning.RatePlan` (fitted: above 40 it uses 40
        and warns; a plan sustaining less than one call at a time is refused). An int 1 runs every call
        in sequence (warning). 0 is unbounded and refused unless allow_unbounded=True.
    allow_unbounded: accept max_concurrency=0. Default: False.
    model / request: the per-item model call: `ConverseRequest(...)` (default form, any model) or
        `NativeRequest(body)`.
    item_processor: instead of model/request, your own chain per item. Bedrock InvokeModel tasks
        in it without a Retry receive `retry`; grant any other models it calls yourself.
    retry: Default: BedrockRetry().
    task_options: result selection, result path, timeout, heartbeat of the model task. Default:
        TaskOptions() (text, stop reason and usage replace the item).
    items_path: where the items are in the input. Default: "$.items".
    expected_items: how many items a run usually gets; with the request's max_tokens it estimates
        the Map's output and warns at synth when that can exceed 256 KiB. At most 131,072 (the items
        arrive in a 256 KiB state, 2 bytes each at the least). Default: not estimated.
    state_machine_options: how the state machine is built. Default: encrypted logs, X-Ray,
        STANDARD type, 24-hour timeout.
    alarm_actions: actions for the alarms (`alarms`: FailedExecutions and TimedOutExecutions, any
        in 5 minutes: a failed run's items are lost unless it is run again). Default: none.
    ledger: a `QuotaLedger` of the model's ModelQuota: each item's call then takes part in the
        quota's shared ledger, beside every other consumer (step_functions.ledger_steps): it
        reserves the share profile's prompt + max_tokens x burndown before the call (a refusal waits
        and tries again, up to about 10 minutes, without calling the model), settles to input + cache
        writes + output x burndown after it, and returns its hold when the call fails. Needs the
        Map's share of the quota (max_concurrency=quota.share(...), or a share named after this
        construct), a ConverseRequest with a max_tokens known at synth and the default selection.
        Given a share drawn with burst_tpm (max_concurrency=quota.share(..., burst_tpm=...)), the
        Map's MaxConcurrency is the calls the burst sustains, and the ledger decides how many run.
        When DynamoDB keeps throttling or failing a reservation, the call falls back to the share's
        floor: it publishes LedgerFallbacks, waits the seconds that keep MaxConcurrency calls within
        the floor (fixed at synth) and calls without the ledger. The state machine may UpdateItem the
        quota's item only, and PutMetricData in the GenaiPacer namespace only. Default: none.

    Attributes: `map_state`, `state_machine`, `alarms`, `ledger_consumer` (the Map's name, floor
    and reservation in the ledger; None without one). Metrics: `metric_failed_executions`,
    `metric_throttled_executions`, `metric_timed_out_executions`, `metric_started_executions`,
    `metric_execution_time`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        max_concurrency: int | planning.RatePlan,
        allow_unbounded: bool = False,
        model: BedrockModel | None = None,
        request: ModelRequest | None = None,
        item_processor: sfn.IChainable | None = None,
        retry: BedrockRetry | None = None,
        task_options: TaskOptions | None = None,
        items_path: str = "$.items",
        expected_items: int | None = None,
        state_machine_options: StateMachineOptions | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        ledger: QuotaLedger | None = None,
    ) -> None:
        super().__init__(scope, id)
        with Checks("BoundedMap", scope=self) as check:
            cap = _cap(self, check, QuotaLedger.burst_plan(ledger, max_concurrency), allow_unbounded, INLINE_MAP_LIMIT,
                       "an inline Map")
            check.instance("retry", retry, BedrockRetry, "BedrockRetry(...)", optional=True)
            check.instance("allow_unbounded", allow_unbounded, bool, "True or False")
            if check.text("items_path", items_path):
                check.rule(items_path.startswith("$"), f"items_path={items_path!r} is not a JsonPath; use e.g. '$.items'", id="items_path.not-jsonpath")
            if _known_at_synth(
                check, "expected_items", expected_items,
                "it is read only at synth, to estimate whether the Map's output can exceed 256 KiB; pass an int "
                "or leave it out",
            ):
                check.integer(
                    "expected_items", expected_items, minimum=1, maximum=MAX_INLINE_MAP_ITEMS, optional=True,
                    fix=f"how many items a run usually gets, 1..{MAX_INLINE_MAP_ITEMS:,}: an inline Map's items arrive "
                    "in its state input, which Step Functions limits to 256 KiB (2 bytes an item at the least); put "
                    "more in S3 and use BoundedDistributedMap",
                )
            check.instance("state_machine_options", state_machine_options, StateMachineOptions, "StateMachineOptions(...)", optional=True)
            check.alarm_actions("alarm_actions", alarm_actions)
            check.raise_if_any()
            retry = retry or BedrockRetry()
            processor, models = self._processor(
                check, model=model, request=request, item_processor=item_processor, retry=retry, task_options=task_options,
                ledger=ledger, plan=max_concurrency, cap=cap,
            )
        self.map_state = sfn.Map(self, "Map", max_concurrency=cap, items_path=items_path)
        self.map_state.item_processor(processor)  # type: ignore[arg-type]
        if expected_items is not None and request is not None:
            self._warn_if_output_can_exceed_the_limit(expected_items, request, task_options)
        self.state_machine = model_state_machine(
            self,
            definition=self.map_state,
            models=models,
            options=state_machine_options or StateMachineOptions(),
            default_timeout=cdk.Duration.hours(24),
        )
        self.alarms = execution_alarms(self, self.state_machine, alarm_actions, what=f"BoundedMap {id}")
        if self.ledger_consumer is not None:
            self.ledger_consumer.grant(self.state_machine)

    def _warn_if_output_can_exceed_the_limit(
        self, items: int, request: ModelRequest, task_options: TaskOptions | None
    ) -> None:
        max_tokens = request.max_tokens
        if max_tokens is None or (task_options is not None and task_options.result_selector is not None):
            return  # a native body without max_tokens, or a selection we cannot size
        if is_token(max_tokens):
            warn(
                self,
                "map-output-size-unknown",
                f"expected_items={items} but the request's max_tokens is a deploy-time value, so whether the Map's "
                "output can exceed Step Functions' 256 KiB state limit cannot be estimated at synth; keep "
                f"{items} x max_tokens x {BYTES_PER_TOKEN} bytes under 256 KiB, or use BoundedDistributedMap",
            )
            return
        if isinstance(request, NativeRequest):
            per_item = max_tokens * BYTES_PER_TOKEN * 3  # a native body repeats ids, usage and JSON framing
        else:
            per_item = max_tokens * BYTES_PER_TOKEN + ANSWER_BYTES_OVERHEAD + (
                TIER_BYTES_OVERHEAD if request.service_tier is not None else 0)
        worst = items * per_item
        if worst > STATE_PAYLOAD_LIMIT_BYTES:
            fits = max(1, STATE_PAYLOAD_LIMIT_BYTES // per_item)
            warn(
                self,
                "map-output-size",
                f"{items} items x up to {max_tokens} output tokens (about {per_item:,} bytes each) can reach "
                f"{worst:,} bytes, above Step Functions' 256 KiB state limit: the run would fail with "
                f"States.DataLimitExceeded after paying for the answers. About {fits} items fit; use "
                "BoundedDistributedMap (results written to S3) for more",
            )


@constructor_doc
class BoundedDistributedMap(_MapBase):
    """A distributed Map over items in S3, bounded by the quota, with results written to S3.

    max_concurrency: required; an int 1..10,000 or a `planning.RatePlan` (fitted to 1..10,000).
        0 is unbounded and refused unless allow_unbounded=True.
    allow_unbounded: accept max_concurrency=0. Default: False.
    model / request / item_processor / retry / task_options: as in BoundedMap.
    items_bucket / items_key: required; the S3 object that lists the items.
    items_format: "jsonl" (one item per line) or "json" (an array). Default: "jsonl".
    results_bucket / results_prefix: where Step Functions writes the results. Default: items_bucket,
        prefix "genai-pacer-results/".
    items_bucket_key / results_bucket_key: the KMS key of an SSE-KMS items_bucket / results_bucket
        that does not know it (imported with s3.Bucket.from_bucket_name or from_bucket_arn). The role
        gets kms:Decrypt on the items bucket's key and kms:GenerateDataKey and kms:Decrypt on the
        results bucket's (a multipart upload needs both). Default: the bucket's own encryption_key
        (an s3.Bucket built with a key, or from_bucket_attributes(encryption_key=...)); none for a
        bucket imported by name, which is then taken as SSE-S3 (no key to grant). A key for a bucket
        that knows another is refused; results_bucket_key requires results_bucket (without it the
        results go to items_bucket, under items_bucket_key).
    tolerated_failure_percentage: failed items that still let the run succeed, 0..100. Default: 0
        (any failed item fails the run, so nothing is lost silently).
    batch_max_items: with item_processor only; items per child execution. Default: no batching.
    child_execution_type: Default: STANDARD (Express children stop after 5 minutes, which a
        throttled call retrying with backoff can exceed).
    state_machine_options: Default: encrypted logs, X-Ray, STANDARD type, 24-hour timeout.
    alarm_actions: actions for the alarms, as BoundedMap's. Default: none.
    ledger: as BoundedMap's: each item's call reserves and settles in the quota's shared ledger. A
        child execution has a history of its own, so a long wait for the ledger fits here better
        than in an inline Map (25,000 events per execution). Default: none.

    The role may read every object of items_bucket and write every object of results_bucket:
    aws-cdk-lib's item reader and result writer grant `bucket/*`. Pass your own role in
    state_machine_options to narrow it.

    Attributes: `map_state`, `state_machine`, `alarms`, `ledger_consumer`. Metrics: as BoundedMap's. With
    tolerated_failure_percentage above 0, failed items no longer fail the execution, so
    metric_failed_executions counts Map Runs that failed beyond the tolerance.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        max_concurrency: int | planning.RatePlan,
        items_bucket: s3.IBucket,
        items_key: str,
        allow_unbounded: bool = False,
        model: BedrockModel | None = None,
        request: ModelRequest | None = None,
        item_processor: sfn.IChainable | None = None,
        retry: BedrockRetry | None = None,
        task_options: TaskOptions | None = None,
        items_format: Literal["jsonl", "json"] = "jsonl",
        results_bucket: s3.IBucket | None = None,
        results_prefix: str = "genai-pacer-results/",
        items_bucket_key: kms.IKey | None = None,
        results_bucket_key: kms.IKey | None = None,
        tolerated_failure_percentage: float = 0,
        batch_max_items: int | None = None,
        child_execution_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD,
        state_machine_options: StateMachineOptions | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        ledger: QuotaLedger | None = None,
    ) -> None:
        super().__init__(scope, id)
        # Without this flag aws-cdk-lib silently drops result_writer_v2 and nothing is written to S3.
        # Set on this construct only, before any child exists, so the user's app is untouched.
        self.node.set_context("@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2", True)
        with Checks("BoundedDistributedMap", scope=self) as check:
            cap = _cap(self, check, QuotaLedger.burst_plan(ledger, max_concurrency), allow_unbounded,
                       DISTRIBUTED_MAP_LIMIT, "a distributed Map")
            check.instance("retry", retry, BedrockRetry, "BedrockRetry(...)", optional=True)
            check.instance("allow_unbounded", allow_unbounded, bool, "True or False")
            check.instance("items_bucket", items_bucket, s3.IBucket, "an s3 bucket (s3.Bucket or s3.Bucket.from_bucket_name)")
            if check.text("items_key", items_key, fix="the key of the JSONL or JSON object listing the items"):
                check_key_bytes(check, "items_key", items_key, "the key of the object that lists the items")
            if _known_at_synth(
                check, "items_format", items_format,
                "the format decides at synth which item reader (JSONL or JSON) the Map is built with; pass 'jsonl' or 'json'",
            ):
                check.one_of("items_format", items_format, ("jsonl", "json"))
            check.instance("results_bucket", results_bucket, s3.IBucket, "an s3 bucket", optional=True)
            items_kms = bucket_key(
                check, bucket_name="items_bucket", bucket=items_bucket, key_name="items_bucket_key", key=items_bucket_key
            )
            results_kms = bucket_key(
                check, bucket_name="results_bucket", bucket=results_bucket, key_name="results_bucket_key",
                key=results_bucket_key,
                without="results_bucket_key is set without results_bucket: the results go to items_bucket, whose key "
                "is items_bucket_key; drop results_bucket_key (or pass results_bucket)",
            )
            if check.text("results_prefix", results_prefix):
                check_key_bytes(
                    check, "results_prefix", results_prefix,
                    "the start of every result object's key (Step Functions adds the Map Run's own path after it)",
                )
            check.number(
                "tolerated_failure_percentage", tolerated_failure_percentage, minimum=0, maximum=100,
                fix="a share of items in percent; 0 fails the run on any failed item",
            )
            batch_ok = check.integer("batch_max_items", batch_max_items, minimum=1, maximum=100_000_000, optional=True)
            if batch_ok or token_kind(batch_max_items) == "number":
                check.rule(
                    model is None,
                    f"batch_max_items={_show(batch_max_items)} hands each child a list of items, which a per-item "
                    "request cannot read; drop it, or pass an item_processor that handles $.Items",
                    id="batch_max_items.per-item-request",
                )
            if _known_at_synth(
                check, "child_execution_type", child_execution_type,
                "aws-cdk-lib takes the children's type as an sfn.StateMachineType at synth; pass "
                "sfn.StateMachineType.STANDARD or EXPRESS",
            ):
                check.one_of(
                    "child_execution_type", child_execution_type,
                    (sfn.StateMachineType.STANDARD, sfn.StateMachineType.EXPRESS),
                )
            check.instance("state_machine_options", state_machine_options, StateMachineOptions, "StateMachineOptions(...)", optional=True)
            check.alarm_actions("alarm_actions", alarm_actions)
            check.raise_if_any()
            retry = retry or BedrockRetry()
            processor, models = self._processor(
                check, model=model, request=request, item_processor=item_processor, retry=retry, task_options=task_options,
                ledger=ledger, plan=max_concurrency, cap=cap,
            )
        reader_cls = sfn.S3JsonLItemReader if items_format == "jsonl" else sfn.S3JsonItemReader
        map_props: dict[str, Any] = dict(
            max_concurrency=cap,
            item_reader=reader_cls(bucket=items_bucket, key=items_key),
            result_writer_v2=sfn.ResultWriterV2(bucket=results_bucket or items_bucket, prefix=results_prefix),
            item_batcher=sfn.ItemBatcher(max_items_per_batch=batch_max_items) if batch_max_items else None,
            map_execution_type=child_execution_type,
        )
        if is_token(tolerated_failure_percentage):
            self.map_state = _DeployTimeTolerance(
                self, "Map", tolerated_failure_percentage=tolerated_failure_percentage, **map_props
            )
        else:
            self.map_state = sfn.DistributedMap(
                self, "Map", tolerated_failure_percentage=tolerated_failure_percentage, **map_props
            )
        self.map_state.item_processor(processor)  # type: ignore[arg-type]
        self.state_machine = model_state_machine(
            self,
            definition=self.map_state,
            models=models,
            options=state_machine_options or StateMachineOptions(),
            default_timeout=cdk.Duration.hours(24),
        )
        self.alarms = execution_alarms(self, self.state_machine, alarm_actions, what=f"BoundedDistributedMap {id}")
        if self.ledger_consumer is not None:
            self.ledger_consumer.grant(self.state_machine)
        if state_machine_options is not None and state_machine_options.state_machine_type == sfn.StateMachineType.EXPRESS:
            # Whether a Distributed Map may run inside an EXPRESS parent is not stated by any AWS page
            # found (Express workflows support only the Request Response integration pattern:
            # https://docs.aws.amazon.com/step-functions/latest/dg/integrate-optimized.html). So a
            # warning, not a refusal: if AWS refuses it, CreateStateMachine fails at deploy.
            warn(
                self,
                "distributed-map-in-express",
                "the state machine is EXPRESS: it runs at most 5 minutes, so the distributed Map must finish every "
                "item (throttles and their retries included) within that, and no AWS page found says a Distributed "
                "Map may run inside an EXPRESS workflow (if not, the deploy fails at CreateStateMachine); use "
                "STANDARD (the default) unless you know both hold",
            )
        # The item reader reads with the role, the result writer writes with it (both grant the S3 actions)
        grant_keys(
            self.state_machine,
            (items_kms, KMS_READ_ACTIONS),
            (results_kms if results_bucket is not None else items_kms, KMS_WRITE_ACTIONS),
        )
        self._acknowledge_generated_names(items_bucket, results_bucket or items_bucket)

    def _acknowledge_generated_names(self, items_bucket: s3.IBucket, results_bucket: s3.IBucket) -> None:
        """A distributed Map starts child executions with generated names and reads and writes S3
        objects whose keys it generates; those grants cannot name each execution or object.

        Exactly these grants, by their ARNs: the role may be the user's (StateMachineOptions(role=...)),
        where a wildcard the user granted themselves must still be reported."""
        machine = self.state_machine
        stack = cdk.Stack.of(self)
        child_policy = machine.node.try_find_child("DistributedMapPolicy")
        if child_policy is not None:
            # aws-cdk-lib's StateMachine.grantExecution on this machine: <execution arn>:* and, for a
            # labelled Map, <execution arn>/*:* (its child executions).
            executions = stack.format_arn(
                service="states", resource="execution", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                resource_name=cdk.Arn.split(machine.state_machine_arn, cdk.ArnFormat.COLON_RESOURCE_NAME).resource_name,
            )
            acknowledge_exact_resources(
                child_policy,
                resources=[flattened(self, f"{executions}:*"), flattened(self, f"{executions}/*:*")],
                reason="a distributed Map starts, describes and stops child executions whose names Step Functions "
                "generates; the grant is scoped to this state machine's executions",
            )
        policy = principal_policy(machine.role)
        if policy is None:
            return
        # aws-cdk-lib's item reader and result writer: arn:<partition>:s3:::<bucket name>/* of these buckets,
        # flattened at validation (a bucket of another stack is an Fn::ImportValue by then).
        objects = [
            cdk.Arn.format(cdk.ArnComponents(
                partition=cdk.Aws.PARTITION, service="s3", region="", account="", resource=bucket.bucket_name,
                resource_name="*",
            ))
            for bucket in (items_bucket, results_bucket)
        ]
        acknowledge_exact_resources_at_validation(
            policy,
            resources=lambda: [flattened(policy, arn) for arn in objects],
            reason="aws-cdk-lib's item reader and result writer grant every object of the items and results "
            "buckets (bucket/*): the Map reads the items object and writes result objects whose keys Step "
            "Functions generates; pass your own role to narrow it",
        )


def _cap(
    scope: Construct, check: Checks, value: Any, allow_unbounded: bool, maximum: int, limit: str
) -> int | None:
    """The Map's MaxConcurrency: 0 only when explicitly unbounded, a literal 1 with a warning (a plan of
    one call at a time is what its quota sustains, and one below one call is refused)."""
    if value == 0 and not isinstance(value, bool) and type(value) is int:
        check.rule(
            allow_unbounded is True,
            f"max_concurrency=0 leaves the Map unbounded, the usual cause of throttling bursts; {_PLAN_HINT} "
            "(or allow_unbounded=True if a downstream limit really bounds it)",
            id="max_concurrency.unbounded",
        )
        return 0
    cap = fit_concurrency(check, scope, "max_concurrency", value, minimum=1, maximum=maximum, limit=limit, fix=_PLAN_HINT)
    if cap == 1 and type(value) is int:
        warn(
            scope,
            "map-sequential",
            "max_concurrency=1 runs every call in sequence; independent calls finish sooner side by side "
            "(size the cap with genai_pacer.planning)",
        )
    return cap


def _known_at_synth(check: Checks, name: str, value: Any, why: str) -> bool:
    """False (with the problem recorded) for a deploy-time value of a prop the construct must know at
    synth; `why` says what decides on it and what to pass."""
    kind = token_kind(value)
    if kind is None:
        return True
    return check.fail(f"{name} is a deploy-time {kind}, but {why}", id=f"{name}.deploy-time-map")


class _DeployTimeTolerance(sfn.DistributedMap):
    """A DistributedMap whose ToleratedFailurePercentage is a deploy-time number (a Ref in the definition).

    aws-cdk-lib refuses every number token there: DistributedMap.validateState checks
    `toleratedFailurePercentage >= 0 && toleratedFailurePercentage <= 100` on the token's encoded
    number (about -1.9e289), aws/aws-cdk packages/aws-cdk-lib/aws-stepfunctions/lib/states/
    distributed-map.ts line 211 (commit 0883740476db; the same check ships in aws-cdk-lib 2.275). So the
    token stays out of aws-cdk-lib's props and is added to the state where aws-cdk-lib renders it.
    """

    def __init__(self, scope: Construct, id: str, *, tolerated_failure_percentage: float, **props: Any) -> None:
        super().__init__(scope, id, **props)
        self._tolerated_failure_percentage = tolerated_failure_percentage

    def to_state_json(self, state_machine_query_language: sfn.QueryLanguage | None = None) -> Mapping[Any, Any]:
        state = super().to_state_json(state_machine_query_language)
        return {**state, "ToleratedFailurePercentage": self._tolerated_failure_percentage}


#: State names ParallelPrompts uses itself; a prompt may not take them.
_PARALLEL_STATES = ("Prompts", "Synthesis", "Synthesis answer", "Synthesis no text", "Synthesis has text?",
                    *(f"Synthesis{suffix}" for suffix in TIER_STATE_SUFFIXES))
#: What a prompt's name may not end with: the states model_call adds after a branch's name.
_CALL_STATE_SUFFIXES = (" answer", " no text", " has text?", *TIER_STATE_SUFFIXES)
#: The suffixes of the states a ledger-paced call adds after its name (ledger_steps.LedgerCall, model_call).
_LEDGER_STATE_SUFFIXES = (" ledger slot", " ledger slot again", " ledger try again?", " ledger wait",
                          " ledger throttled", " ledger throttled again?", " reserve", " release", " failed", " cache writes?", " charge",
                          " charge with cache writes", " settle", " ledger answer", " ledger want", *FALLBACK_STATE_SUFFIXES) + tuple(
                              f" charge output {i}" for i in range(1, 11))
_STATE_NAME_FORBIDDEN = '<>{}[]?*"#%\\^|~`$&,;:/'


@constructor_doc
class ParallelPrompts(_ExecutionMetrics, Construct):
    """Independent prompts as branches of one Parallel state, then an optional synthesis call.

    Run side by side, four 5-second prompts take about 5 seconds instead of 20. The output is
    {"answers": {<name>: <answer text>, ...}} and, with a synthesis, also
    {"synthesis": {"text", "stopReason", "usage"}}. Where a request names a service tier, the tier it
    asked for and the tier that served it are beside the answers: {"tiers": {<name>: {"requested",
    "served"}}} (and "serviceTier" in the synthesis; "served" is absent when the response names no
    tier). The synthesis receives the state with
    `answers` (names and texts only, no response metadata), e.g.
    `sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.answers"))` in its prompt.

    prompts: branch name -> ConverseRequest (or NativeRequest: its answer is then the native
        body). At least one; names are state names (1-80 characters, no brackets or punctuation).
    model: the model every branch calls.
    synthesis: the request of a final call that runs after every branch. Default: none.
    synthesis_model: requires synthesis. Default: `model`.
    retry: Default: BedrockRetry().
    state_machine_options: Default: encrypted logs, X-Ray, STANDARD type, 15-minute timeout. For a
        caller that waits for the answer, use EXPRESS (at most 5 minutes) and StartSyncExecution.
    alarm_actions: actions for the alarms, as BoundedMap's. Default: none.
    ledger: a `QuotaLedger` of `model`'s ModelQuota: each branch's call (and the synthesis, when it calls
        `model`) reserves and settles in the quota's shared ledger, as BoundedMap's calls do. Needs a
        share drawn under this construct's id (quota.share("<id>", profile, calls=<branches>, ...)) and
        ConverseRequest prompts. Default: none.

    Attributes: `parallel_state`, `synthesis_task` (or None), `state_machine`, `alarms`,
    `ledger_consumer`. Metrics: as BoundedMap's.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        prompts: Mapping[str, ModelRequest],
        model: BedrockModel,
        synthesis: ModelRequest | None = None,
        synthesis_model: BedrockModel | None = None,
        retry: BedrockRetry | None = None,
        state_machine_options: StateMachineOptions | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        ledger: QuotaLedger | None = None,
    ) -> None:
        super().__init__(scope, id)
        model = as_bedrock_model(model)
        synthesis_model = as_bedrock_model(synthesis_model, "synthesis_model")
        with Checks("ParallelPrompts", scope=self) as check:
            check.instance("model", model, BedrockModel, _MODEL_HINT)
            check.instance("synthesis_model", synthesis_model, BedrockModel, _MODEL_HINT, optional=True)
            check.rule(
                synthesis_model is None or synthesis is not None,
                "synthesis_model is set without synthesis; it would be ignored: pass synthesis or drop synthesis_model",
                id="synthesis_model.without-synthesis",
            )
            check.instance("synthesis", synthesis, (ConverseRequest, NativeRequest), "ConverseRequest(...)", optional=True)
            check.instance("retry", retry, BedrockRetry, "BedrockRetry(...)", optional=True)
            check.instance("state_machine_options", state_machine_options, StateMachineOptions, "StateMachineOptions(...)", optional=True)
            check.alarm_actions("alarm_actions", alarm_actions)
            if check.instance("prompts", prompts, Mapping, "a dict of branch name -> ConverseRequest"):
                check.rule(bool(prompts), "prompts is empty; pass at least one branch name -> ConverseRequest", id="prompts.empty")
                for name, request in prompts.items():
                    _check_state_name(check, name)
                    check.instance(f"prompts[{name!r}]", request, (ConverseRequest, NativeRequest), "ConverseRequest(prompt=..., max_tokens=...)")
            # M, the fallback's calls at once: every branch of an execution runs at once (ledger_steps)
            width = len(prompts) if isinstance(prompts, Mapping) and prompts else None
            self.ledger_consumer = ledger_consumer(check, self, ledger, model=model, calls_per_execution=width)
            # The synthesis takes part when it calls the ledger's model (another model has its own quota).
            self._synthesis_paced = synthesis is not None and (
                synthesis_model is None or getattr(synthesis_model, "model_id", None) == getattr(model, "model_id", None))
            if self.ledger_consumer is not None and isinstance(prompts, Mapping):
                for name, request in prompts.items():
                    check_ledger_request(check, self.ledger_consumer, request, None, name=f"prompts[{name!r}]")
                    check.rule(
                        not (isinstance(name, str) and name.endswith(_LEDGER_STATE_SUFFIXES)),
                        f"prompt name {name!r} ends like the ledger's own states ("
                        f"{', '.join(repr('<name>' + x) for x in _LEDGER_STATE_SUFFIXES)}); rename the prompt",
                        id="prompts.ledger-state-name",
                    )
                if self._synthesis_paced:
                    check_ledger_request(check, self.ledger_consumer, synthesis, None, name="synthesis")
        retry = retry or BedrockRetry()
        if len(prompts) == 1:
            warn(
                self,
                "single-branch",
                "ParallelPrompts has one prompt; a Parallel state only saves time with two or more independent calls",
            )
        # Only names and texts move on: ids, usage and model names would cost the synthesis tokens.
        answers = {
            f"{name}.$": f"$[{index}].{'body' if isinstance(request, NativeRequest) else 'text'}"
            for index, (name, request) in enumerate(prompts.items())
        }
        # A branch that names a service tier adds {"requested", "served"} under its name in `tiers`.
        tiers = {
            f"{name}.$": f"$[{index}].{TIER_FIELD}"
            for index, (name, request) in enumerate(prompts.items())
            if isinstance(request, ConverseRequest) and request.service_tier is not None
        }
        self.parallel_state = sfn.Parallel(
            self, "Prompts", result_selector={"answers": answers, **({"tiers": tiers} if tiers else {})})
        # The branches' states live in a scope of their own, so a prompt may be named like any child of
        # this construct (StateMachine, Logs, LogsKey...). States create no resources: no logical id moves.
        branches = Construct(self, "Branches")
        for name, request in prompts.items():
            _, chain = model_call(branches, name, model=model, request=request, retry=retry, ledger=self.ledger_consumer)
            self.parallel_state.branch(chain)
        definition: sfn.IChainable = self.parallel_state
        models = [model]
        self.synthesis_task: sfn.TaskStateBase | None = None
        if synthesis is not None:
            synthesis_model = synthesis_model or model
            self.synthesis_task, chain = model_call(
                self, "Synthesis", model=synthesis_model, request=synthesis, retry=retry,
                options=TaskOptions(result_path="$.synthesis"),
                ledger=self.ledger_consumer if self._synthesis_paced else None,
            )
            definition = self.parallel_state.next(chain)
            models.append(synthesis_model)
        self.state_machine = model_state_machine(
            self,
            definition=definition,
            models=models,
            options=state_machine_options or StateMachineOptions(),
            default_timeout=cdk.Duration.minutes(15),
        )
        self.alarms = execution_alarms(self, self.state_machine, alarm_actions, what=f"ParallelPrompts {id}")
        if self.ledger_consumer is not None:
            self.ledger_consumer.grant(self.state_machine)


def _check_state_name(check: Checks, name: Any) -> None:
    if not _known_at_synth(
        check, "prompts", name,
        "a prompt's name is the name of its state and its key in the output's answers, both written at synth; "
        "use literal names (the requests may hold deploy-time values)",
    ):
        return
    if not check.text("prompt name", name, max_length=80):
        return
    check.rule(
        not any(c in name for c in _STATE_NAME_FORBIDDEN),
        f"prompt name {name!r} cannot be a Step Functions state name: use 1-80 characters without "
        "brackets, wildcards, quotes or punctuation such as : / $",
        id="prompts.invalid-state-name",
    )
    check.rule(
        name not in _PARALLEL_STATES and not name.endswith(_CALL_STATE_SUFFIXES),
        f"prompt name {name!r} is taken by ParallelPrompts' own states ({', '.join(_PARALLEL_STATES)}, and "
        f"{', '.join(repr('<name>' + x) for x in _CALL_STATE_SUFFIXES)}); rename the prompt",
        id="prompts.state-name-taken",
    )
