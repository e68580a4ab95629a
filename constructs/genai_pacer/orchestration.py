"""Throttle-safe Step Functions: bounded Map fan-out and Parallel prompts, each call retried with jitter.

Bedrock rejects a throttled call at once rather than queuing it, so only two settings change how
often a workflow throttles: a MaxConcurrency the quota sustains, and a Retry on throttling with
exponential backoff and jitter. Every model call these constructs build gets both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct

from . import planning
from ._nag import acknowledge_wildcard_resources
from ._secure import StateMachineOptions, model_state_machine
from .models import BedrockModel

__all__ = [
    "BedrockRetry",
    "BoundedMap",
    "ParallelPrompts",
    "StateMachineOptions",
    "invoke_model_task",
    "DEFAULT_RETRY_ERRORS",
    "INLINE_MAP_LIMIT",
    "DISTRIBUTED_MAP_LIMIT",
]

INLINE_MAP_LIMIT = 40
DISTRIBUTED_MAP_LIMIT = 10_000

#: Error names a model call is retried on. The optimized bedrock:invokeModel integration reports
#: Bedrock.<Name>Exception; the AWS SDK integration for bedrock-runtime reports
#: BedrockRuntime.<Name>Exception. Both spellings are listed so either task type is covered.
DEFAULT_RETRY_ERRORS: tuple[str, ...] = tuple(
    f"{service}.{name}Exception"
    for name in ("Throttling", "ServiceUnavailable", "ModelNotReady", "InternalServer", "ModelTimeout")
    for service in ("Bedrock", "BedrockRuntime")
)


@dataclass(frozen=True)
class BedrockRetry:
    """The Retry a model-calling task needs: exponential backoff with FULL jitter, capped.

    errors: error names to retry. Default: throttling plus the transient Bedrock errors
        (DEFAULT_RETRY_ERRORS); validation and access errors are never worth retrying.
    interval: first wait. Default: 2 seconds.
    backoff_rate: growth per attempt. Default: 2.0.
    max_attempts: retries after the first call. Default: 6 (about 2 minutes of waiting at most).
    max_delay: cap on any one wait, so late retries do not sleep for minutes. Default: 30 seconds.

    FULL jitter spreads retries of calls throttled together over the whole wait, so they do not
    come back as the same burst.
    """

    errors: tuple[str, ...] = DEFAULT_RETRY_ERRORS
    interval: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(2))
    backoff_rate: float = 2.0
    max_attempts: int = 6
    max_delay: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(30))

    def __post_init__(self) -> None:
        if not self.errors:
            raise ValueError(
                "errors=() retries nothing; keep DEFAULT_RETRY_ERRORS or list the throttling errors"
            )
        if self.max_attempts < 1:
            raise ValueError(
                f"max_attempts={self.max_attempts} never retries a throttle; use 1 or more (default 6)"
            )
        if self.backoff_rate < 1:
            raise ValueError(
                f"backoff_rate={self.backoff_rate} shrinks the wait each attempt; use >= 1 (default 2.0)"
            )
        if self.max_delay.to_milliseconds() < self.interval.to_milliseconds():
            raise ValueError(
                f"max_delay={self.max_delay.to_human_string()} is shorter than interval="
                f"{self.interval.to_human_string()}; the cap must be at least the first wait"
            )

    def apply_to(self, task: sfn.TaskStateBase) -> sfn.TaskStateBase:
        """Add this Retry to a task state and return the task."""
        task.add_retry(
            errors=list(self.errors),
            interval=self.interval,
            backoff_rate=self.backoff_rate,
            max_attempts=self.max_attempts,
            max_delay=self.max_delay,
            jitter_strategy=sfn.JitterType.FULL,
        )
        return task


RequestBody = Mapping[str, Any] | sfn.TaskInput


def invoke_model_task(
    scope: Construct,
    id: str,
    *,
    model: BedrockModel,
    body: RequestBody,
    retry: BedrockRetry,
    **task_props: Any,
) -> tasks.BedrockInvokeModel:
    """A Bedrock InvokeModel task with `retry` applied; its grant covers only `model`."""
    if not isinstance(body, sfn.TaskInput):
        if not isinstance(body, Mapping) or not body:
            raise ValueError(
                f"{id}: body={body!r} is not a request; pass the model's native request as a dict, e.g. "
                "{'messages': [...], 'max_tokens': 600}, or an sfn.TaskInput"
            )
        body = sfn.TaskInput.from_object(dict(body))
    task = tasks.BedrockInvokeModel(
        scope, id, model=model.as_imodel(scope, f"{id}Model"), body=body, **task_props
    )
    retry.apply_to(task)
    return task


class BoundedMap(Construct):
    """A Map state whose MaxConcurrency the quota sustains, in a state machine of its own.

    Per item it calls `model` with `body` (JSONPath references such as `$.prompt` read the item), or
    runs your own `item_processor`; every Bedrock task in it gets `retry`.

    max_concurrency: required; an int or a `planning.RatePlan` (its max_concurrency is used). 0 is
        unbounded and rejected unless allow_unbounded=True; 1 runs every call in sequence (warning);
        inline maps allow at most 40, distributed maps 10,000.
    allow_unbounded: accept max_concurrency=0. Default: False.
    model / body: the per-item model call (both, or neither when item_processor is given).
    item_processor: your own chain per item (a distributed child). Bedrock InvokeModel tasks in it
        receive `retry`; grant any other models it calls yourself.
    retry: Default: BedrockRetry().
    mode: "inline" (items from the state input) or "distributed" (items from S3). Default: "inline".
    items_path: inline only; where the items are in the input. Default: "$.items".
    items_bucket / items_key: distributed only; the S3 object that lists the items. Required there.
    items_format: "jsonl" or "json" (an array). Default: "jsonl".
    results_bucket / results_prefix: distributed only; where Step Functions writes the results.
        Default: items_bucket, prefix "genai-pacer-results/".
    tolerated_failure_percentage: distributed only; failed items that still let the run succeed.
        Default: 0 (any failed item fails the run, so nothing is lost silently).
    batch_max_items: distributed with item_processor only; items per child execution. Default: no
        batching.
    child_execution_type: distributed only. Default: STANDARD (Express children stop after 5 minutes,
        which a throttled call retrying with backoff can exceed).
    state_machine_options: how the state machine is built (StateMachineOptions). Default: encrypted logs,
        X-Ray, STANDARD type, 24-hour timeout.

    Attributes: `map_state`, `state_machine`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        max_concurrency: int | planning.RatePlan,
        allow_unbounded: bool = False,
        model: BedrockModel | None = None,
        body: RequestBody | None = None,
        item_processor: sfn.IChainable | None = None,
        retry: BedrockRetry | None = None,
        mode: Literal["inline", "distributed"] = "inline",
        items_path: str = "$.items",
        items_bucket: s3.IBucket | None = None,
        items_key: str | None = None,
        items_format: Literal["jsonl", "json"] = "jsonl",
        results_bucket: s3.IBucket | None = None,
        results_prefix: str = "genai-pacer-results/",
        tolerated_failure_percentage: float = 0,
        batch_max_items: int | None = None,
        child_execution_type: sfn.StateMachineType = sfn.StateMachineType.STANDARD,
        state_machine_options: StateMachineOptions | None = None,
    ) -> None:
        super().__init__(scope, id)
        # Without this flag aws-cdk-lib silently drops result_writer_v2 and nothing is written to S3.
        # Set on this construct only, before any child exists, so the user's app is untouched.
        self.node.set_context("@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2", True)
        retry = retry or BedrockRetry()
        cap = planning.as_max_concurrency(max_concurrency)
        self._validate(cap, allow_unbounded, mode)
        if (model is None) == (item_processor is None):
            raise ValueError(
                "BoundedMap needs exactly one of model (with body) for a model call per item, or item_processor "
                "for your own chain"
            )
        if model is not None and body is None:
            raise ValueError("model is set but body is not; pass the request body template for each item")

        if model is not None:
            if batch_max_items is not None:
                raise ValueError(
                    f"batch_max_items={batch_max_items} hands each child a list of items, which a per-item request "
                    "body cannot read; drop it, or pass an item_processor that handles $.Items"
                )
            processor: sfn.IChainable = invoke_model_task(
                self, "InvokeModel", model=model, body=body, retry=retry
            )
            models = [model]
        else:
            processor = item_processor
            models = []
            for state in sfn.State.find_reachable_states(item_processor.start_state):
                if isinstance(state, tasks.BedrockInvokeModel):
                    retry.apply_to(state)

        if mode == "inline":
            for name, value in (
                ("items_bucket", items_bucket),
                ("items_key", items_key),
                ("results_bucket", results_bucket),
                ("batch_max_items", batch_max_items),
            ):
                if value is not None:
                    raise ValueError(
                        f"{name} applies to mode='distributed' only; an inline Map reads {items_path}"
                    )
            self.map_state: sfn.Map | sfn.DistributedMap = sfn.Map(
                self, "Map", max_concurrency=cap, items_path=items_path
            )
            self.map_state.item_processor(processor)
        else:
            if items_bucket is None or not items_key:
                raise ValueError("mode='distributed' reads items from S3: pass items_bucket and items_key")
            if not 0 <= tolerated_failure_percentage <= 100:
                raise ValueError(
                    f"tolerated_failure_percentage={tolerated_failure_percentage} must be within 0..100"
                )
            if items_format not in ("jsonl", "json"):
                raise ValueError(f"items_format={items_format!r} must be 'jsonl' or 'json'")
            reader_cls = sfn.S3JsonLItemReader if items_format == "jsonl" else sfn.S3JsonItemReader
            self.map_state = sfn.DistributedMap(
                self,
                "Map",
                max_concurrency=cap,
                item_reader=reader_cls(bucket=items_bucket, key=items_key),
                result_writer_v2=sfn.ResultWriterV2(
                    bucket=results_bucket or items_bucket, prefix=results_prefix
                ),
                tolerated_failure_percentage=tolerated_failure_percentage,
                item_batcher=sfn.ItemBatcher(max_items_per_batch=batch_max_items)
                if batch_max_items
                else None,
                map_execution_type=child_execution_type,
            )
            self.map_state.item_processor(processor)

        self.state_machine = model_state_machine(
            self,
            definition=self.map_state,
            models=models,
            options=state_machine_options or StateMachineOptions(),
            default_timeout=cdk.Duration.hours(24),
        )
        if mode == "distributed" and (state_machine_options is None or state_machine_options.role is None):
            self._acknowledge_distributed_grants()

    def _acknowledge_distributed_grants(self) -> None:
        """A distributed Map must start child executions with generated names and read and write S3
        objects whose names it generates; those grants cannot name each object."""
        machine = self.state_machine
        child_policy = machine.node.try_find_child("DistributedMapPolicy")
        if child_policy is not None:
            acknowledge_wildcard_resources(
                child_policy,
                matches=lambda arn: ":execution:" in arn,
                reason="a distributed Map starts, describes and stops child executions whose names Step Functions "
                "generates; the grant is scoped to this state machine's executions",
            )
        acknowledge_wildcard_resources(
            machine.role.node.find_child("DefaultPolicy"),
            matches=lambda arn: ":s3:::" in arn and arn.endswith("/*"),
            reason="the Map reads the items object and writes result objects whose keys Step Functions generates "
            "under the results prefix of the configured buckets only",
        )

    def _validate(self, cap: int, allow_unbounded: bool, mode: str) -> None:
        if mode not in ("inline", "distributed"):
            raise ValueError(f"mode={mode!r} must be 'inline' or 'distributed'")
        if cdk.Token.is_unresolved(cap):
            return
        hint = "pass a positive cap, e.g. planning.sustainable_rate(...).max_concurrency"
        if cap < 0:
            raise ValueError(f"max_concurrency={cap} is negative; {hint}")
        if cap == 0 and not allow_unbounded:
            raise ValueError(
                f"max_concurrency=0 leaves the Map unbounded, the usual cause of throttling bursts; {hint} "
                "(or allow_unbounded=True if a downstream limit really bounds it)"
            )
        if mode == "inline" and cap > INLINE_MAP_LIMIT:
            raise ValueError(
                f"max_concurrency={cap} exceeds the inline Map limit of {INLINE_MAP_LIMIT} concurrent iterations; "
                "use mode='distributed' (items from S3, up to 10,000) or lower the cap"
            )
        if cap > DISTRIBUTED_MAP_LIMIT:
            raise ValueError(
                f"max_concurrency={cap} exceeds the distributed Map limit of {DISTRIBUTED_MAP_LIMIT}; lower the cap"
            )
        if cap == 1:
            cdk.Annotations.of(self).add_warning_v2(
                "genai-pacer:map-sequential",
                "max_concurrency=1 runs every call in sequence; independent calls finish sooner side by side "
                "(size the cap with genai_pacer.planning)",
            )


class ParallelPrompts(Construct):
    """Independent prompts as branches of one Parallel state, then an optional synthesis call.

    Run side by side, four 5-second prompts take about 5 seconds instead of 20. Each branch returns
    {"prompt": <name>, "response": <model response body>}; the Parallel state's output is the list
    of those in `prompts` order, which is what `synthesis` receives as its input ($[0].response...).

    prompts: branch name -> request body (the model's native request). At least one.
    model: the model every branch calls.
    synthesis: request body of a final call that runs after every branch. Default: none.
    synthesis_model: Default: `model`.
    retry: Default: BedrockRetry().
    state_machine_options: how the state machine is built (StateMachineOptions). Default: encrypted logs,
        X-Ray, STANDARD type, 15-minute timeout.

    Attributes: `parallel_state`, `synthesis_task` (or None), `state_machine`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        prompts: Mapping[str, RequestBody],
        model: BedrockModel,
        synthesis: RequestBody | None = None,
        synthesis_model: BedrockModel | None = None,
        retry: BedrockRetry | None = None,
        state_machine_options: StateMachineOptions | None = None,
    ) -> None:
        super().__init__(scope, id)
        retry = retry or BedrockRetry()
        if not prompts:
            raise ValueError("prompts is empty; pass at least one branch name -> request body")
        if len(prompts) == 1:
            cdk.Annotations.of(self).add_warning_v2(
                "genai-pacer:single-branch",
                "ParallelPrompts has one prompt; a Parallel state only saves time with two or more independent calls",
            )
        self.parallel_state = sfn.Parallel(self, "Prompts")
        for name, body in prompts.items():
            _check_state_name(name)
            self.parallel_state.branch(
                invoke_model_task(
                    self,
                    name,
                    model=model,
                    body=body,
                    retry=retry,
                    result_selector={"prompt": name, "response.$": "$.Body"},
                )
            )
        models: Sequence[BedrockModel] = [model]
        definition: sfn.IChainable = self.parallel_state
        self.synthesis_task: tasks.BedrockInvokeModel | None = None
        if synthesis is not None:
            synthesis_model = synthesis_model or model
            self.synthesis_task = invoke_model_task(
                self,
                "Synthesis",
                model=synthesis_model,
                body=synthesis,
                retry=retry,
                result_selector={"response.$": "$.Body"},
            )
            definition = self.parallel_state.next(self.synthesis_task)
            models = [model, synthesis_model]
        self.state_machine = model_state_machine(
            self,
            definition=definition,
            models=models,
            options=state_machine_options or StateMachineOptions(),
            default_timeout=cdk.Duration.minutes(15),
        )


def _check_state_name(name: str) -> None:
    if not name or len(name) > 80 or any(c in name for c in '<>{}[]?*"#%\\^|~`$&,;:/'):
        raise ValueError(
            f"prompt name {name!r} cannot be a Step Functions state name: use 1-80 characters without "
            "brackets, wildcards, quotes or punctuation such as : / $"
        )
