"""Scale a SageMaker real-time endpoint that hosts an LLM: scheduled capacity ahead of known peaks,
target tracking on concurrent requests in between.

A new instance serves nothing for the minutes it takes to download and load its model, so reactive
scaling cannot cover the first minutes of a sharp surge. Two policies work together:

- Scheduled actions raise the minimum capacity `lead_time` before each known peak (a weekday
  opening rush, a launch) and lower it when the peak ends, so instances are loaded when demand
  arrives and not paid for through nights and weekends.
- Target tracking on concurrency (`ConcurrentRequestsPerModel` for a variant,
  `ConcurrentRequestsPerCopy` for an inference component, both high-resolution) follows the load in
  between. Concurrency reflects LLM load; CPU and invocations per minute do not, because one long
  generation occupies a model for seconds at low CPU and counts as one invocation.

Size the target and the peaks with genai_pacer.endpoints.capacity. Serverless inference is refused: it has no
GPUs and adds cold starts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker

from constructs import Construct

from .._internal.alarms import threshold_alarm
from .._internal.checks import Checks, _show, duration_in, is_token, kind_of, shown, token_kind, warn
from .._internal.docs import constructor_doc
from .capacity import (
    MAX_CAPACITY,
    MAX_LOAD_SECONDS,
    MAX_TARGET_CONCURRENCY,
    ConcurrencyTarget,
    LeadTime,
    PeakCapacity,
)
from .llm_endpoint import LlmEndpoint

__all__ = ["EndpointScaling", "PeakWindow", "SCALING_METRICS", "MAX_SCHEDULED_ACTIONS"]

#: What target tracking may follow. Only "concurrency" reflects LLM load; the others need
#: allow_non_concurrency_metric=True.
SCALING_METRICS = ("concurrency", "invocations", "cpu")
#: A variant's CPUUtilization is summed over vCPUs (0..100 each); no SageMaker instance has 256.
_MAX_CPU_PERCENT = 100 * 256

# --- AWS facts (machine-checked in tests/endpoints/test_aws_facts_scaling.py where a model or schema says so) ---
_AAS_MODEL = "botocore data/application-autoscaling/2016-02-06/service-2.json"
_SAGEMAKER_MODEL = "botocore data/sagemaker/2017-07-24/service-2.json"
#: Scheduled actions per scalable target, not adjustable; each peak takes two.
#: https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-quotas.html
MAX_SCHEDULED_ACTIONS = 200
#: A scheduled action's name: at most 256 characters (_AAS_MODEL shape ScheduledActionName).
MAX_SCHEDULED_ACTION_NAME = 256
#: Schedule expressions: "at(yyyy-mm-ddThh:mm:ss)" and "cron(fields)", six fields (minute hour day-of-month month
#: day-of-week year) (_AAS_MODEL, PutScheduledAction Schedule). Day-of-week numbers count Sunday as 1:
#: https://docs.aws.amazon.com/autoscaling/application/userguide/scheduled-scaling-using-cron-expressions.html
AT_FORMAT = "at(%Y-%m-%dT%H:%M:%S)"
CRON_FIELDS = 6
#: Scalable dimensions (_AAS_MODEL enum ScalableDimension) and their resource ids (_AAS_MODEL, RegisterScalableTarget
#: ResourceId: "endpoint/my-end-point/variant/KMeansClustering", "inference-component/my-inference-component").
VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
COMPONENT_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
VARIANT_RESOURCE_ID = "endpoint/{endpoint}/variant/{variant}"
COMPONENT_RESOURCE_ID = "inference-component/{component}"
#: Predefined metric types target tracking uses (_AAS_MODEL enum MetricType); aws-cdk-lib's enum must write these.
PREDEFINED_METRIC_TYPES = {
    ("concurrency", False): "SageMakerVariantConcurrentRequestsPerModelHighResolution",
    ("concurrency", True): "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution",
    ("invocations", False): "SageMakerVariantInvocationsPerInstance",
    ("invocations", True): "SageMakerInferenceComponentInvocationsPerCopy",
}
#: SageMaker names: endpoint and variant (_SAGEMAKER_MODEL shapes EndpointName, VariantName), inference component
#: (shape InferenceComponentName), each at most 63 characters.
ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
VARIANT_NAME = ENDPOINT_NAME
INFERENCE_COMPONENT_NAME = re.compile(r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?")
MAX_SAGEMAKER_NAME = 63
#: The service-linked role Application Auto Scaling uses for SageMaker (the same for every account):
#: https://docs.aws.amazon.com/autoscaling/application/userguide/services-that-can-integrate-sagemaker.html
SERVICE_LINKED_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
#: CloudWatch metrics, namespaces and dimensions (no model lists them; the SageMaker Developer Guide does):
#: https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html and, for the concurrency pair,
#: https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html. A wrong name would
#: leave an alarm without data (NOT_BREACHING): target tracking itself uses the predefined types above.
INVOCATION_NAMESPACE = "AWS/SageMaker"
VARIANT_UTILIZATION_NAMESPACE = "/aws/sagemaker/Endpoints"
COMPONENT_UTILIZATION_NAMESPACE = "/aws/sagemaker/InferenceComponents"
CONCURRENCY_PER_MODEL = "ConcurrentRequestsPerModel"
CONCURRENCY_PER_COPY = "ConcurrentRequestsPerCopy"
#: Requests that found no copy; its alarm is how an inference component leaves zero:
#: https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html
NO_CAPACITY_FAILURES = "NoCapacityInvocationFailures"
#: Dimension names: a variant's metrics carry the endpoint and variant, an inference component's its own name.
ENDPOINT_DIMENSION, VARIANT_NAME_DIMENSION, COMPONENT_NAME_DIMENSION = "EndpointName", "VariantName", "InferenceComponentName"
VARIANT_CPU = "CPUUtilization"
COMPONENT_CPU = "CPUUtilizationNormalized"
#: Burstable T2 instances cannot be auto scaled. No source reachable here confirms it; a wrong guess only refuses
#: a type without GPUs that no LLM endpoint uses.
UNSCALABLE_FAMILY = "ml.t2."
#: The lead when none is given (a library choice: most LLM containers load in 10-15 minutes).
DEFAULT_LEAD_MINUTES = 20
#: The longest lead and cooldown accepted: a day (library bounds that catch unit mistakes).
MAX_LEAD_SECONDS = MAX_COOLDOWN_SECONDS = 24 * 3600
#: Days of weekly schedules the overlap check walks: a year and a week, so each of a zone's clock
#: changes in the year falls inside with a full week of weekdays after it. A library choice.
OVERLAP_CHECK_DAYS = 372

_DAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_CRON = re.compile(r"^cron\((.+)\)$")
_SERVERLESS = (
    "SageMaker Serverless Inference has no GPUs and starts cold, so it suits neither LLM hosting nor sharp "
    "bursts; host the model on a real-time GPU variant (LlmEndpoint) and scale that"
)


@dataclass(frozen=True)
class PeakWindow:
    """A known peak: the capacity to hold from `start` to `end`, in an IANA time zone.

    capacity: required; instances (variant) or copies (inference component) to hold as the minimum
        during the peak; an int or a capacity.PeakCapacity (capacity_for_peak(...)). Must not exceed
        EndpointScaling's max_capacity, and must be above its min_capacity (else the window changes
        nothing).
    start / end: required; one of three forms, the same for both:
        - a time of day, "08:30" or datetime.time(8, 30): a weekly window on `days`. An end at or
          before the start ends on the next day (an overnight window).
        - a datetime: a one-off window (Application Auto Scaling `at()` schedules). A naive datetime
          is read in time_zone; an aware one is converted to it.
        - a cron expression, "cron(0 9 1 * ? *)", fields as Application Auto Scaling takes them
          (minute hour day-of-month month day-of-week year); minute and hour must be single numbers
          so the lead can be subtracted. Overlaps with other windows are not checked for this form.
    time_zone: required; an IANA name such as "Europe/Berlin" or "America/New_York". Peaks follow
        the users' clock, daylight saving included, so there is no default.
    days: weekly windows only: "MON-FRI", "SAT,SUN", ["MON", "WED"] or "*". Default: every day.
    name: names the scheduled actions (letters, digits, - and _). Default: "peak<n>".

    For each window EndpointScaling adds a scheduled action that raises the minimum capacity
    `lead_time` before the start and one that restores the minimum at the end; target tracking
    keeps scaling above the minimum throughout.
    """

    capacity: int | PeakCapacity
    start: str | time | datetime
    end: str | time | datetime
    time_zone: str
    days: str | Sequence[str] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        with Checks("PeakWindow") as check:
            _tokens(check, {p: getattr(self, p) for p in _PEAK_TOKENS}, _PEAK_TOKENS)
            check.raise_if_any()  # a refused token would only repeat below as a wrong type
            capacity = self.capacity.capacity if isinstance(self.capacity, PeakCapacity) else self.capacity
            check.integer(
                "capacity",
                capacity,
                minimum=1,
                maximum=MAX_CAPACITY,
                fix="instances or copies to hold during the peak (capacity.capacity_for_peak(...))",
            )
            if check.text("time_zone", self.time_zone, fix="an IANA name such as 'Europe/Berlin'"):
                _zone(check, self.time_zone)
            if self.name is not None and check.text("name", self.name):
                check.rule(
                    _NAME.match(self.name) is not None,
                    f"name={self.name!r} names scheduled actions: use 1-100 letters, digits, '-' and '_'",
                    id="name.not-action-name",
                )
            kinds = {_kind(self.start), _kind(self.end)}
            if not check.rule(
                len(kinds) == 1 and None not in kinds,
                f"start={self.start!r} and end={self.end!r} must be the same form: two times of day ('08:00' or "
                "datetime.time), two datetimes (a one-off window) or two 'cron(...)' expressions",
                id="start.form-differs-from-end",
            ):
                return
            kind = kinds.pop()
            if kind != "weekly":
                check.rule(
                    self.days is None,
                    f"days={self.days!r} applies to weekly windows (times of day) only; a {kind} window carries its "
                    "own dates: drop days",
                    id="days.not-weekly",
                )
            if kind == "weekly":
                start, end = (
                    _minute_of_day(check, "start", self.start),
                    _minute_of_day(check, "end", self.end),
                )
                if start is not None and end is not None:
                    check.rule(
                        start != end, f"start and end are both {self.start!r}: the window has no length", id="end.same-as-start"
                    )
                _weekdays(check, self.days)
            elif kind == "once":
                if (
                    isinstance(self.start, datetime)
                    and isinstance(self.end, datetime)
                    and check.problems == []
                ):
                    zone = ZoneInfo(self.time_zone)
                    check.rule(
                        _local(self.end, zone) > _local(self.start, zone),
                        f"end={self.end.isoformat()} is not after start={self.start.isoformat()}",
                        id="end.not-after-start",
                    )
            else:
                for prop in ("start", "end"):
                    _cron_fields(check, prop, getattr(self, prop))

    @property
    def min_capacity(self) -> int:
        """The minimum capacity held during the window: an int, or a number token (a Ref in the template)."""
        if isinstance(self.capacity, PeakCapacity):
            return self.capacity.capacity
        return self.capacity if is_token(self.capacity) else int(self.capacity)  # a number token stays a Ref

    @property
    def kind(self) -> str:
        """ "weekly", "once" or "cron"."""
        return _kind(self.start) or ""


_NUMBER = "a number or a number token (CfnParameter(type='Number').value_as_number)"
_STRING = "a string or a string token (CfnParameter.value_as_string)"
_SECONDS = "a cdk.Duration, or cdk.Duration.seconds(parameter.value_as_number) for a deploy-time one"
_LITERAL = "so pass a literal value"
#: Every PeakWindow prop: (the token kind that reaches the template unchanged, or None; what to pass).
_PEAK_TOKENS: dict[str, tuple[str | None, str]] = {
    "capacity": ("a number token", _NUMBER + " (a scheduled action's MinCapacity)"),
    "name": ("a string token", _STRING),
    "start": (None, f"the raise action's time is the start minus the lead and the overlap check compares it, {_LITERAL}"),
    "end": (None, f"the restore action's time and the overlap check are computed from it, {_LITERAL}"),
    "time_zone": (None, f"the overlap check and one-off times are computed in the zone, {_LITERAL}"),
    "days": (None, f"the cron day fields and the overlap check are computed from it, {_LITERAL}"),
}


def _token_kind(value: Any) -> str | None:
    """'a number token', 'a string token', 'a Duration token', 'a list token', or None for a value known at synth."""
    kind = token_kind(value)
    return None if kind is None else f"a {kind} token"


def _tokens(check: Checks, values: dict[str, Any], table: dict[str, tuple[str | None, str]]) -> None:
    """Refuse each token the construct cannot use as given (the table says which kind passes through
    to the template, and why the others must be known at synth), naming the prop and its kind."""
    for prop, value in values.items():
        kind = _token_kind(value)
        passes, say = table[prop]
        if kind is None or kind == passes:
            continue
        if passes is None:
            check.fail(f"{prop} is {kind}, a deploy-time value, but {say}", id=f"{prop}.deploy-time")
        else:
            check.fail(f"{prop} is {kind}; pass {say}", id=f"{prop}.token-kind")


#: Every EndpointScaling prop: (the token kind that reaches the template unchanged, or None; what to pass).
_SCALING_TOKENS: dict[str, tuple[str | None, str]] = {
    "endpoint": ("a string token", "an LlmEndpoint, or an endpoint name: " + _STRING),
    "variant_name": ("a string token", _STRING),
    "inference_component_name": ("a string token", _STRING),
    "max_capacity": ("a number token", _NUMBER),
    "min_capacity": ("a number token", _NUMBER),
    "target_concurrency": ("a number token", _NUMBER + " or a capacity.ConcurrencyTarget"),
    "target_value": ("a number token", _NUMBER),
    "scale_out_cooldown": ("a Duration token", _SECONDS),
    "scale_in_cooldown": ("a Duration token", _SECONDS),
    "lead_time": (None, f"each raise action's time is a peak's start minus the lead, {_LITERAL}"),
    "model_load_time": (
        None,
        f"the lead-time check and the shortfall alarm's evaluation periods are computed from it, {_LITERAL}",
    ),
    "peaks": (None, f"each window becomes scheduled actions checked for overlaps, {_LITERAL}"),
    "metric": (None, f"it picks the tracked metric and the target's limits, {_LITERAL}"),
    "disable_scale_in": (None, f"it decides the policy and a warning, {_LITERAL} (True or False)"),
    "scale_to_zero": (None, f"it decides which resources the construct adds, {_LITERAL} (True or False)"),
    "allow_non_concurrency_metric": (None, f"it decides which metrics are accepted, {_LITERAL} (True or False)"),
    "endpoint_config": (None, "pass the sagemaker.CfnEndpointConfig itself: its variants are checked at synth"),
    "alarm_actions": (None, f"each action is added to the alarms at synth, {_LITERAL} (a list of alarm actions)"),
}


def _duration(
    check: Checks,
    name: str,
    value: Any,
    *,
    minimum: float,
    maximum: float,
    unit: str,
    example: int,
    optional: bool = True,
    fix: str = "",
) -> bool:
    """check.duration between `minimum` and `maximum` seconds; a value that is not a Duration is refused
    with one that would pass: its number in `unit` ("seconds" or "minutes") made whole, or `example` when
    that is out of bounds (the shared check suggests cdk.Duration.seconds(value), which may itself be refused)."""
    if value is not None and not isinstance(value, cdk.Duration):
        per = 60 if unit == "minutes" else 1
        low, high = math.ceil(minimum / per), math.floor(maximum / per)
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        suggested = math.ceil(value) if number and low <= math.ceil(value) <= high else example
        tail = f"; {fix}" if fix else ""
        return check.fail(
            f"{name}={_show(value)} is {kind_of(value)}; pass a cdk.Duration such as cdk.Duration.{unit}({suggested}){tail}", id=f"{name}.type"
        )
    return check.duration(
        name,
        value,
        minimum=cdk.Duration.seconds(minimum),
        maximum=cdk.Duration.seconds(maximum),
        optional=optional,
        fix=fix,
    )


def _kind(value: Any) -> str | None:
    if isinstance(value, datetime):
        return "once"
    if isinstance(value, time):
        return "weekly"
    if isinstance(value, str) and not is_token(value):
        return "cron" if value.strip().startswith("cron(") else "weekly"
    return None


def _zone(check: Checks, name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        check.fail(
            f"time_zone={name!r} is not an IANA time zone; use a name such as 'Europe/Berlin', 'America/New_York' "
            "or 'UTC' (if every name fails, install the tzdata package)", id="time_zone.not-iana"
        )
        return None


def _minute_of_day(check: Checks, prop: str, value: Any) -> int | None:
    if isinstance(value, time):
        if value.second or value.microsecond:
            check.fail(f"{prop}={value.isoformat()} has seconds; schedules run on whole minutes", id=f"{prop}.has-seconds")
            return None
        return value.hour * 60 + value.minute
    match = re.fullmatch(r"(\d{1,2}):(\d{2})", value.strip())
    if not match or int(match[1]) > 23 or int(match[2]) > 59:
        check.fail(f"{prop}={value!r} is not a time of day; write 'HH:MM' in 24-hour form, e.g. '08:30'", id=f"{prop}.not-time-of-day")
        return None
    return int(match[1]) * 60 + int(match[2])


def _weekdays(check: Checks, days: Any) -> list[int] | None:
    """Weekday indexes (0 = Monday) from "MON-FRI", "SAT,SUN", "*" or a list of names."""
    if days is None:
        return list(range(7))
    fix = "use day names MON..SUN: 'MON-FRI', 'SAT,SUN', ['MON', 'WED'] or '*'"
    if isinstance(days, str):
        parts = [p.strip() for p in days.split(",")]
    elif isinstance(days, list | tuple) and all(isinstance(d, str) for d in days):
        parts = [d.strip() for d in days]
    else:
        check.fail(f"days={days!r} is {kind_of(days)}; {fix}", id="days.type")
        return None
    if parts == ["*"]:
        return list(range(7))
    found: list[int] = []
    for part in parts:
        ends = [p.strip().upper() for p in part.split("-")]
        if not ends or len(ends) > 2 or any(e not in _DAYS for e in ends):
            check.fail(
                f"days={days!r}: {part!r} is not a day or a range of days; {fix} (numbers are ambiguous: "
                "cron counts 1 as Sunday)", id="days.not-day"
            )
            return None
        first, last = _DAYS.index(ends[0]), _DAYS.index(ends[-1])
        span = (last - first) % 7
        found.extend((first + i) % 7 for i in range(span + 1))
    if not found:
        check.fail(f"days={days!r} names no day; {fix}", id="days.empty")
        return None
    return sorted(set(found))


def _cron_fields(check: Checks, prop: str, value: str) -> list[str] | None:
    match = _CRON.match(value.strip())
    fields = match[1].split() if match else []
    if len(fields) != CRON_FIELDS:
        check.fail(
            f"{prop}={value!r} is not an Application Auto Scaling cron expression: cron(minute hour "
            "day-of-month month day-of-week year), six fields, e.g. 'cron(0 9 ? * MON-FRI *)'", id=f"{prop}.not-cron"
        )
        return None
    minute, hour = fields[0], fields[1]
    if not (minute.isdigit() and int(minute) <= 59 and hour.isdigit() and int(hour) <= 23):
        check.fail(
            f"{prop}={value!r}: minute and hour must be single numbers so the lead time can be subtracted from the "
            "start; use a weekly window (start='08:30', days=...) for anything else", id=f"{prop}.cron-minute-hour"
        )
        return None
    if (fields[2] == "?") == (fields[4] == "?"):
        check.fail(f"{prop}={value!r}: exactly one of day-of-month and day-of-week must be '?'", id=f"{prop}.cron-day-fields")
        return None
    return fields


def _local(moment: datetime, zone: ZoneInfo) -> datetime:
    """A datetime in `zone`: a naive one is read as local time there, an aware one converted."""
    return moment.replace(tzinfo=zone) if moment.tzinfo is None else moment.astimezone(zone)


def _at(moment: datetime) -> str:
    return moment.strftime(AT_FORMAT)


@constructor_doc
class EndpointScaling(Construct):
    """Target tracking on concurrent requests plus scheduled capacity ahead of known peaks, for a
    SageMaker real-time endpoint's variant (instances) or inference component (copies).

    endpoint: required; an LlmEndpoint, or the name of an endpoint created elsewhere (a literal or a
        token such as `cfn_endpoint.attr_endpoint_name`).
    variant_name: with an endpoint name: the production variant whose instances to scale.
        Default: "AllTraffic" (the name SageMaker's SDK and console give a single variant).
    inference_component_name: with an endpoint name: scale this inference component's copies
        instead of a variant's instances. Default: none.
    max_capacity: required; the most instances (or copies) scaling may run, 1..10,000.
    min_capacity: the fewest instances (or copies). Default: 1, or 0 with scale_to_zero.
    target_concurrency: required with the default metric; the concurrent requests per model (or per
        copy) target tracking holds: a number > 0 or a capacity.ConcurrencyTarget
        (capacity.target_concurrency(...) derives it from the throughput you measured).
    scale_out_cooldown: Default: model_load_time if known, else 10 minutes. Target tracking counts
        capacity still loading as already added, so a long cooldown does not delay a needed
        scale-out; it stops a second one for load that the loading instances will absorb.
    scale_in_cooldown: Default: 15 minutes, so a lull shorter than that does not release an
        instance that takes minutes to load again.
    disable_scale_in: target tracking never removes capacity. Default: False. With peaks it warns:
        capacity raised for a peak would then stay after it.
    peaks: PeakWindow list; each raises the minimum `lead_time` before its start and restores
        min_capacity at its end. Windows whose lead-extended spans overlap are refused (the earlier
        window's end would lower the minimum the later one raised). At most 100. Default: none.
    lead_time: how far ahead of each peak the minimum rises, whole minutes, 1 minute..1 day: a
        cdk.Duration or the LeadTime capacity.lead_time(...) returns. Default: 20 minutes. Refused when
        shorter than model_load_time.
    model_load_time: from scale-out to a serving instance. Default: an LlmEndpoint's startup
        health-check timeout; unknown for an endpoint by name (lead_time then unchecked).
    scale_to_zero: inference components only: min_capacity 0, and a step-scaling policy on
        NoCapacityInvocationFailures that adds a copy when a request finds none. Default: False.
        The cost: requests fail until a copy is loaded, several minutes after the first one
        (a warning annotation says so). An LlmEndpoint must have
        InferenceComponentOptions(min_instances=0) for the instances to go too.
    endpoint_config: the CfnEndpointConfig of an endpoint by name, when it is in your app: a
        serverless variant is then refused and the variant name checked. Default: none.
    metric: "concurrency" (default), or "invocations" (per instance or copy per minute) or "cpu"
        with allow_non_concurrency_metric=True, which leaves a warning annotation. "cpu" tracks a
        variant's CPUUtilization (percent summed over vCPUs: 400 is four busy vCPUs) or an inference
        component's CPUUtilizationNormalized (0..100 of its reservation).
    target_value: the target of an "invocations" or "cpu" metric.
    allow_non_concurrency_metric: Default: False.
    alarm_actions: actions for the alarms. Default: none.

    Deploy-time values (a CfnParameter, an imported value): endpoint, variant_name and
    inference_component_name take a string token; max_capacity, min_capacity, target_concurrency,
    target_value and PeakWindow capacity a number token (each reaches the template as a Ref);
    the cooldowns cdk.Duration.seconds(token). The construct computes with every other prop at
    synth (schedule times, overlap checks, alarm periods), so a token there is refused, naming it.

    Attributes: `scalable_target`, `tracking_policy`, `scale_out_from_zero` (or None),
    `scheduled_action_names`, `target_value`, `resource_id`, `alarms` (name -> Alarm):
    "ConcurrencyAboveTarget" fires when concurrency stays above the target longer than a scale-out
    takes: the endpoint is at max_capacity or cannot add instances (quota, capacity), and with
    scale_to_zero "NoCapacity" is the alarm that wakes the inference component.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        endpoint: LlmEndpoint | str,
        max_capacity: int,
        target_concurrency: float | ConcurrencyTarget | None = None,
        variant_name: str | None = None,
        inference_component_name: str | None = None,
        min_capacity: int | None = None,
        scale_out_cooldown: cdk.Duration | None = None,
        scale_in_cooldown: cdk.Duration | None = None,
        disable_scale_in: bool = False,
        peaks: Sequence[PeakWindow] = (),
        lead_time: cdk.Duration | LeadTime | None = None,
        model_load_time: cdk.Duration | None = None,
        scale_to_zero: bool = False,
        endpoint_config: sagemaker.CfnEndpointConfig | None = None,
        metric: str = "concurrency",
        target_value: float | None = None,
        allow_non_concurrency_metric: bool = False,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, id)
        with Checks("EndpointScaling", scope=self) as check:
            _tokens(check, {p: v for p, v in locals().items() if p in _SCALING_TOKENS}, _SCALING_TOKENS)
            check.raise_if_any()  # a refused token would only repeat below as a wrong type
            if isinstance(lead_time, LeadTime):  # capacity.lead_time(...): whole minutes, checked when built
                lead_time = cdk.Duration.minutes(lead_time.minutes)
            lead_time = lead_time if lead_time is not None else cdk.Duration.minutes(DEFAULT_LEAD_MINUTES)
            if model_load_time is None and isinstance(endpoint, LlmEndpoint):
                implied = endpoint.startup_health_check_timeout
                model_load_time = None if implied.is_unresolved() else implied  # a deploy-time one: unknown
            target = self._check_target(
                check, endpoint, variant_name, inference_component_name, endpoint_config, scale_to_zero
            )
            tracked = self._check_metric(
                check,
                metric,
                target_concurrency,
                target_value,
                allow_non_concurrency_metric,
                target[3] if target is not None else None,
            )
            minimum = self._check_capacity(check, min_capacity, max_capacity, scale_to_zero)
            check.instance("disable_scale_in", disable_scale_in, bool, "True or False")
            for name, value in (
                ("scale_out_cooldown", scale_out_cooldown),
                ("scale_in_cooldown", scale_in_cooldown),
            ):
                if value is not None and _token_kind(value) is not None:  # CloudFormation gets the seconds as a Ref
                    duration_in(check, name, value, "seconds", why="Application Auto Scaling takes cooldowns")
                elif value is not None and _duration(
                    check, name, value, minimum=0, maximum=MAX_COOLDOWN_SECONDS, unit="seconds", example=600,
                    fix="Application Auto Scaling waits whole seconds, up to a day here",
                ):
                    seconds = value.to_seconds(integral=False)
                    check.rule(
                        seconds == int(seconds),
                        f"{name}={value.to_human_string()} is not whole seconds; Application Auto Scaling takes "
                        f"seconds: use cdk.Duration.seconds({math.ceil(seconds)})",
                        id=f"{name}.cooldown-not-whole-seconds",
                    )
            load_ok = _duration(
                check,
                "model_load_time",
                model_load_time,
                minimum=1,
                maximum=MAX_LOAD_SECONDS,
                unit="seconds",
                example=600,
                fix="from scale-out to a serving instance; SageMaker's two startup timeouts allow 2 hours",
            )
            lead_ok = _duration(
                check,
                "lead_time",
                lead_time,
                minimum=60,
                maximum=MAX_LEAD_SECONDS,
                unit="minutes",
                example=DEFAULT_LEAD_MINUTES,
                optional=False,
                fix="how far ahead of each peak the minimum rises, in whole minutes (or capacity.lead_time(...))",
            )
            if lead_ok:
                lead_minutes = lead_time.to_seconds(integral=False) / 60
                lead_ok = check.rule(
                    lead_minutes == int(lead_minutes),
                    f"lead_time={lead_time.to_human_string()} is not whole minutes; schedules fire on whole minutes: "
                    f"use cdk.Duration.minutes({math.ceil(lead_minutes)})",
                    id="lead_time.not-whole-minutes",
                )
            if lead_ok and load_ok and model_load_time is not None and peaks:
                check.rule(
                    lead_time.to_seconds(integral=False) >= model_load_time.to_seconds(integral=False),
                    f"lead_time={lead_time.to_human_string()} is shorter than the model load time "
                    f"({model_load_time.to_human_string()}): capacity raised that late is still loading when the peak "
                    f"starts; use at least cdk.Duration.minutes({math.ceil(model_load_time.to_seconds(integral=False) / 60)}) "
                    "(capacity.lead_time(...) adds a margin)",
                    id="lead_time.below-model-load-time",
                )
            windows = self._check_peaks(check, peaks, minimum, max_capacity, lead_time if lead_ok else None)
            schedules = (
                _plan_schedules(check, windows, int(lead_time.to_minutes()), minimum) if lead_ok else []
            )
            check.instance("scale_to_zero", scale_to_zero, bool, "True or False")
            check.alarm_actions("alarm_actions", alarm_actions)
        # The Checks above raised unless the target, the tracked value and the minimum were all found.
        target = cast(tuple[str, str, dict[str, str], bool], target)
        tracked = cast(float, tracked)
        minimum = cast(int | float, minimum)

        self.resource_id, dimension, self._dimensions, is_component = target
        self.target_value = tracked
        stack = cdk.Stack.of(self)
        # SageMaker scaling always runs as Application Auto Scaling's service-linked role; naming it
        # keeps aws-cdk-lib from creating a role of its own that would never be used.
        role = iam.Role.from_role_arn(
            self,
            "ServiceLinkedRole",
            stack.format_arn(service="iam", region="", resource="role", resource_name=SERVICE_LINKED_ROLE),
            mutable=False,
        )
        self.scalable_target = appscaling.ScalableTarget(
            self,
            "Target",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=self.resource_id,
            scalable_dimension=dimension,
            min_capacity=minimum,
            max_capacity=max_capacity,
            role=role,
        )
        if isinstance(endpoint, LlmEndpoint):  # the target exists only once the endpoint is in service
            self.scalable_target.node.add_dependency(endpoint.scaled_resource)

        load = model_load_time or cdk.Duration.minutes(10)
        self.tracking_policy = self.scalable_target.scale_to_track_metric(
            "Tracking",
            target_value=tracked,
            predefined_metric=self._predefined(metric, is_component),
            custom_metric=self._cpu_metric(is_component) if metric == "cpu" else None,
            scale_out_cooldown=scale_out_cooldown or load,
            scale_in_cooldown=scale_in_cooldown or cdk.Duration.minutes(15),
            disable_scale_in=disable_scale_in or None,
        )
        if metric != "concurrency":
            warn(
                self,
                "non-concurrency-metric",
                f"target tracking follows {metric} (allow_non_concurrency_metric=True): a long generation occupies "
                "a model for seconds at low CPU and counts as one invocation, so this metric lags LLM load; track "
                "concurrency unless you measured otherwise",
            )

        self.scheduled_action_names: list[str] = []
        for action, expression, capacity, time_zone in schedules:
            self.scalable_target.scale_on_schedule(
                action,
                schedule=appscaling.Schedule.expression(expression),
                min_capacity=capacity,
                time_zone=cdk.TimeZone.of(time_zone),
            )
            self.scheduled_action_names.append(action)
        if disable_scale_in and peaks:
            warn(
                self,
                "scale-in-disabled-with-peaks",
                "disable_scale_in=True with peaks: restoring the minimum after a peak does not remove instances "
                "(only target tracking scales in), so capacity raised for a peak stays until you lower it",
            )

        self.scale_out_from_zero: appscaling.StepScalingAction | None = None
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        if scale_to_zero:
            self._scale_to_zero(alarm_actions)
        if metric == "concurrency":
            self._shortfall_alarm(tracked, max_capacity, load, alarm_actions)

    # --- validation ------------------------------------------------------------------------------

    def _check_target(
        self,
        check: Checks,
        endpoint: Any,
        variant_name: Any,
        component_name: Any,
        endpoint_config: Any,
        scale_to_zero: Any,
    ) -> tuple[str, str, dict[str, str], bool] | None:
        """(resource id, scalable dimension, metric dimensions, is an inference component)."""
        if isinstance(endpoint, LlmEndpoint):
            for prop, value in (
                ("variant_name", variant_name),
                ("inference_component_name", component_name),
                ("endpoint_config", endpoint_config),
            ):
                check.rule(
                    value is None,
                    f"{prop} is set with an LlmEndpoint, which knows its own; it would be ignored: drop {prop}",
                    id=f"{prop}.ignored-with-llm-endpoint",
                )
            name, variant, component = (
                endpoint.endpoint_name,
                endpoint.variant_name,
                endpoint.inference_component_name,
            )
            if not is_token(endpoint.instance_type) and endpoint.instance_type.startswith(UNSCALABLE_FAMILY):
                check.fail(
                    f"{endpoint.instance_type} is a burstable T2 type, which SageMaker cannot auto scale; host the "
                    "model on a GPU type", id="endpoint.burstable-instance"
                )
            if scale_to_zero is True and component is not None:
                options_min = endpoint.inference_component_options.min_instances  # type: ignore[union-attr]
                check.rule(
                    options_min == 0,
                    "scale_to_zero=True but the LlmEndpoint keeps at least "
                    f"{options_min} instance(s): copies would go to zero while instances keep running; pass "
                    "InferenceComponentOptions(min_instances=0)",
                    id="scale_to_zero.instances-kept",
                )
        else:
            # a deploy-time name (e.g. CfnEndpoint.attr_endpoint_name) is checked by SageMaker, not here
            if not is_token(endpoint):
                if not check.text("endpoint", endpoint, fix="an LlmEndpoint, or the name of an existing endpoint"):
                    return None
                check.rule(
                    len(endpoint) <= MAX_SAGEMAKER_NAME and ENDPOINT_NAME.fullmatch(endpoint) is not None,
                    f"endpoint={endpoint!r} is not a SageMaker endpoint name (1-63 letters, digits and hyphens)",
                    id="endpoint.not-sagemaker-name",
                )
            check.rule(
                variant_name is None or component_name is None,
                "variant_name and inference_component_name are both set: scale either a variant's instances or an "
                "inference component's copies, one per EndpointScaling",
                id="variant_name.with-inference-component-name",
            )
            for prop, value, pattern in (
                ("variant_name", variant_name, VARIANT_NAME),
                ("inference_component_name", component_name, INFERENCE_COMPONENT_NAME),
            ):
                if value is not None and check.text(prop, value, max_length=MAX_SAGEMAKER_NAME) and not is_token(value):
                    check.rule(
                        pattern.fullmatch(value) is not None,
                        f"{prop}={value!r} is not a SageMaker name (1-63 letters, digits and hyphens)",
                        id=f"{prop}.not-scaling-target-name",
                    )
            name, variant, component = endpoint, variant_name or "AllTraffic", component_name
            if check.instance(
                "endpoint_config",
                endpoint_config,
                sagemaker.CfnEndpointConfig,
                "the sagemaker.CfnEndpointConfig of the endpoint",
                optional=True,
            ):
                self._check_config(check, endpoint_config, variant, component)
        if component is not None:
            return (
                COMPONENT_RESOURCE_ID.format(component=component),
                COMPONENT_DIMENSION,
                {COMPONENT_NAME_DIMENSION: component},
                True,
            )
        check.rule(
            scale_to_zero is not True,
            "scale_to_zero=True needs an inference component: SageMaker scales a variant to zero instances only "
            "through its inference components; host the model as one (InferenceComponentOptions) or keep min_capacity >= 1",
            id="scale_to_zero.without-inference-component",
        )
        return (
            VARIANT_RESOURCE_ID.format(endpoint=name, variant=variant),
            VARIANT_DIMENSION,
            {ENDPOINT_DIMENSION: name, VARIANT_NAME_DIMENSION: variant},
            False,
        )

    def _check_config(
        self, check: Checks, config: sagemaker.CfnEndpointConfig, variant: str, component: str | None
    ) -> None:
        resolved = cdk.Stack.of(config).resolve(config.production_variants)
        variants = resolved if isinstance(resolved, list) else []
        by_name = {v.get("variantName"): v for v in variants if isinstance(v, dict)}
        if any(isinstance(v, dict) and v.get("serverlessConfig") for v in variants):
            check.fail(f"the endpoint config has a serverless variant: {_SERVERLESS}", id="endpoint_config.serverless")
            return
        if component is None and by_name and not is_token(variant):
            check.rule(
                variant in by_name,
                f"variant_name={variant!r} is not a variant of the endpoint config (it has {', '.join(sorted(map(str, by_name)))})",
                id="variant_name.not-in-config",
            )

    def _check_metric(
        self,
        check: Checks,
        metric: Any,
        target_concurrency: Any,
        target_value: Any,
        allow: Any,
        is_component: bool | None,
    ) -> float | None:
        check.instance("allow_non_concurrency_metric", allow, bool, "True or False")
        if not check.one_of(
            "metric",
            metric,
            SCALING_METRICS,
            fix="track 'concurrency': it reflects LLM load; CPU and invocations do not",
        ):
            return None
        if metric == "concurrency":
            check.rule(
                target_value is None,
                "target_value is for the 'invocations' and 'cpu' metrics; with concurrency pass target_concurrency",
                id="target_value.with-concurrency",
            )
            if isinstance(target_concurrency, ConcurrencyTarget):
                return target_concurrency.target_value
            fix = (
                "the concurrent requests per model or copy to hold; derive it with "
                "capacity.target_concurrency(sustained_requests_per_minute=..., latency_seconds=...)"
            )
            if check.number(
                "target_concurrency", target_concurrency, above=0, maximum=MAX_TARGET_CONCURRENCY, fix=fix
            ):
                return float(target_concurrency)
            return target_concurrency if is_token(target_concurrency) else None
        if not check.rule(
            allow is True,
            f"metric={metric!r} as the signal for an LLM endpoint: one generation occupies a model for seconds at low "
            "CPU and counts as one invocation, so the metric lags the load and the endpoint saturates before it "
            "scales; track 'concurrency', or pass allow_non_concurrency_metric=True if you measured that it fits",
            id="metric.not-for-llm",
        ):
            return None
        check.rule(
            target_concurrency is None,
            f"target_concurrency is for the concurrency metric; with metric={metric!r} pass target_value",
            id="target_concurrency.without-concurrency",
        )
        if metric == "cpu" and is_component is not False:
            ok = check.number(
                "target_value",
                target_value,
                above=0,
                maximum=100,
                fix="the CPU utilization per copy to hold, in percent of its reservation (0..100)",
            )
        elif metric == "cpu":
            ok = check.number(
                "target_value",
                target_value,
                above=0,
                maximum=_MAX_CPU_PERCENT,
                fix="the variant's CPUUtilization to hold: percent summed over vCPUs (400 is four busy vCPUs)",
            )
        else:
            ok = check.number(
                "target_value",
                target_value,
                above=0,
                maximum=1e6,
                fix="invocations per instance (or copy) per minute to hold",
            )
        return float(target_value) if ok else (target_value if is_token(target_value) else None)

    def _check_capacity(self, check: Checks, minimum: Any, maximum: Any, scale_to_zero: Any) -> int | float | None:
        """The minimum capacity: an int, or a number token."""
        max_ok = check.integer(
            "max_capacity",
            maximum,
            minimum=1,
            maximum=MAX_CAPACITY,
            fix="the most instances or copies scaling may run (capacity.capacity_for_peak(...))",
        )
        if minimum is None:
            return 0 if scale_to_zero is True else 1
        if not check.integer(
            "min_capacity",
            minimum,
            minimum=0,
            maximum=MAX_CAPACITY,
            fix="the fewest instances or copies to keep",
        ):
            if not is_token(minimum):
                return None
            # a deploy-time minimum reaches MinCapacity and each restore action as a Ref
            return minimum if check.rule(
                scale_to_zero is not True, "min_capacity with scale_to_zero=True: drop min_capacity (scale to zero means 0)", id="min_capacity.deploy-time-with-scale-to-zero"
            ) else None
        if minimum == 0 and scale_to_zero is not True:
            check.fail(
                "min_capacity=0 without scale_to_zero: at zero nothing brings capacity back (target tracking has no "
                "copies to measure); pass scale_to_zero=True (inference components) or min_capacity >= 1", id="min_capacity.zero-without-scale-to-zero"
            )
        if minimum > 0 and scale_to_zero is True:
            check.fail(
                f"min_capacity={minimum} with scale_to_zero=True: drop min_capacity (scale to zero means 0)", id="min_capacity.with-scale-to-zero"
            )
        if max_ok:
            check.rule(minimum <= maximum, f"min_capacity={minimum} exceeds max_capacity={maximum}", id="min_capacity.above-max-capacity")
        return int(minimum)

    def _check_peaks(
        self, check: Checks, peaks: Any, minimum: float | None, maximum: Any, lead: cdk.Duration | None
    ) -> list[tuple[str, PeakWindow]]:
        if not check.each("peaks", peaks, lambda n, v: check.instance(n, v, PeakWindow, "a PeakWindow(...)")):
            return []
        if not check.rule(
            2 * len(peaks) <= MAX_SCHEDULED_ACTIONS,
            f"{len(peaks)} peaks need {2 * len(peaks)} scheduled actions; Application Auto Scaling allows "
            f"{MAX_SCHEDULED_ACTIONS} per scalable target",
            id="peaks.too-many-actions",
        ):
            return []
        windows = [(w.name or f"peak{i + 1}", w) for i, w in enumerate(peaks)]
        names = [n for n, _ in windows]
        for name in sorted({n for n in names if names.count(n) > 1}):
            check.fail(f"two peaks are named {name!r}; scheduled action names must be unique: rename one", id="peaks.duplicate-name")
        for name, window in windows:
            if is_token(window.min_capacity):  # deploy-time capacity: Application Auto Scaling checks it
                continue
            if isinstance(maximum, int) and not isinstance(maximum, bool):
                check.rule(
                    window.min_capacity <= maximum,
                    f"peak {name!r} holds {window.min_capacity} but max_capacity={maximum}: Application Auto Scaling "
                    f"would cap the peak at {maximum}; raise max_capacity or lower the peak's capacity",
                    id="peaks.above-max-capacity",
                )
            if minimum is not None and not is_token(minimum):
                check.rule(
                    window.min_capacity > minimum,
                    f"peak {name!r} holds {window.min_capacity}, not above min_capacity={minimum}: the window "
                    "changes nothing; raise its capacity or drop it",
                    id="peaks.not-above-min-capacity",
                )
        if lead is not None and not check.problems:
            _check_overlaps(check, windows, int(lead.to_minutes()))
            self._warn_past(windows)
            self._warn_unchecked(windows)
        return windows

    def _warn_past(self, windows: list[tuple[str, PeakWindow]]) -> None:
        now = datetime.now(UTC)
        for name, window in windows:
            if window.kind == "once" and _local(window.end, ZoneInfo(window.time_zone)) <= now:  # type: ignore[arg-type]
                warn(
                    self,
                    "peak-in-the-past",
                    f"peak {name!r} ended at {window.end.isoformat()} ({window.time_zone}), before this synth: its "  # type: ignore[union-attr]
                    "one-off scheduled actions will never run; drop or move the window",
                )

    def _warn_unchecked(self, windows: list[tuple[str, PeakWindow]]) -> None:
        crons = [name for name, w in windows if w.kind == "cron"]
        if crons and len(windows) > 1:
            warn(
                self,
                "peak-overlap-unchecked",
                f"peaks {', '.join(map(repr, crons))} are cron expressions, whose overlap with other peaks is not "
                "checked: if one ends while another is running, the minimum drops early",
            )

    # --- resources -------------------------------------------------------------------------------

    def _predefined(self, metric: str, is_component: bool) -> appscaling.PredefinedMetric | None:
        metrics = {
            (
                "concurrency",
                False,
            ): appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION,
            (
                "concurrency",
                True,
            ): appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_CONCURRENT_REQUESTS_PER_COPY_HIGH_RESOLUTION,
            ("invocations", False): appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
            (
                "invocations",
                True,
            ): appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_INVOCATIONS_PER_COPY,
        }
        return metrics.get((metric, is_component))

    def _cpu_metric(self, is_component: bool) -> cloudwatch.Metric:
        if is_component:
            return cloudwatch.Metric(
                namespace=COMPONENT_UTILIZATION_NAMESPACE,
                metric_name=COMPONENT_CPU,
                dimensions_map=self._dimensions,
                statistic="Average",
                period=cdk.Duration.minutes(1),
            )
        return cloudwatch.Metric(
            namespace=VARIANT_UTILIZATION_NAMESPACE,
            metric_name=VARIANT_CPU,
            dimensions_map=self._dimensions,
            statistic="Average",
            period=cdk.Duration.minutes(1),
        )

    def metric_concurrent_requests(self, **props: Any) -> cloudwatch.Metric:
        """The tracked concurrency: requests in flight per model (variant) or per copy. SageMaker
        publishes it for the Minimum and Maximum statistics; the default is the Maximum in each minute."""
        props.setdefault("statistic", "Maximum")
        props.setdefault("period", cdk.Duration.minutes(1))
        name = (
            CONCURRENCY_PER_COPY
            if COMPONENT_NAME_DIMENSION in self._dimensions
            else CONCURRENCY_PER_MODEL
        )
        return cloudwatch.Metric(
            namespace=INVOCATION_NAMESPACE, metric_name=name, dimensions_map=self._dimensions, **props
        )

    def _scale_to_zero(self, actions: Sequence[cloudwatch.IAlarmAction]) -> None:
        """Target tracking cannot leave zero (there is no copy to measure): a request that finds no copy
        raises NoCapacityInvocationFailures, whose alarm adds one copy."""
        self.scale_out_from_zero = appscaling.StepScalingAction(
            self,
            "ScaleOutFromZero",
            scaling_target=self.scalable_target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            cooldown=cdk.Duration.minutes(1),
        )
        self.scale_out_from_zero.add_adjustment(adjustment=1, lower_bound=0)
        self.alarms["NoCapacity"] = threshold_alarm(
            self,
            "NoCapacityAlarm",
            metric=cloudwatch.Metric(
                namespace=INVOCATION_NAMESPACE,
                metric_name=NO_CAPACITY_FAILURES,
                dimensions_map=self._dimensions,
                statistic="Sum",
                period=cdk.Duration.minutes(1),
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="a request found no copy of the inference component: adds one (scale out from zero)",
            actions=[cloudwatch_actions.ApplicationScalingAction(self.scale_out_from_zero), *actions],
        )
        warn(
            self,
            "scale-to-zero",
            "scale_to_zero=True: after an idle period the inference component has no copy, and requests fail "
            "(NoCapacityInvocationFailures) until a new copy is loaded, several minutes after the first one. "
            "Use it for endpoints that tolerate a cold start, never on a user-facing path",
        )

    def _shortfall_alarm(
        self, target: float, maximum: int, load: cdk.Duration, actions: Sequence[cloudwatch.IAlarmAction]
    ) -> None:
        minutes = (
            math.ceil(load.to_seconds(integral=False) / 60) + 5
        )  # a scale-out's load, plus the alarm's own lag
        self.alarms["ConcurrencyAboveTarget"] = threshold_alarm(
            self,
            "ConcurrencyAboveTargetAlarm",
            # Minimum: even the quietest sample of every model stayed above the target, so the
            # alarm is about missing capacity, not a burst that one more minute would absorb.
            metric=self.metric_concurrent_requests(statistic="Minimum"),
            threshold=target,
            periods=minutes,
            actions=actions,
            description=(
                f"concurrency per model stayed above the target for {minutes} minutes, longer than a scale-out takes: "
                f"the endpoint is at max_capacity ({shown(maximum)}) or cannot add instances (quota, insufficient capacity); "
                "raise max_capacity or schedule the peak"
            ),
        )


def _plan_schedules(
    check: Checks, windows: list[tuple[str, PeakWindow]], lead: int, baseline: float | None
) -> list[tuple[str, str, float, str]]:
    """Each window's two scheduled actions: (name, schedule expression, minimum capacity (an int or a
    number token), time zone)."""
    if baseline is None or check.problems:
        return []
    planned: list[tuple[str, str, float, str]] = []
    for name, window in windows:
        if window.kind == "weekly":
            raised, restored = _weekly_expressions(window, lead)
        elif window.kind == "once":
            zone = ZoneInfo(window.time_zone)
            start = _local(window.start, zone)  # type: ignore[arg-type]
            raised = _at((start.astimezone(UTC) - timedelta(minutes=lead)).astimezone(zone))
            restored = _at(_local(window.end, zone))  # type: ignore[arg-type]
        else:
            expressions = _cron_expressions(check, name, window, lead)
            if expressions is None:
                continue
            raised, restored = expressions
        planned.append((f"{name}-raise", raised, window.min_capacity, window.time_zone))
        planned.append((f"{name}-restore", restored, baseline, window.time_zone))
    return planned


def _weekly_expressions(window: PeakWindow, lead: int) -> tuple[str, str]:
    scratch = Checks("PeakWindow")  # the window was validated when it was built
    start = _minute_of_day(scratch, "start", window.start)
    end = _minute_of_day(scratch, "end", window.end)
    days = _weekdays(scratch, window.days)
    # PeakWindow.__post_init__ refused a start, end or days these could not read
    start, end, days = cast(int, start), cast(int, end), cast(list[int], days)

    def cron(minute_of_day: int, day_shift: int) -> str:
        shifted = sorted({(d + day_shift) % 7 for d in days})
        week_day = "*" if len(shifted) == 7 else ",".join(_DAYS[d] for d in shifted)
        return f"cron({minute_of_day % 60} {minute_of_day // 60} ? * {week_day} *)"

    # A lead that crosses midnight raises the minimum the day before; an overnight window ends the next day.
    return cron((start - lead) % 1440, math.floor((start - lead) / 1440)), cron(end, 1 if end <= start else 0)


def _cron_expressions(check: Checks, name: str, window: PeakWindow, lead: int) -> tuple[str, str] | None:
    fields = cast(list[str], _cron_fields(Checks("PeakWindow"), "start", str(window.start)))  # validated when built
    start = int(fields[1]) * 60 + int(fields[0])
    raised, shift = (start - lead) % 1440, math.floor((start - lead) / 1440)
    raise_fields = [str(raised % 60), str(raised // 60), *fields[2:]]
    if shift and fields[4] != "?":  # day-of-week schedule: move each day back
        shifted = _shift_cron_days(fields[4], shift)
        if shifted is None:
            check.fail(
                f"peak {name!r}: its {lead}-minute lead starts the day before, and the day-of-week field "
                f"{fields[4]!r} cannot be shifted; use day names or numbers 1-7 (Sunday = 1), or a weekly window", id="peaks.lead-crosses-day"
            )
            return None
        raise_fields[4] = shifted
    elif shift and fields[2] != "*":
        check.fail(
            f"peak {name!r}: its {lead}-minute lead starts the day before a day-of-month schedule "
            f"({window.start}), which one cron expression cannot say; start the peak later, shorten the lead, or "
            "use a one-off window", id="peaks.lead-crosses-month-day"
        )
        return None
    return f"cron({' '.join(raise_fields)})", str(window.end).strip()


def _shift_cron_days(field: str, shift: int) -> str | None:
    """A cron day-of-week field (names, or 1-7 with Sunday = 1) moved by `shift` days, or None."""
    if field == "*":
        return "*"
    names = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
    parts = []
    for part in field.split(","):
        ends = part.split("-")
        if not all(e.isdigit() and 1 <= int(e) <= 7 or e.upper() in names for e in ends):
            return None
        parts.append("-".join(names[int(e) - 1] if e.isdigit() else e.upper() for e in ends))
    days = _weekdays(Checks("PeakWindow"), ",".join(parts))
    if days is None:
        return None
    return ",".join(_DAYS[(d + shift) % 7] for d in days)


def _today() -> date:
    """The first day the overlap check walks (a function, so tests can pin the year)."""
    return datetime.now(UTC).date()


def _check_overlaps(check: Checks, windows: list[tuple[str, PeakWindow]], lead: int) -> None:
    """Refuse windows whose spans, extended by the lead before their start, overlap on any day: the
    earlier window's restore action would lower the minimum the later window raised.

    Weekly windows are unrolled day by day over the next OVERLAP_CHECK_DAYS days in their own zones
    (zoneinfo), so two zones that change clocks on different dates are compared on the days in
    between too, not only in winter and summer."""
    checked = [(name, w) for name, w in windows if w.kind != "cron"]
    for name, window in checked:
        if window.kind == "weekly":
            _check_self_overlap(check, name, window, lead)
    if len(checked) < 2:
        return
    first = _today()
    found = _overlapping_days(checked, lead, first)
    for (i, j), days in sorted(found.items()):
        (a, one), (b, other) = checked[i], checked[j]
        weeks = {d.isocalendar()[:2] for d in days}
        when = ""
        if one.kind == "weekly" and other.kind == "weekly" and len(weeks) < 52:
            shown = ", ".join(d.isoformat() for d in days[:8]) + (f", ... {days[-1].isoformat()}" if len(days) > 8 else "")
            zones = sorted({one.time_zone, other.time_zone})
            cause = (
                f"when only one of {' and '.join(zones)} has changed its clocks"
                if len(zones) == 2
                else "around a change of clocks"
            )
            when = f" on {len(days)} day(s) of the year from {first.isoformat()} ({shown}, UTC dates), {cause}"
        check.fail(
            f"peaks {a!r} ({_describe(one)}) and {b!r} ({_describe(other)}) overlap once each minimum "
            f"rises {lead} minutes early{when}: the first to end restores the minimum while the other is still "
            "running; merge them into one window with the larger capacity, or move one", id="peaks.overlap"
        )


def _overlapping_days(
    windows: list[tuple[str, PeakWindow]], lead: int, first: date
) -> dict[tuple[int, int], list[date]]:
    """(index, index) of each overlapping pair -> the UTC dates on which their lead-extended spans meet.

    Every occurrence becomes a span in UTC; one sweep over all spans sorted by start finds the pairs."""
    last = first + timedelta(days=OVERLAP_CHECK_DAYS)
    ranges = [(first - timedelta(days=1), last)]
    for _, window in windows:  # weekly occurrences around each one-off, whatever its year
        if window.kind == "once":
            begin, end = _absolute(window, lead)
            ranges.append((begin.date() - timedelta(days=8), min(end.date(), begin.date() + timedelta(days=15)) + timedelta(days=1)))
    spans: list[tuple[datetime, datetime, int]] = []
    for index, (_, window) in enumerate(windows):
        if window.kind == "once":
            begin, end = _absolute(window, lead)
            spans.append((begin, end, index))
            continue
        for low, high in ranges:
            spans.extend((s, e, index) for s, e in _weekly_spans(window, lead, low, high))
    spans.sort()
    found: dict[tuple[int, int], set[date]] = {}
    active: list[tuple[datetime, int]] = []
    for start, end, index in spans:
        active = [(e, i) for e, i in active if e > start]
        for _, other in active:
            if other != index:
                found.setdefault((min(index, other), max(index, other)), set()).add(start.date())
        active.append((end, index))
    return {pair: sorted(days) for pair, days in found.items()}


def _weekly_spans(window: PeakWindow, lead: int, low: date, high: date) -> list[tuple[datetime, datetime]]:
    """A weekly window's lead-extended occurrences starting on local dates low..high, in UTC. The lead is
    taken on the local clock, as the raise action's cron expression is."""
    scratch = Checks("PeakWindow")  # the window was validated when it was built
    start = _minute_of_day(scratch, "start", window.start)
    end = _minute_of_day(scratch, "end", window.end)
    days = set(_weekdays(scratch, window.days) or [])
    start, end = cast(int, start), cast(int, end)  # PeakWindow.__post_init__ refused a start or end these could not read
    zone = ZoneInfo(window.time_zone)
    length = (end - start) % 1440 or 1440
    result = []
    day = low
    while day <= high:
        if day.weekday() in days:
            midnight = datetime.combine(day, time())
            raised = (midnight + timedelta(minutes=start - lead)).replace(tzinfo=zone).astimezone(UTC)
            restored = (midnight + timedelta(minutes=start + length)).replace(tzinfo=zone).astimezone(UTC)
            result.append((raised, restored))
        day += timedelta(days=1)
    return result


def _check_self_overlap(check: Checks, name: str, window: PeakWindow, lead: int) -> None:
    """A weekly window nearly a day long can reach its own next occurrence: the day's restore would
    then lower the minimum the next day's raise has just set."""
    scratch = Checks("PeakWindow")
    start = _minute_of_day(scratch, "start", window.start)
    end = _minute_of_day(scratch, "end", window.end)
    days = _weekdays(scratch, window.days) or []
    if start is None or end is None or len(days) < 2:
        return
    gap = min((days[(i + 1) % len(days)] - day) % 7 or 7 for i, day in enumerate(days)) * 1440
    length = (end - start) % 1440 or 1440
    check.rule(
        length + lead <= gap,
        f"peak {name!r} ({_describe(window)}) lasts {length} minutes and rises {lead} minutes early, so it "
        f"reaches its own next occurrence {gap // 1440} day(s) later: that day's raise comes before the "
        "previous restore, which then drops the minimum; end it earlier, shorten the lead, or hold the "
        "capacity with min_capacity instead",
        id="peaks.reaches-next-occurrence",
    )


def _absolute(window: PeakWindow, lead: int) -> tuple[datetime, datetime]:
    zone = ZoneInfo(window.time_zone)
    start = _local(window.start, zone).astimezone(UTC) - timedelta(minutes=lead)  # type: ignore[arg-type]
    return start, _local(window.end, zone).astimezone(UTC)  # type: ignore[arg-type]


def _describe(window: PeakWindow) -> str:
    if window.kind == "once":
        return f"{window.start.isoformat()} to {window.end.isoformat()} {window.time_zone}"  # type: ignore[union-attr]
    days = window.days if window.days is not None else "every day"
    start = window.start.strftime("%H:%M") if isinstance(window.start, time) else window.start
    end = window.end.strftime("%H:%M") if isinstance(window.end, time) else window.end
    return f"{days} {start}-{end} {window.time_zone}"
