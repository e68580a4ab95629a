"""Model calls as Step Functions tasks: one request shape for every model, a Retry on throttling,
and a result narrowed to what the next state needs.

Converse (the AWS SDK integration `aws-sdk:bedrockruntime:converse`) is the default request form:
one body works for Anthropic, Nova, Llama and the rest, sampling goes in InferenceConfig and
model-specific fields in AdditionalModelRequestFields. A task's result is narrowed to the answer
text, the stop reason and the token usage: a whole response per item is what pushes a Map past
Step Functions' 256 KiB state limit. Native InvokeModel bodies stay available as `NativeRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import aws_cdk as cdk
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct

from .._internal.checks import Checks, Default, in_unit, is_token, resolved, token_kind, warn
from .._internal.runtime_constants import metrics_constants
from ..models import INVOKE_ACTIONS, BedrockModel, as_bedrock_model
from .ledger_steps import (
    ENVELOPE_ANSWER,
    ENVELOPE_CALL,
    ENVELOPE_ERROR,
    ENVELOPE_INPUT,
    FALLBACK_CALL_SUFFIX,
    LedgerCall,
    LedgerConsumer,
    check_ledger_request,
)

__all__ = [
    "DEFAULT_RETRY_ERRORS",
    "CONVERSE_ERRORS",
    "LARGEST_DOCUMENTED_MAX_OUTPUT_TOKENS",
    "BedrockRetry",
    "ConverseRequest",
    "NativeRequest",
    "ModelRequest",
    "SERVICE_TIERS",
    "ServiceTier",
    "TaskOptions",
    "model_call",
    "ANSWER_BYTES_OVERHEAD",
]

#: Bedrock errors worth retrying: throttling and the transient ones. Each is an error of both
#: Converse and InvokeModel in botocore's bedrock-runtime model (checked by
#: tests/test_aws_facts_bedrock.py); validation, access and ModelError are never retried, nor
#: ServiceQuotaExceeded (a daily quota does not come back within a retry's wait).
RETRIED_BEDROCK_ERRORS = ("ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException",
                          "InternalServerException", "ModelTimeoutException")
#: How Step Functions names a task's error, by integration. The AWS SDK integration (Converse,
#: `aws-sdk:bedrockruntime:converse`) reports ServiceName.ErrorName, both PascalCase, with the
#: Exception suffix: https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html
#: (so "BedrockRuntime."). The optimized `bedrock:invokeModel` integration's prefix is not
#: documented (https://docs.aws.amazon.com/step-functions/latest/dg/connect-bedrock.html lists no
#: errors): "Bedrock." is the optimized integrations' usual service prefix. Retrying both prefixes
#: on every task makes a wrong guess harmless; BedrockRetry(errors=...) overrides the list.
ERROR_PREFIXES = ("Bedrock", "BedrockRuntime")
#: Error names a model call is retried on: every retried error under both prefixes.
DEFAULT_RETRY_ERRORS: tuple[str, ...] = tuple(
    f"{service}.{name}" for name in RETRIED_BEDROCK_ERRORS for service in ERROR_PREFIXES
)

#: What a Converse task (the SDK integration) can raise: BedrockRuntime.<Error> for each error of
#: Converse in botocore's bedrock-runtime model (its serviceId without spaces is the prefix; both checked
#: by tests/test_aws_facts_bedrock.py), and Step Functions' own States.* names (States.ALL,
#: States.TaskFailed and States.Timeout match any task), which ErrorEquals compares case-sensitively.
CONVERSE_ERROR_PREFIX = "BedrockRuntime."
STATES_ERROR_PREFIX = "States."
CONVERSE_ERRORS = ("AccessDeniedException", "InternalServerException", "ModelErrorException", "ModelNotReadyException",
                   "ModelTimeoutException", "ResourceNotFoundException", "ServiceUnavailableException",
                   "ThrottlingException", "ValidationException")
#: States.* names that match every error a task raises (States.TaskFailed: all but States.Timeout).
_MATCH_ANY = ("States.ALL", "States.TaskFailed")

#: Upper bounds of a Retrier's MaxAttempts and MaxDelaySeconds. No AWS page found states them (the
#: ASL schema cfn-lint ships gives only minimums); they are far above any useful value, and a value
#: beyond the service's real limit fails CreateStateMachine at deploy, never silently.
_MAX_RETRIES = 99_999_999
_MAX_DELAY_SECONDS = 31_622_400

#: Converse inferenceConfig ranges and performanceConfig latency modes: botocore's bedrock-runtime
#: model (InferenceConfiguration temperature/topP 0..1, maxTokens >= 1; PerformanceConfigLatency),
#: checked by tests/test_aws_facts_bedrock.py.
TEMPERATURE_RANGE = (0.0, 1.0)
TOP_P_RANGE = (0.0, 1.0)
MIN_MAX_TOKENS = 1
#: The largest output limit any model on Bedrock documents that could be sourced: 128K tokens
#: ("Max output", Claude Opus and Sonnet from 4.6 on; 128,000 in the API's own refusal):
#: https://platform.claude.com/docs/en/about-claude/models/overview. There is no Bedrock-wide maximum:
#: botocore's maxTokens has only a minimum, and each model refuses more than its own limit with a
#: ValidationException on every call. Limits grow with new models, so a larger max_tokens is warned
#: at synth, not refused (a refusal would block the next model until a release).
LARGEST_DOCUMENTED_MAX_OUTPUT_TOKENS = 128_000
LATENCY_MODES = ("standard", "optimized")
#: Bedrock's service tiers (botocore 1.44.8's ServiceTierType; the one list is the runtime's,
#: lambda/pacer_runtime/metrics.py, checked against botocore by tests/test_aws_facts_bedrock.py).
SERVICE_TIERS: tuple[str, ...] = tuple(metrics_constants().SERVICE_TIERS)
#: ASSUMPTION (deploy-only, docs/verified.md, "AWS facts no primary source confirms"): that Step
#: Functions' AWS SDK integration `aws-sdk:bedrockruntime:converse` passes `ServiceTier` on to Converse. Its
#: Parameters mirror the API (serviceTier: {"type": ...} becomes ServiceTier: {"Type": ...}), but no
#: AWS page found says which SDK version the integration is built from, and Step Functions says new
#: parameters of an already supported action "might not be immediately available" (API action support
#: is released quarterly: https://docs.aws.amazon.com/step-functions/latest/dg/change-log-supported-services.html,
#: read 2026-12-05). If it does not, the task
#: fails on its first call with an error naming the field; the state machine is never silently
#: served at another tier.
SFN_CONVERSE_PASSES_SERVICE_TIER = "assumed"

#: Where a ledger-paced call's selection keeps Converse's whole Usage until it is settled.
LEDGER_USAGE = "ledgerUsage"
#: The tier that served a call, from the Converse response: ConverseResponse's serviceTier (a ServiceTier,
#: whose type is the tier), optional in botocore 1.44.8's bedrock-runtime model (tests/step_functions/
#: test_served_tier.py checks the member), so PascalCase ServiceTier.Type in the SDK integration's result. Selected through a
#: filter on the response object, which makes the path indefinite: Step Functions' JSONPath (Jayway
#: JsonPath) answers a list, [] when the response names no tier, where the definite $.ServiceTier.Type
#: would fail the task (States.Runtime) after the call was served and billed.
SERVED_TIER_PATH = "$[?(@.ServiceTier)].ServiceTier.Type"
#: Where a tiered call's selection keeps that list, and the field of the narrowed answer that holds
#: {"requested": <the request's tier>, "served": <the response's tier, absent when it names none>}.
SERVED_TIERS = "servedTiers"
TIER_FIELD = "serviceTier"
#: Bytes the tiers add to a tiered call's answer: ,"serviceTier":{"requested":"priority","served":"priority"}.
TIER_BYTES_OVERHEAD = 64
#: The states a tiered call adds after its name (ParallelPrompts keeps prompt names clear of them).
TIER_STATE_SUFFIXES = (" served tier?", " served tier", " served tier unreported")
#: Bytes a narrowed answer carries besides its text: field names, stop reason, usage.
ANSWER_BYTES_OVERHEAD = 120


@dataclass(frozen=True)
class BedrockRetry:
    """The Retry a model-calling task needs: exponential backoff with FULL jitter, capped.

    errors: error names to retry; one name or a list. Default: throttling plus the transient
        Bedrock errors (DEFAULT_RETRY_ERRORS); validation and access errors are never worth retrying.
    interval: first wait, whole seconds. Default: 2 seconds.
    backoff_rate: growth per retry, >= 1. Default: 2.0.
    max_retries: retries after the first call (Step Functions' MaxAttempts). Default: 6 (about
        2 minutes of waiting at most).
    max_delay: cap on any one wait, so late retries do not sleep for minutes. Default: 30 seconds.

    FULL jitter spreads retries of calls throttled together over the whole wait, so they do not
    come back as the same burst.
    """

    errors: str | Sequence[str] = DEFAULT_RETRY_ERRORS
    # Built when a BedrockRetry is (no jsii object at import); help() shows the code, not '<factory>'.
    interval: cdk.Duration = cast(cdk.Duration, Default("cdk.Duration.seconds(2)", lambda: cdk.Duration.seconds(2)))
    backoff_rate: float = 2.0
    max_retries: int = 6
    max_delay: cdk.Duration = cast(cdk.Duration, Default("cdk.Duration.seconds(30)", lambda: cdk.Duration.seconds(30)))

    def __post_init__(self) -> None:
        for name in ("interval", "max_delay"):
            object.__setattr__(self, name, resolved(getattr(self, name)))
        if isinstance(self.errors, str):  # one name, not its characters
            object.__setattr__(self, "errors", (self.errors,))
        with Checks("BedrockRetry") as check:
            if definition_list(check, "errors", self.errors) and check.each("errors", self.errors, lambda n, v: check.text(n, v)):
                object.__setattr__(self, "errors", tuple(self.errors))
                check.rule(
                    bool(self.errors), "errors=() retries nothing; keep DEFAULT_RETRY_ERRORS or list the throttling errors", id="errors.empty"
                )
            check.integer(
                "max_retries", self.max_retries, minimum=1, maximum=_MAX_RETRIES,
                fix="a throttled call needs retries to succeed; the default is 6",
            )
            check.number(
                "backoff_rate", self.backoff_rate, minimum=1,
                fix="a rate below 1 shrinks the wait each retry; the default is 2.0",
            )
            interval_ok = check.duration(
                "interval", self.interval, minimum=cdk.Duration.seconds(1),
                maximum=cdk.Duration.seconds(_MAX_RETRIES), fix="Step Functions waits whole seconds, at least 1",
            )
            delay_ok = check.duration(
                "max_delay", self.max_delay, minimum=cdk.Duration.seconds(1),
                maximum=cdk.Duration.seconds(_MAX_DELAY_SECONDS), fix="Step Functions caps MaxDelaySeconds at 366 days",
            )
            in_unit(check, "interval", self.interval, "seconds", why="a Retrier's IntervalSeconds is")
            in_unit(check, "max_delay", self.max_delay, "seconds", why="a Retrier's MaxDelaySeconds is")
            if interval_ok:
                check.rule(
                    self.interval.to_seconds(integral=False) == int(self.interval.to_seconds(integral=False)),
                    f"interval={self.interval.to_human_string()} is not whole seconds; Step Functions' "
                    "IntervalSeconds is an integer",
                    id="interval.not-whole-seconds",
                )
            if interval_ok and delay_ok:
                check.rule(
                    self.max_delay.to_seconds(integral=False) >= self.interval.to_seconds(integral=False),
                    f"max_delay={self.max_delay.to_human_string()} is shorter than interval="
                    f"{self.interval.to_human_string()}; the cap must be at least the first wait",
                    id="max_delay.below-interval",
                )

    def apply_to(self, task: sfn.TaskStateBase) -> sfn.TaskStateBase:
        """Add this Retry to a task state and return the task."""
        task.add_retry(
            errors=list(self.errors),
            interval=self.interval,
            backoff_rate=self.backoff_rate,
            max_attempts=self.max_retries,
            max_delay=self.max_delay,
            jitter_strategy=sfn.JitterType.FULL,
        )
        return task


def definition_list(check: Checks, name: str, values: Any) -> bool:
    """False (recorded) for a deploy-time list (a CommaDelimitedList's value_as_list) where a list
    goes into a state machine definition: aws-cdk-lib can write one there only through a
    Lambda-backed custom resource it adds to the stack (Custom::AWSCDKCfnJsonStringify, with an AWS
    managed policy and a Node.js function cdk-nag reports), core/lib/private/cloudformation-lang.ts
    renderIntrinsic's STRING_LIST case. A list of deploy-time strings needs no such resource."""
    if isinstance(values, list | tuple) and any(isinstance(v, str) and "#{Token[" in v for v in values):
        return check.fail(
            f"{name} is a deploy-time list, which aws-cdk-lib writes into a state machine definition only "
            "through a Lambda-backed custom resource it adds to your stack; pass a list whose items are "
            f"deploy-time strings instead, e.g. {name}=[cdk.Fn.select(0, param.value_as_list), ...]", id=f"{name}.deploy-time-list"
        )
    return True


def has_retry(task: sfn.TaskStateBase) -> bool:
    """Whether a task already carries a Retry (a user's own, which we must not stack another on)."""
    return bool(task.to_state_json().get("Retry"))


_PASCAL_HINT = (
    "Step Functions' SDK integration takes Converse fields in PascalCase: "
    "{'Role': 'user', 'Content': [{'Text': ...}]}"
)


ServiceTier = Literal["priority", "default", "flex", "reserved"]
#: The environment variable that gives a genai-pacer handler (the queue worker, the answer router)
#: its construct's tier; the handler refuses to start with any other value.
SERVICE_TIER_VARIABLE = "SERVICE_TIER"

_TIER_FIX = ("'priority' (the user's path), 'default' (standard), 'flex' (background work) or 'reserved' (a "
             "Reserved tier reservation of this model), or a deploy-time string")


def check_service_tier(check: Checks, name: str, value: Any) -> bool:
    """A service tier: one of SERVICE_TIERS, or a deploy-time string (it flows into the request as is)."""
    if value is None:
        return False
    if is_token(value) and not isinstance(value, str):
        return check.fail(f"{name} is a deploy-time {token_kind(value)}; pass {_TIER_FIX}", id=f"{name}.deploy-time-kind")
    fix = "Bedrock spells standard 'default'" if value == "standard" else f"pass {_TIER_FIX}"
    return check.one_of(name, value, SERVICE_TIERS, fix=fix)


@dataclass(frozen=True)
class ConverseRequest:
    """A Converse request (the default): one body for every model family.

    prompt: the user message text; a literal or a JsonPath expression such as
        sfn.JsonPath.string_at("$.prompt") or sfn.JsonPath.format("Summarize {}", ...).
    messages: instead of prompt, Converse messages in PascalCase as the SDK integration takes them
        ({"Role": "user", "Content": [{"Text": ...}]}).
    system: a system prompt. Default: none.
    max_tokens: required; size it from the p99 answer (planning.size_max_tokens): Bedrock reserves
        it against the quota at the start of every call. The limit is the model's own; above
        LARGEST_DOCUMENTED_MAX_OUTPUT_TOKENS (128,000) the task that sends it warns at synth.
    temperature / top_p / stop_sequences: Default: the model's.
    additional_fields: model-specific fields (e.g. Anthropic's top_k), sent as
        AdditionalModelRequestFields. Default: none.
    latency: "optimized" requests latency-optimized inference. Default: standard.
    service_tier: the Bedrock service tier to ask for: "priority" (ahead of default under load, at a
        premium: the user's path), "default" (standard), "flex" (after default, at a discount:
        background work) or "reserved" (a Reserved tier reservation of the model; beyond it Bedrock
        serves at default). Sent as ServiceTier, beside PerformanceConfig (both may be sent). Which
        tiers a model takes depends on the model and the Region: an unsupported tier fails every call
        (https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html). Whether
        Step Functions' Converse integration passes it on is confirmed only by a deploy
        (SFN_CONVERSE_PASSES_SERVICE_TIER). The task's answer records the tier asked for and the
        tier that served the call (serviceTier: {"requested", "served"}; TaskOptions). The role that runs
        the task is denied every other tier (BedrockModel.tier_fence), a deploy-time tier included.
        Default: none (Bedrock serves at default).
    """

    prompt: str | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: Sequence[str] | None = None
    additional_fields: Mapping[str, Any] | None = None
    latency: Literal["standard", "optimized"] | None = None
    service_tier: ServiceTier | None = None

    def __post_init__(self) -> None:
        with Checks("ConverseRequest") as check:
            check_service_tier(check, "service_tier", self.service_tier)
            check.rule(
                (self.prompt is None) != (self.messages is None),
                "pass exactly one of prompt (the user message text) or messages (Converse messages)",
                id="prompt.one-of-prompt-or-messages",
            )
            check.text("prompt", self.prompt, optional=True)
            if token_kind(self.messages) is not None:
                check.fail(
                    "messages is a deploy-time value, but Converse messages are a structure of roles and content "
                    "blocks built at synth; pass a list of dicts (their texts may be deploy-time strings)", id="messages.deploy-time"
                )
            elif self.messages is not None and check.each(
                "messages", self.messages, lambda n, v: check.instance(n, v, Mapping, "a dict " + _PASCAL_HINT)
            ):
                check.rule(bool(self.messages), "messages is empty; pass at least one user message", id="messages.empty")
                for i, message in enumerate(self.messages):
                    if "role" in message or "content" in message or not {"Role", "Content"} <= set(message):
                        check.fail(f"messages[{i}] has keys {sorted(message)}; {_PASCAL_HINT}", id="messages.keys")
            check.text("system", self.system, optional=True)
            check.integer(
                "max_tokens", self.max_tokens, minimum=MIN_MAX_TOKENS,
                fix="size it from the p99 answer with planning.size_max_tokens: Bedrock reserves max_tokens "
                "against the quota, and an unset value reserves the model's maximum",
            )
            check.number("temperature", self.temperature, minimum=TEMPERATURE_RANGE[0], maximum=TEMPERATURE_RANGE[1],
                         optional=True)
            check.number("top_p", self.top_p, minimum=TOP_P_RANGE[0], maximum=TOP_P_RANGE[1], optional=True)
            if self.stop_sequences is not None and definition_list(check, "stop_sequences", self.stop_sequences):
                check.each("stop_sequences", self.stop_sequences, lambda n, v: check.text(n, v))
            if self.additional_fields is not None:
                check.instance(
                    "additional_fields", self.additional_fields, Mapping, "a dict of model-specific fields"
                )
            if self.latency is not None:
                if is_token(self.latency) and not isinstance(self.latency, str):
                    check.fail(f"latency is a deploy-time {token_kind(self.latency)}; pass 'standard' or 'optimized', "
                               "or a deploy-time string", id="latency.deploy-time-kind")
                else:
                    check.one_of("latency", self.latency, LATENCY_MODES)

    def parameters(self, model_id: str) -> dict[str, Any]:
        """The SDK integration's Parameters (PascalCase, as Step Functions passes them to Converse)."""
        messages = (
            [dict(m) for m in self.messages]
            if self.messages is not None
            else [{"Role": "user", "Content": [{"Text": self.prompt}]}]
        )
        inference: dict[str, Any] = {"MaxTokens": self.max_tokens}
        for key, value in (
            ("Temperature", self.temperature),
            ("TopP", self.top_p),
            ("StopSequences", list(self.stop_sequences) if self.stop_sequences is not None else None),
        ):
            if value is not None:
                inference[key] = value
        parameters: dict[str, Any] = {"ModelId": model_id, "Messages": messages, "InferenceConfig": inference}
        if self.system is not None:
            parameters["System"] = [{"Text": self.system}]
        if self.additional_fields:
            parameters["AdditionalModelRequestFields"] = dict(self.additional_fields)
        if self.latency is not None:
            parameters["PerformanceConfig"] = {"Latency": self.latency}
        if self.service_tier is not None:
            parameters["ServiceTier"] = {"Type": self.service_tier}
        return parameters


@dataclass(frozen=True)
class NativeRequest:
    """A model-native InvokeModel body (e.g. Anthropic Messages), for features Converse lacks.

    body: the request as a dict (JsonPath references allowed) or an sfn.TaskInput.
    max_tokens: the body's max_tokens, when you want the Map size estimate to use it. Default: none.
    service_tier: refused. InvokeModel takes its tier in a header (X-Amzn-Bedrock-Service-Tier,
        botocore 1.44.8's InvokeModel serviceTier), and aws-cdk-lib's BedrockInvokeModel task (the
        optimized `bedrock:invokeModel` integration NativeRequest builds) has no field for it
        (accept, body, content_type, guardrail, input, output, trace_enabled in 2.275): a tier put
        in the body is not a tier. Use ConverseRequest(service_tier=...). Default: none.
    """

    body: Mapping[str, Any] | sfn.TaskInput
    max_tokens: int | None = None
    service_tier: ServiceTier | None = None

    def __post_init__(self) -> None:
        with Checks("NativeRequest") as check:
            if self.service_tier is not None:
                check.fail(
                    f"service_tier={_show_tier(self.service_tier)} cannot be sent: InvokeModel takes the tier in the "
                    "X-Amzn-Bedrock-Service-Tier header, and the optimized bedrock:invokeModel task (aws-cdk-lib's "
                    "BedrockInvokeModel) has no field for it; "
                    "use ConverseRequest(prompt=..., max_tokens=..., service_tier=...), whose Converse call carries it", id="service_tier.invoke-model"
                )
            if check.instance("body", self.body, (Mapping, sfn.TaskInput), "the model's native request as a dict, or an sfn.TaskInput"):
                check.rule(
                    isinstance(self.body, sfn.TaskInput) or bool(self.body),
                    "body={} is empty; pass the model's native request, e.g. {'messages': [...], 'max_tokens': 600}",
                    id="body.empty",
                )
            if is_token(self.max_tokens):
                check.fail(
                    f"max_tokens is a deploy-time {token_kind(self.max_tokens)}, but it is read only at synth, to estimate a Map's output "
                    "size (the body carries what the model gets); put the deploy-time value in body and leave "
                    "max_tokens out", id="max_tokens.deploy-time-kind"
                )
            else:
                check.integer("max_tokens", self.max_tokens, minimum=1, optional=True)


ModelRequest = ConverseRequest | NativeRequest


def _show_tier(value: Any) -> str:
    return f"<deploy-time {token_kind(value)}>" if is_token(value) else repr(value)


@dataclass(frozen=True)
class TaskOptions:
    """Settings of the model-call task itself, so you need no item processor of your own for them.

    result_selector: your own selection from the raw response (Converse: PascalCase, e.g.
        {"answer.$": "$.Output.Message.Content[0].Text"}). Default: text (first text block), stop
        reason and token usage, and, for a request that names a service tier, serviceTier:
        {"requested": <its tier>, "served": <the tier the response names>} ("served" absent when the
        response names none).
    result_path: where the selected result goes in the state, e.g. "$.answer" to keep the input
        beside it. Default: "$" (the result replaces the input).
    timeout: the task's timeout. Default: none (the state machine's).
    heartbeat: Default: none.
    """

    result_selector: Mapping[str, Any] | None = None
    result_path: str | None = None
    timeout: cdk.Duration | None = None
    heartbeat: cdk.Duration | None = None

    def __post_init__(self) -> None:
        with Checks("TaskOptions") as check:
            check.instance("result_selector", self.result_selector, Mapping, "a dict of selections", optional=True)
            if check.text("result_path", self.result_path, optional=True):
                check.rule(
                    str(self.result_path).startswith("$"),
                    f"result_path={self.result_path!r} is not a reference path; use '$' or '$.field'",
                    id="result_path.not-reference-path",
                )
            durations = [
                check.duration(
                    name, getattr(self, name), minimum=cdk.Duration.seconds(1),
                    maximum=cdk.Duration.days(365), optional=True,
                )
                for name in ("timeout", "heartbeat")
            ]
            for name in ("timeout", "heartbeat"):
                in_unit(check, name, getattr(self, name), "seconds", why=f"a task's {name.capitalize()}Seconds is")
            if all(durations) and self.timeout is not None and self.heartbeat is not None:
                check.rule(
                    self.heartbeat.to_seconds(integral=False) < self.timeout.to_seconds(integral=False),
                    f"heartbeat={self.heartbeat.to_human_string()} is not shorter than timeout="
                    f"{self.timeout.to_human_string()}; Step Functions requires HeartbeatSeconds < TimeoutSeconds",
                    id="heartbeat.not-below-timeout",
                )


def model_call(
    scope: Construct,
    id: str,
    *,
    model: BedrockModel,
    request: ModelRequest,
    retry: BedrockRetry,
    options: TaskOptions | None = None,
    result_extra: Mapping[str, Any] | None = None,
    ledger: LedgerConsumer | None = None,
) -> tuple[sfn.TaskStateBase, sfn.IChainable]:
    """The task that calls `model` with `request`, `retry` applied, its result narrowed.

    Returns (task, chain): the task itself and what to put in a definition. With the default
    selection of a Converse call, the chain picks the first text block (a reasoning block can come
    first) in two small states after the task. `result_extra` adds constant fields to the answer
    (e.g. the branch name). The task grants only `model`'s invoke ARN; the state machine adds the
    Regions an inference profile routes to.

    `ledger`: the call reserves before and settles after in the shared quota ledger (ledger_steps;
    the caller checked the request with check_ledger_request); the chain then starts with the
    reservation, and a failed call returns its hold before it fails.
    """
    options = options or TaskOptions()
    model = as_bedrock_model(model)
    with Checks(f"model_task {id!r}", scope=scope) as check:
        check.instance("model", model, BedrockModel, "a BedrockModel, e.g. BedrockModel.from_id('amazon.nova-lite-v1:0')")
        check.instance(
            "request", request, (ConverseRequest, NativeRequest),
            "ConverseRequest(prompt=..., max_tokens=...) or NativeRequest(body={...}); a plain dict is "
            "ambiguous: wrap a native body in NativeRequest",
        )
        check.instance("retry", retry, BedrockRetry, "a BedrockRetry", optional=True)
        check.instance("options", options, TaskOptions, "TaskOptions(...)")
        if isinstance(request, ConverseRequest) and isinstance(retry, BedrockRetry):
            _check_converse_retry(check, scope, retry)
        if isinstance(request, ConverseRequest):
            _warn_above_documented_output(scope, request.max_tokens)
        check_ledger_request(check, ledger, request, options.result_selector)
    extra = dict(result_extra or {})
    path = options.result_path or "$"
    # With a ledger the call works in an envelope (ledger_steps.ENVELOPE): the item as `input`, the
    # hold's slot, the call's selection, the charge; the answer goes back where `path` says.
    source = ENVELOPE_CALL if ledger is not None else path
    common: dict[str, Any] = {
        "result_path": options.result_path if ledger is None else ENVELOPE_CALL,
        "input_path": ENVELOPE_INPUT if ledger is not None else None,
        "task_timeout": sfn.Timeout.duration(options.timeout) if options.timeout else None,
        "heartbeat_timeout": sfn.Timeout.duration(options.heartbeat) if options.heartbeat else None,
    }
    task: sfn.TaskStateBase
    if isinstance(request, NativeRequest):
        body = request.body if isinstance(request.body, sfn.TaskInput) else sfn.TaskInput.from_object(dict(request.body))
        task = tasks.BedrockInvokeModel(
            scope, id, model=model.as_imodel(scope, f"{id}:model"), body=body,
            result_selector=dict(options.result_selector) if options.result_selector else {"body.$": "$.Body", **extra},
            **common,
        )
        retry.apply_to(task)
        return task, task
    selected = options.result_selector is not None

    def converse(name: str) -> tasks.CallAwsService:
        """The Converse task under `name` (the call, or with a ledger also its fallback: the same call)."""
        converse_task = tasks.CallAwsService(
            scope,
            name,
            service="bedrockruntime",
            action="converse",
            # The SDK integration would derive "bedrockruntime:converse", which is no IAM action.
            iam_action=INVOKE_ACTIONS[0],
            iam_resources=[model.invoke_arn(scope)],
            # A tier given at synth: the role running the task is denied the others (BedrockModel.tier_fence).
            additional_iam_statements=[fence] if (
                request.service_tier is not None and (fence := model.tier_fence(scope, request.service_tier)) is not None
            ) else None,
            parameters=request.parameters(model.model_id),
            result_selector=dict(options.result_selector)
            if options.result_selector is not None
            else {
                "texts.$": "$.Output.Message.Content[?(@.Text)].Text",
                "stopReason.$": "$.StopReason",
                "usage": {"inputTokens.$": "$.Usage.InputTokens", "outputTokens.$": "$.Usage.OutputTokens"},
                # the settlement's input (Converse's whole Usage: cache writes are optional in it)
                **({LEDGER_USAGE + ".$": "$.Usage"} if ledger is not None else {}),
                **({SERVED_TIERS + ".$": SERVED_TIER_PATH} if request.service_tier is not None else {}),
            },
            **common,
        )
        retry.apply_to(converse_task)
        return converse_task

    task = converse(id)
    if selected:
        return task, task
    # Without a ledger the answer replaces the selection in place; with one it goes from the envelope
    # to `path` of the item (ledger_steps.LedgerCall.place).
    placed = ledger is not None and path != "$"
    target = ENVELOPE_ANSWER if placed else path
    answer = {"stopReason.$": f"{_join(source, 'stopReason')}", "usage.$": f"{_join(source, 'usage')}", **extra}
    if request.service_tier is not None:
        answer[TIER_FIELD + ".$"] = _join(source, TIER_FIELD)
    first_text = sfn.Pass(
        scope, f"{id} answer",
        parameters={"text.$": f"States.ArrayGetItem({_join(source, 'texts')}, 0)", **answer},
        result_path=target,
    )
    no_text = sfn.Pass(scope, f"{id} no text", parameters={"text": "", **answer}, result_path=target)
    pick = (
        sfn.Choice(scope, f"{id} has text?")
        .when(sfn.Condition.is_present(_join(source, "texts[0]")), first_text)
        .otherwise(no_text)
    )
    # A tiered call records the tier it asked for beside the tier that served it.
    head: sfn.IChainable = pick if request.service_tier is None else served_tier_states(
        scope, id, source, request.service_tier, pick)
    if ledger is None:
        if head is pick:
            return task, task.next(pick.afterwards())
        task.next(head)
        answered = pick.afterwards()
        return task, sfn.Chain.custom(task, answered.end_states, answered)
    # ledger_steps: slot, reserve, the call (a failure releases, then fails as before), charge, settle
    call = LedgerCall(ledger, scope, id, int(request.max_tokens))  # type: ignore[arg-type]
    failed = sfn.Fail(scope, f"{id} failed", error_path=f"{ENVELOPE_ERROR}.Error", cause_path=f"{ENVELOPE_ERROR}.Cause")
    release = call.release()
    release.add_catch(failed, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
    release.next(failed)
    task.add_catch(release, errors=["States.ALL"], result_path=ENVELOPE_ERROR)
    settle = call.settle()
    # A slot that left the window (ConditionalCheckFailed), or DynamoDB failing past its Retry: the
    # answer is paid for and goes on; the hold then counts until its window passes (never less).
    settle.add_catch(head, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
    settle.next(head)
    task.next(call.charge(_join(source, LEDGER_USAGE), settle))
    # DynamoDB failing the reservation past its tries: the same call without the ledger, after the floor's
    # wait (ledger_steps, "When DynamoDB fails"); nothing was held, so nothing to settle or release
    fallback = call.fallback(converse(f"{id}{FALLBACK_CALL_SUFFIX}") if ledger.falls_back else None,
                             failed=failed, error_path=ENVELOPE_ERROR, then=head)
    # a refusal waits and tries again in a new slot; one still refused after the ledger's retries fails the
    # call as before (the same Fail, nothing held, so nothing to release)
    slot, reserve = call.admission(failed, ENVELOPE_ERROR, fallback)
    reserve.next(task)
    answered = pick.afterwards()
    if placed:
        answered = answered.next(call.place(path))
    return task, sfn.Chain.custom(slot, answered.end_states, answered)


def served_tier_states(scope: Construct, id: str, source: str, requested: Any, then: sfn.IChainable) -> sfn.Choice:
    """`<source>.serviceTier` = {"requested": the request's tier, "served": the response's} (no "served" when
    the response names none), from the selection's SERVED_TIERS list, then `then`. A deploy-time tier is
    written into the definition as it is sent."""
    target = _join(source, TIER_FIELD)
    served = sfn.Pass(
        scope, f"{id}{TIER_STATE_SUFFIXES[1]}",
        parameters={"requested": requested, "served.$": f"States.ArrayGetItem({_join(source, SERVED_TIERS)}, 0)"},
        result_path=target,
    )
    unreported = sfn.Pass(scope, f"{id}{TIER_STATE_SUFFIXES[2]}", parameters={"requested": requested}, result_path=target)
    served.next(then)
    unreported.next(then)
    return (
        sfn.Choice(scope, f"{id}{TIER_STATE_SUFFIXES[0]}")
        .when(sfn.Condition.is_present(_join(source, f"{SERVED_TIERS}[0]")), served)
        .otherwise(unreported)
    )


def _warn_above_documented_output(scope: Construct, max_tokens: Any) -> None:
    """A max_tokens above every documented model output limit fails every call (or, were a model to
    allow it, reserves that much quota per call); deploy-time values are skipped."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        return
    if max_tokens > LARGEST_DOCUMENTED_MAX_OUTPUT_TOKENS:
        warn(
            scope,
            "max-tokens-above-model-limits",
            f"max_tokens={max_tokens:,} is above {LARGEST_DOCUMENTED_MAX_OUTPUT_TOKENS:,}, the largest output limit any "
            "Bedrock model documents (each model has its own, see its model card): a model refuses a larger maxTokens "
            "with a ValidationException on every call, and Bedrock reserves max_tokens against the quota on each "
            "one; size it from the p99 answer with planning.size_max_tokens",
        )


def _check_converse_retry(check: Checks, scope: Construct, retry: BedrockRetry) -> None:
    """A Retry whose error names a Converse task can never raise retries nothing, silently.

    Refused when no name can match: the Retry would be a no-op and every throttle would fail the call,
    which nobody means. Warned when some names cannot match and their BedrockRuntime. twin is not listed
    either: the list may be shared with an optimized bedrock:invokeModel task, whose prefix no AWS page
    confirms (so a Bedrock. name is never refused there, nor blamed here when its twin is listed, as in
    DEFAULT_RETRY_ERRORS). Deploy-time names are skipped: their value is unknown at synth.
    """
    names = [n for n in retry.errors if isinstance(n, str) and not is_token(n)]
    if len(names) < len(retry.errors) or any(n in _MATCH_ANY for n in names):
        return
    never = [n for n in names if not n.startswith((CONVERSE_ERROR_PREFIX, STATES_ERROR_PREFIX))]
    twins = {n: CONVERSE_ERROR_PREFIX + n.split(".", 1)[-1] for n in never}
    suggested = sorted({t for t in twins.values() if t.removeprefix(CONVERSE_ERROR_PREFIX) in CONVERSE_ERRORS})
    raised = ", ".join(CONVERSE_ERROR_PREFIX + e for e in CONVERSE_ERRORS)
    why = (f"a Converse task (the SDK integration aws-sdk:bedrockruntime:converse) raises {raised}, and Step "
           "Functions' own States.ALL, States.TaskFailed and States.Timeout")
    fix = f"list {', '.join(suggested)}" if suggested else f"list names it raises, e.g. {CONVERSE_ERROR_PREFIX}ThrottlingException"
    if len(never) == len(names):
        check.fail(f"retry.errors={names} can never match: {why}; this Retry would retry nothing and every throttle "
                   f"would fail the call: {fix}, or keep DEFAULT_RETRY_ERRORS", id="retry.errors.never-match")
        return
    unmatched = [n for n in never if twins[n] not in names]
    if unmatched:
        warn(
            scope,
            "retry-never-matches",
            f"retry.errors names {', '.join(unmatched)}, which a Converse task never raises: {why}; "
            f"{fix.replace('list ', 'add ', 1)} (the other names still apply)",
        )


def _join(path: str, field_name: str) -> str:
    return f"$.{field_name}" if path == "$" else f"{path}.{field_name}"
