"""One way to build the library's alarms: a metric above a threshold for N periods, missing data
treated as fine (no traffic is no problem), and the user's actions on every alarm. Also how a
deploy-time value (a CfnParameter's token) reaches a threshold or a description intact."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from constructs import Construct

from ._checks import Checks, is_token, token_kind

__all__ = ["duration_in", "shown", "threshold_alarm", "token_kind", "token_of_kind"]


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


def shown(value: Any) -> str:
    """A number as a description or expression shows it: '20', or for a deploy-time number the
    reference CloudFormation fills in (never the token's float encoding)."""
    if is_token(value):
        return cdk.Tokenization.stringify_number(value)
    return f"{value:g}"


_CONVERSIONS = {"seconds": "to_seconds", "minutes": "to_minutes", "millis": "to_milliseconds"}


def duration_in(check: Checks, name: str, duration: cdk.Duration, unit: str, *, why: str) -> Any:
    """`duration` as a number of `unit` ("seconds", "minutes" or "millis"), or None after a failure.

    A literal converts; a deploy-time Duration converts only from the same unit, since aws-cdk-lib
    cannot scale a token (it reaches the template as the parameter itself). `why` says what the
    number is for, so the refusal names the prop, the reason and the fix."""
    convert = getattr(duration, _CONVERSIONS[unit])
    if not duration.is_unresolved():
        return convert(integral=False)
    try:
        return convert()
    except Exception:  # aws-cdk-lib: "Duration must be specified as 'Duration.<unit>()' here"
        check.fail(
            f"{name} is a deploy-time Duration in another unit, but {why} in {unit}: build it with "
            f"cdk.Duration.{unit}(parameter.value_as_number)"
        )
        return None


def token_of_kind(check: Checks, name: str, value: Any, expected: str, *, fix: str) -> bool:
    """True when `value` is a deploy-time value of the `expected` kind (it may pass to CloudFormation);
    a deploy-time value of another kind is refused, naming the prop; False for a literal."""
    kind = token_kind(value)
    if kind is None:
        return False
    if kind == expected:
        return True
    check.fail(f"{name} is a deploy-time {kind}, but it takes a {expected}: {fix}")
    return False
