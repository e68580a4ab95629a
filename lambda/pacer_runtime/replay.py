"""One request's measurement and a run's summary, for the local bench and the deployed load replay.

`genai-pacer bench` (genai_pacer.testing.bench) and the Lambda a deployed replay runs in the target
Region (issue 26) both call this file, so the two cannot measure or summarize differently: reading
a Converse response or a ConverseStream event stream into a `Sample`, and turning a list of samples
(read back from S3 or just measured) into the report's summary, CSV and percentiles.

Standard library only at import, no relative imports: the bench loads this one file by its path
(genai_pacer/_internal/runtime_constants.py) and imports without boto3; in Lambda it is
`pacer_runtime.replay`. A client is passed in, never created here.

A Sample holds measurements only (times, token counts, counts, error codes), never prompt or
answer text, so the records a deployed run writes to S3 are not a copy of production traffic.
"""

from __future__ import annotations

import csv
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "CSV_FIELDS",
    "THROTTLE_CODES",
    "TAIL_MINIMUM",
    "AttemptCounter",
    "BenchConfig",
    "ConverseResult",
    "Percentiles",
    "Sample",
    "arrivals",
    "call_converse",
    "call_converse_stream",
    "charge",
    "error_code",
    "measure",
    "percentile",
    "percentile_of_sorted",
    "percentiles",
    "report_document",
    "summarize",
    "write_csv",
]

#: Bedrock's throttling error codes (bedrock-runtime service model: ThrottlingException,
#: ServiceQuotaExceededException; TooManyRequestsException from InvokeModel's older models).
THROTTLE_CODES = frozenset({"ThrottlingException", "TooManyRequestsException", "ServiceQuotaExceededException"})
#: The Converse/ConverseStream member naming the tier (botocore bedrock-runtime model; the same
#: constant as metrics.SERVICE_TIER_MEMBER, repeated because this file loads alone: a test pins them).
SERVICE_TIER_MEMBER = "serviceTier"
TAIL_MINIMUM = {"p50": 1, "p90": 10, "p99": 100}  # samples below which a percentile is not a measured tail


# --- percentiles: one definition for every genai-pacer report (genai_pacer.stats re-exports these)


def percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values already in ascending order (a bootstrap calls this
    thousands of times on one sorted sample, so it does not sort again). Linear interpolation
    between closest ranks (numpy's default method, "linear"), not nearest rank."""
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:  # NaN fails both comparisons
        raise ValueError(f"q={q!r} must be within 0..100")
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of `values` in any order."""
    return percentile_of_sorted(sorted(values), q)


@dataclass(frozen=True)
class Percentiles:
    n: int
    p50: float | None
    p90: float | None
    p99: float | None
    note: str = ""


def percentiles(values: Sequence[float], *, lower_is_worse: bool = False) -> Percentiles:
    """p50/p90/p99, with a note naming each tail percentile that has too few samples to mean much.

    Percentiles describe the slow tail: for latencies that is the high end; for a rate such as
    output tokens per second (lower_is_worse) p99 is the rate 99% of requests reach or beat.
    """
    if not values:
        return Percentiles(0, None, None, None, "no samples")
    thin = [name for name, minimum in TAIL_MINIMUM.items() if len(values) < minimum]
    note = (
        f"{len(values)} samples: {', '.join(thin)} {'needs' if len(thin) == 1 else 'need'} at least "
        f"{', '.join(str(TAIL_MINIMUM[name]) for name in thin)} samples to describe a tail"
        if thin else ""
    )
    p50, p90, p99 = (round(percentile(values, q), 4) for q in ((50, 10, 1) if lower_is_worse else (50, 90, 99)))
    return Percentiles(len(values), p50, p90, p99, note)


# --- the record and the run's settings


@dataclass
class Sample:
    """One request. Times are seconds (model seconds against a time-scaled emulator)."""

    index: int
    prompt_id: str
    warmup: bool
    started_s: float
    e2e_s: float = 0.0
    ttft_s: float | None = None
    otps: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    attempts: int = 0
    throttles: int = 0
    error: str | None = None
    served_latency: str | None = None
    #: The service tier that served the request (Converse's serviceTier.type, ConverseStream's
    #: metadata event): "default", "priority", "flex" or "reserved"; None when the response names none.
    served_tier: str | None = None
    reserved: int = 0
    settled: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


#: The report's CSV columns, one per Sample field, in order.
CSV_FIELDS = list(Sample.__dataclass_fields__)


@dataclass(frozen=True)
class BenchConfig:
    """What to replay and how.

    Exactly one of concurrency (closed loop: that many requests always in flight) or
    rate_per_minute (open loop: Poisson arrivals, seeded) sets the load. max_tokens None leaves it
    unset; then reserved tokens are counted at model_max_tokens, which is what Bedrock reserves.
    time_scale converts wall time to model time against an emulator started with the same factor.
    warmup: requests sent first and left out of the summary, so connection set-up does not count
    against the percentiles. Default: 8, the CLI's --warmup default.
    """

    model_id: str
    requests: int = 100
    concurrency: int | None = 8
    rate_per_minute: float | None = None
    streaming: bool = True
    warmup: int = 8
    max_tokens: int | None = None
    model_max_tokens: int = 8_192
    latency: str | None = None
    burndown: float = 1.0
    tpm_quota: float | None = None
    ttft_target_s: float | None = None
    otps_target: float | None = None
    e2e_target_s: float | None = None
    time_scale: float = 1.0
    seed: int = 0
    answer_hint: bool = True  # send each prompt's expected length in requestMetadata (the emulator uses it)

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate_per_minute is None):
            raise ValueError("set exactly one of concurrency (closed loop) or rate_per_minute (open loop)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency!r} must be >= 1")
        if self.rate_per_minute is not None and self.rate_per_minute <= 0:
            raise ValueError(f"rate_per_minute={self.rate_per_minute!r} must be > 0")
        if self.requests < 1 or self.warmup < 0:
            raise ValueError(f"requests={self.requests!r} must be >= 1 and warmup={self.warmup!r} >= 0")
        if self.time_scale <= 0:
            raise ValueError(f"time_scale={self.time_scale!r} must be > 0")


# --- the open loop's arrivals


def arrivals(rate_per_s: float, n: int, seed: int | random.Random = 0) -> list[float]:
    """The open loop's schedule: n Poisson arrival times in seconds from the run's start, the first
    at 0, exponential gaps of mean 1/rate_per_s drawn from random.Random(seed). A given seed gives
    the same schedule everywhere, so the local bench and a deployed replay's workers, which each
    take their slice of it, keep one schedule. seed may be a random.Random the caller goes on using."""
    if not rate_per_s > 0 or math.isinf(rate_per_s):  # NaN fails the comparison
        raise ValueError(f"rate_per_s={rate_per_s!r} must be a finite number > 0")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r} must be a whole number >= 0")
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    schedule, due = [], 0.0
    for _ in range(n):
        schedule.append(due)
        due += rng.expovariate(rate_per_s)
    return schedule


# --- one request


@dataclass(frozen=True)
class ConverseResult:
    text: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    stop_reason: str
    latency_ms: float  # measured by the caller, retries included
    service_latency_ms: int | None  # the service's own metrics.latencyMs
    served_latency: str  # "standard" or "optimized": what actually served the request
    first_token_ms: float | None = None  # streaming only: time to the first text, measured by the caller
    #: The service tier that served the call, as the response names it (Converse's serviceTier.type,
    #: ConverseStream's metadata event); None when the response names none.
    served_tier: str | None = None

    @property
    def output_tokens_per_second(self) -> float | None:
        """Decode speed after the first token (streaming only): what a reader sees the answer keep."""
        if self.first_token_ms is None or self.latency_ms <= self.first_token_ms:
            return None
        return self.output_tokens / ((self.latency_ms - self.first_token_ms) / 1000)


def call_converse(client: Any, request: Mapping[str, Any], *,
                  clock: Callable[[], float] = time.perf_counter) -> ConverseResult:
    """Call Converse and read its response; errors propagate as botocore ClientError. clock is in
    seconds (a test passes its own)."""
    started = clock()
    response = client.converse(**request)
    elapsed_ms = (clock() - started) * 1000
    content = response.get("output", {}).get("message", {}).get("content", [])
    return _result("".join(block.get("text", "") for block in content), response, elapsed_ms, first_token_ms=None)


def call_converse_stream(client: Any, request: Mapping[str, Any], *,
                         clock: Callable[[], float] = time.perf_counter) -> ConverseResult:
    """Call ConverseStream and read it to the end, timing the first text (TTFT) as the user sees it.

    Usage, served latency mode, served tier and stop reason come from the stream's own events
    (server-reported, never re-counted). An exception inside the stream propagates as botocore's
    EventStreamError, which carries the same error code a ClientError would.
    """
    started = clock()
    response = client.converse_stream(**request)
    parts: list[str] = []
    summary: dict[str, Any] = {}
    first_token_ms = None
    for event in response["stream"]:
        if "contentBlockDelta" in event:
            text = event["contentBlockDelta"].get("delta", {}).get("text", "")
            if text and first_token_ms is None:
                first_token_ms = (clock() - started) * 1000
            parts.append(text)
        elif "messageStop" in event:
            summary["stopReason"] = event["messageStop"].get("stopReason", "")
        elif "metadata" in event:
            summary.update(event["metadata"])
    elapsed_ms = (clock() - started) * 1000
    return _result("".join(parts), summary, elapsed_ms, first_token_ms=first_token_ms)


def _result(text: str, response: Mapping[str, Any], elapsed_ms: float, *, first_token_ms: float | None) -> ConverseResult:
    usage = response.get("usage", {})
    return ConverseResult(
        text=text,
        input_tokens=usage.get("inputTokens", 0),
        output_tokens=usage.get("outputTokens", 0),
        cache_read_tokens=usage.get("cacheReadInputTokens", 0),
        cache_write_tokens=usage.get("cacheWriteInputTokens", 0),
        stop_reason=response.get("stopReason", ""),
        latency_ms=round(elapsed_ms, 1),
        service_latency_ms=response.get("metrics", {}).get("latencyMs"),
        served_latency=response.get("performanceConfig", {}).get("latency", "standard"),
        first_token_ms=None if first_token_ms is None else round(first_token_ms, 1),
        served_tier=(response.get(SERVICE_TIER_MEMBER) or {}).get("type"),
    )


def error_code(error: BaseException | None) -> str:
    """The service's error code (ThrottlingException), or the exception's class name."""
    response = getattr(error, "response", None)
    if isinstance(response, dict) and response.get("Error", {}).get("Code"):
        return str(response["Error"]["Code"])
    return type(error).__name__


class AttemptCounter:
    """Counts each HTTP attempt and each throttle inside the SDK's own retries, per thread."""

    def __init__(self, client: Any):
        self.local = threading.local()
        client.meta.events.register("needs-retry.bedrock-runtime", self._on_attempt)

    @classmethod
    def of(cls, client: Any) -> AttemptCounter:
        """One counter per client, however many benchmarks run on it."""
        if not hasattr(client, "_genai_pacer_attempts"):
            client._genai_pacer_attempts = cls(client)
        counter: AttemptCounter = client._genai_pacer_attempts
        return counter

    def _on_attempt(self, response: Any = None, caught_exception: Any = None, **_: Any) -> None:
        self.local.attempts = getattr(self.local, "attempts", 0) + 1
        parsed = response[1] if response else {}
        code = (parsed or {}).get("Error", {}).get("Code", "")
        if code in THROTTLE_CODES:
            self.local.throttles = getattr(self.local, "throttles", 0) + 1

    def take(self) -> tuple[int, int]:
        attempts, throttles = getattr(self.local, "attempts", 0), getattr(self.local, "throttles", 0)
        self.local.attempts = self.local.throttles = 0
        return attempts, throttles


def charge(*, input_tokens: int, output_tokens: int, max_tokens: int, burndown: float = 1.0,
           cache_write_tokens: int = 0, cache_read_tokens: int = 0) -> tuple[int, float]:
    """(reserved, settled) quota tokens of one call: what it held while it ran (input, cache
    included, + max_tokens) and what it was charged (input + cache writes + output x burndown;
    cache reads are free). genai_pacer.quota.planning.TokenProfile's arithmetic (a test pins them)."""
    reserved = input_tokens + cache_write_tokens + cache_read_tokens + max_tokens
    return reserved, input_tokens + cache_write_tokens + output_tokens * burndown


def measure(client: Any, request: Mapping[str, Any], sample: Sample, *, streaming: bool, now: Callable[[], float],
            counter: AttemptCounter, max_tokens: int, burndown: float = 1.0, time_scale: float = 1.0,
            clock: Callable[[], float] = time.perf_counter) -> Sample:
    """Send one request and fill `sample` (whose started_s is on `now`'s clock) with what it
    measured: TTFT and output tokens per second from the stream, end-to-end from the first attempt
    to the last byte (SDK retries and backoff inside), server-reported usage, the served latency
    mode, the attempts and throttles the counter saw, or the error code. The answer's text is
    read and dropped. max_tokens is what the call reserves per output (the run's, the prompt's or
    the model's); time_scale turns wall time into model time against a time-scaled emulator; clock
    (seconds) times the call's TTFT and decode (a test passes its own)."""
    call = call_converse_stream if streaming else call_converse
    try:
        result = call(client, request, clock=clock)
    except Exception as error:  # counted and reported, never hidden in latency
        sample.error = error_code(error)
    else:
        sample.input_tokens, sample.output_tokens = result.input_tokens, result.output_tokens
        sample.cache_read_tokens, sample.cache_write_tokens = result.cache_read_tokens, result.cache_write_tokens
        sample.served_latency, sample.served_tier = result.served_latency, result.served_tier
        if result.first_token_ms is not None:
            sample.ttft_s = round(result.first_token_ms / 1000 * time_scale, 4)
        if result.output_tokens_per_second is not None:
            sample.otps = round(result.output_tokens_per_second / time_scale, 2)
        sample.reserved, sample.settled = charge(  # on server-reported usage
            input_tokens=result.input_tokens, output_tokens=result.output_tokens,
            max_tokens=max(max_tokens, result.output_tokens), burndown=burndown,
            cache_write_tokens=result.cache_write_tokens, cache_read_tokens=result.cache_read_tokens)
    sample.e2e_s = round(now() - sample.started_s, 4)
    sample.attempts, sample.throttles = counter.take()
    return sample


# --- the run's summary


def summarize(samples: Sequence[Sample], config: BenchConfig) -> dict[str, Any]:
    """The report's figures from measured samples (warm-up excluded); pure arithmetic, so a last
    step can compute it from records read back from storage."""
    measured = [s for s in samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    if measured:
        begin = min(s.started_s for s in measured)
        end = max(s.started_s + s.e2e_s for s in measured)
        minutes = max(end - begin, 1e-9) / 60
    else:
        minutes = 0.0

    def good(sample: Sample) -> bool:
        return sample.ok and all([
            config.ttft_target_s is None or (sample.ttft_s is not None and sample.ttft_s <= config.ttft_target_s),
            config.otps_target is None or (sample.otps is not None and sample.otps >= config.otps_target),
            config.e2e_target_s is None or sample.e2e_s <= config.e2e_target_s,
        ])

    def per_minute(total: float) -> float | None:
        return round(total / minutes, 1) if minutes else None

    settled_tpm = per_minute(sum(s.settled for s in measured))
    reserved_tpm = per_minute(sum(s.reserved for s in measured))
    quota = config.tpm_quota
    goodput = sum(good(s) for s in measured)
    errors: dict[str, int] = {}
    for sample in measured:
        if sample.error:
            errors[sample.error] = errors.get(sample.error, 0) + 1
    return {
        "requests": len(measured),
        "succeeded": len(ok),
        "failed": len(measured) - len(ok),
        "errors": errors,
        "throttles": sum(s.throttles for s in measured),
        "attempts": sum(s.attempts for s in measured),
        "duration_s": round(minutes * 60, 3),
        "ttft_s": asdict(percentiles([s.ttft_s for s in ok if s.ttft_s is not None])),
        "otps": asdict(percentiles([s.otps for s in ok if s.otps is not None], lower_is_worse=True)),
        "e2e_s": asdict(percentiles([s.e2e_s for s in ok])),
        "output_tokens": asdict(percentiles([s.output_tokens for s in ok])),
        "goodput": {
            "requests": goodput,
            "fraction": round(goodput / len(measured), 4) if measured else None,
            "per_minute": per_minute(goodput),
            "targets": {"ttft_s": config.ttft_target_s, "otps": config.otps_target, "e2e_s": config.e2e_target_s},
        },
        "tpm": {
            "settled": settled_tpm,
            "reserved": reserved_tpm,
            "quota": quota,
            "settled_pct_of_quota": round(100 * settled_tpm / quota, 1) if quota and settled_tpm is not None else None,
            "reserved_pct_of_quota": round(100 * reserved_tpm / quota, 1) if quota and reserved_tpm is not None else None,
        },
        "served_latency": {mode: sum(s.served_latency == mode for s in ok) for mode in ("standard", "optimized")},
        "served_tier": {tier: sum(s.served_tier == tier for s in ok)
                        for tier in sorted({s.served_tier for s in ok if s.served_tier is not None})},
        "notes": [
            "times in seconds of model time (wall time x time_scale)" if config.time_scale != 1 else "times in seconds",
            "otps percentiles describe the slow tail: p90 is the rate 90% of requests reach or beat",
            "e2e_s runs from the first attempt to the last byte, SDK retries and backoff included",
            f"requests counts the measured requests; {config.warmup} warm-up requests ran first and are left out",
            "tpm.reserved is input + max_tokens per call, what a call holds while it runs; the unused part is "
            "returned when it ends, so reserved_pct_of_quota can pass 100 with no throttle: "
            "settled_pct_of_quota is what the quota was charged",
        ],
    }


def report_document(config: BenchConfig, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The report's JSON document (<name>.json): the run's settings and its summary."""
    return {"config": asdict(config), "summary": summary}


def write_csv(handle: Any, samples: Iterable[Sample]) -> None:
    """The report's CSV (<name>.csv) to an open text handle (newline=""): a header, one row per request."""
    writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for sample in samples:
        writer.writerow(asdict(sample))

