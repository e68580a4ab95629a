"""Where the seconds and tokens go: a CloudWatch dashboard and alarms for Bedrock models.

Latency is read in two parts: time to first token (prefill, grows with the prompt) and output
tokens per second after it (decode); end-to-end latency is about TTFT + output tokens / OTPS. Each
part has its own fixes, so the dashboard shows them side by side with the answer length, instead
of one average latency that hides which part moved. Quota is read as AWS estimates it
(EstimatedTPMQuotaUsage, an absolute token count that leaves out the start-of-request reservation)
beside the reservation the handlers report (input + max_tokens per call) and the plan, so an
oversized max_tokens shows as a gap between the two.

Sources: AWS/Bedrock by ModelId (every caller and API of the model; TimeToFirstToken only for
ConverseStream and InvokeModelWithResponseStream; for an inference profile, read under every ModelId
value BedrockModel.metric_model_ids gives, since AWS does not document which one a call through a
profile is counted under) and the handlers' own per-call metrics
(pacer_runtime.metrics: this library's workers and any code that calls metrics.emit_call), which
alone know the reservation, the served latency mode and a caller's own streaming OTPS.

    quota = TpmQuota.from_plan(planning.plan_tpm(profile, requests_per_minute=300, call_seconds=6), tpm_quota=400_000)
    dashboard = LatencyDashboard(self, "Latency", models=[WatchedModel(model, quota=quota, burndown=5)])
    dashboard.add_queued_inference(summaries)
    dashboard.add_state_machine(digest)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn

from constructs import Construct

from .._internal.alarms import threshold_alarm
from .._internal.checks import Checks, Default, is_token, resolved, token_kind
from .._internal.docs import constructor_doc
from .._internal.metrics import model_metric
from .._internal.metrics import tier_metric as served_tier_metric
from .._internal.runtime_constants import metrics_constants
from ..models import BedrockModel, as_bedrock_model
from ..quota import planning

__all__ = [
    "BEDROCK_NAMESPACE",
    "HOW_TO_READ",
    "LatencyAlarms",
    "LatencyDashboard",
    "TpmQuota",
    "WatchedModel",
    "bedrock_metric",
    "bedrock_model_metric",
    "handler_metric",
]

# --- AWS/Bedrock runtime metrics ---------------------------------------------------------------------
# Source for each of these unless its comment names another: the Bedrock user guide, "Monitor
# bedrock-runtime inference using CloudWatch metrics",
# https://docs.aws.amazon.com/bedrock/latest/userguide/monitoring-runtime-metrics.html

#: The namespace bedrock-runtime publishes its metrics under.
BEDROCK_NAMESPACE = "AWS/Bedrock"
#: The dimension each runtime metric is published per model under (the page above; AWS's March 2026
#: announcement of TimeToFirstToken and EstimatedTPMQuotaUsage names it for those two as well). Which
#: value it holds for a call through an inference profile is not documented: BedrockModel.metric_model_ids.
MODEL_ID_DIMENSION = "ModelId"
#: Requests accepted for processing (Converse, ConverseStream, InvokeModel, InvokeModelWithResponseStream).
INVOCATIONS = "Invocations"
#: Milliseconds from the request to the last token.
INVOCATION_LATENCY = "InvocationLatency"
#: Throttled requests (counted as neither invocations nor errors).
INVOCATION_THROTTLES = "InvocationThrottles"
INVOCATION_CLIENT_ERRORS = "InvocationClientErrors"
INVOCATION_SERVER_ERRORS = "InvocationServerErrors"
INPUT_TOKEN_COUNT = "InputTokenCount"
OUTPUT_TOKEN_COUNT = "OutputTokenCount"
#: Milliseconds to the first token, streaming operations only (the user guide's "Diagnose
#: InvocationLatency increases using output tokens per second (OTPS)",
#: https://docs.aws.amazon.com/bedrock/latest/userguide/monitoring-runtime-otps.html).
TIME_TO_FIRST_TOKEN = "TimeToFirstToken"
#: Estimated quota tokens per minute, an absolute count (the runtime metrics page; announced March 2026).
ESTIMATED_TPM_QUOTA_USAGE = "EstimatedTPMQuotaUsage"
#: AWS/Bedrock's service tier dimensions: "service tier metrics in Amazon CloudWatch Metrics under
#: ModelId, ServiceTier, and ResolvedServiceTier, where ResolvedServiceTier shows the actual tier that
#: served your requests" (https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html,
#: read in a copy fetched 2026-02-15). The scheme has changed once: the page first said metrics appear
#: "under model-id+priority and model-id+flex". So these are read only by a SEARCH over that exact
#: dimension set, on a graph: if AWS changes the scheme again the graph is empty, never wrong, and no
#: alarm reads them (the tier alarm reads the handlers' own ServedBelowRequestedTier).
SERVICE_TIER_DIMENSION = "ServiceTier"
RESOLVED_SERVICE_TIER_DIMENSION = "ResolvedServiceTier"

# --- CloudWatch limits the combined metrics stay within -------------------------------------------------
#: A metric math alarm retrieves at most 10 metrics (botocore's cloudwatch model, MetricDataQuery: "as
#: many as 10 structures that contain a MetricStat"; CloudWatch user guide, alarm limits:
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html).
MAX_ALARM_METRICS = 10
#: ... and computes at most 10 expressions (the same MetricDataQuery documentation).
MAX_ALARM_EXPRESSIONS = 10
#: A dashboard graph holds at most 500 metrics and expressions, hidden ones included (CloudWatch user
#: guide, "Using math expressions with CloudWatch metrics":
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html).
MAX_GRAPH_METRICS = 500
#: How several ModelId values' series of one metric become one: counts add up; a percentile cannot be
#: added, and the larger of the values' percentiles bounds the combined one from above.
COMBINE = ("SUM", "MAX")

ONE_MINUTE = cdk.Duration.minutes(1)
#: The reservation alarm compares sums over this period: enough calls for a ratio that means something.
RESERVATION_PERIOD = cdk.Duration.minutes(15)
#: CloudWatch evaluates at most one day of periods (1,440 one-minute periods).
MAX_EVALUATION_PERIODS = 1_440
_DASHBOARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")

HOW_TO_READ = """\
## How to read this dashboard

**Latency has two parts.** Time to first token (TTFT) is prefill: the model reads the whole prompt before the first token, so it grows with input length and retrieved context. Output tokens per second (OTPS) is decode: how fast the rest of the answer arrives. End-to-end latency ≈ TTFT + output tokens ÷ OTPS. Compare the graphs before changing a setting:

- **TTFT grew** (prefill): shorten the prompt, send fewer retrieved chunks, cache the stable prefix (prompt caching), or use latency-optimized inference. maxTokens and temperature do nothing here.
- **OTPS fell** (decode): the service generates more slowly; check *served latency mode* (optimized requests served at standard after the optimized quota ran out) and throttling. Prompt length does nothing here.
- **TTFT and OTPS held, latency grew**: the answers got longer (*tokens per call*). Lower maxTokens toward the real p99 answer, or ask for shorter answers.

**Service tiers.** Priority is served ahead of standard, Flex after it, and a Reserved tier reservation overflows to standard. The *served tier* row compares the handlers' latency, TTFT and OTPS per tier that served the calls, and counts calls served below the tier they asked for (Reserved overflowing, Priority served at standard): the handlers' count, and AWS/Bedrock's, which counts every caller's calls (Step Functions tasks run no handler: their calls show there, and each task's answer names its served tier). AWS/Bedrock's own per-tier figures appear only while AWS publishes the ServiceTier and ResolvedServiceTier dimensions, and no alarm reads them.

**Quota.** EstimatedTPMQuotaUsage is an absolute token count (cache writes and the output burndown included), not a percentage, and it leaves out the reservation each request holds from its start: input + maxTokens. The handlers' *reserved tokens* line shows that reservation; far above *settled tokens*, maxTokens is oversized and requests throttle while usage looks low. TimeToFirstToken exists for streaming calls only; AWS/Bedrock's figures mix every caller and API of the model, the handlers' figures are this application's calls only.
"""


def bedrock_metric(model_id: str, metric_name: str, *, statistic: str, label: str | None = None,
                   period: cdk.Duration = ONE_MINUTE) -> cloudwatch.Metric:
    """A metric of AWS/Bedrock for one ModelId value (a model id, profile id or ARN)."""
    return cloudwatch.Metric(namespace=BEDROCK_NAMESPACE, metric_name=metric_name,
                             dimensions_map={MODEL_ID_DIMENSION: model_id},
                             statistic=statistic, label=label, period=period)


def metric_ids(model: BedrockModel) -> tuple[str, ...]:
    """The ModelId values a model's AWS/Bedrock metrics are read under (BedrockModel.metric_model_ids:
    the id the calls pass, then, for an inference profile, its foundation model), refused past what
    one alarm can retrieve."""
    ids = model.metric_model_ids
    with Checks("LatencyDashboard") as check:
        check.rule(
            len(ids) <= MAX_ALARM_METRICS,
            f"model {model.model_id!r} has {len(ids)} ModelId values to read; an alarm retrieves at most "
            f"{MAX_ALARM_METRICS} metrics: watch the model under fewer ids",
            id="model.too-many-model-ids",
        )
    return ids


def bedrock_model_metric(model: BedrockModel, metric_name: str, *, statistic: str, key: str,
                         combine: str = "SUM", label: str | None = None,
                         period: cdk.Duration = ONE_MINUTE) -> cloudwatch.IMetric:
    """One AWS/Bedrock metric of `model`, read under every ModelId value its calls may be counted under.

    A model with one value (a foundation model) gives the plain metric. A profile gives one metric
    per value combined into one series by `combine`: "SUM" for counts (Invocations, throttles, tokens,
    EstimatedTPMQuotaUsage), so the calls are counted whichever value AWS uses; "MAX" for a
    percentile (which cannot be added), an upper bound of the percentile of both together. The sum
    also counts calls made to the foundation model directly (any caller in the account), which errs
    toward an early alarm, never a missed one. `key` prefixes the hidden metrics' ids (key0, key1, ...):
    unique within the expression or widget the result is used in."""
    with Checks("bedrock_model_metric") as check:
        check.one_of("combine", combine, COMBINE, fix='"SUM" for counts, "MAX" for a percentile')
    ids = metric_ids(model)
    if len(ids) == 1:
        return bedrock_metric(ids[0], metric_name, statistic=statistic, label=label, period=period)
    using = {f"{key}{i}": bedrock_metric(model_id, metric_name, statistic=statistic, period=period)
             for i, model_id in enumerate(ids)}
    return cloudwatch.MathExpression(
        expression=f"{combine}([{', '.join(using)}])", using_metrics=using, period=period,
        label=label or f"{metric_name} {statistic} ({combine.lower()} over ModelId {', '.join(ids)})",
    )


def _bedrock_mean(model: BedrockModel, metric_name: str, key: str, period: cdk.Duration = ONE_MINUTE) -> cloudwatch.IMetric:
    """The average of a metric over every call under every ModelId value: the Average of the one
    value, or the sums over the counts of several (an average of averages would weigh a value with
    few calls like one with many)."""
    ids = metric_ids(model)
    if len(ids) == 1:
        return bedrock_metric(ids[0], metric_name, statistic="Average", period=period)
    total = bedrock_model_metric(model, metric_name, statistic="Sum", key=f"{key}sum", period=period)
    count = bedrock_model_metric(model, metric_name, statistic="SampleCount", key=f"{key}n", period=period)
    return cloudwatch.MathExpression(expression=f"{key}s / {key}c", using_metrics={f"{key}s": total, f"{key}c": count},
                                     period=period, label=f"{metric_name} average")


def handler_metric(model_id: str, metric_name: str, *, statistic: str, label: str | None = None,
                   period: cdk.Duration = ONE_MINUTE) -> cloudwatch.Metric:
    """A metric the handlers publish per call (pacer_runtime.metrics), summed over every caller of the model."""
    return model_metric(model_id, metric_name, statistic=statistic, label=label, period=period)


def tier_metric(model_id: str, metric_name: str, tier: str, *, statistic: str, label: str | None = None,
                period: cdk.Duration = ONE_MINUTE) -> cloudwatch.Metric:
    """A per-call metric of the handlers' calls served at one service tier (ModelId and ServedTier)."""
    return served_tier_metric(model_id, tier, metric_name, statistic=statistic, label=label or tier, period=period)


def bedrock_tier_search(model_id: str, metric_name: str, *, statistic: str, name: str) -> cloudwatch.MathExpression:
    """AWS/Bedrock's `metric_name` per requested and served tier of one ModelId value, by a SEARCH over
    the dimension set the service tiers page names (SERVICE_TIER_DIMENSION): empty, not wrong, if
    AWS publishes another scheme. Graphs only: an alarm cannot read a SEARCH."""
    dimensions = ",".join((MODEL_ID_DIMENSION, RESOLVED_SERVICE_TIER_DIMENSION, SERVICE_TIER_DIMENSION))
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{BEDROCK_NAMESPACE},{dimensions}}} MetricName=\"{metric_name}\" "
                   f"{MODEL_ID_DIMENSION}=\"{model_id}\"', '{statistic}', 60)",
        # a dynamic label: each series the SEARCH finds is named by its own tiers
        using_metrics={}, period=ONE_MINUTE,
        label=f"{name}: asked ${{PROP('Dim.{SERVICE_TIER_DIMENSION}')}}, served ${{PROP('Dim.{RESOLVED_SERVICE_TIER_DIMENSION}')}}",
    )


def bedrock_tier_downgrade_search(model_id: str, *, name: str) -> cloudwatch.MathExpression:
    """AWS/Bedrock's Invocations of one ModelId value served below the tier they asked for (each requested
    ServiceTier with each lower ResolvedServiceTier, pacer_runtime.metrics.TIER_RANK), a SEARCH over the
    service tiers page's dimension set. AWS/Bedrock counts every call of the model, whatever made it, so
    this is where the calls of Step Functions tasks (which run no genai-pacer handler to count them) show
    up; empty, not wrong, if AWS publishes another scheme, and graphs only (an alarm cannot read a SEARCH)."""
    rank = metrics_constants().TIER_RANK
    below = " OR ".join(
        f'({SERVICE_TIER_DIMENSION}="{asked}" AND {RESOLVED_SERVICE_TIER_DIMENSION}="{served}")'
        for asked in rank for served in rank if rank[served] < rank[asked]
    )
    dimensions = ",".join((MODEL_ID_DIMENSION, RESOLVED_SERVICE_TIER_DIMENSION, SERVICE_TIER_DIMENSION))
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{BEDROCK_NAMESPACE},{dimensions}}} MetricName=\"{INVOCATIONS}\" "
                   f"{MODEL_ID_DIMENSION}=\"{model_id}\" ({below})', 'Sum', 60)",
        using_metrics={}, period=ONE_MINUTE,
        label=f"{name} (AWS/Bedrock, every caller): asked ${{PROP('Dim.{SERVICE_TIER_DIMENSION}')}}, "
              f"served ${{PROP('Dim.{RESOLVED_SERVICE_TIER_DIMENSION}')}}",
    )


def _from_zero(maximum: float | None = None) -> cloudwatch.YAxisProps:
    """A graph axis from 0, without units: the dashboard's counts, tokens, times and shares are never negative."""
    return cloudwatch.YAxisProps(min=0, max=maximum, show_units=False)


def _graph(title: str, left: Sequence[cloudwatch.IMetric], *, width: int,
           left_y_axis: cloudwatch.YAxisProps | None = None, **props: Any) -> cloudwatch.GraphWidget:
    """A graph whose left axis starts at 0 (_from_zero) unless `left_y_axis` says otherwise."""
    return cloudwatch.GraphWidget(title=title, left=left, left_y_axis=left_y_axis or _from_zero(), width=width, **props)


def _p50_p90(metric: Any, **props: Any) -> list[cloudwatch.IMetric]:
    """A latency's p50 and p90 lines: `metric` is a construct's metric_* method (props: its period)."""
    return [metric(statistic="p50", label="p50", **props), metric(statistic="p90", label="p90", **props)]


def _number(check: Checks, name: str, value: Any, *, synth_time: bool = True, **limits: Any) -> bool:
    """A finite number within limits; a deploy-time token refused where the value is needed at synth."""
    if synth_time and is_token(value):
        return check.fail(f"{name} is a deploy-time token, but it sets an alarm threshold or an annotation at synth: pass a number", id=f"{name}.deploy-time-threshold")
    return check.number(name, value, **limits)


@dataclass(frozen=True)
class TpmQuota:
    """A model's tokens-per-minute quota and plan: the quota alarm and the quota graph's annotations.

    tpm_quota: required; the quota in tokens per minute (Service Quotas: "On-demand (or
        Cross-Region) InvokeModel tokens per minute for <model>").
    alarm_fraction: alarm when EstimatedTPMQuotaUsage exceeds this fraction of the quota, in (0, 1].
        The metric is a token count, so the alarm's threshold is tpm_quota x alarm_fraction tokens.
        A fraction, not a percentage: 80 is refused. Default: 0.8.
    planned_tpm: the TPM the plan needs at peak, e.g. planning.plan_tpm(...).required_tpm. Drawn
        on the quota graph. Default: none.
    planned_reservation_tpm: the tokens the plan's requests hold at peak, reservations included
        (TpmPlan.reservation_peak_tpm): what state machines hold, which publish no per-call
        metrics. Drawn on the quota graph. Default: none.

    burndown: the model's quota tokens per output token, when the quota knows it (a ModelQuota
        does): a WatchedModel with this quota uses it. Default: none (the WatchedModel's own, 1).

    `TpmQuota.from_plan(plan, tpm_quota=...)` fills both planned figures from a planning.TpmPlan;
    `TpmQuota.from_model_quota(quota)` takes the quota, its burndown and its plan from a ModelQuota.
    """

    tpm_quota: float
    alarm_fraction: float = 0.8
    planned_tpm: float | None = None
    planned_reservation_tpm: float | None = None
    burndown: float | None = None

    def __post_init__(self) -> None:
        with Checks("TpmQuota") as check:
            _number(check, "tpm_quota", self.tpm_quota, minimum=1, maximum=planning.MAX_TPM_QUOTA,
                    fix="the model's tokens-per-minute quota from Service Quotas, e.g. 400000")
            fraction = self.alarm_fraction
            if (isinstance(fraction, int | float) and not isinstance(fraction, bool) and not is_token(fraction)
                    and 1 < fraction <= 100):
                check.fail(
                    f"alarm_fraction={fraction!r} looks like a percentage; it is a fraction of the quota in (0, 1]: "
                    f"pass {fraction / 100:g} to alarm at {fraction:g}% of tpm_quota", id="alarm_fraction.percentage"
                )
            else:
                _number(check, "alarm_fraction", fraction, above=0, maximum=1,
                        fix="a fraction of the quota in (0, 1], e.g. 0.8 to alarm at 80% of tpm_quota")
            for name in ("planned_tpm", "planned_reservation_tpm"):
                _number(check, name, getattr(self, name), above=0, maximum=planning.MAX_TPM_QUOTA * 100, optional=True,
                        fix="tokens per minute from a planning.TpmPlan, or None")
            _number(check, "burndown", self.burndown, minimum=1, maximum=planning.MAX_BURNDOWN, optional=True,
                    fix="quota tokens per output token: 1 for most models, 5 for older Anthropic Claude models")

    @classmethod
    def from_plan(cls, plan: planning.TpmPlan, *, tpm_quota: float, alarm_fraction: float = 0.8) -> TpmQuota:
        """The quota with the plan's required TPM and its reservation peak as the planned figures."""
        with Checks("TpmQuota.from_plan") as check:
            check.instance("plan", plan, planning.TpmPlan, "a planning.TpmPlan (planning.plan_tpm(...))")
        return cls(tpm_quota=tpm_quota, alarm_fraction=alarm_fraction, planned_tpm=plan.required_tpm,
                   planned_reservation_tpm=plan.reservation_peak_tpm)

    @classmethod
    def from_model_quota(cls, quota: Any, *, alarm_fraction: float = 0.8) -> TpmQuota:
        """The quota a ModelQuota declares, its burndown, and the TPM its consumers draw at their caps
        as the plan line: the dashboard reads the same plan synth checked. Call it once every share is
        declared (the plan is read now)."""
        from ..quota import ModelQuota

        with Checks("TpmQuota.from_model_quota") as check:
            if check.instance("quota", quota, ModelQuota, "a ModelQuota"):
                check.rule(quota.endpoint == "bedrock-runtime",
                           f"quota={quota.node.id} is a bedrock-mantle quota: the dashboard's quota graph and alarm read "
                           "bedrock-runtime's EstimatedTPMQuotaUsage against one combined TPM; pass a bedrock-runtime "
                           "ModelQuota, or TpmQuota(tpm_quota=...) yourself", id="quota.mantle-dashboard")
        plan = quota.plan()
        return cls(tpm_quota=plan.tpm_quota, alarm_fraction=alarm_fraction, planned_tpm=plan.tpm_at_caps or None,
                   burndown=plan.burndown)

    @property
    def alarm_threshold_tokens(self) -> float:
        """EstimatedTPMQuotaUsage tokens per minute above which the quota alarm fires."""
        return self.tpm_quota * self.alarm_fraction


@dataclass(frozen=True)
class LatencyAlarms:
    """The alarms LatencyDashboard defines for one model; each threshold is a prop, None turns one off.

    ttft_p90: alarm when the p90 time to first token (streaming calls) stays above this budget.
        Default: 2 seconds (a reader notices a longer wait before the first words).
    throttle_periods: alarm when InvocationThrottles is above zero for this many consecutive
        minutes (1..1440). Default: 3 (a short burst the retries absorb is no alarm).
    reservation_ratio: alarm when the tokens the handlers' calls reserve (input + cache +
        maxTokens) exceed this multiple of what they settle (input + cache writes + output x
        burndown), summed over 15 minutes; > 1. Default: 2 (half of the reserved quota unused: size
        maxTokens from the real p99 answer with planning.size_max_tokens).
    latency_fallbacks: alarm when more calls than this per minute asked for optimized latency and
        were served at standard (its quota ran out; billed at standard rates, no error); >= 0.
        Default: 0.
    tier_downgrades: alarm when more of the handlers' calls than this per minute were served below
        the service tier they asked for (a Reserved reservation overflowing to default, Priority
        served at default; no error); >= 0. Default: 0.
    evaluation_periods: consecutive one-minute periods the TTFT, quota and fallback alarms wait
        before firing (1..1440). Default: 5.

    The quota alarm is configured by the model's TpmQuota (alarm_fraction and tpm_quota in tokens).
    """

    # Built when LatencyAlarms is (no jsii object at import); help() shows the code, not '<factory>'.
    ttft_p90: cdk.Duration | None = cast(cdk.Duration, Default("cdk.Duration.seconds(2)", lambda: cdk.Duration.seconds(2)))
    throttle_periods: int | None = 3
    reservation_ratio: float | None = 2.0
    latency_fallbacks: int | None = 0
    evaluation_periods: int = 5
    tier_downgrades: int | None = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ttft_p90", resolved(self.ttft_p90))
        with Checks("LatencyAlarms") as check:
            if is_token(self.ttft_p90):
                check.fail("ttft_p90 is a deploy-time token, but it sets an alarm threshold at synth: pass a cdk.Duration", id="ttft_p90.deploy-time")
            else:
                check.duration("ttft_p90", self.ttft_p90, minimum=cdk.Duration.millis(1), maximum=cdk.Duration.minutes(15),
                               optional=True, fix="a time-to-first-token budget such as cdk.Duration.seconds(2), or None for no alarm")
            _number(check, "throttle_periods", self.throttle_periods, integer=True, minimum=1,
                    maximum=MAX_EVALUATION_PERIODS, optional=True,
                    fix="consecutive minutes with throttles before the alarm, or None for no alarm")
            _number(check, "reservation_ratio", self.reservation_ratio, above=1, maximum=1_000_000, optional=True,
                    fix="reserved / settled tokens above which maxTokens is oversized, e.g. 2; None for no alarm")
            _number(check, "latency_fallbacks", self.latency_fallbacks, integer=True, minimum=0, maximum=1_000_000_000,
                    optional=True, fix="fallbacks per minute the alarm tolerates (0 alarms on the first), or None for no alarm")
            _number(check, "tier_downgrades", self.tier_downgrades, integer=True, minimum=0, maximum=1_000_000_000,
                    optional=True, fix="calls served below their tier per minute the alarm tolerates, or None for no alarm")
            _number(check, "evaluation_periods", self.evaluation_periods, integer=True, minimum=1,
                    maximum=MAX_EVALUATION_PERIODS, fix="consecutive one-minute periods before an alarm fires")


@dataclass(frozen=True)
class WatchedModel:
    """One model on a LatencyDashboard.

    model: required; the model or inference profile. Its AWS/Bedrock metrics are read under each
        of its metric_model_ids (for a profile: the profile id and the foundation model id).
    quota: the model's TpmQuota (quota alarm and annotations). Default: none (no quota alarm: a
        threshold on EstimatedTPMQuotaUsage means nothing without the quota in tokens).
    burndown: quota tokens per output token (1 for most models, 5 for older Claude models), for
        the settled-tokens line and the reservation alarm. Default: the quota's burndown (a TpmQuota
        from a ModelQuota carries it), else 1. A burndown that differs from the quota's is refused.
    alarms: the model's alarm thresholds. Default: LatencyAlarms(); None defines no alarms.
    label: how widgets and alarms name the model. Default: its model_id.
    """

    model: BedrockModel
    quota: TpmQuota | None = None
    burndown: float | None = None
    alarms: LatencyAlarms | None = cast(LatencyAlarms, Default("LatencyAlarms()", LatencyAlarms))  # help() shows this
    label: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "alarms", resolved(self.alarms))
        object.__setattr__(self, "model", as_bedrock_model(self.model))  # an aws_bedrock_alpha IBedrockInvokable too
        with Checks("WatchedModel") as check:
            check.instance("model", self.model, BedrockModel, "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')")
            has_quota = check.instance("quota", self.quota, TpmQuota, "a TpmQuota(tpm_quota=..., alarm_fraction=...)",
                                       optional=True)
            known = self.quota.burndown if has_quota and self.quota is not None else None
            if self.burndown is None:
                object.__setattr__(self, "burndown", known if known is not None else 1.0)
            elif _number(check, "burndown", self.burndown, minimum=1, maximum=planning.MAX_BURNDOWN,
                         fix="quota tokens per output token: 1 for most models, 5 for older Anthropic Claude models") \
                    and known is not None and self.burndown != known:
                check.fail(f"burndown={self.burndown:g} differs from the quota's burndown={known:g}: the settled tokens "
                               "and the reservation alarm would not match the plan; omit burndown to use the quota's", id="burndown.other-than-quota")
            check.instance("alarms", self.alarms, LatencyAlarms, "LatencyAlarms(...), or None for no alarms", optional=True)
            check.text("label", self.label, optional=True, max_length=100,
                       fix="a short name for the model's widgets and alarms")

    @property
    def name(self) -> str:
        if self.label is not None:
            return self.label
        return "model" if is_token(self.model.model_id) else self.model.model_id


@constructor_doc
class LatencyDashboard(Construct):
    """A CloudWatch dashboard (and alarms) of TTFT, latency, OTPS, tokens and quota per Bedrock model.

    models: the models to show, each a BedrockModel or a WatchedModel (quota, burndown, alarms).
        Default: none; add more with add_model.
    dashboard_name: letters, digits, - and _ (1-255). Default: generated by CloudFormation.
    alarm_actions: actions for every alarm the dashboard defines. Default: none.
    default_interval: the time range the dashboard opens with. Default: 3 hours.

    Per model: TTFT and InvocationLatency at p50/p90/p99; output tokens per second from the
    handlers (p50 and the slowest 10%) beside an AWS/Bedrock estimate; input and output tokens per
    call; invocations, throttles, client and server errors; EstimatedTPMQuotaUsage against the
    quota, the alarm threshold and the plan, with the handlers' reserved and settled tokens; served
    latency modes; per served service tier, the handlers' latency, TTFT and OTPS, the calls served
    below the tier they asked for, and AWS/Bedrock's latency per tier where AWS publishes it; and the
    model's alarm states. `add_queued_inference`, `add_state_machine`
    (anything with a .state_machine: BoundedMap, BoundedDistributedMap, ParallelPrompts,
    ScheduledPrecompute, BatchPrecompute), `add_answer_router`, `add_prompt_experiment`,
    `add_sync_execution_url` and `add_endpoint` put the library's other constructs on the same dashboard.

    Attributes: `dashboard`, `alarms` (every alarm), `model_alarms` (model label -> name -> Alarm;
    names TimeToFirstToken, Throttles, QuotaUsage, Reservation, LatencyFallbacks, TierDowngrades).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        models: Sequence[BedrockModel | WatchedModel] = (),
        dashboard_name: str | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
        default_interval: cdk.Duration | None = None,
    ) -> None:
        super().__init__(scope, id)
        with Checks("LatencyDashboard", scope=self) as check:
            if check.text("dashboard_name", dashboard_name, optional=True):
                check.rule(
                    bool(_DASHBOARD_NAME.match(str(dashboard_name))),
                    f"dashboard_name={dashboard_name!r} may hold letters, digits, - and _ only (1-255 characters)",
                    id="dashboard_name.characters",
                )
            if check.instance("models", models, (list, tuple), "a list of BedrockModel or WatchedModel"):
                models = [as_bedrock_model(model, f"models[{i}]") for i, model in enumerate(models)]
                for i, model in enumerate(models):
                    check.instance(f"models[{i}]", model, (BedrockModel, WatchedModel), "a BedrockModel or WatchedModel(...)")
            check.alarm_actions("alarm_actions", alarm_actions)
            if token_kind(default_interval) is not None:
                check.fail("default_interval is a deploy-time value, but the dashboard's opening range is written at "
                           "synth: pass a Duration such as cdk.Duration.hours(3)", id="default_interval.deploy-time")
            check.duration("default_interval", default_interval, minimum=cdk.Duration.minutes(5),
                           maximum=cdk.Duration.days(455), optional=True, fix="how far back the dashboard opens, e.g. 3 hours")
        self._actions = list(alarm_actions)
        self.alarms: list[cloudwatch.Alarm] = []
        self.model_alarms: dict[str, dict[str, cloudwatch.Alarm]] = {}
        self._models: list[WatchedModel] = []
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=dashboard_name, default_interval=default_interval or cdk.Duration.hours(3),
        )
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=HOW_TO_READ, width=24, height=8))
        for model in models:
            self.add_model(model)

    # --- models ----------------------------------------------------------------------------------

    def add_model(self, model: BedrockModel | WatchedModel) -> WatchedModel:
        """Add one model's rows (and alarms) to the dashboard; returns it as a WatchedModel."""
        model = as_bedrock_model(model)
        with Checks("LatencyDashboard.add_model", scope=self) as check:
            check.instance("model", model, (BedrockModel, WatchedModel), "a BedrockModel or WatchedModel(...)")
        watched = model if isinstance(model, WatchedModel) else WatchedModel(model)
        with Checks("LatencyDashboard.add_model", scope=self) as check:
            for other in self._models:
                if not is_token(watched.model.model_id):
                    check.rule(other.model.model_id != watched.model.model_id,
                               f"model {watched.model.model_id!r} is already on the dashboard; add each model once", id="model.added-twice")
                check.rule(other.name != watched.name,
                           f"label {watched.name!r} is taken by another model; give each model its own label", id="label.taken")
        index = len(self._models)
        self._models.append(watched)
        scope = Construct(self, f"Model{index}")
        alarms = self._model_alarms(scope, watched)
        self.model_alarms[watched.name] = alarms
        self.alarms.extend(alarms.values())
        self._model_widgets(watched, alarms)
        return watched

    def _model_widgets(self, watched: WatchedModel, alarms: dict[str, cloudwatch.Alarm]) -> None:
        names = metrics_constants()
        model, model_id, label = watched.model, watched.model.model_id, watched.name
        ids = metric_ids(model)

        def aws(metric: str, statistic: str, key: str, text: str | None = None) -> cloudwatch.IMetric:
            return bedrock_model_metric(model, metric, statistic=statistic, key=key, label=text)

        def own(metric: str, statistic: str, text: str | None = None, period: cdk.Duration = ONE_MINUTE) -> cloudwatch.Metric:
            return handler_metric(model_id, metric, statistic=statistic, label=text, period=period)

        def percentiles(metric: str) -> list[cloudwatch.IMetric]:
            """p50/p90/p99 under each ModelId value, one line each: percentiles cannot be added, and a
            line per value shows which value carries the calls (AWS does not document it for a profile)."""
            return [bedrock_metric(one, metric, statistic=stat, label=stat if len(ids) == 1 else f"{stat} ({one})")
                    for one in ids for stat in ("p50", "p90", "p99")]

        ttft_budget = watched.alarms.ttft_p90 if watched.alarms is not None else None
        ttft = _graph(
            title=f"{label}: time to first token, ms (streaming calls only)",
            left=percentiles(TIME_TO_FIRST_TOKEN),
            left_annotations=[cloudwatch.HorizontalAnnotation(value=ttft_budget.to_milliseconds(), label="p90 budget (alarm)")]
            if ttft_budget is not None else None,
            width=8,
        )
        latency = _graph(f"{label}: invocation latency, ms (request to last token)", percentiles(INVOCATION_LATENCY), width=8)
        aws_otps = cloudwatch.MathExpression(
            expression="(out / inv) / ((lat - ttft) / 1000)",
            using_metrics={
                "out": aws(OUTPUT_TOKEN_COUNT, "Sum", "out"), "inv": aws(INVOCATIONS, "Sum", "inv"),
                "lat": _bedrock_mean(model, INVOCATION_LATENCY, "lat"), "ttft": _bedrock_mean(model, TIME_TO_FIRST_TOKEN, "ttft"),
            },
            label="estimate from AWS/Bedrock averages (mixes streaming and non-streaming calls of every caller)",
            period=ONE_MINUTE,
        )
        otps = _graph(
            title=f"{label}: output tokens per second after the first token (decode)",
            left=[
                own(names.OUTPUT_TOKENS_PER_SECOND, "p50", "handlers' streaming calls, p50"),
                own(names.OUTPUT_TOKENS_PER_SECOND, "p10", "handlers' streaming calls, slowest 10% (p10)"),
                aws_otps,
            ], width=8,
        )
        per_call = _graph(
            title=f"{label}: tokens per call (average)",
            left=[
                cloudwatch.MathExpression(expression="inputs / calls", label="input tokens per call", period=ONE_MINUTE,
                                          using_metrics={"inputs": aws(INPUT_TOKEN_COUNT, "Sum", "inp"),
                                                         "calls": aws(INVOCATIONS, "Sum", "inv")}),
                cloudwatch.MathExpression(expression="outputs / calls", label="output tokens per call", period=ONE_MINUTE,
                                          using_metrics={"outputs": aws(OUTPUT_TOKEN_COUNT, "Sum", "out"),
                                                         "calls": aws(INVOCATIONS, "Sum", "inv")}),
            ], width=8,
        )
        outcomes = _graph(
            title=f"{label}: invocations, throttles and errors per minute",
            left=[aws(INVOCATIONS, "Sum", "inv", "invocations")],
            right=[aws(INVOCATION_THROTTLES, "Sum", "thr", "throttles"),
                   aws(INVOCATION_CLIENT_ERRORS, "Sum", "cli", "client errors"),
                   aws(INVOCATION_SERVER_ERRORS, "Sum", "srv", "server errors")],
            right_y_axis=_from_zero(), width=8,
        )
        modes = _graph(
            title=f"{label}: served latency mode (handlers' calls per minute)",
            left=[own(names.SERVED_OPTIMIZED, "Sum", "served optimized"), own(names.SERVED_STANDARD, "Sum", "served standard"),
                  own(names.OPTIMIZED_SERVED_STANDARD, "Sum", "asked optimized, served standard")], width=8,
        )
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"## {label}", width=24, height=1))
        if len(ids) > 1:
            self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=_ids_note(ids), width=24, height=2))
        self.dashboard.add_widgets(ttft, latency, otps)
        self.dashboard.add_widgets(per_call, outcomes, modes)
        self.dashboard.add_widgets(*self._tier_widgets(watched, alarms))
        quota_row: list[cloudwatch.IWidget] = [self._quota_widget(watched)]
        if alarms:
            quota_row.append(cloudwatch.AlarmStatusWidget(alarms=list(alarms.values()), title=f"{label}: alarms",
                                                          width=8, height=6))
        self.dashboard.add_widgets(*quota_row)

    def _tier_widgets(self, watched: WatchedModel, alarms: dict[str, cloudwatch.Alarm]) -> list[cloudwatch.IWidget]:
        """The served tier row: the handlers' speed per tier that served them, the calls served below the
        tier they asked for, and AWS/Bedrock's latency per tier (a SEARCH: empty if the scheme changed)."""
        names = metrics_constants()
        model_id, label = watched.model.model_id, watched.name
        tiers = names.SERVICE_TIERS
        latency = _graph(
            title=f"{label}: latency and TTFT p90 by served tier, ms (handlers' calls)",
            left=[tier_metric(model_id, names.LATENCY_MS, tier, statistic="p90", label=f"{tier} latency") for tier in tiers]
            + [tier_metric(model_id, names.TIME_TO_FIRST_TOKEN_MS, tier, statistic="p90", label=f"{tier} TTFT") for tier in tiers],
            width=6,
        )
        otps = _graph(
            title=f"{label}: decode speed (OTPS) p50 by served tier (handlers' streaming calls)",
            left=[tier_metric(model_id, names.OUTPUT_TOKENS_PER_SECOND, tier, statistic="p50") for tier in tiers],
            width=6,
        )
        allowed = watched.alarms.tier_downgrades if watched.alarms is not None else None
        below = _graph(
            title=f"{label}: calls served below the tier they asked for (handlers' calls; every caller where AWS publishes it)",
            left=[handler_metric(model_id, names.SERVED_BELOW_REQUESTED_TIER, statistic="Sum", label="calls per minute")]
            # Step Functions tasks run no handler: AWS/Bedrock's own count of every caller's calls shows theirs
            + [bedrock_tier_downgrade_search(one, name=one) for one in metric_ids(watched.model)],
            right=[cloudwatch.MathExpression(
                expression="100 * share", label="share of calls that named a tier, %", period=ONE_MINUTE,
                using_metrics={"share": handler_metric(model_id, names.SERVED_BELOW_REQUESTED_TIER, statistic="Average")})],
            left_annotations=[cloudwatch.HorizontalAnnotation(value=allowed, label="alarm above")]
            if allowed is not None and "TierDowngrades" in alarms else None,
            right_y_axis=_from_zero(100), width=6,
        )
        aws = _graph(
            title=f"{label}: AWS/Bedrock invocation latency p90 by requested and served tier (where published)",
            left=[bedrock_tier_search(one, INVOCATION_LATENCY, statistic="p90", name=one) for one in metric_ids(watched.model)],
            width=6,
        )
        return [latency, otps, below, aws]

    def _quota_widget(self, watched: WatchedModel) -> cloudwatch.GraphWidget:
        names = metrics_constants()
        model_id, label, quota = watched.model.model_id, watched.name, watched.quota
        annotations = []
        if quota is not None:
            annotations += [
                cloudwatch.HorizontalAnnotation(value=quota.tpm_quota, label="TPM quota", color="#d62728"),
                cloudwatch.HorizontalAnnotation(value=quota.alarm_threshold_tokens,
                                                label=f"alarm at {quota.alarm_fraction:.0%} of quota", color="#ff7f0e"),
            ]
            if quota.planned_tpm is not None:
                annotations.append(cloudwatch.HorizontalAnnotation(value=quota.planned_tpm, label="planned TPM", color="#2ca02c"))
            if quota.planned_reservation_tpm is not None:
                annotations.append(cloudwatch.HorizontalAnnotation(
                    value=quota.planned_reservation_tpm, label="planned reservation peak (state machines hold this)",
                    color="#9467bd"))
        return _graph(
            title=f"{label}: quota tokens per minute: AWS estimate vs the handlers' reservation",
            left=[
                bedrock_model_metric(watched.model, ESTIMATED_TPM_QUOTA_USAGE, statistic="Sum", key="quota",
                                     label="EstimatedTPMQuotaUsage (AWS estimate, without reservations)"),
                handler_metric(model_id, names.RESERVED_TOKENS, statistic="Sum",
                               label="reserved by the handlers' calls (input + maxTokens)"),
                self._settled(watched, ONE_MINUTE, "settled by the handlers' calls (input + cache writes + output x burndown)"),
            ],
            left_annotations=annotations or None, width=16, height=6,
        )

    @staticmethod
    def _settled(watched: WatchedModel, period: cdk.Duration, label: str) -> cloudwatch.MathExpression:
        names = metrics_constants()
        model_id = watched.model.model_id
        return cloudwatch.MathExpression(
            expression=f"inp + cw + out * {watched.burndown:g}",
            using_metrics={
                "inp": handler_metric(model_id, names.INPUT_TOKENS, statistic="Sum", period=period),
                "cw": handler_metric(model_id, names.CACHE_WRITE_TOKENS, statistic="Sum", period=period),
                "out": handler_metric(model_id, names.OUTPUT_TOKENS, statistic="Sum", period=period),
            },
            label=label, period=period,
        )

    def _model_alarms(self, scope: Construct, watched: WatchedModel) -> dict[str, cloudwatch.Alarm]:
        settings, quota, label = watched.alarms, watched.quota, watched.name
        model, model_id = watched.model, watched.model.model_id
        names = metrics_constants()
        alarms: dict[str, cloudwatch.Alarm] = {}
        periods = settings.evaluation_periods if settings is not None else 1
        if settings is not None and settings.ttft_p90 is not None:
            budget = settings.ttft_p90
            alarms["TimeToFirstToken"] = self._alarm(
                scope, "TimeToFirstToken",
                bedrock_model_metric(model, TIME_TO_FIRST_TOKEN, statistic="p90", key="ttft", combine="MAX"),
                budget.to_milliseconds(), periods,
                f"{label}: p90 time to first token above {budget.to_human_string()} for {periods} minutes. A prefill "
                "problem: shorten the prompt or the retrieved context, cache the stable prefix, or use latency-optimized "
                "inference. Output settings (maxTokens, temperature) do not help.",
            )
        if settings is not None and settings.throttle_periods is not None:
            n = settings.throttle_periods
            alarms["Throttles"] = self._alarm(
                scope, "Throttles", bedrock_model_metric(model, INVOCATION_THROTTLES, statistic="Sum", key="thr"), 0, n,
                f"{label}: Bedrock throttled calls in each of {n} consecutive minutes. Check the quota graph: a "
                "reservation far above settlement means maxTokens is oversized; otherwise lower the callers' "
                "concurrency (genai_pacer.planning) or raise the quota.",
            )
        if quota is not None:
            alarms["QuotaUsage"] = self._alarm(
                scope, "QuotaUsage", bedrock_model_metric(model, ESTIMATED_TPM_QUOTA_USAGE, statistic="Sum", key="quota"),
                quota.alarm_threshold_tokens, periods,
                f"{label}: EstimatedTPMQuotaUsage above {quota.alarm_threshold_tokens:,.0f} tokens per minute "
                f"({quota.alarm_fraction:.0%} of the {quota.tpm_quota:,.0f} TPM quota) for {periods} minutes. The "
                "estimate leaves out reservations, so throttling can start before it reaches the quota.",
            )
        if settings is not None and settings.reservation_ratio is not None:
            ratio = cloudwatch.MathExpression(
                expression="reserved / settled",
                using_metrics={
                    "reserved": handler_metric(model_id, names.RESERVED_TOKENS, statistic="Sum", period=RESERVATION_PERIOD),
                    "settled": self._settled(watched, RESERVATION_PERIOD, "settled tokens"),
                },
                label="reserved / settled tokens", period=RESERVATION_PERIOD,
            )
            alarms["Reservation"] = self._alarm(
                scope, "Reservation", ratio, settings.reservation_ratio, 1,
                f"{label}: the handlers' calls reserved more than {settings.reservation_ratio:g} x the tokens they "
                "settled over 15 minutes: maxTokens is oversized, and the unused reservation throttles concurrent "
                "calls. Size maxTokens just above the real p99 answer (planning.size_max_tokens).",
            )
        # Calls served short of what they asked for, counted by the handlers: (alarm, the LatencyAlarms prop
        # that allows that many a minute, the metric counting them, what happened to them and why).
        served_short = (
            ("LatencyFallbacks", "latency_fallbacks", names.OPTIMIZED_SERVED_STANDARD,
             "asked for latency-optimized inference and were served at standard, for {periods} minutes: the "
             "optimized quota ran out (no error; billed at standard rates)."),
            ("TierDowngrades", "tier_downgrades", names.SERVED_BELOW_REQUESTED_TIER,
             "were served below the service tier they asked for, for {periods} minutes: a Reserved tier reservation "
             "overflowing to default (raise it, or move traffic off it), or Priority served at default. No error; the "
             "calls ran slower than asked."),
        )
        for name, prop, metric_name, what in served_short:
            allowed = getattr(settings, prop) if settings is not None else None
            if allowed is not None:
                alarms[name] = self._alarm(
                    scope, name, handler_metric(model_id, metric_name, statistic="Sum"), allowed, periods,
                    f"{label}: {f'more than {allowed} calls' if allowed else 'calls'} per minute "
                    + what.format(periods=periods),
                )
        return alarms

    def _alarm(self, scope: Construct, id: str, metric: cloudwatch.IMetric, threshold: float, periods: int,
               description: str) -> cloudwatch.Alarm:
        return threshold_alarm(
            scope, id, metric=metric, threshold=threshold, description=description, actions=self._actions,
            periods=periods,
        )

    # --- the library's other constructs ----------------------------------------------------------

    def _title(self, name: str, title: Any, default: str) -> str:
        with Checks(f"LatencyDashboard.{name}", scope=self) as check:
            check.text("title", title, optional=True, max_length=100)
        return title if title is not None else default

    def _named(self, method: str, argument: str, construct: Any, kind: type, accepted: str, title: Any) -> str:
        """The title of an add_* method's widgets once `construct` is the kind it shows: `title`, else its path."""
        with Checks(f"LatencyDashboard.{method}", scope=self) as check:
            check.instance(argument, construct, kind, accepted)
        return self._title(method, title, construct.node.path)

    def add_queued_inference(self, queued: Any, *, title: str | None = None) -> None:
        """A QueuedInference: queue age and DLQ depth, worker errors and throttles, its calls' tokens,
        reservation, latency and served mode, and its alarms."""
        from ..queue.inference import QueuedInference

        name = self._named("add_queued_inference", "queued", queued, QueuedInference, "a QueuedInference", title)
        queue_metrics: list[cloudwatch.IMetric] = [queued.metric_oldest_message_age(label="oldest message age, s")]
        dead = queued.metric_dead_letters(label="messages in the dead-letter queue")
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"## {name} (queue-driven inference)", width=24, height=1))
        self.dashboard.add_widgets(
            _graph(f"{name}: queue", queue_metrics, right=[dead] if dead is not None else None, width=8),
            _graph(
                title=f"{name}: worker failures (5 minutes)",
                left=[queued.metric_worker_errors(label="failed invocations"),
                      queued.metric_worker_throttles(label="Lambda throttles"),
                      queued.metric_model_throttles(label="model calls throttled", period=cdk.Duration.minutes(5))],
                width=8,
            ),
            _graph(
                title=f"{name}: worker calls, tokens per minute",
                left=[queued.metric_input_tokens(label="input"), queued.metric_output_tokens(label="output"),
                      queued.metric_reserved_tokens(label="reserved (input + maxTokens)")], width=8,
            ),
        )
        self.dashboard.add_widgets(
            _graph(f"{name}: worker call latency, ms (retries included)", _p50_p90(queued.metric_latency), width=8),
            _graph(
                title=f"{name}: served latency mode",
                left=[queued.metric_served_optimized(label="served optimized"), queued.metric_served_standard(label="served standard"),
                      queued.metric_latency_fallbacks(label="asked optimized, served standard")], width=8,
            ),
            cloudwatch.AlarmStatusWidget(alarms=list(queued.alarms.values()), title=f"{name}: alarms", width=8, height=6),
        )

    def add_state_machine(self, workflow: Any, *, title: str | None = None) -> None:
        """A workflow: anything with a `.state_machine` (BoundedMap, BoundedDistributedMap,
        ParallelPrompts, ScheduledPrecompute, BatchPrecompute) or an sfn.StateMachine itself.

        Every workflow: started, failed, timed-out and throttled executions, and execution time. A
        ScheduledPrecompute adds the keys its runs could not answer; a BatchPrecompute adds the records
        its loader wrote and left unanswered, and Bedrock's batch metrics for its model (records
        pending, tokens processed per minute: account-wide, every job of the model in the account and
        Region). Model calls inside a workflow publish no per-call metrics: give the model a TpmQuota
        from the plan to see their reservation."""
        machine = getattr(workflow, "state_machine", workflow)
        with Checks("LatencyDashboard.add_state_machine", scope=self) as check:
            check.instance("workflow", machine, sfn.StateMachine, ACCEPTED_WORKFLOWS)
        name = self._title("add_state_machine", title, getattr(workflow, "node", machine.node).path)
        five = cdk.Duration.minutes(5)
        self.dashboard.add_widgets(
            _graph(
                title=f"{name}: executions (5 minutes)",
                left=[machine.metric_started(statistic="Sum", period=five, label="started")],
                right=[machine.metric_failed(statistic="Sum", period=five, label="failed"),
                       machine.metric_timed_out(statistic="Sum", period=five, label="timed out"),
                       machine.metric_throttled(statistic="Sum", period=five, label="throttled at start")],
                right_y_axis=_from_zero(), width=12,
            ),
            _graph(f"{name}: execution time, ms", _p50_p90(machine.metric_time, period=five), width=12),
        )
        if callable(getattr(workflow, "metric_failed_keys", None)):  # ScheduledPrecompute
            self.dashboard.add_widgets(_graph(
                title=f"{name}: keys a run could not answer (per day)",
                left=[workflow.metric_failed_keys(label="failed keys")], width=24, height=4,
            ))
        if callable(getattr(workflow, "metric_records_loaded", None)):  # BatchPrecompute
            self._batch_widgets(workflow, name)

    def _batch_widgets(self, batch: Any, name: str) -> None:
        """A BatchPrecompute's loaded and unanswered records, and Bedrock's batch metrics for its model
        (BatchPrecompute's own metric methods: the names and their sources live there)."""
        model_id = _batch_model_id(batch)
        self.dashboard.add_widgets(
            _graph(
                title=f"{name}: records loaded into the store and left unanswered (per day)",
                left=[batch.metric_records_loaded(label="loaded"), batch.metric_records_failed(label="errored or missing")],
                width=8,
            ),
            _graph(
                title=f"{name}: Bedrock batch records and tokens pending (account-wide, model {model_id})",
                left=[batch.metric_records_pending(label="records pending, this model"),
                      batch.metric_account_records_pending(label="records pending, every model")],
                right=[batch.metric_tokens_pending(label="tokens pending (Claude models only)")],
                right_y_axis=_from_zero(), width=8,
            ),
            _graph(
                title=f"{name}: Bedrock batch tokens processed per minute (account-wide, model {model_id})",
                left=[batch.metric_input_tokens_processed(label="input"), batch.metric_output_tokens_processed(label="output")],
                width=8,
            ),
        )

    def add_answer_router(self, router: Any, *, title: str | None = None) -> None:
        """An AnswerRouter: the share of requests served from the store (hits), without a stored answer
        (misses) and with one older than the caller accepts (stale), with the counts behind them."""
        from ..precompute.router import AnswerRouter

        name = self._named("add_answer_router", "router", router, AnswerRouter, "an AnswerRouter", title)
        counts = {"hits": router.metric_hits(), "misses": router.metric_misses(), "stale": router.metric_stale()}
        total = "(FILL(hits, 0) + FILL(misses, 0) + FILL(stale, 0))"  # a period without stale answers still has a rate
        rates = [cloudwatch.MathExpression(expression=f"100 * FILL({key}, 0) / {total}", using_metrics=counts,
                                           label=f"{label} (%)", period=cdk.Duration.minutes(5))
                 for key, label in (("hits", "hit rate"), ("misses", "miss rate"), ("stale", "stale rate"))]
        self.dashboard.add_widgets(
            _graph(
                title=f"{name}: answers served from the store, missing and stale, % of requests (5 minutes)",
                left=rates, left_y_axis=_from_zero(100), width=12,
            ),
            _graph(
                title=f"{name}: requests by outcome (5 minutes)",
                left=[router.metric_hits(label="hits"), router.metric_misses(label="misses"),
                      router.metric_stale(label="stale")], width=12,
            ),
        )

    def add_prompt_experiment(self, experiment: Any, *, title: str | None = None) -> None:
        """A PromptExperiment: each variant's p90 latency and failed calls (what its guards read) and the
        guard alarms' states."""
        from ..experiments.prompt_experiment import PromptExperiment

        name = self._named("add_prompt_experiment", "experiment", experiment, PromptExperiment, "a PromptExperiment", title)
        variants = [v.name for v in experiment.variants]
        self.dashboard.add_widgets(
            _graph(
                title=f"{name}: p90 latency per variant, ms",
                left=[experiment.metric_latency(v, label=v) for v in variants], width=8,
            ),
            _graph(
                title=f"{name}: failed calls per variant",
                left=[experiment.metric_errors(v, label=v) for v in variants], width=8,
            ),
            cloudwatch.AlarmStatusWidget(alarms=list(experiment.alarms.values()), title=f"{name}: guard alarms",
                                         width=8, height=6),
        )

    def add_sync_execution_url(self, url: Any, *, title: str | None = None) -> None:
        """A SyncExecutionUrl: what callers wait (p50/p90) and the function's errors and throttles."""
        from ..step_functions.sync_execution import SyncExecutionUrl

        name = self._named("add_sync_execution_url", "url", url, SyncExecutionUrl, "a SyncExecutionUrl", title)
        self.dashboard.add_widgets(
            _graph(f"{name}: what a caller waits, ms", _p50_p90(url.metric_duration), width=12),
            _graph(
                title=f"{name}: function errors and throttles (5 minutes)",
                left=[url.metric_errors(label="errors"), url.metric_throttles(label="throttles")], width=12,
            ),
        )

    def add_endpoint(self, endpoint: Any, *, title: str | None = None) -> None:
        """A self-hosted endpoint (LlmEndpoint or EndpointScaling): concurrent requests per model or
        per copy, the signal its scaling tracks."""
        with Checks("LatencyDashboard.add_endpoint", scope=self) as check:
            check.rule(
                callable(getattr(endpoint, "metric_concurrent_requests", None)) and hasattr(endpoint, "node"),
                f"endpoint={type(endpoint).__name__} has no metric_concurrent_requests(); pass an LlmEndpoint or EndpointScaling",
                id="endpoint.no-concurrency-metric",
            )
        name = self._title("add_endpoint", title, endpoint.node.path)
        self.dashboard.add_widgets(
            _graph(
                title=f"{name}: concurrent requests (queued and streaming requests count)",
                left=[endpoint.metric_concurrent_requests(statistic="Average", label="average"),
                      endpoint.metric_concurrent_requests(statistic="Maximum", label="maximum")], width=24,
            ),
        )


#: What add_state_machine accepts, as its refusal says.
ACCEPTED_WORKFLOWS = ("a workflow with a .state_machine (BoundedMap, BoundedDistributedMap, ParallelPrompts, "
                      "ScheduledPrecompute, BatchPrecompute) or an sfn.StateMachine")


def _batch_model_id(batch: Any) -> str:
    """The ModelId a BatchPrecompute's jobs run under (its model, or inference profile, id)."""
    model = getattr(batch, "model", None) or getattr(batch, "_model", None)
    return str(getattr(model, "model_id", "unknown"))


def _ids_note(ids: Sequence[str]) -> str:
    """What a profile's rows read: AWS/Bedrock under each ModelId value, and how they are combined."""
    shown = " and ".join(f"`{one}`" for one in ids)
    return (f"AWS/Bedrock figures of this profile are read under ModelId {shown}: AWS does not document which "
            "one a call through a profile is counted under. Counts, tokens and EstimatedTPMQuotaUsage are summed "
            "(so they include direct calls of the foundation model); latency shows one line per id; the TTFT "
            "alarm reads the larger p90.")
