"""Capacity planning for self-hosted model endpoints (pure Python, no CDK import).

A SageMaker endpoint that hosts an LLM scales on concurrency: one long generation occupies a model
for seconds, so the number of requests in flight, not CPU or invocations per minute, says how busy
an instance is. Three figures follow from one measurement and Little's law (requests in flight =
arrival rate x time in the system):

- `target_concurrency`: the concurrent requests per instance (or inference-component copy) that
  target tracking should hold, from the throughput one instance sustains at your latency target.
  That throughput is a figure you measure against your own endpoint (a load test at rising
  concurrency, reading the rate at which latency reaches the target); nothing here guesses it.
- `capacity_for_peak`: the instances (or copies) a known peak needs, from the peak's concurrent
  requests (or its rate and latency) and that target.
- `lead_time`: how long before a peak the minimum capacity must rise, from the model load time:
  an instance added when the surge starts serves nothing until its weights are loaded.

`EndpointScaling` takes these results directly (`target_concurrency=ConcurrencyTarget`,
`PeakWindow(capacity=PeakCapacity)`, `lead_time=LeadTime`).

Every function checks all its inputs at once (genai_pacer._checks): one InvalidPropsError (a
ValueError and a TypeError) lists each bad input with its value, the rule and the fix. Numbers are
finite ints or floats (a bool is not a number); an unresolved CDK token is refused, as a plan needs
the value at synth time. The bounds below keep every result finite and catch unit mistakes.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from .._internal.checks import Checks, is_token, kind_of

__all__ = [
    "ConcurrencyTarget",
    "PeakCapacity",
    "LeadTime",
    "concurrent_requests",
    "target_concurrency",
    "capacity_for_peak",
    "lead_time",
    "MAX_TARGET_CONCURRENCY",
    "MAX_CAPACITY",
    "MAX_LOAD_SECONDS",
]

MIN_LATENCY_SECONDS = 0.001
"""A request takes at least a millisecond; shorter latencies make every concurrency vanish."""
MAX_LATENCY_SECONDS = 3_600.0
"""One hour. SageMaker real-time invocations time out after minutes; more is milliseconds passed as seconds."""
MAX_RATE = 1e12
"""Requests per minute: beyond any endpoint; the bound keeps the arithmetic finite."""
MAX_CONCURRENT_REQUESTS = 1e12
"""Requests in flight at once: beyond any endpoint; the bound keeps the arithmetic finite."""
MAX_TARGET_CONCURRENCY = 10_000
"""Concurrent requests per model or copy: a library bound, not an AWS limit. Model servers admit a few
hundred at once (vLLM's default max_num_seqs is 256, TGI's MAX_CONCURRENT_REQUESTS 128; the bound is a
hundred times wider, so a changed default cannot make it wrong); above 10,000 a rate was passed as a concurrency."""
MAX_CAPACITY = 10_000
"""Instances or copies of one scalable target: far above any SageMaker instance quota; a larger
count is usually a number of requests passed as a number of instances."""
MAX_LOAD_SECONDS = 7_200.0
"""Model load time: SageMaker allows at most one hour to download the model and one hour for the
container's startup health check (botocore data/sagemaker/2017-07-24/service-2.json shapes
ProductionVariantModelDataDownloadTimeoutInSeconds and ...ContainerStartupHealthCheckTimeoutInSeconds,
60..3600 each; checked in tests/endpoints/test_aws_facts_scaling.py)."""
MAX_LEAD_MINUTES = 1_440
"""A lead of at most a day (EndpointScaling's bound): the longest load with the largest margin needs 1,320."""
MAX_HEADROOM = 0.9
"""headroom is a fraction of the measured concurrency: 0.2 is 20%; at 1 the target would be zero."""
MAX_MARGIN = 10.0
"""margin is a fraction: 0.25 is 25%; above 10 (1,000%) a percentage was passed as a fraction."""

_LATENCY_FIX = (
    f"the end-to-end seconds of one request at your latency target, {MIN_LATENCY_SECONDS:g}.."
    f"{MAX_LATENCY_SECONDS:,.0f} (a larger value is usually milliseconds passed as seconds)"
)
_RATE_FIX = f"requests per minute, more than 0 and at most {MAX_RATE:.0e}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(check: Checks, name: str, value: Any, *, fix: str, optional: bool = False, **limits: Any) -> bool:
    """Checks.number, refusing CDK tokens (a plan needs the number at synth time) and ints beyond a float."""
    if is_token(value):  # a Duration token too, which Checks.number would skip as if it were a number token
        kind = "a number token" if isinstance(value, float) else "a string token" if isinstance(value, str) else (
            f"{kind_of(value)} token"
        )
        return check.fail(
            f"{name} is an unresolved CDK token ({kind}, a deploy-time value); the planner needs the number at "
            f"synth time: pass it as a constant or from context; {fix}", id=f"{name}.deploy-time-capacity"
        )
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        return check.fail(f"{name}={_short(value)} is beyond any float's range; {fix}", id=f"{name}.beyond-float")
    return check.number(name, value, fix=fix, optional=optional, **limits)


def _latency(check: Checks, name: str, value: Any, *, optional: bool = False) -> bool:
    return _number(
        check,
        name,
        value,
        minimum=MIN_LATENCY_SECONDS,
        maximum=MAX_LATENCY_SECONDS,
        optional=optional,
        fix=_LATENCY_FIX,
    )


def _rate(check: Checks, name: str, value: Any, *, optional: bool = False) -> bool:
    return _number(check, name, value, above=0, maximum=MAX_RATE, optional=optional, fix=_RATE_FIX)


def _exact(value: float) -> float:
    """Drop float noise (4 x 1.6 is 6.4000000000000004) before rounding up or comparing."""
    return round(value, 9)


def concurrent_requests(requests_per_minute: float, latency_seconds: float) -> float:
    """Requests in flight at a steady rate: rate x time in the system (Little's law).

    900 requests per minute that each take 4 seconds keep 15/s x 4 s = 60 requests in flight.
    """
    with Checks("concurrent_requests") as check:
        _rate(check, "requests_per_minute", requests_per_minute)
        _latency(check, "latency_seconds", latency_seconds)
    return _exact(requests_per_minute / 60 * latency_seconds)


@dataclass(frozen=True)
class ConcurrencyTarget:
    """The concurrency per model or copy that target tracking holds, and where it came from.

    saturation: requests one instance (or copy) holds at once when it runs at your latency target.
    headroom: the share of that saturation kept free, 0..0.9.
    target_value: saturation x (1 - headroom): what `EndpointScaling(target_concurrency=...)` tracks.
    """

    saturation: float
    headroom: float
    target_value: float

    def __post_init__(self) -> None:
        # EndpointScaling takes this object as its target: a hand-built one must be as sound.
        with Checks("ConcurrencyTarget") as check:
            _number(
                check,
                "saturation",
                self.saturation,
                above=0,
                maximum=MAX_CONCURRENT_REQUESTS,
                fix="the concurrent requests one instance holds at the latency target (target_concurrency(...))",
            )
            _number(
                check,
                "headroom",
                self.headroom,
                minimum=0,
                maximum=MAX_HEADROOM,
                fix=f"a fraction of the saturation kept free, 0..{MAX_HEADROOM:g} (0.2 is 20%)",
            )
            if (
                _number(
                    check,
                    "target_value",
                    self.target_value,
                    above=0,
                    maximum=MAX_TARGET_CONCURRENCY,
                    fix=f"concurrent requests per model or copy, more than 0 and at most {MAX_TARGET_CONCURRENCY:,}",
                )
                and not check.problems
            ):  # the relation needs all three numbers valid
                expected = _exact(self.saturation * (1 - self.headroom))
                check.rule(
                    math.isclose(self.target_value, expected, rel_tol=1e-9),
                    f"target_value={self.target_value!r} is not saturation x (1 - headroom) = {expected!r}; "
                    "build it with capacity.target_concurrency(...)",
                    id="target_value.not-derived",
                )


def target_concurrency(
    *, sustained_requests_per_minute: float, latency_seconds: float, headroom: float = 0.2
) -> ConcurrencyTarget:
    """The concurrency per instance (or copy) to track, from a throughput you measured.

    sustained_requests_per_minute: the rate one instance (or one inference-component copy) serves
        while its latency stays at your target, measured against your endpoint.
    latency_seconds: the end-to-end time of one request at that rate (for streaming, until the
        last token: SageMaker's concurrency metrics count a streamed request until it ends).
    headroom: the share kept below saturation. Default: 0.2. Target tracking adds capacity only
        after the metric exceeds the target, and a new instance serves nothing for the minutes its
        model takes to load; the headroom absorbs ordinary surges meanwhile.

    By Little's law the instance holds rate x latency requests at once when saturated; the target
    is that figure reduced by the headroom. Example: 120 requests per minute at 4 seconds each is
    2/s x 4 s = 8 concurrent requests; with 20% headroom the target is 6.4.
    """
    with Checks("target_concurrency") as check:
        _rate(check, "sustained_requests_per_minute", sustained_requests_per_minute)
        _latency(check, "latency_seconds", latency_seconds)
        _number(
            check,
            "headroom",
            headroom,
            minimum=0,
            maximum=MAX_HEADROOM,
            fix=f"a fraction of the saturation kept free, 0..{MAX_HEADROOM:g} (0.2 is 20%)",
        )
    saturation = _exact(sustained_requests_per_minute / 60 * latency_seconds)
    target = _exact(saturation * (1 - headroom))
    with Checks("target_concurrency") as check:
        check.rule(
            0 < target <= MAX_TARGET_CONCURRENCY,
            f"the target works out at {target:g} concurrent requests per instance "
            f"({sustained_requests_per_minute:g} requests per minute x {latency_seconds:g} s x (1 - {headroom:g})), "
            f"outside 0..{MAX_TARGET_CONCURRENCY:,}: check that the rate is per instance and per minute and the "
            "latency in seconds",
            id="target.out-of-range",
        )
    return ConcurrencyTarget(saturation=saturation, headroom=headroom, target_value=target)


@dataclass(frozen=True)
class PeakCapacity:
    """What a known peak needs: `capacity` instances (or copies) holding the target each.

    concurrent_requests: requests in flight at the peak.
    target_concurrency: the concurrency per instance or copy the capacity is sized for.
    capacity: ceil(concurrent_requests / target_concurrency), at least 1; pass it (or this object)
        as `PeakWindow(capacity=...)`.
    """

    concurrent_requests: float
    target_concurrency: float
    capacity: int

    def __post_init__(self) -> None:
        with Checks("PeakCapacity") as check:
            _number(
                check,
                "concurrent_requests",
                self.concurrent_requests,
                minimum=0,
                maximum=MAX_CONCURRENT_REQUESTS,
                fix="requests in flight at the peak (capacity_for_peak(...))",
            )
            _number(
                check,
                "target_concurrency",
                self.target_concurrency,
                above=0,
                maximum=MAX_TARGET_CONCURRENCY,
                fix="the concurrency per model or copy the capacity is sized for",
            )
            _number(
                check,
                "capacity",
                self.capacity,
                minimum=1,
                maximum=MAX_CAPACITY,
                integer=True,
                fix=f"instances or copies, 1..{MAX_CAPACITY:,} (capacity_for_peak(...))",
            )


def capacity_for_peak(
    *,
    target_concurrency: float | ConcurrencyTarget,
    concurrent_requests: float | None = None,
    requests_per_minute: float | None = None,
    latency_seconds: float | None = None,
) -> PeakCapacity:
    """Instances (or copies) a peak needs so each holds at most the target concurrency.

    target_concurrency: the tracked concurrency per instance or copy: a number or a
        ConcurrencyTarget (target_concurrency(...)).
    concurrent_requests: the peak's requests in flight, if you measured them; or instead
    requests_per_minute and latency_seconds: the peak's rate and per-request latency, from which
        Little's law gives the requests in flight.

    Example: a peak of 900 requests per minute at 4 seconds each keeps 60 requests in flight; at a
    target of 6.4 per instance it needs ceil(60 / 6.4) = 10 instances.
    """
    with Checks("capacity_for_peak") as check:
        if isinstance(target_concurrency, ConcurrencyTarget):
            target = target_concurrency.target_value
        else:
            target = target_concurrency
            _number(
                check,
                "target_concurrency",
                target,
                above=0,
                maximum=MAX_TARGET_CONCURRENCY,
                fix="concurrent requests per model or copy, or a capacity.ConcurrencyTarget",
            )
        by_rate = requests_per_minute is not None or latency_seconds is not None
        one_way = check.rule(
            (concurrent_requests is not None) != by_rate,
            "pass either concurrent_requests (measured requests in flight at the peak) or requests_per_minute "
            "with latency_seconds (Little's law derives the requests in flight), not both or neither",
            id="concurrent_requests.one-of-concurrency-or-rate",
        )
        if one_way and concurrent_requests is not None:
            _number(
                check,
                "concurrent_requests",
                concurrent_requests,
                minimum=0,
                maximum=MAX_CONCURRENT_REQUESTS,
                fix="requests in flight at the peak, 0 or more",
            )
        elif one_way:
            check.rule(
                requests_per_minute is not None and latency_seconds is not None,
                "requests_per_minute and latency_seconds go together: pass both, or concurrent_requests instead",
                id="requests_per_minute.without-latency",
            )
            _rate(check, "requests_per_minute", requests_per_minute, optional=True)
            _latency(check, "latency_seconds", latency_seconds, optional=True)
    # Every input is valid here (Checks raised otherwise).
    if concurrent_requests is None:
        concurrent = _exact(float(requests_per_minute) / 60 * float(latency_seconds))  # type: ignore[arg-type]
    else:
        concurrent = float(concurrent_requests)
    capacity = max(1, math.ceil(_exact(concurrent / float(target))))
    with Checks("capacity_for_peak") as check:
        check.rule(
            capacity <= MAX_CAPACITY,
            f"the peak needs {capacity:,} instances ({concurrent:g} requests in flight / {target:g} per instance), "
            f"above {MAX_CAPACITY:,}: check the units (requests per minute, seconds) or raise the target concurrency",
            id="peak.above-max-instances",
        )
    return PeakCapacity(concurrent_requests=concurrent, target_concurrency=float(target), capacity=capacity)


@dataclass(frozen=True)
class LeadTime:
    """How far ahead of a peak the minimum capacity rises.

    load_seconds: the model load time it was derived from.
    margin: the share added on top, for instance provisioning and the scheduled action's own delay.
    minutes: ceil(load x (1 + margin)) in whole minutes (schedules run on whole minutes), at least 1.
    Pass it as `EndpointScaling(lead_time=...)` (or cdk.Duration.minutes(minutes)).
    """

    load_seconds: float
    margin: float
    minutes: int

    def __post_init__(self) -> None:
        # EndpointScaling takes this object as its lead: a hand-built one must be as sound.
        with Checks("LeadTime") as check:
            load_ok = _load_seconds(check, "load_seconds", self.load_seconds)
            margin_ok = _margin(check, self.margin)
            if _number(
                check,
                "minutes",
                self.minutes,
                minimum=1,
                maximum=MAX_LEAD_MINUTES,
                integer=True,
                fix=f"whole minutes of lead, 1..{MAX_LEAD_MINUTES:,} (capacity.lead_time(...))",
            ) and load_ok and margin_ok:
                expected = _lead_minutes(self.load_seconds, self.margin)
                check.rule(
                    self.minutes >= expected,
                    f"minutes={self.minutes} is shorter than load_seconds x (1 + margin) = {expected} minutes; "
                    "build it with capacity.lead_time(...)",
                    id="minutes.below-load-time",
                )


def lead_time(model_load_seconds: float, *, margin: float = 0.25) -> LeadTime:
    """The lead a scheduled scale-out needs so instances are serving when the peak starts.

    model_load_seconds: from the moment capacity is requested to the moment a new instance passes
        its health check (instance start, weight download, load onto the accelerators). Measure it
        from the endpoint's events, or bound it with the startup health-check timeout you configure.
    margin: added on top. Default: 0.25 (a quarter: the load time varies with the instance, the
        weights' S3 throughput and how long the scheduled action takes to fire).

    Example: a 10-minute load with the default margin needs ceil(12.5) = 13 minutes of lead.
    """
    with Checks("lead_time") as check:
        _load_seconds(check, "model_load_seconds", model_load_seconds)
        _margin(check, margin)
    minutes = _lead_minutes(model_load_seconds, margin)
    return LeadTime(load_seconds=float(model_load_seconds), margin=float(margin), minutes=minutes)


def _lead_minutes(load_seconds: float, margin: float) -> int:
    return max(1, math.ceil(_exact(load_seconds * (1 + margin) / 60)))


def _load_seconds(check: Checks, name: str, value: Any) -> bool:
    return _number(
        check,
        name,
        value,
        above=0,
        maximum=MAX_LOAD_SECONDS,
        fix=f"seconds from scale-out to a serving instance, at most {MAX_LOAD_SECONDS:,.0f} (SageMaker's two "
        "one-hour startup timeouts); a larger value is usually milliseconds passed as seconds",
    )


def _margin(check: Checks, value: Any) -> bool:
    return _number(
        check,
        "margin",
        value,
        minimum=0,
        maximum=MAX_MARGIN,
        fix=f"a fraction added to the load time, 0..{MAX_MARGIN:g} (0.25 is 25%)",
    )
