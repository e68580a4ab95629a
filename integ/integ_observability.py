"""Integration test: the latency dashboard and its alarms exist as synthesized, read back from CloudWatch.

One test case: a LatencyDashboard over the test model with a TPM quota (so the quota alarm is
defined too) and a small QueuedInference added to it. Assertions: GetDashboard returns the
dashboard with the Bedrock TTFT, latency and throttle metrics in its body; DescribeAlarms returns
every alarm the construct lists in `alarms`, each by name. CloudFormation accepting the dashboard
body and the metric math is what this verifies beyond the offline template tests.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer import QueuedInference, planning  # noqa: E402
from genai_pacer.observability import LatencyDashboard, TpmQuota, WatchedModel  # noqa: E402

from integ._support import destroy_on_delete, model, new_app  # noqa: E402

#: AWS/Bedrock metric names the dashboard body must carry.
METRICS = ("TimeToFirstToken", "InvocationLatency", "InvocationThrottles", "EstimatedTPMQuotaUsage")


class ObservabilityStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        bedrock = model(self)
        profile = planning.TokenProfile(input_tokens=200, output_tokens=50, max_tokens=100, burndown=1)
        plan = planning.plan_tpm(profile, requests_per_minute=10, call_seconds=2)
        self.dashboard = LatencyDashboard(
            self,
            "Latency",
            models=[WatchedModel(bedrock, quota=TpmQuota.from_plan(plan, tpm_quota=100_000))],
        )
        queued = QueuedInference(self, "Worker", model=bedrock, max_concurrency=2, batch_size=1, max_output_tokens=100)
        self.dashboard.add_queued_inference(queued)
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = ObservabilityStack(app, "IntegObservability")
    integ = IntegTest(app, "Observability", test_cases=[stack], stack_update_workflow=False)
    dashboard = stack.dashboard
    body = "".join(f"(?=[\\s\\S]*{name})" for name in METRICS)  # every name, in any order
    integ.assertions.aws_api_call(
        "CloudWatch", "getDashboard", {"DashboardName": dashboard.dashboard.dashboard_name}
    ).expect(
        ExpectedResult.object_like(
            {"DashboardName": dashboard.dashboard.dashboard_name, "DashboardBody": Match.string_like_regexp(body)}
        )
    )
    names = [alarm.alarm_name for alarm in dashboard.alarms]
    integ.assertions.aws_api_call("CloudWatch", "describeAlarms", {"AlarmNames": names}).expect(
        ExpectedResult.object_like(
            {"MetricAlarms": Match.array_with([Match.object_like({"AlarmName": name}) for name in names])}
        )
    )
    return app


if __name__ == "__main__":
    build_app().synth()
