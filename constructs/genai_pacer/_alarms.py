"""One way to build the library's alarms: a metric above a threshold for N periods, missing data
treated as fine (no traffic is no problem), and the user's actions on every alarm. (How a
deploy-time value reaches a threshold or a description intact is in _checks: shown, duration_in.)"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_cloudwatch as cloudwatch

from constructs import Construct

__all__ = ["threshold_alarm"]


def threshold_alarm(
    scope: Construct,
    id: str,
    *,
    metric: cloudwatch.IMetric,
    threshold: float,
    description: str,
    actions: Sequence[cloudwatch.IAlarmAction] = (),
    periods: int = 1,
    comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
) -> cloudwatch.Alarm:
    """An alarm that fires when `metric` breaches `threshold` in `periods` consecutive periods."""
    alarm = cloudwatch.Alarm(
        scope,
        id,
        metric=metric,
        threshold=threshold,
        evaluation_periods=periods,
        datapoints_to_alarm=periods,
        comparison_operator=comparison,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )
    for action in actions:
        alarm.add_alarm_action(action)
    return alarm
