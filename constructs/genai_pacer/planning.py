"""Quota and capacity planning for Bedrock on-demand inference (pure Python, no CDK import).

Bedrock charges a tokens-per-minute (TPM) quota in two steps. At request start it *reserves*
input + cache writes + cache reads + max_tokens and throttles if that would exceed the quota; at
completion it *settles* the charge to input + cache writes + output x the model's burndown rate and
returns the rest (cache reads are free). Billing is a third figure: the tokens actually processed.
Every number a construct needs (MaxConcurrency, max_tokens, required TPM) is derived here so the
stacks and the tests use one arithmetic.

Burndown rates differ per model and change over time, so they are always inputs: check the model's
current rate in the Bedrock documentation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

__all__ = [
    "TokenProfile",
    "TpmPlan",
    "MaxTokensSizing",
    "RatePlan",
    "ExecutionChoice",
    "LatencyProfile",
    "LatencyDiagnosis",
    "plan_tpm",
    "size_max_tokens",
    "sustainable_rate",
    "max_concurrency",
    "as_max_concurrency",
    "choose_execution",
    "diagnose_latency",
]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _non_negative(name: str, value: float) -> None:
    _require(value >= 0, f"{name}={value!r} is negative; token counts and durations must be >= 0")


def _positive(name: str, value: float) -> None:
    _require(value > 0, f"{name}={value!r} must be > 0")


@dataclass(frozen=True)
class TokenProfile:
    """The token shape of one request, as Bedrock's quota sees it.

    input_tokens: uncached input tokens (CloudWatch InputTokenCount).
    output_tokens: generated tokens (OutputTokenCount); for planning, a typical or p99 value.
    max_tokens: the request's max_tokens; None means the caller did not set it, in which case pass
        the model's maximum output here instead: Bedrock reserves that.
    burndown: how many quota tokens one output token costs (1 for most models, 5 for older
        Anthropic Claude models, more for the newest). Must be >= 1.
    cache_write_tokens / cache_read_tokens: prompt-cache tokens (CacheWriteInputTokenCount,
        CacheReadInputTokenCount).
    """

    input_tokens: int
    output_tokens: int
    max_tokens: int
    burndown: float = 1.0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens"):
            _non_negative(name, getattr(self, name))
        _require(
            self.max_tokens >= 1,
            f"max_tokens={self.max_tokens!r} must be >= 1; pass the model's maximum output if the "
            "request leaves max_tokens unset (Bedrock reserves that)",
        )
        _require(
            self.output_tokens <= self.max_tokens,
            f"output_tokens={self.output_tokens} exceeds max_tokens={self.max_tokens}: a model never "
            "generates more than max_tokens; raise max_tokens or lower the output estimate",
        )
        _require(
            self.burndown >= 1,
            f"burndown={self.burndown!r} is below 1; output tokens cost at least one quota token each "
            "(1 for most models, 5 or more for Anthropic Claude)",
        )

    @property
    def reserved(self) -> int:
        """Quota tokens deducted when the request starts."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens + self.max_tokens

    @property
    def settled(self) -> float:
        """Quota tokens the request finally consumes once Bedrock settles it."""
        return self.input_tokens + self.cache_write_tokens + self.output_tokens * self.burndown

    @property
    def billed(self) -> int:
        """Tokens processed, which is what the bill counts (cache tokens are priced differently)."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens + self.output_tokens


@dataclass(frozen=True)
class TpmPlan:
    """The TPM a peak load needs, and whether reservations rather than settlement bind it."""

    requests_per_minute: float
    concurrency: float
    settled_tpm: float
    required_tpm: float
    reservation_peak_tpm: float
    reservation_binds: bool
    headroom: float


def plan_tpm(
    profile: TokenProfile,
    *,
    requests_per_minute: float,
    headroom: float = 0.2,
    concurrency: float | None = None,
    call_seconds: float | None = None,
) -> TpmPlan:
    """Plan TPM for a peak request rate.

    settled_tpm is requests_per_minute x settled tokens. In any one-minute window the requests in
    flight still hold their full reservation, so the window is charged about
    settled_tpm + in-window concurrency x (reserved - settled). When that exceeds settled_tpm with headroom,
    the reservation binds and required_tpm follows it instead. concurrency defaults to Little's law
    (requests_per_minute / 60 x call_seconds); with neither given it is taken as 0.
    """
    _positive("requests_per_minute", requests_per_minute)
    _require(headroom >= 0, f"headroom={headroom!r} is below 0; pass a fraction such as 0.2 for 20% spare")
    if concurrency is None:
        if call_seconds is not None:
            _non_negative("call_seconds", call_seconds)
        concurrency = requests_per_minute / 60 * (call_seconds or 0)
    _non_negative("concurrency", concurrency)
    settled_tpm = requests_per_minute * profile.settled
    with_headroom = settled_tpm * (1 + headroom)
    # Only requests that started inside the window hold a reservation in it: at most one minute's worth.
    in_window = min(concurrency, requests_per_minute)
    reservation_peak = settled_tpm + in_window * (profile.reserved - profile.settled)
    binds = reservation_peak > with_headroom
    return TpmPlan(
        requests_per_minute=requests_per_minute,
        concurrency=concurrency,
        settled_tpm=settled_tpm,
        required_tpm=max(with_headroom, reservation_peak),
        reservation_peak_tpm=reservation_peak,
        reservation_binds=binds,
        headroom=headroom,
    )


@dataclass(frozen=True)
class MaxTokensSizing:
    """A max_tokens just above the observed p99 output, and the reservation it saves per request."""

    p99_output_tokens: int
    max_tokens: int
    current_max_tokens: int | None
    reservation_saved_per_request: int


def size_max_tokens(
    p99_output_tokens: int, *, margin: float = 0.1, current_max_tokens: int | None = None
) -> MaxTokensSizing:
    """Size max_tokens at p99 output x (1 + margin), rounded up.

    A reservation uses max_tokens, so an oversized value throttles concurrent requests long before
    real consumption reaches the quota. The margin keeps the rare answer above p99 from being cut.
    """
    _positive("p99_output_tokens", p99_output_tokens)
    _require(margin >= 0, f"margin={margin!r} is below 0; max_tokens below the p99 output truncates answers")
    sized = math.ceil(round(p99_output_tokens * (1 + margin), 6))  # round: 900 x 1.1 is 990.0000000000001
    saved = 0
    if current_max_tokens is not None:
        _require(
            current_max_tokens >= p99_output_tokens,
            f"current_max_tokens={current_max_tokens} is below the p99 output ({p99_output_tokens}): "
            "more than 1% of answers are already truncated; raise max_tokens to at least "
            f"{sized}",
        )
        saved = max(current_max_tokens - sized, 0)
    return MaxTokensSizing(p99_output_tokens, sized, current_max_tokens, saved)


@dataclass(frozen=True)
class RatePlan:
    """The request rate a quota sustains and the concurrency cap that holds the load to it."""

    requests_per_minute: float
    limited_by: str
    max_concurrency: int
    call_seconds: float


def sustainable_rate(
    profile: TokenProfile,
    *,
    tpm_quota: float,
    call_seconds: float,
    rpm_quota: float | None = None,
) -> RatePlan:
    """The steady request rate a TPM (and optional RPM) quota sustains, reservations included.

    At rate r per minute, r x settled tokens settle in the window while r x min(call_seconds/60, 1)
    requests still hold (reserved - settled) extra tokens, so
    r = tpm / (settled + min(call_seconds/60, 1) x max(reserved - settled, 0)). When settlement
    exceeds the reservation (output x burndown > max_tokens) the settled charge is the binding one.
    RPM is optional: Bedrock no longer enforces it for recent models.
    """
    _positive("tpm_quota", tpm_quota)
    _positive("call_seconds", call_seconds)
    if rpm_quota is not None:
        _positive("rpm_quota", rpm_quota)
    held = max(profile.reserved - profile.settled, 0)
    per_request = profile.settled + min(call_seconds / 60, 1) * held
    rate, limited_by = tpm_quota / per_request, "tpm"
    if rpm_quota is not None and rpm_quota < rate:
        rate, limited_by = rpm_quota, "rpm"
    return RatePlan(rate, limited_by, max_concurrency(rate, call_seconds), call_seconds)


def as_max_concurrency(value: int | RatePlan) -> int:
    """The cap a construct prop means: an int as given, or a RatePlan's max_concurrency."""
    return value.max_concurrency if isinstance(value, RatePlan) else value


def max_concurrency(requests_per_minute: float, call_seconds: float) -> int:
    """MaxConcurrency that holds a load to a rate: rate x average call duration (Little's law).

    Rounded down so the cap never exceeds what the quota sustains, but never below 1.
    """
    _positive("requests_per_minute", requests_per_minute)
    _positive("call_seconds", call_seconds)
    return max(1, math.floor(requests_per_minute / 60 * call_seconds))


@dataclass(frozen=True)
class ExecutionChoice:
    """Whether a body of work belongs on batch inference or on on-demand calls, and why."""

    mode: str  # "batch" or "on-demand"
    reason: str


def choose_execution(
    *,
    deadline: timedelta,
    record_count: int,
    batch_min_records: int = 100,
    batch_turnaround: timedelta = timedelta(hours=24),
) -> ExecutionChoice:
    """Choose batch inference or on-demand calls for an offline body of work.

    Batch jobs queue and promise no per-job completion time, and need a minimum number of records
    (a per-model Service Quota, commonly 100); they also keep the volume off the on-demand quota
    interactive users share. batch_turnaround is the slack a job must be given (Default: 24 hours,
    the shortest batch job timeout).
    """
    _require(deadline > timedelta(0), f"deadline={deadline!r} must be positive")
    _positive("record_count", record_count)
    _positive("batch_min_records", batch_min_records)
    if deadline < batch_turnaround:
        return ExecutionChoice(
            "on-demand",
            f"deadline {deadline} is shorter than the batch turnaround {batch_turnaround}; batch jobs "
            "queue with no guaranteed completion time",
        )
    if record_count < batch_min_records:
        return ExecutionChoice(
            "on-demand",
            f"{record_count} records is below the batch job minimum of {batch_min_records}",
        )
    return ExecutionChoice(
        "batch",
        f"{record_count} records with {deadline} of slack: batch is cheaper and keeps the volume off "
        "the on-demand quota",
    )


@dataclass(frozen=True)
class LatencyProfile:
    """One latency reading (e.g. the p50 of a period): TTFT, end-to-end latency, output length."""

    ttft_seconds: float
    latency_seconds: float
    output_tokens: float

    def __post_init__(self) -> None:
        _non_negative("ttft_seconds", self.ttft_seconds)
        _non_negative("output_tokens", self.output_tokens)
        _require(
            self.latency_seconds > self.ttft_seconds,
            f"latency_seconds={self.latency_seconds} must exceed ttft_seconds={self.ttft_seconds}: "
            "end-to-end latency includes the time to first token",
        )

    @property
    def output_tokens_per_second(self) -> float:
        """Decode speed: output tokens over the time after the first token."""
        return self.output_tokens / (self.latency_seconds - self.ttft_seconds)


@dataclass(frozen=True)
class LatencyDiagnosis:
    """Which phase made a latency change: prefill (TTFT), decode speed, or longer answers."""

    cause: str  # "prefill", "decode", "longer-output" or "unchanged"
    before_otps: float
    after_otps: float
    explanation: str


def diagnose_latency(
    before: LatencyProfile, after: LatencyProfile, *, tolerance: float = 0.1
) -> LatencyDiagnosis:
    """Tell a prefill problem from a decode problem before touching any setting.

    Output-side settings (max_tokens, temperature) do nothing for a prefill problem and input-side
    ones nothing for decode, so the cause decides the fix. tolerance is the relative change treated
    as noise.
    """
    _require(tolerance >= 0, f"tolerance={tolerance!r} must be >= 0")
    b, a = before.output_tokens_per_second, after.output_tokens_per_second

    def grew(old: float, new: float) -> bool:
        return new > old * (1 + tolerance)

    if grew(before.ttft_seconds, after.ttft_seconds):
        cause, why = "prefill", "time to first token grew: look at prompt length and retrieval size"
    elif b > a * (1 + tolerance):
        cause, why = "decode", f"output tokens per second fell from {b:.1f} to {a:.1f}"
    elif grew(before.output_tokens, after.output_tokens):
        cause, why = (
            "longer-output",
            f"decode speed held at about {a:.1f} tokens/s; answers grew from {before.output_tokens:g} "
            f"to {after.output_tokens:g} tokens",
        )
    else:
        cause, why = "unchanged", "TTFT, decode speed and answer length are within tolerance"
    return LatencyDiagnosis(cause, b, a, why)
