"""Quota and capacity planning for Bedrock on-demand inference (pure Python, no CDK import).

Bedrock charges a tokens-per-minute (TPM) quota in two steps. At request start it *reserves*
input + cache writes + cache reads + max_tokens and throttles if that would exceed the quota; at
completion it *settles* the charge to input + cache writes + output x the model's burndown rate and
returns the rest (cache reads are free). Billing is a third figure: the tokens actually processed.
Every number a construct needs (MaxConcurrency, max_tokens, required TPM) is derived here so the
stacks and the tests use one arithmetic.

Burndown rates differ per model and change over time, so they are always inputs: check the model's
current rate in the Bedrock documentation.

Bedrock's quotas for the bedrock-runtime endpoint (QUOTAS_DOC): one tokens-per-minute quota per
model (on-demand and cross-Region calls each have theirs), a per-model daily token quota (by
default the TPM quota x 1,440) and a cross-model daily cap per account and Region. Requests per
minute are no longer enforced there (RPM_DOC): rpm_quota arguments are optional and legacy, kept
for accounts or tooling that still track an RPM figure. `plan_daily_tokens` checks a day's
schedule against both daily quotas.

Every function and value object checks all its inputs at once (genai_pacer._checks): one
InvalidPropsError (a ValueError and a TypeError) lists each bad input with its value, the rule and
the fix. The rules, so a plan is never built on a value that cannot be right:

- Numbers are finite ints or floats. A bool is not a number; an unresolved CDK token is refused
  (a plan needs the value at synth time).
- Counts of tokens, records and calls are whole numbers: an int, or a float without a fractional
  part (900.0 read from a CloudWatch statistic), stored as an int. 1.5 tokens is refused: round a
  mean, ceil a percentile. LatencyProfile.output_tokens is a reading (a p50 over a period) and may
  be fractional.
- The bounds below (MAX_REQUEST_TOKENS, MAX_BURNDOWN, ...) keep every result finite, so no
  accepted input yields inf, NaN or an OverflowError, and they catch unit mistakes (milliseconds
  passed as seconds, 20 passed for a 20% headroom).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .._internal.checks import Checks, is_token

# Capacity arithmetic for self-hosted endpoints lives in its own module; planning is the one place
# users look for the numbers, so it re-exports it.
from ..endpoints.capacity import (
    ConcurrencyTarget,
    LeadTime,
    PeakCapacity,
    capacity_for_peak,
    concurrent_requests,
    lead_time,
    target_concurrency,
)

__all__ = [
    "ConcurrencyTarget",
    "LeadTime",
    "PeakCapacity",
    "capacity_for_peak",
    "concurrent_requests",
    "lead_time",
    "target_concurrency",
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
    "sustainable_mantle_rate",
    "one_call_tpm",
    "max_concurrency",
    "as_max_concurrency",
    "choose_execution",
    "diagnose_latency",
    "DailyLoad",
    "DailyPlan",
    "plan_daily_tokens",
    "ReservedPlan",
    "plan_reserved",
]

#: Bedrock's quotas for the bedrock-runtime endpoint (the TPM, daily and cross-model daily quotas).
QUOTAS_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html"
#: "Quotas for the bedrock-mantle endpoint" (OpenAI Responses / Chat Completions and Anthropic
#: Messages APIs): per model and Region, input tokens per minute (input + max_tokens, or the model's
#: maximum when max_tokens is unset, checked at admission; cached reads do not count) and output
#: tokens per minute (counted as the model generates); no RPM quota, and no daily quota listed. The
#: stored copies searched were the page's translations (ja_jp, fr_fr, de_de, it_it, each saying the
#: English page prevails); what Bedrock does once the output quota is spent was cut off in them, and
#: the page says nothing of burndown there: sustainable_mantle_rate counts output 1:1.
MANTLE_QUOTAS_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-mantle.html"
#: "How tokens are counted in Amazon Bedrock": the burndown rate converts output tokens into quota
#: usage; the page lists the models whose rate is 5x ("1 output token consumes 5 tokens from your
#: quotas"), every other model counting output 1:1.
BURNDOWN_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-token-burndown.html"
#: Burndown rates a model has: 1 and 5 from BURNDOWN_DOC; 10 and 15 for the newest models, as the
#: project's domain notes (shared/reference/genai-performance-notes.txt) give them. A quota declared
#: with any other rate is warned about at synth (ModelQuota), not refused, since AWS may publish more.
PUBLISHED_BURNDOWN_RATES = (1, 5, 10, 15)
#: Requests per minute on bedrock-runtime are legacy. The English page (primary; each translation
#: says the English version prevails in a conflict) says inference there "is governed by per-model
#: token-based quotas" and lists only token quotas: cross-Region and on-demand InvokeModel tokens per
#: minute, model invocation max tokens per day and cross-model max tokens per day, no RPM row. (The
#: ko_kr machine translation still lists an RPM row for some models; commit c7d083c followed it.)
#: The planner still takes an RPM figure for accounts or tooling that still track one, never needs it,
#: and names it legacy wherever it binds.
RPM_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html"
RPM_RULE = ("RPM is legacy: Bedrock no longer enforces requests-per-minute quotas on the bedrock-runtime endpoint, "
            f"whose quotas are token-based; throttling follows the tokens-per-minute and daily token quotas ({RPM_DOC})")
#: The default per-model daily token quota is the TPM quota x 24 x 60 ("Model invocation max tokens
#: per day for ${model}", QUOTAS_DOC); new accounts may get less.
MINUTES_PER_DAY = 24 * 60


# Bounds. They keep every result finite (no inf, NaN or OverflowError from any accepted input) and
# catch unit mistakes; each is far beyond what a real workload needs.
MAX_REQUEST_TOKENS = 100_000_000
"""Tokens in one request: ten times the largest advertised context window (about 10 million). A
bigger count is a total over many requests (per minute, per day) passed as one request's shape."""
MAX_BURNDOWN = 100
"""Quota tokens per output token: published rates are 1, 5, 10 and 15."""
MAX_TPM_QUOTA = 1e12
"""Tokens per minute: far above any quota Service Quotas grants; the bound keeps the arithmetic finite."""
MAX_RATE = 1e18
"""Requests per minute (or requests in flight): beyond any quota; the bound keeps the arithmetic finite."""
MIN_CALL_SECONDS = 0.001
"""A model call takes at least a millisecond; shorter durations make the sustainable rate unbounded."""
MAX_CALL_SECONDS = 86_400.0
"""One day. A longer call is usually milliseconds passed as seconds."""
MAX_FRACTION = 10.0
"""headroom, margin and tolerance are fractions (0.2 is 20%); above 10 (1,000%) a percentage was
passed as a fraction."""
MAX_OUTPUT_TOKENS_PER_SECOND = 1_000_000
"""Decode speed no model approaches: a LatencyProfile implying more has its units wrong."""

_EXACT_FLOAT = 2**53  # the largest float that still holds every whole number below it exactly
_TOKEN_FIX = (
    f"a request holds 0..{MAX_REQUEST_TOKENS:,} tokens (ten times the largest context window); "
    "a bigger count is a total over many requests"
)
_CALL_FIX = (
    f"the average duration of one model call in seconds, {MIN_CALL_SECONDS:g}..{MAX_CALL_SECONDS:,.0f} "
    "(a larger value is usually milliseconds passed as seconds)"
)
#: What can bind a RatePlan's rate: bedrock-runtime's TPM (or a legacy RPM figure), or one of
#: bedrock-mantle's two quotas.
RATE_LIMITS = ("tpm", "rpm", "input-tpm", "output-tpm")
_RATE_FIX = f"requests per minute, more than 0 and at most {MAX_RATE:.0e}"
_ROUNDING = {  # how to make a whole count of each unit, and which way to round
    "tokens": "round a mean with round(x) or a percentile up with math.ceil(x)",
    "records": "count whole records",
    "calls": "round down with math.floor(x): a cap above the plan overdraws the quota",
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(
    check: Checks,
    name: str,
    value: Any,
    *,
    fix: str,
    whole: str | None = None,
    tokens_pass: bool = False,
    **limits: Any,
) -> bool:
    """Checks.number plus the planner's own rules; True when `value` is a usable number.

    whole: the unit of a count ("tokens", "records", "calls"): the value must be an int, or a float
    with no fractional part up to 2**53 (above that a float skips whole numbers). A CDK token (a
    float, a str, or a Duration built from one) is refused, as a plan needs its value at synth time, unless
    tokens_pass, where the caller hands it on. Ints beyond a float's range are refused here because
    math.isfinite raises OverflowError on them.
    """
    if is_token(value):  # a number or string token, or a Duration built from one (Duration.seconds(param))
        if tokens_pass:
            return False
        return check.fail(
            f"{name} is an unresolved CDK token (a deploy-time value); the planner needs the number at "
            f"synth time: pass it as a constant or from context; {fix}", id=f"{name}.deploy-time-planner"
        )
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        return check.fail(f"{name}={_short(value)} is beyond any float's range; {fix}", id=f"{name}.beyond-float")
    if whole and isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        return check.fail(f"{name}={value!r} is not a whole number of {whole}: {_ROUNDING[whole]}; {fix}", id=f"{name}.not-whole")
    ok = check.number(name, value, integer=whole is not None, fix=fix, **limits)
    if ok and whole and isinstance(value, float) and abs(value) > _EXACT_FLOAT:
        return check.fail(f"{name}={value!r} is too large for a float to count exactly; pass an int", id=f"{name}.beyond-exact-float")
    return ok


def _count(check: Checks, name: str, value: Any, *, unit: str = "tokens", **limits: Any) -> bool:
    """A whole count; token counts are bounded by MAX_REQUEST_TOKENS unless a maximum is given."""
    if unit == "tokens":
        limits.setdefault("maximum", MAX_REQUEST_TOKENS)
        limits.setdefault("fix", _TOKEN_FIX)
    return _number(check, name, value, whole=unit, **limits)


def _call_seconds(check: Checks, name: str, value: Any, *, optional: bool = False) -> bool:
    return _number(
        check,
        name,
        value,
        minimum=MIN_CALL_SECONDS,
        maximum=MAX_CALL_SECONDS,
        optional=optional,
        fix=_CALL_FIX,
    )


def _fraction(check: Checks, name: str, value: Any, *, meaning: str) -> bool:
    return _number(
        check,
        name,
        value,
        minimum=0,
        maximum=MAX_FRACTION,
        fix=f"{name} is a fraction, 0..{MAX_FRACTION:g}: {meaning}",
    )


def _duration(check: Checks, name: str, value: Any, *, fix: str) -> bool:
    if not check.instance(name, value, timedelta, f"a datetime.timedelta such as timedelta(hours=36); {fix}"):
        return False
    return check.rule(value > timedelta(0), f"{name}={value!r} must be positive; {fix}", id=f"{name}.not-positive")


def _whole_values(obj: Any, *names: str) -> None:
    """Store integral floats (900.0 from a CloudWatch statistic) as ints, after validation."""
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, float):
            object.__setattr__(obj, name, int(value))


def _profile(check: Checks, profile: Any) -> bool:
    return check.instance(
        "profile",
        profile,
        TokenProfile,
        "a planning.TokenProfile(input_tokens=..., output_tokens=..., max_tokens=...)",
    )


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
        with Checks("TokenProfile") as check:
            _count(check, "input_tokens", self.input_tokens, minimum=0)
            output_ok = _count(check, "output_tokens", self.output_tokens, minimum=0)
            max_ok = _count(
                check,
                "max_tokens",
                self.max_tokens,
                minimum=1,
                fix=f"1..{MAX_REQUEST_TOKENS:,}; pass the model's maximum output if the request leaves "
                "max_tokens unset (Bedrock reserves that)",
            )
            _number(
                check,
                "burndown",
                self.burndown,
                minimum=1,
                maximum=MAX_BURNDOWN,
                fix=f"quota tokens per output token, 1..{MAX_BURNDOWN}: 1 for most models, 5 for older "
                "Anthropic Claude models, 10 or 15 for the newest (check the model's current rate)",
            )
            for name in ("cache_write_tokens", "cache_read_tokens"):
                _count(check, name, getattr(self, name), minimum=0)
            if output_ok and max_ok:
                check.rule(
                    self.output_tokens <= self.max_tokens,
                    f"output_tokens={self.output_tokens} exceeds max_tokens={self.max_tokens}: a model never "
                    "generates more than max_tokens; raise max_tokens or lower the output estimate",
                    id="output_tokens.above-max-tokens",
                )
        _whole_values(
            self, "input_tokens", "output_tokens", "max_tokens", "cache_write_tokens", "cache_read_tokens"
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
    (requests_per_minute / 60 x call_seconds); with neither given it is taken as 0. Pass one of
    them, not both.
    """
    with Checks("plan_tpm") as check:
        _profile(check, profile)
        _number(
            check,
            "requests_per_minute",
            requests_per_minute,
            above=0,
            maximum=MAX_RATE,
            fix=f"the peak load in {_RATE_FIX}",
        )
        _fraction(check, "headroom", headroom, meaning="0.2 keeps 20% spare above the settled need")
        _number(
            check,
            "concurrency",
            concurrency,
            minimum=0,
            maximum=MAX_RATE,
            optional=True,
            fix="the requests in flight at peak (or pass call_seconds to derive it)",
        )
        _call_seconds(check, "call_seconds", call_seconds, optional=True)
        check.rule(
            concurrency is None or call_seconds is None,
            f"concurrency={_short(concurrency)} and call_seconds={_short(call_seconds)} are both given; "
            "concurrency is derived from call_seconds (requests_per_minute / 60 x call_seconds), so one "
            "would be ignored: pass only one",
            id="concurrency.with-call-seconds",
        )
    if concurrency is None:
        concurrency = requests_per_minute / 60 * (call_seconds or 0)
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
    with Checks("size_max_tokens") as check:
        p99_ok = _count(
            check,
            "p99_output_tokens",
            p99_output_tokens,
            minimum=1,
            fix=f"the 99th percentile of OutputTokenCount, 1..{MAX_REQUEST_TOKENS:,} (math.ceil a fractional percentile)",
        )
        margin_ok = _fraction(
            check,
            "margin",
            margin,
            meaning="0.1 sizes max_tokens 10% above the p99; below 0 truncates answers",
        )
        current_ok = _count(
            check,
            "current_max_tokens",
            current_max_tokens,
            minimum=1,
            optional=True,
            fix=f"the max_tokens requests use today, 1..{MAX_REQUEST_TOKENS:,}, or None",
        )
        if p99_ok and current_ok:
            at_least = _sized(p99_output_tokens, margin) if margin_ok else p99_output_tokens
            check.rule(
                current_max_tokens is not None and current_max_tokens >= p99_output_tokens,
                f"current_max_tokens={current_max_tokens} is below the p99 output ({p99_output_tokens}): "
                "more than 1% of answers are already truncated; raise max_tokens to at least "
                f"{at_least}",
                id="current_max_tokens.below-p99",
            )
    p99 = int(p99_output_tokens)
    current = None if current_max_tokens is None else int(current_max_tokens)
    sized = _sized(p99, margin)
    saved = 0 if current is None else max(current - sized, 0)
    return MaxTokensSizing(p99, sized, current, saved)


def _sized(p99_output_tokens: float, margin: float) -> int:
    return math.ceil(round(p99_output_tokens * (1 + margin), 6))  # round: 900 x 1.1 is 990.0000000000001


@dataclass(frozen=True)
class RatePlan:
    """The request rate a quota sustains and the concurrency cap that holds the load to it.

    limited_by: "tpm" when the tokens-per-minute quota binds; "rpm" only when a legacy rpm_quota was
    passed and is lower than the rate the TPM quota sustains: Bedrock does not enforce that figure on
    bedrock-runtime (RPM_RULE), only tooling that tracks it does. On bedrock-mantle
    (sustainable_mantle_rate), "input-tpm" or "output-tpm": which of its two quotas binds.
    `binding` says so in words.
    """

    requests_per_minute: float
    limited_by: str  # "tpm", or "rpm": a legacy rpm_quota given (RPM_RULE)
    max_concurrency: int
    call_seconds: float

    def __post_init__(self) -> None:
        # Constructs fit a plan to their own range (_checks.fit_concurrency): a hand-built plan must
        # be as sound as one sustainable_rate returns.
        with Checks("RatePlan") as check:
            _number(
                check,
                "requests_per_minute",
                self.requests_per_minute,
                above=0,
                maximum=MAX_RATE,
                fix=_RATE_FIX,
            )
            check.one_of("limited_by", self.limited_by, RATE_LIMITS, fix="the quota that binds the rate")
            _count(
                check,
                "max_concurrency",
                self.max_concurrency,
                unit="calls",
                minimum=1,
                fix="at least one call in flight; planning.max_concurrency(...) rounds down and never below 1",
            )
            _call_seconds(check, "call_seconds", self.call_seconds)
        _whole_values(self, "max_concurrency")

    @property
    def binding(self) -> str:
        """What holds the rate, in words: the TPM quota, or the legacy RPM figure given (named legacy)."""
        if self.limited_by == "rpm":
            return (f"the legacy rpm_quota of {self.requests_per_minute:,.6g} requests per minute, lower than the TPM "
                    f"quota sustains; {RPM_RULE}")
        if self.limited_by == "input-tpm":
            return "the bedrock-mantle input tokens-per-minute quota, max_tokens held while a call runs"
        if self.limited_by == "output-tpm":
            return "the bedrock-mantle output tokens-per-minute quota"
        return "the tokens-per-minute quota, reservations included"


def sustainable_rate(
    profile: TokenProfile,
    *,
    tpm_quota: float,
    call_seconds: float,
    rpm_quota: float | None = None,
) -> RatePlan:
    """The steady request rate a TPM (and optional, legacy RPM) quota sustains, reservations included.

    At rate r per minute, r x settled tokens settle in the window while r x min(call_seconds/60, 1)
    requests still hold (reserved - settled) extra tokens, so
    r = tpm / (settled + min(call_seconds/60, 1) x max(reserved - settled, 0)). When settlement
    exceeds the reservation (output x burndown > max_tokens) the settled charge is the binding one.
    A quota below one_call_tpm(profile, call_seconds) is refused (holds_one_call): it cannot hold one
    call's reservation, or even one call at a time overdraws it, and no cap is lower than one call.
    rpm_quota: legacy (RPM_RULE): Bedrock no longer enforces requests per minute on bedrock-runtime;
    pass one only where an account or tooling still tracks an RPM figure, and it caps the rate.
    """
    with Checks("sustainable_rate") as check:
        profile_ok = _profile(check, profile)
        quota_ok = _number(
            check,
            "tpm_quota",
            tpm_quota,
            minimum=1,
            maximum=MAX_TPM_QUOTA,
            fix=f"the model's tokens-per-minute quota (Service Quotas), 1..{MAX_TPM_QUOTA:.0e}",
        )
        seconds_ok = _call_seconds(check, "call_seconds", call_seconds)
        _number(
            check,
            "rpm_quota",
            rpm_quota,
            above=0,
            maximum=MAX_RATE,
            optional=True,
            fix="a legacy requests-per-minute figure, or None (bedrock-runtime no longer enforces RPM)",
        )
        if profile_ok and quota_ok and seconds_ok:
            holds_one_call(check, profile, tpm=tpm_quota, call_seconds=call_seconds, quota="tpm_quota")
    # Bounded: settled >= 0 and, when it is 0, reserved >= max_tokens >= 1 held for >= 1 ms, so the
    # rate is at most MAX_TPM_QUOTA / (MIN_CALL_SECONDS / 60) = 6e16 < MAX_RATE, never inf.
    rate, limited_by = tpm_quota / _per_request(profile, call_seconds), "tpm"
    if rpm_quota is not None and rpm_quota < rate:
        rate, limited_by = rpm_quota, "rpm"
    return RatePlan(rate, limited_by, _cap(rate, call_seconds), call_seconds)


def sustainable_mantle_rate(
    profile: TokenProfile,
    *,
    input_tpm_quota: float,
    output_tpm_quota: float,
    call_seconds: float,
) -> RatePlan:
    """The steady request rate bedrock-mantle's two quotas sustain (MANTLE_QUOTAS_DOC).

    Input tokens per minute: a call is admitted against input + cache writes + max_tokens (cache
    reads do not count) and, as on bedrock-runtime, this assumes the max_tokens part is held while the
    call runs and returned when it completes, so one call charges the window
    input + cache writes + min(call_seconds/60, 1) x max_tokens and
    r_in = input_tpm_quota / that. Output tokens per minute: output tokens are counted as generated,
    without burndown (the page names none; profile.burndown is not used here),
    r_out = output_tpm_quota / output_tokens. The rate is the smaller; limited_by names the quota
    that binds ("input-tpm" or "output-tpm"). There is no RPM quota on bedrock-mantle.

    Refused: a call whose input + cache writes + max_tokens exceeds input_tpm_quota (never admitted,
    however idle the quota), and quotas below what one call at a time draws (no concurrency cap is
    lower than one call).
    """
    with Checks("sustainable_mantle_rate") as check:
        profile_ok = _profile(check, profile)
        quotas_ok = all([_number(check, name, value, minimum=1, maximum=MAX_TPM_QUOTA,
                                 fix=f"the model's Bedrock Mantle {kind} tokens per minute (Service Quotas), "
                                 f"1..{MAX_TPM_QUOTA:.0e}")
                         for name, value, kind in (("input_tpm_quota", input_tpm_quota, "input"),
                                                   ("output_tpm_quota", output_tpm_quota, "output"))])
        seconds_ok = _call_seconds(check, "call_seconds", call_seconds)
        if profile_ok and quotas_ok and seconds_ok:
            admitted = profile.input_tokens + profile.cache_write_tokens + profile.max_tokens
            per_call_in = _mantle_input(profile, call_seconds)
            admits = check.rule(admitted <= input_tpm_quota,
                       f"input_tpm_quota={_short(input_tpm_quota)} cannot admit one call: bedrock-mantle checks "
                       f"input + cache writes + max_tokens = {admitted:,} against it ({MANTLE_QUOTAS_DOC}); lower "
                       "max_tokens or raise the quota", id="input_tpm_quota.below-one-call")
            one_at_a_time = 60 / call_seconds
            check.rule(not admits or one_at_a_time * per_call_in <= input_tpm_quota,
                       f"input_tpm_quota={_short(input_tpm_quota)} cannot sustain one call at a time: one after "
                       f"another ({one_at_a_time:,.4g} a minute) draw {one_at_a_time * per_call_in:,.0f} input "
                       "tokens a minute; raise the quota or lower max_tokens", id="input_tpm_quota.below-one-at-a-time")
            check.rule(one_at_a_time * profile.output_tokens <= output_tpm_quota,
                       f"output_tpm_quota={_short(output_tpm_quota)} cannot sustain one call at a time: one after "
                       f"another ({one_at_a_time:,.4g} a minute) generate {one_at_a_time * profile.output_tokens:,.0f} "
                       "output tokens a minute; raise the quota", id="output_tpm_quota.below-one-at-a-time")
    # Bounded as sustainable_rate is: per_call_in >= max_tokens x 1 ms / 60 s > 0.
    rate, limited_by = input_tpm_quota / _mantle_input(profile, call_seconds), "input-tpm"
    if profile.output_tokens and output_tpm_quota / profile.output_tokens < rate:
        rate, limited_by = output_tpm_quota / profile.output_tokens, "output-tpm"
    return RatePlan(rate, limited_by, _cap(rate, call_seconds), call_seconds)


def _mantle_input(profile: TokenProfile, call_seconds: float) -> float:
    """Input tokens one call charges bedrock-mantle's one-minute input window (cache reads are free)."""
    return profile.input_tokens + profile.cache_write_tokens + min(call_seconds / 60, 1) * profile.max_tokens


def _per_request(profile: TokenProfile, call_seconds: float) -> float:
    """Quota tokens one request charges a one-minute window: its settlement, plus its reservation's
    excess over it for the part of the minute the request is in flight."""
    held = max(profile.reserved - profile.settled, 0)
    return profile.settled + min(call_seconds / 60, 1) * held


def one_call_tpm(profile: TokenProfile, call_seconds: float) -> float:
    """The smallest tokens-per-minute quota that sustains one call at a time.

    The larger of the call's reservation (Bedrock throttles a call whose reservation exceeds the
    quota, however idle the quota is) and what one call after another draws: 60 / call_seconds calls
    a minute, each charging what sustainable_rate charges it. No concurrency cap (a Map's, a queue's,
    a function's) is lower than one call, so no construct can hold calls to a smaller quota.
    """
    with Checks("one_call_tpm") as check:
        _profile(check, profile)
        _call_seconds(check, "call_seconds", call_seconds)
    return max(float(profile.reserved), 60 / call_seconds * _per_request(profile, call_seconds))


def holds_one_call(
    check: Checks, profile: TokenProfile, *, tpm: float, call_seconds: float, quota: str, executions: int = 1
) -> bool:
    """The one rule every plan keeps, with its one message: `tpm` sustains one call at a time.

    sustainable_rate and ModelQuota.share check it before they plan, so no RatePlan they return sustains
    less than one call; the constructs refuse a plan below their own minimum (_checks.fit_concurrency).
    QuotaPacer refuses a call whose reservation exceeds its share at run time: the first case here.
    The message names the quota, the reservation and the TPM one call at a time needs. `quota` says
    what `tpm` is ("tpm_quota"); with `executions` > 1, `tpm` is one execution's slice of a share.
    """
    needed = one_call_tpm(profile, call_seconds)
    if tpm >= needed:
        return True
    reserved = profile.reserved
    draws = "" if needed <= reserved else (
        f" and settles {profile.settled:,.0f}, so one call after another over {call_seconds:g} s each draws "
        f"{needed:,.0f} TPM")
    if reserved > tpm:
        consequence = ("Bedrock would throttle every call (it refuses a call whose reservation exceeds the tokens "
                       "per minute left)")
    else:
        consequence = "even one call at a time overdraws it, and no concurrency cap is lower than one call"
    if executions > 1:
        fix = (f"give each execution at least {needed:,.0f} TPM (the share {needed * executions:,.0f}), run fewer "
               "executions, or lower max_tokens or the prompt")
    else:
        fix = f"give it at least {needed:,.0f} TPM, or lower max_tokens or the prompt"
    return check.fail(
        f"{quota} ({tpm:,.0f} TPM) cannot sustain one call at a time: each call reserves {reserved:,} tokens{draws}; "
        f"{consequence}: {fix}", id="tpm.below-one-call"
    )


def as_max_concurrency(value: int | RatePlan) -> int:
    """The cap a construct prop means: an int as given, or a RatePlan's max_concurrency.

    Kept for compatibility: constructs now fit a plan to their range with _checks.fit_concurrency.
    The range (0 for an unbounded Map, 2..1000 for an SQS event source) is the construct's to check,
    so only the type is checked here; a CDK token is handed on unchanged.
    """
    if isinstance(value, RatePlan):
        return value.max_concurrency
    with Checks("as_max_concurrency") as check:
        ok = _count(
            check,
            "max_concurrency",
            value,
            unit="calls",
            tokens_pass=True,
            fix="pass an int or a planning.RatePlan (sustainable_rate(...))",
        )
    return int(value) if ok else value


def max_concurrency(requests_per_minute: float, call_seconds: float) -> int:
    """MaxConcurrency that holds a load to a rate: rate x average call duration (Little's law).

    Rounded down so the cap never exceeds what the quota sustains, but never below 1.
    """
    with Checks("max_concurrency") as check:
        _number(check, "requests_per_minute", requests_per_minute, above=0, maximum=MAX_RATE, fix=_RATE_FIX)
        _call_seconds(check, "call_seconds", call_seconds)
    return _cap(requests_per_minute, call_seconds)


def _cap(requests_per_minute: float, call_seconds: float) -> int:
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
    with Checks("choose_execution") as check:
        _duration(check, "deadline", deadline, fix="the time by which every record must be answered")
        _count(
            check,
            "record_count",
            record_count,
            unit="records",
            minimum=1,
            fix="the number of records to answer",
        )
        _count(
            check,
            "batch_min_records",
            batch_min_records,
            unit="records",
            minimum=1,
            fix="the model's minimum records per batch job (a Service Quota, commonly 100)",
        )
        _duration(
            check,
            "batch_turnaround",
            batch_turnaround,
            fix="the slack a batch job needs; Default: 24 hours, the shortest batch job timeout",
        )
    record_count, batch_min_records = int(record_count), int(batch_min_records)
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
        seconds = f"seconds, 0..{MAX_CALL_SECONDS:,.0f} (a larger value is usually milliseconds)"
        with Checks("LatencyProfile") as check:
            ttft_ok = _number(
                check,
                "ttft_seconds",
                self.ttft_seconds,
                minimum=0,
                maximum=MAX_CALL_SECONDS,
                fix=f"time to first token in {seconds}",
            )
            latency_ok = _number(
                check,
                "latency_seconds",
                self.latency_seconds,
                above=0,
                maximum=MAX_CALL_SECONDS,
                fix=f"end-to-end latency in {seconds}",
            )
            output_ok = _number(
                check,
                "output_tokens",
                self.output_tokens,
                minimum=0,
                maximum=MAX_REQUEST_TOKENS,
                fix=f"output tokens of the reading, 0..{MAX_REQUEST_TOKENS:,} (a mean or percentile may be fractional)",
            )
            if ttft_ok and latency_ok:
                ordered = check.rule(
                    self.latency_seconds > self.ttft_seconds,
                    f"latency_seconds={self.latency_seconds} must exceed ttft_seconds={self.ttft_seconds}: "
                    "end-to-end latency includes the time to first token",
                    id="latency_seconds.not-above-ttft",
                )
                # The decode time is > 0 here, but can be tiny enough to make the speed infinite.
                if ordered and output_ok:
                    speed = self.output_tokens / (self.latency_seconds - self.ttft_seconds)
                    check.rule(
                        speed <= MAX_OUTPUT_TOKENS_PER_SECOND,
                        f"output_tokens={self.output_tokens:g} in {self.latency_seconds - self.ttft_seconds:g} s "
                        f"after the first token is {speed:g} tokens/s, above the {MAX_OUTPUT_TOKENS_PER_SECOND:,} "
                        "no model reaches: check that both latencies are in seconds",
                        id="output_tokens.faster-than-any-model",
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
    with Checks("diagnose_latency") as check:
        for name, value in (("before", before), ("after", after)):
            check.instance(
                name,
                value,
                LatencyProfile,
                "a planning.LatencyProfile(ttft_seconds=..., latency_seconds=..., output_tokens=...)",
            )
        _fraction(
            check, "tolerance", tolerance, meaning="the relative change treated as noise, e.g. 0.1 for 10%"
        )
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


_HOURS_FIX = "hours a day the workload runs, more than 0 and at most 24"
_DAILY_FIX = f"tokens a day, 1..{MAX_TPM_QUOTA * MINUTES_PER_DAY:.0e}"


@dataclass(frozen=True)
class DailyLoad:
    """One workload's day on a model: it settles `tokens_per_minute` for `hours` a day.

    tokens_per_minute counts what the quota settles (input + cache writes + output x burndown).
    Build one from a request shape with `DailyLoad.traffic(...)` (steady traffic at a rate) or
    `DailyLoad.records(...)` (a body of work, such as a nightly on-demand pre-computation, done
    within a window). Bedrock does not say whether the daily quota applies the burndown; counting
    it can only make the plan warn early, never late.
    """

    name: str
    tokens_per_minute: float
    hours: float = 24.0

    def __post_init__(self) -> None:
        with Checks("DailyLoad") as check:
            check.text("name", self.name, max_length=80, fix="a label for the workload, e.g. 'nightly'")
            _number(check, "tokens_per_minute", self.tokens_per_minute, minimum=0, maximum=MAX_TPM_QUOTA,
                    fix=f"settled tokens per minute while the workload runs, 0..{MAX_TPM_QUOTA:.0e}")
            _number(check, "hours", self.hours, above=0, maximum=24, fix=_HOURS_FIX)

    @property
    def daily_tokens(self) -> float:
        return self.tokens_per_minute * 60 * self.hours

    @classmethod
    def traffic(cls, name: str, profile: TokenProfile, *, requests_per_minute: float, hours: float) -> DailyLoad:
        """Steady traffic: requests_per_minute requests of `profile` for `hours` a day (daytime users)."""
        with Checks("DailyLoad.traffic") as check:
            _profile(check, profile)
            _number(check, "requests_per_minute", requests_per_minute, minimum=0, maximum=MAX_RATE, fix=_RATE_FIX)
        return cls(name, requests_per_minute * profile.settled, hours)

    @classmethod
    def records(cls, name: str, profile: TokenProfile, *, records: int, hours: float) -> DailyLoad:
        """A body of work: `records` requests of `profile` done within `hours` (a nightly pre-computation)."""
        with Checks("DailyLoad.records") as check:
            _profile(check, profile)
            _count(check, "records", records, unit="records", minimum=0, maximum=MAX_RATE,
                   fix="the number of requests the run makes")
            hours_ok = _number(check, "hours", hours, above=0, maximum=24, fix=_HOURS_FIX)
        return cls(name, records * profile.settled / (hours * 60) if hours_ok else 0, hours)


@dataclass(frozen=True)
class DailyPlan:
    """A day's tokens on one model against its daily quota and the account's cross-model daily cap."""

    loads: tuple[DailyLoad, ...]
    daily_tokens: float
    daily_quota: float
    cross_model_daily_tokens: float | None
    other_models_daily_tokens: float
    warnings: tuple[str, ...]

    @property
    def fraction(self) -> float:
        """The day's tokens over the model's daily quota (above 1: the model is throttled before the day ends)."""
        return self.daily_tokens / self.daily_quota

    @property
    def cross_model_fraction(self) -> float | None:
        """This model's and the other models' day over the account's cross-model cap; None without a cap."""
        if self.cross_model_daily_tokens is None:
            return None
        return (self.daily_tokens + self.other_models_daily_tokens) / self.cross_model_daily_tokens


def plan_daily_tokens(
    loads: Any,
    *,
    tpm_quota: float,
    daily_token_quota: float | None = None,
    cross_model_daily_tokens: float | None = None,
    other_models_daily_tokens: float = 0.0,
) -> DailyPlan:
    """A day's schedule on one model against its daily token quotas.

    loads: the workloads of the day (DailyLoad), e.g. a nightly pre-computation and daytime traffic.
    daily_token_quota: the model's "Model invocation max tokens per day" quota. Default: tpm_quota x
        1,440, the AWS default (new accounts may have less: check Service Quotas).
    cross_model_daily_tokens: the account's "Cross-Model Max Tokens Per Day" in the Region (all
        models together). Default: None (not checked). other_models_daily_tokens: what the other
        models of the account use of it in a day. Default: 0.
    A plan that passes either quota carries a warning saying by how much and what to change: each
    minute can fit its TPM quota while the day still runs out.
    """
    with Checks("plan_daily_tokens") as check:
        if check.instance("loads", loads, (list, tuple), "a list of planning.DailyLoad(...)"):
            for i, load in enumerate(loads):
                check.instance(f"loads[{i}]", load, DailyLoad,
                               "a planning.DailyLoad, e.g. DailyLoad.records('nightly', profile, records=..., hours=6)")
        _number(check, "tpm_quota", tpm_quota, minimum=1, maximum=MAX_TPM_QUOTA,
                fix=f"the model's tokens-per-minute quota (Service Quotas), 1..{MAX_TPM_QUOTA:.0e}")
        _number(check, "daily_token_quota", daily_token_quota, minimum=1, maximum=MAX_TPM_QUOTA * MINUTES_PER_DAY,
                optional=True, fix=f"the model's daily token quota, or None for tpm_quota x {MINUTES_PER_DAY:,}; {_DAILY_FIX}")
        _number(check, "cross_model_daily_tokens", cross_model_daily_tokens, minimum=1,
                maximum=MAX_TPM_QUOTA * MINUTES_PER_DAY, optional=True,
                fix=f"the account's Cross-Model Max Tokens Per Day in the Region, or None; {_DAILY_FIX}")
        _number(check, "other_models_daily_tokens", other_models_daily_tokens, minimum=0,
                maximum=MAX_TPM_QUOTA * MINUTES_PER_DAY, fix=f"other models' tokens a day, 0..{MAX_TPM_QUOTA * MINUTES_PER_DAY:.0e}")
    loads = tuple(loads)
    quota = float(tpm_quota) * MINUTES_PER_DAY if daily_token_quota is None else float(daily_token_quota)
    day = sum(load.daily_tokens for load in loads)
    biggest = ", ".join(f"{load.name} {load.daily_tokens:,.0f}" for load in sorted(loads, key=lambda x: -x.daily_tokens)[:3])
    warnings = [
        f"{load.name} settles {load.tokens_per_minute:,.0f} tokens a minute, above the {tpm_quota:,.0f} TPM quota: at "
        f"the quota it takes {load.daily_tokens / tpm_quota / 60:.1f} hours, not {load.hours:g}; give it longer or "
        "move it to batch inference"
        for load in loads if load.tokens_per_minute > tpm_quota
    ]
    if day > quota:
        source = "given" if daily_token_quota is not None else f"the default: {tpm_quota:,.0f} TPM x {MINUTES_PER_DAY:,}"
        warnings.append(
            f"the day's workloads settle {day:,.0f} tokens, {day / quota:,.1%} of the model's daily quota of {quota:,.0f} "
            f"({source}), so calls are throttled before the day ends ({biggest}); move work to batch inference, "
            "shorten the runs or the answers, or request a higher daily quota")
    if cross_model_daily_tokens is not None and day + other_models_daily_tokens > cross_model_daily_tokens:
        total = day + other_models_daily_tokens
        warnings.append(
            f"with the other models' {other_models_daily_tokens:,.0f}, the account settles {total:,.0f} tokens a day in "
            f"this Region, {total / cross_model_daily_tokens:,.1%} of its cross-model daily cap of "
            f"{cross_model_daily_tokens:,.0f}: every model is throttled once it is reached; move work to batch "
            "inference or request a higher cap")
    return DailyPlan(loads, day, quota, None if cross_model_daily_tokens is None else float(cross_model_daily_tokens),
                     float(other_models_daily_tokens), tuple(warnings))


# --- service tiers -----------------------------------------------------------------------------------

#: Bedrock's service tiers page: priority, default and flex share the model's one on-demand quota; a
#: Reserved tier reservation is separate from it, bought per model as input tokens per minute and
#: output tokens per minute, sized on input + cache writes (InputTokenCount + CacheWriteInputTokens),
#: and a call it cannot hold overflows to the Standard (default) tier.
SERVICE_TIERS_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html"


@dataclass(frozen=True)
class ReservedPlan:
    """What a Reserved tier reservation holds of a load, and what overflows to the on-demand quota.

    input_tpm / output_tpm: what the load asks of each budget (output: its peak in a minute, the
    maxTokens of the calls in flight included). served_fraction: the share of calls the reservation
    holds (1: all of them), limited by the budget that binds (`binding`: "input", "output", or
    "none"). overflow_requests_per_minute and overflow: the rest, planned against the on-demand
    quota (a TpmPlan with its burndown; None when nothing overflows).
    """

    requests_per_minute: float
    input_tpm: float
    output_tpm: float
    served_fraction: float
    binding: str
    overflow_requests_per_minute: float
    overflow: TpmPlan | None


def plan_reserved(
    profile: TokenProfile,
    *,
    requests_per_minute: float,
    reserved_input_tpm: float,
    reserved_output_tpm: float,
    call_seconds: float,
    headroom: float = 0.2,
) -> ReservedPlan:
    """Plan a load at the Reserved tier: how much of it the reservation holds, and the on-demand TPM
    the overflow needs (SERVICE_TIERS_DOC).

    The input budget is charged input + cache writes per call (the page's sizing rule). The output
    budget is charged the output tokens, and, while a call is in flight, its maxTokens: an
    ASSUMPTION mirroring the on-demand quota's reservation, without the burndown (the page sizes the
    reservation in plain tokens; genai-pacer's emulator and QuotaPacer assume the same). The
    reservation serves calls in full or not at all, so the fraction it holds is the smaller of the
    two budgets' ratios; the rest overflows and is planned with plan_tpm (burndown included),
    which is what it draws from the shared on-demand quota of priority, default and flex.
    """
    with Checks("plan_reserved") as check:
        _profile(check, profile)
        _number(check, "requests_per_minute", requests_per_minute, above=0, maximum=MAX_RATE,
                fix=f"the load in {_RATE_FIX}")
        for name, value in (("reserved_input_tpm", reserved_input_tpm), ("reserved_output_tpm", reserved_output_tpm)):
            _number(check, name, value, minimum=1, maximum=MAX_TPM_QUOTA,
                    fix="the reservation's (or your part of its) tokens per minute, from your AWS account team")
        _call_seconds(check, "call_seconds", call_seconds)
        _fraction(check, "headroom", headroom, meaning="0.2 keeps 20% spare above the overflow's settled need")
    input_tpm = requests_per_minute * (profile.input_tokens + profile.cache_write_tokens)
    in_window = min(requests_per_minute / 60 * call_seconds, requests_per_minute)
    output_tpm = requests_per_minute * profile.output_tokens + in_window * (profile.max_tokens - profile.output_tokens)
    ratios = {"input": reserved_input_tpm / input_tpm if input_tpm else math.inf,
              "output": reserved_output_tpm / output_tpm if output_tpm else math.inf}
    binding = min(ratios, key=lambda k: ratios[k])
    served = min(1.0, ratios[binding])
    overflow_rpm = requests_per_minute * (1 - served)
    overflow = (plan_tpm(profile, requests_per_minute=overflow_rpm, headroom=headroom, call_seconds=call_seconds)
                if overflow_rpm > 0 else None)
    return ReservedPlan(
        requests_per_minute=requests_per_minute, input_tpm=input_tpm, output_tpm=output_tpm, served_fraction=served,
        binding=binding if served < 1 else "none", overflow_requests_per_minute=overflow_rpm, overflow=overflow,
    )
