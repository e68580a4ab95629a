"""Metrics every genai-pacer handler emits, in CloudWatch embedded metric format (EMF).

One JSON line on stdout becomes metrics through CloudWatch Logs, with no API call on the request
path. The namespace, metric names and dimension names live here and nowhere else: the handlers
write with them and the constructs' `metric_*` methods and `LatencyDashboard` read them (genai_pacer
loads this file by path, without boto3), so a dashboard can never look for a name no handler
writes. Standard library only.

Per model call, `emit_call` writes what AWS/Bedrock cannot say: the reservation the call held
(input + cache + max_tokens; AWS's EstimatedTPMQuotaUsage leaves it out), the latency mode that
actually served it, and TTFT and output tokens per second of this caller's streaming calls only
(AWS/Bedrock's ModelId dimension mixes every caller and API of the model).

Inside a live experiment (pacer_runtime.experiment) every per-call, error and outcome metric is
published twice in the same line: under the model-level dimension sets, so the model's alarms and
dashboards still see every call, and under the same sets plus Experiment and Variant (CloudWatch
treats each dimension set as a separate metric). Experiment rides along with Variant because
variant names such as "control" repeat across experiments.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NAMESPACE",
    "MODEL_DIMENSION",
    "FUNCTION_DIMENSION",
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "CACHE_READ_TOKENS",
    "CACHE_WRITE_TOKENS",
    "RESERVED_TOKENS",
    "LATENCY_MS",
    "TIME_TO_FIRST_TOKEN_MS",
    "OUTPUT_TOKENS_PER_SECOND",
    "SERVED_OPTIMIZED",
    "SERVED_STANDARD",
    "OPTIMIZED_SERVED_STANDARD",
    "SERVED_BELOW_REQUESTED_TIER",
    "SERVED_TIER_DIMENSION",
    "TIER_RANK",
    "THROTTLES",
    "ANSWER_HITS",
    "ANSWER_MISSES",
    "ANSWER_STALE",
    "PRECOMPUTE_FAILED_KEYS",
    "BATCH_RECORDS_LOADED",
    "BATCH_RECORDS_FAILED",
    "CALL_ERRORS",
    "INVALID_STORED_ITEMS",
    "LEDGER_FALLBACKS",
    "LEDGER_DIMENSION",
    "emit_ledger_fallback",
    "EXPERIMENT_DIMENSION",
    "VARIANT_DIMENSION",
    "OUTCOMES",
    "UNITS",
    "LATENCY_MODES",
    "SERVICE_TIERS",
    "DEFAULT_TIER",
    "SERVICE_TIER_MEMBER",
    "SERVICE_TIER_HEADER",
    "CallMetrics",
    "call_metrics",
    "emf_line",
    "emit",
    "emit_call",
    "emit_call_error",
    "emit_outcome",
    "emit_throttle",
    "lambda_dimensions",
]

NAMESPACE = "GenaiPacer"

#: Every per-call metric carries the model id; the Lambda function name is a second dimension set,
#: so a construct can read its own worker's calls while a dashboard sums all callers of a model.
MODEL_DIMENSION = "ModelId"
FUNCTION_DIMENSION = "FunctionName"
#: The service tier that served a call (a value of SERVICE_TIERS, from the response): per-call latency,
#: TTFT and OTPS are published per ModelId and ServedTier too, so a dashboard compares the tiers.
SERVED_TIER_DIMENSION = "ServedTier"
#: A call inside a live experiment: which experiment and which of its variants served it.
EXPERIMENT_DIMENSION = "Experiment"
VARIANT_DIMENSION = "Variant"

INPUT_TOKENS = "InputTokens"
OUTPUT_TOKENS = "OutputTokens"
CACHE_READ_TOKENS = "CacheReadInputTokens"
CACHE_WRITE_TOKENS = "CacheWriteInputTokens"
#: Quota tokens held when the call started: input + cache read + cache write + max_tokens.
RESERVED_TOKENS = "ReservedTokens"
#: End-to-end, as the caller measured it (SDK retries included).
LATENCY_MS = "LatencyMs"
#: Streaming calls only: time to the first text, and decode speed after it.
TIME_TO_FIRST_TOKEN_MS = "TimeToFirstTokenMs"
OUTPUT_TOKENS_PER_SECOND = "OutputTokensPerSecond"
#: The latency mode that served each call (1 or 0 per call, so Sum counts calls).
SERVED_OPTIMIZED = "ServedOptimized"
SERVED_STANDARD = "ServedStandard"
#: A call that asked for latency-optimized inference and was served at standard (its quota ran out).
OPTIMIZED_SERVED_STANDARD = "OptimizedServedStandard"
#: A call that asked for a service tier and was served at a lower one (priority or reserved served at
#: default or flex, default at flex), 1 or 0 per call that named a tier and whose response named the
#: tier that served it: Sum counts such calls, Average is their share.
SERVED_BELOW_REQUESTED_TIER = "ServedBelowRequestedTier"
#: Model calls that failed with a throttling error after the SDK's own retries.
THROTTLES = "Throttles"
#: AnswerRouter: a fresh stored answer served, no stored answer, a stored answer older than max-age.
ANSWER_HITS = "AnswerHits"
ANSWER_MISSES = "AnswerMisses"
ANSWER_STALE = "AnswerStale"
#: AnswerRouter: answers with a 5xx status, 1 per answer, except AnswerPending (a miss waiting for another
#: request's call to the same key: the coalescing working as designed, answered 503 with Retry-After).
ANSWER_SERVER_ERRORS = "AnswerServerErrors"
#: The error code of an answer that is not a server error of the router's, though its status is 5xx.
ANSWER_PENDING = "AnswerPending"
#: Pre-computation: keys whose answer could not be generated in a run.
PRECOMPUTE_FAILED_KEYS = "PrecomputeFailedKeys"
#: Batch inference loading: records written to the answer store, records the job reported as errors.
BATCH_RECORDS_LOADED = "BatchRecordsLoaded"
BATCH_RECORDS_FAILED = "BatchRecordsFailed"
#: Model calls that failed for any reason after the SDK's retries (throttles included), 1 per call;
#: with LatencyMs's SampleCount (the calls that succeeded) it gives an error rate.
CALL_ERRORS = "CallErrors"
#: Answer-store items readers found invalid (pacer_runtime.answers.check_item) or put_answer replaced as
#: invalid, 1 per item met; the rule broken is the log line's InvalidItemRule field, never a dimension.
INVALID_STORED_ITEMS = "InvalidStoredItems"
#: QuotaPacer: times a process switched to its static share because the quota's shared ledger could not
#: be used (DynamoDB kept throttling or refused), 1 per switch, by the ledger's id (LEDGER_DIMENSION).
LEDGER_FALLBACKS = "LedgerFallbacks"
LEDGER_DIMENSION = "LedgerId"
#: Outcome events of a live experiment, by the name record_outcome takes -> metric name (Sum counts events).
OUTCOMES: dict[str, str] = {
    "thumbs_up": "ThumbsUp",
    "thumbs_down": "ThumbsDown",
    "escalation": "Escalations",
    "resolution": "Resolutions",
}

UNITS: dict[str, str] = {
    INPUT_TOKENS: "Count",
    OUTPUT_TOKENS: "Count",
    CACHE_READ_TOKENS: "Count",
    CACHE_WRITE_TOKENS: "Count",
    RESERVED_TOKENS: "Count",
    LATENCY_MS: "Milliseconds",
    TIME_TO_FIRST_TOKEN_MS: "Milliseconds",
    OUTPUT_TOKENS_PER_SECOND: "Count/Second",
    SERVED_OPTIMIZED: "Count",
    SERVED_STANDARD: "Count",
    OPTIMIZED_SERVED_STANDARD: "Count",
    SERVED_BELOW_REQUESTED_TIER: "Count",
    THROTTLES: "Count",
    ANSWER_HITS: "Count",
    ANSWER_MISSES: "Count",
    ANSWER_STALE: "Count",
    ANSWER_SERVER_ERRORS: "Count",
    PRECOMPUTE_FAILED_KEYS: "Count",
    BATCH_RECORDS_LOADED: "Count",
    BATCH_RECORDS_FAILED: "Count",
    CALL_ERRORS: "Count",
    INVALID_STORED_ITEMS: "Count",
    LEDGER_FALLBACKS: "Count",
    **{name: "Count" for name in OUTCOMES.values()},
}

LATENCY_MODES = ("standard", "optimized")

#: Bedrock's service tiers, botocore 1.44.8's bedrock-runtime ServiceTierType enum (the API reference:
#: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ServiceTier.html), checked by
#: tests/test_aws_facts_bedrock.py. Standard is spelled `default`, and a call that names no tier is
#: served at it (https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html).
SERVICE_TIERS = ("priority", "default", "flex", "reserved")
DEFAULT_TIER = "default"
#: Where a call names its tier and a response names the one that served it (botocore 1.44.8):
#: Converse and ConverseStream take `serviceTier: {"type": <tier>}` and return it in the response and
#: in the stream's metadata event; InvokeModel and InvokeModelWithResponseStream take and return the
#: tier in this header (boto3's `serviceTier=` argument).
SERVICE_TIER_MEMBER = "serviceTier"
SERVICE_TIER_HEADER = "X-Amzn-Bedrock-Service-Tier"
#: How far ahead each tier is served, for "served below the requested tier". The service tiers page
#: says Priority is served ahead of Standard and Flex, that Flex trades processing time for a discount,
#: and that Reserved overflows to Standard; it ranks Reserved against Priority nowhere, so both rank
#: first here (either served at default is below what was asked).
TIER_RANK = {"priority": 3, "reserved": 3, "default": 2, "flex": 1}


def emf_line(
    values: Mapping[str, float],
    dimensions: Mapping[str, str],
    *,
    timestamp_ms: int | None = None,
    dimension_sets: Sequence[Sequence[str]] | None = None,
    properties: Mapping[str, Any] | None = None,
) -> str:
    """One EMF log line publishing `values` (metric name -> value) under `dimensions`.

    dimension_sets: which combinations of the dimensions to publish, e.g. [["ModelId"],
    ["FunctionName", "ModelId"]]; each set is a separate CloudWatch metric. Default: one set of all.
    properties: extra fields for CloudWatch Logs Insights (not metrics), e.g. the served latency mode.
    """
    unknown = sorted(set(values) - set(UNITS))
    if unknown:
        raise ValueError(f"unknown metric names {unknown}; add them to pacer_runtime.metrics.UNITS")
    bad = sorted(
        name for name, value in values.items()
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    )
    if bad:
        raise ValueError(f"metrics {bad} are not finite numbers; CloudWatch drops the whole line, so nothing would be recorded")
    sets = [sorted(dimensions)] if dimension_sets is None else [list(s) for s in dimension_sets]
    missing = sorted({name for s in sets for name in s} - set(dimensions))
    if missing:
        raise ValueError(f"dimension sets name {missing}, which have no value in dimensions")
    clashes = sorted(set(properties or {}) & (set(values) | set(dimensions) | {"_aws"}))
    if clashes:
        raise ValueError(f"properties {clashes} would overwrite a metric or dimension of the same name")
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": sets,
                        "Metrics": [{"Name": name, "Unit": UNITS[name]} for name in values],
                    }
                ],
            },
            **(properties or {}),
            **dimensions,
            **values,
        }
    )


def emit(values: Mapping[str, float], dimensions: Mapping[str, str], **options: Any) -> None:
    """Print one EMF line (Lambda sends stdout to CloudWatch Logs); options as in emf_line."""
    print(emf_line(values, dimensions, **options))


def emit_ledger_fallback(ledger_id: str) -> None:
    """LedgerFallbacks = 1 by LedgerId, and inside Lambda by FunctionName and LedgerId too: CloudWatch keeps
    each dimension set as a metric of its own, so the LedgerId-only one, which the state machines publish as
    well (step_functions.ledger_steps), is every consumer's fallbacks in one series (QuotaLedger's
    metric_fallbacks), and the other names the function."""
    dimensions = {LEDGER_DIMENSION: ledger_id, **lambda_dimensions()}
    sets = [[LEDGER_DIMENSION]] + ([sorted(dimensions)] if len(dimensions) > 1 else [])
    emit({LEDGER_FALLBACKS: 1}, dimensions, dimension_sets=sets)


def lambda_dimensions() -> dict[str, str]:
    """{"FunctionName": <this function>} inside Lambda (from AWS_LAMBDA_FUNCTION_NAME), else {}."""
    name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    return {FUNCTION_DIMENSION: name} if name else {}


@dataclass(frozen=True)
class CallMetrics:
    """The per-call figures emit_call publishes, computed from a ConverseResult and its request."""

    model_id: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    max_tokens: int | None
    latency_ms: float
    first_token_ms: float | None
    output_tokens_per_second: float | None
    requested_latency: str
    served_latency: str
    requested_tier: str | None = None  # the request's serviceTier.type; None: it named none (served at default)
    served_tier: str | None = None  # the response's; None: it named none

    @property
    def served_below_requested_tier(self) -> bool | None:
        """Served at a lower tier than asked (Reserved overflowing to default, Priority served at
        default); None when the call named no tier or the response named none (nothing to compare)."""
        if self.requested_tier is None or self.served_tier not in TIER_RANK:
            return None
        return TIER_RANK[self.served_tier] < TIER_RANK[self.requested_tier]

    @property
    def reserved_tokens(self) -> int | None:
        """Quota tokens Bedrock held when the call started; None when max_tokens is unknown (the
        request left it unset, so Bedrock reserved the model's maximum, which only the caller knows)."""
        if self.max_tokens is None:
            return None
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens + self.max_tokens

    @property
    def fell_back(self) -> bool:
        """Asked for optimized latency, served at standard (optimized capacity ran out; no error)."""
        return self.requested_latency == "optimized" and self.served_latency == "standard"

    def values(self) -> dict[str, float]:
        """Metric name -> value, in a stable order: tokens first, then latency and mode."""
        values: dict[str, float] = {
            INPUT_TOKENS: self.input_tokens,
            OUTPUT_TOKENS: self.output_tokens,
            CACHE_READ_TOKENS: self.cache_read_tokens,
            CACHE_WRITE_TOKENS: self.cache_write_tokens,
        }
        if self.reserved_tokens is not None:
            values[RESERVED_TOKENS] = self.reserved_tokens
        values[LATENCY_MS] = self.latency_ms
        if self.first_token_ms is not None:
            values[TIME_TO_FIRST_TOKEN_MS] = self.first_token_ms
        if self.output_tokens_per_second is not None:
            values[OUTPUT_TOKENS_PER_SECOND] = round(self.output_tokens_per_second, 2)
        values[SERVED_OPTIMIZED] = int(self.served_latency == "optimized")
        values[SERVED_STANDARD] = int(self.served_latency == "standard")
        values[OPTIMIZED_SERVED_STANDARD] = int(self.fell_back)
        below = self.served_below_requested_tier
        if below is not None:
            values[SERVED_BELOW_REQUESTED_TIER] = int(below)
        return values


def _whole(name: str, value: Any, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}={value!r} must be a whole number of tokens >= 0")
    return value


def call_metrics(
    result: Any,
    *,
    model_id: str,
    request: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
) -> CallMetrics:
    """The figures of one call from its ConverseResult (any object with the same attributes).

    max_tokens and the requested latency mode are read from the Converse `request` (its
    inferenceConfig.maxTokens and performanceConfig.latency); pass max_tokens yourself when the
    request is not at hand. Without either, the reservation is left out (see CallMetrics.reserved_tokens).
    """
    if not isinstance(model_id, str) or not model_id:
        raise ValueError(f"model_id={model_id!r} must be the non-empty id the call passed as modelId")
    request = request or {}
    if max_tokens is None:
        max_tokens = (request.get("inferenceConfig") or {}).get("maxTokens")
    requested = (request.get("performanceConfig") or {}).get("latency", "standard")
    served = getattr(result, "served_latency", "standard") or "standard"
    for name, mode in (("requested latency", requested), ("served latency", served)):
        if mode not in LATENCY_MODES:
            raise ValueError(f"{name}={mode!r} must be 'standard' or 'optimized'")
    requested_tier = (request.get(SERVICE_TIER_MEMBER) or {}).get("type")
    served_tier = getattr(result, "served_tier", None)
    if requested_tier is not None and requested_tier not in SERVICE_TIERS:
        raise ValueError(f"requested tier={requested_tier!r} must be one of {', '.join(SERVICE_TIERS)}")
    if served_tier is not None and not (isinstance(served_tier, str) and served_tier.isascii()
                                        and served_tier.isidentifier() and len(served_tier) <= 32):
        raise ValueError(f"served tier={served_tier!r} is not a tier name")
    # A tier AWS adds later is recorded as it is (a new ServedTier value), never refused: the call
    # succeeded, and its metrics must not fail it. It is compared with nothing (served_below: None).
    latency_ms = result.latency_ms
    if isinstance(latency_ms, bool) or not isinstance(latency_ms, int | float) or not latency_ms >= 0:
        raise ValueError(f"latency_ms={latency_ms!r} must be a number of milliseconds >= 0")
    return CallMetrics(
        model_id=model_id,
        input_tokens=_whole("input_tokens", result.input_tokens),  # type: ignore[arg-type]
        output_tokens=_whole("output_tokens", result.output_tokens),  # type: ignore[arg-type]
        cache_read_tokens=_whole("cache_read_tokens", result.cache_read_tokens),  # type: ignore[arg-type]
        cache_write_tokens=_whole("cache_write_tokens", result.cache_write_tokens),  # type: ignore[arg-type]
        max_tokens=_whole("max_tokens", max_tokens, optional=True),
        latency_ms=float(latency_ms),
        first_token_ms=getattr(result, "first_token_ms", None),
        output_tokens_per_second=getattr(result, "output_tokens_per_second", None),
        requested_latency=requested,
        served_latency=served,
        requested_tier=requested_tier,
        served_tier=served_tier,
    )


def _dimension_sets(dimensions: Mapping[str, str], variant: Mapping[str, str] | None = None) -> list[list[str]]:
    """ModelId alone (every caller of the model), and ModelId with each set of extra dimensions;
    inside an experiment, each of those sets again with Experiment and Variant added."""
    extra = sorted(name for name in dimensions if name not in (MODEL_DIMENSION, *(variant or {})))
    base = [[MODEL_DIMENSION]] + ([[MODEL_DIMENSION, *extra]] if extra else [])
    if not variant:
        return base
    return base + [[*names, EXPERIMENT_DIMENSION, VARIANT_DIMENSION] for names in base]


def _with_variant(dimensions: Mapping[str, str] | None, model_id: str, variant: Mapping[str, str] | None) -> dict[str, str]:
    """All dimension values of one line; `variant` must be exactly {Experiment: ..., Variant: ...}."""
    if variant is not None:
        if (not isinstance(variant, Mapping) or set(variant) != {EXPERIMENT_DIMENSION, VARIANT_DIMENSION}
                or not all(isinstance(v, str) and v for v in variant.values())):
            raise ValueError(
                f"variant={variant!r} must be {{{EXPERIMENT_DIMENSION!r}: <experiment>, {VARIANT_DIMENSION!r}: <variant>}} "
                "with non-empty names (pacer_runtime.experiment.variant_dimensions builds it)"
            )
        clash = set(dimensions or {}) & set(variant)
        if clash:
            raise ValueError(f"dimensions {sorted(clash)} are set by variant=; pass them there only")
    return {**(dimensions or {}), **(variant or {}), MODEL_DIMENSION: model_id}


def emit_call(
    result: Any,
    *,
    model_id: str,
    request: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    dimensions: Mapping[str, str] | None = None,
    variant: Mapping[str, str] | None = None,
    properties: Mapping[str, Any] | None = None,
) -> CallMetrics:
    """Print one EMF line with the call's tokens, reservation, latency, TTFT, OTPS and served mode.

    Published per ModelId and, when `dimensions` adds any (e.g. lambda_dimensions()), per ModelId
    with those too. `variant` ({"Experiment": ..., "Variant": ...}) publishes every set again with
    those two added. `properties` are extra log fields (not metrics). Returns the figures it published.
    """
    figures = call_metrics(result, model_id=model_id, request=request, max_tokens=max_tokens)
    all_dimensions = _with_variant(dimensions, model_id, variant)
    sets = _dimension_sets(all_dimensions, variant)
    tiers: dict[str, Any] = {"RequestedTier": figures.requested_tier or DEFAULT_TIER}
    if figures.served_tier is not None:
        tiers["ServedTier"] = figures.served_tier
    emit(
        figures.values(),
        all_dimensions,
        dimension_sets=sets,
        properties={**(properties or {}), "RequestedLatency": figures.requested_latency,
                    "ServedLatency": figures.served_latency, **tiers},
    )
    if figures.served_tier is not None:
        # The speed of each served tier, in a second line: a dimension set lists the same metrics as the
        # line's others, and only these three compare tiers.
        per_tier = {name: value for name, value in figures.values().items()
                    if name in (LATENCY_MS, TIME_TO_FIRST_TOKEN_MS, OUTPUT_TOKENS_PER_SECOND)}
        emit(per_tier, {MODEL_DIMENSION: model_id, SERVED_TIER_DIMENSION: figures.served_tier},
             dimension_sets=[[MODEL_DIMENSION, SERVED_TIER_DIMENSION]])
    return figures


def emit_throttle(
    model_id: str, *, count: int = 1, dimensions: Mapping[str, str] | None = None, variant: Mapping[str, str] | None = None
) -> None:
    """Print one EMF line counting calls that failed throttled (after the SDK's retries)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} must be a whole number of throttled calls >= 1")
    _check_model_id(model_id)
    all_dimensions = _with_variant(dimensions, model_id, variant)
    emit({THROTTLES: count}, all_dimensions, dimension_sets=_dimension_sets(all_dimensions, variant))


def emit_call_error(
    model_id: str,
    *,
    error_code: str,
    throttled: bool = False,
    dimensions: Mapping[str, str] | None = None,
    variant: Mapping[str, str] | None = None,
    properties: Mapping[str, Any] | None = None,
) -> None:
    """Print one EMF line counting one failed call (CallErrors, plus Throttles when `throttled`).

    error_code (e.g. "ModelTimeoutException") goes in the log fields, not in a dimension, so an
    unexpected code cannot multiply the metrics.
    """
    _check_model_id(model_id)
    if not isinstance(error_code, str) or not error_code:
        raise ValueError(f"error_code={error_code!r} must name the error, e.g. 'ModelTimeoutException'")
    all_dimensions = _with_variant(dimensions, model_id, variant)
    values: dict[str, float] = {CALL_ERRORS: 1}
    if throttled:
        values[THROTTLES] = 1
    emit(values, all_dimensions, dimension_sets=_dimension_sets(all_dimensions, variant),
         properties={**(properties or {}), "ErrorCode": error_code})


def emit_outcome(
    outcome: str,
    *,
    model_id: str,
    value: int = 1,
    dimensions: Mapping[str, str] | None = None,
    variant: Mapping[str, str] | None = None,
    properties: Mapping[str, Any] | None = None,
) -> None:
    """Print one EMF line counting an outcome event (thumbs_up, thumbs_down, escalation, resolution)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r} must be one of {sorted(OUTCOMES)}")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"value={value!r} must be a whole number of events >= 1")
    _check_model_id(model_id)
    all_dimensions = _with_variant(dimensions, model_id, variant)
    emit({OUTCOMES[outcome]: value}, all_dimensions, dimension_sets=_dimension_sets(all_dimensions, variant),
         properties={**(properties or {}), "Outcome": outcome})


def _check_model_id(model_id: Any) -> None:
    if not isinstance(model_id, str) or not model_id:
        raise ValueError(f"model_id={model_id!r} must be the non-empty id the call passed as modelId")
