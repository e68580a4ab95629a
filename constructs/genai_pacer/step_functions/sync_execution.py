"""A synchronous front door for an EXPRESS workflow: a caller sends the input and waits for the output.

ParallelPrompts exists to cut latency on a user's path, where polling a Standard execution adds
seconds and a second request. StartSyncExecution answers in the same request, but only for
EXPRESS workflows, which run at most 5 minutes. The URL uses IAM auth: callers sign with SigV4
and need both lambda:InvokeFunctionUrl and lambda:InvokeFunction (`grant_invoke_url` gives both).
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

from .._internal.checks import Checks, warn
from .._internal.docs import constructor_doc
from .._internal.secure import handler_function
from .state_machine import EXPRESS_LIMIT, configured_timeout

__all__ = ["SyncExecutionUrl", "EXPRESS_LIMIT", "READ_MARGIN", "START_RETRY_BUDGET", "URL_INVOKE_ACTIONS"]

#: How much longer than the workflow StartSyncExecution may take to answer: the handler's read
#: timeout is wait + READ_MARGIN, so a workflow that ends at its own timeout is still reported
#: (TIMED_OUT, 504) rather than cut off. Our margin, not an AWS figure.
READ_MARGIN = cdk.Duration.seconds(5)
#: Time the function keeps beyond the read timeout for starts Step Functions refused (throttles,
#: retried with backoff of at most 2 s each, see lambda/sync_execution/handler.py) and its own work.
START_RETRY_BUDGET = cdk.Duration.seconds(10)
#: What a caller of an AWS_IAM function URL created since October 2025 needs (Lambda developer
#: guide, "Control access to Lambda function URLs"); aws-cdk-lib 2.275's grant_invoke_url grants both.
URL_INVOKE_ACTIONS = ("lambda:InvokeFunctionUrl", "lambda:InvokeFunction")


@constructor_doc
class SyncExecutionUrl(Construct):
    """A Lambda function URL (AWS_IAM auth) that runs an EXPRESS state machine with StartSyncExecution.

    POST a JSON object (the execution input). The answer is always an HTTP status with a JSON body,
    never a function error: 200 with the execution's output; 400 for a body that is not a JSON
    object (or input Step Functions refuses); 413 for input above Step Functions' 256 KiB; 429 when
    Step Functions throttled the start (nothing ran; retried by the function first); 502 when the
    execution FAILED (its error and cause), Step Functions failed, or the output cannot be returned;
    504 when it TIMED_OUT or gave no answer within `wait` plus a 5-second margin.

    A start is never repeated once sent: a lost answer would otherwise run (and pay for) the whole
    workflow again. The function's SDK client has its retries off and a read timeout above the
    workflow's, and only starts that provably never ran (throttled, or no connection) are retried.

    state_machine: required; an EXPRESS sfn.StateMachine, e.g. ParallelPrompts(...,
        state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)).state_machine.
    wait: how long a caller waits for the workflow, 1 s..5 min; a deploy-time value (a
        CfnParameter: cdk.Duration.seconds(param.value_as_number)) is accepted, and the function's
        timeout is then sized for the 5-minute maximum. Default: the state machine's timeout when
        a genai-pacer construct built it, else 5 minutes (the EXPRESS limit). A wait shorter than
        the workflow's timeout warns: the caller gets 504 while the workflow runs on.
    max_concurrent_executions: how many executions may run at once (the function's reserved
        concurrency, 1..1000); a request beyond it gets HTTP 429. Set it to the executions a quota
        share was planned for (ModelQuota.share(..., executions=N)). Default: unbounded.
    encryption_key / log_retention: for the function's new log group. Default: the construct's one
        KMS key, with rotation, retained on delete ($1 a month while it exists, AWS KMS pricing page;
        docs/security.md, "KMS keys"); one month.

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
        with Checks("SyncExecutionUrl", scope=self) as check:
            workflow_timeout = None
            if check.instance("state_machine", state_machine, sfn.StateMachine, "an sfn.StateMachine built in this app"):
                check.rule(
                    state_machine.state_machine_type == sfn.StateMachineType.EXPRESS,
                    f"state_machine {state_machine.node.path} is {state_machine.state_machine_type.value}; "
                    "StartSyncExecution runs EXPRESS workflows only: build it with "
                    "StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)",
                    id="state_machine.not-express",
                )
                workflow_timeout = configured_timeout(state_machine)
            wait = wait or _concrete(workflow_timeout) or EXPRESS_LIMIT
            wait_seconds = _wait_seconds(check, wait)
            check.integer(
                "max_concurrent_executions", max_concurrent_executions, minimum=1, maximum=1000, optional=True,
                fix="it reserves that much of the account's Lambda concurrency (1,000 by default)",
            )
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
        if wait_seconds is not None and _concrete(workflow_timeout) is not None:
            self._warn_if_shorter_than_the_workflow(wait, workflow_timeout)  # type: ignore[arg-type]
        # With a deploy-time wait the function is sized for the longest an EXPRESS workflow may run;
        # the handler adds the margin to the wait it reads from its environment.
        longest = wait if wait_seconds is not None else EXPRESS_LIMIT
        self.function = handler_function(
            self,
            "Function",
            handler="sync_execution.handler.handler",
            environment={
                "STATE_MACHINE_ARN": state_machine.state_machine_arn,
                "WAIT_SECONDS": cdk.Token.as_string(wait.to_seconds()) if wait_seconds is None else f"{wait_seconds:g}",
                "READ_MARGIN_SECONDS": f"{READ_MARGIN.to_seconds():g}",
            },
            timeout=cdk.Duration.seconds(longest.to_seconds() + READ_MARGIN.to_seconds() + START_RETRY_BUDGET.to_seconds()),
            encryption_key=encryption_key,
            log_retention=log_retention,
            reserved_concurrency=max_concurrent_executions,
        )
        state_machine.grant_start_sync_execution(self.function)
        self.url = self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM)

    def _warn_if_shorter_than_the_workflow(self, wait: cdk.Duration, workflow_timeout: cdk.Duration) -> None:
        if wait.to_seconds() < workflow_timeout.to_seconds():
            warn(
                self,
                "sync-wait-shorter-than-workflow",
                f"wait={wait.to_human_string()} is shorter than the workflow's timeout of "
                f"{workflow_timeout.to_human_string()}: a caller gets 504 after {wait.to_human_string()} while "
                "the execution runs on (and is paid for) to its end; set wait to the workflow's timeout, or "
                "lower the timeout in StateMachineOptions",
            )

    def grant_invoke_url(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller (a role, a function) call the URL: lambda:InvokeFunctionUrl (for AWS_IAM
        URLs) and lambda:InvokeFunction (only through the URL), as URLs created since October 2025
        require. Returns the second grant, as aws-cdk-lib's Function.grant_invoke_url does."""
        return self.function.grant_invoke_url(grantee)

    def metric_errors(self, **props: Any) -> cloudwatch.Metric:
        """Invocations that failed in the function itself (Sum over 5 minutes by default)."""
        return self.function.metric_errors(**{"statistic": "Sum", **props})

    def metric_throttles(self, **props: Any) -> cloudwatch.Metric:
        """Requests Lambda refused for lack of concurrency (Sum over 5 minutes by default)."""
        return self.function.metric_throttles(**{"statistic": "Sum", **props})

    def metric_duration(self, **props: Any) -> cloudwatch.Metric:
        """How long a caller waits for the workflow's answer, in ms (p90 over 5 minutes by default)."""
        return self.function.metric_duration(**{"statistic": "p90", **props})


def _concrete(duration: cdk.Duration | None) -> cdk.Duration | None:
    """`duration` when it is known at synth, else None (a deploy-time value or nothing)."""
    return duration if duration is not None and not duration.is_unresolved() else None


def _wait_seconds(check: Checks, wait: Any) -> float | None:
    """The wait in seconds when known at synth; None for a deploy-time wait (or an invalid one)."""
    if not check.duration(
        "wait", wait, minimum=cdk.Duration.seconds(1), maximum=EXPRESS_LIMIT,
        fix="an EXPRESS execution runs at most 5 minutes",
    ):
        if isinstance(wait, cdk.Duration) and wait.is_unresolved():
            try:
                wait.to_seconds()
            except RuntimeError:  # jsii: a token can be converted only from the unit it was given in
                check.fail(
                    "wait is a deploy-time value in a unit other than seconds, which cannot be converted at synth; "
                    "pass cdk.Duration.seconds(param.value_as_number)", id="wait.deploy-time-unit"
                )
        return None
    return float(wait.to_seconds(integral=False))
