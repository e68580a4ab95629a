"""A synchronous front door for an EXPRESS workflow: a caller sends the input and waits for the output.

ParallelPrompts exists to cut latency on a user's path, where polling a Standard execution adds
seconds and a second request. StartSyncExecution answers in the same request, but only for
EXPRESS workflows, which run at most 5 minutes. The URL uses IAM auth: callers sign with SigV4
and need lambda:InvokeFunctionUrl (`grant_invoke_url`).
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn

from constructs import Construct

from ._checks import Checks
from ._secure import handler_function

__all__ = ["SyncExecutionUrl", "EXPRESS_LIMIT"]

#: The longest an EXPRESS execution runs.
EXPRESS_LIMIT = cdk.Duration.minutes(5)


class SyncExecutionUrl(Construct):
    """A Lambda function URL (AWS_IAM auth) that runs an EXPRESS state machine with StartSyncExecution.

    POST a JSON object (the execution input); the response is the execution's output (200), or its
    error and cause (502 FAILED, 504 TIMED_OUT), or 400 for a body that is not a JSON object.

    state_machine: required; an EXPRESS sfn.StateMachine, e.g. ParallelPrompts(...,
        state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)).state_machine.
    wait: how long the function waits for the execution, 1 s..5 min. Set it at or above the
        workflow's timeout. Default: 5 minutes (the EXPRESS limit).
    max_concurrent_executions: how many executions may run at once (the function's reserved
        concurrency, 1..1000); a request beyond it gets HTTP 429. Set it to the executions a quota
        share was planned for (ModelQuota.share(..., executions=N)). Default: unbounded.
    encryption_key / log_retention: for the function's new log group. Default: a new key with
        rotation; one month.

    Attributes: `function`, `url` (its `url` attribute is the endpoint). Metrics: `metric_errors`,
    `metric_throttles`, `metric_duration` (what a caller waits). An execution that fails or times out
    is a 502 or 504 answer, not a function error: see the state machine's own metrics.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        state_machine: sfn.StateMachine,
        wait: cdk.Duration | None = None,
        max_concurrent_executions: int | None = None,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
    ) -> None:
        super().__init__(scope, id)
        wait = wait or EXPRESS_LIMIT
        with Checks(f"SyncExecutionUrl {id}") as check:
            if check.instance("state_machine", state_machine, sfn.StateMachine, "an sfn.StateMachine built in this app"):
                check.rule(
                    state_machine.state_machine_type == sfn.StateMachineType.EXPRESS,
                    f"state_machine {state_machine.node.path} is {state_machine.state_machine_type.value}; "
                    "StartSyncExecution runs EXPRESS workflows only: build it with "
                    "StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)",
                )
            check.duration(
                "wait", wait, minimum=cdk.Duration.seconds(1), maximum=EXPRESS_LIMIT,
                fix="an EXPRESS execution runs at most 5 minutes",
            )
            check.integer(
                "max_concurrent_executions", max_concurrent_executions, minimum=1, maximum=1000, optional=True,
                fix="it reserves that much of the account's Lambda concurrency (1,000 by default)",
            )
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
        self.function = handler_function(
            self,
            "Function",
            handler="sync_execution.handler.handler",
            environment={"STATE_MACHINE_ARN": state_machine.state_machine_arn},
            # a little above the wait, so the function reports a timed-out execution itself
            timeout=cdk.Duration.seconds(wait.to_seconds() + 10),
            encryption_key=encryption_key,
            log_retention=log_retention,
            reserved_concurrency=max_concurrent_executions,
        )
        state_machine.grant_start_sync_execution(self.function)
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)

    def grant_invoke_url(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller (a role, a function) call the URL."""
        return self.function.grant_invoke_url(grantee)

    def metric_errors(self, **props: Any) -> cloudwatch.Metric:
        """Invocations that failed in the function itself (Sum over 5 minutes by default)."""
        props.setdefault("statistic", "Sum")
        return self.function.metric_errors(**props)

    def metric_throttles(self, **props: Any) -> cloudwatch.Metric:
        """Requests Lambda refused for lack of concurrency (Sum over 5 minutes by default)."""
        props.setdefault("statistic", "Sum")
        return self.function.metric_throttles(**props)

    def metric_duration(self, **props: Any) -> cloudwatch.Metric:
        """How long a caller waits for the workflow's answer, in ms (p90 over 5 minutes by default)."""
        props.setdefault("statistic", "p90")
        return self.function.metric_duration(**props)
