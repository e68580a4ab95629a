"""One way to build the library's alarms: a metric above a threshold for N periods, missing data
treated as fine (no traffic is no problem), and the user's actions on every alarm. (How a
deploy-time value reaches a threshold or a description intact is in _checks: shown, duration_in.)"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_stepfunctions as sfn

from constructs import Construct

__all__ = ["execution_alarms", "threshold_alarm"]


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


def execution_alarms(
    scope: Construct, machine: sfn.StateMachine, actions: Sequence[cloudwatch.IAlarmAction], *, what: str,
) -> dict[str, cloudwatch.Alarm]:
    """What every construct with a state machine watches: any failed or timed-out execution in five
    minutes (aws-cdk-lib's metric_failed / metric_timed_out, AWS/States ExecutionsFailed and
    ExecutionsTimedOut by StateMachineArn). A run that fails is work lost (a key unanswered, a batch
    not loaded), so the threshold is no failure at all; `what` says what such a run leaves undone."""
    five_minutes = cdk.Duration.minutes(5)
    return {
        "FailedExecutions": threshold_alarm(
            scope, "FailedExecutions", metric=machine.metric_failed(statistic="Sum", period=five_minutes), threshold=0,
            actions=actions,
            description=f"An execution of {what} failed: {_UNDONE}. Read the failed execution's history in the "
                        "Step Functions console (its cause names the state and the error).",
        ),
        "TimedOutExecutions": threshold_alarm(
            scope, "TimedOutExecutions", metric=machine.metric_timed_out(statistic="Sum", period=five_minutes),
            threshold=0, actions=actions,
            description=f"An execution of {what} ran past the state machine's timeout: {_UNDONE}. Raise the timeout "
                        "(StateMachineOptions(timeout=...)) or lower the work per run.",
        ),
    }


_UNDONE = "what it was to do is not done, and nothing retries it by itself"
