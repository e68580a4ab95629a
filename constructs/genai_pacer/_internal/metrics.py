"""The library's own CloudWatch metrics (namespace GenaiPacer): one factory per dimension set.

Names and dimension names are the handlers' own (lambda/pacer_runtime/metrics.py, through
metrics_constants), so a construct's `metric_*` and the dashboard read exactly what is written, and a
renamed dimension changes here once. Each factory takes the metric's name and cloudwatch.Metric's
other props (statistic, period, label, ...); the defaults stay with the `metric_*` that documents them.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_cloudwatch as cloudwatch

from .runtime_constants import metrics_constants

__all__ = [
    "STATE_MACHINE_DIMENSION",
    "function_metric",
    "model_function_metric",
    "model_metric",
    "state_machine_metric",
    "tier_metric",
    "variant_metric",
]

#: The dimension of what a state machine publishes itself (ScheduledPrecompute's PutMetricData state
#: writes PrecomputeFailedKeys under it): the state machine's name.
STATE_MACHINE_DIMENSION = "StateMachine"


def model_metric(model_id: str, metric_name: str, **props: Any) -> cloudwatch.Metric:
    """Every handler's calls of one model (ModelId): what a dashboard sums over all callers."""
    return _metric(metric_name, {metrics_constants().MODEL_DIMENSION: model_id}, props)


def model_function_metric(model_id: str, function_name: str, metric_name: str, **props: Any) -> cloudwatch.Metric:
    """One function's calls of one model (ModelId, FunctionName): a construct's own worker."""
    names = metrics_constants()
    return _metric(metric_name, {names.MODEL_DIMENSION: model_id, names.FUNCTION_DIMENSION: function_name}, props)


def tier_metric(model_id: str, tier: str, metric_name: str, **props: Any) -> cloudwatch.Metric:
    """The calls of one model served at one service tier (ModelId, ServedTier)."""
    names = metrics_constants()
    return _metric(metric_name, {names.MODEL_DIMENSION: model_id, names.SERVED_TIER_DIMENSION: tier}, props)


def variant_metric(model_id: str, experiment: str, variant: str, metric_name: str, **props: Any) -> cloudwatch.Metric:
    """One variant's calls in one experiment (ModelId, Experiment, Variant): an A/B test's arms."""
    names = metrics_constants()
    dimensions = {names.MODEL_DIMENSION: model_id, names.EXPERIMENT_DIMENSION: experiment, names.VARIANT_DIMENSION: variant}
    return _metric(metric_name, dimensions, props)


def function_metric(function_name: str, metric_name: str, **props: Any) -> cloudwatch.Metric:
    """What one function counts apart from model calls (FunctionName): a router's hits, a loader's records."""
    return _metric(metric_name, {metrics_constants().FUNCTION_DIMENSION: function_name}, props)


def state_machine_metric(state_machine_name: str, metric_name: str, **props: Any) -> cloudwatch.Metric:
    """What one state machine publishes itself (StateMachine)."""
    return _metric(metric_name, {STATE_MACHINE_DIMENSION: state_machine_name}, props)


def _metric(metric_name: str, dimensions: dict[str, str], props: dict[str, Any]) -> cloudwatch.Metric:
    return cloudwatch.Metric(namespace=metrics_constants().NAMESPACE, metric_name=metric_name,
                             dimensions_map=dimensions, **props)
