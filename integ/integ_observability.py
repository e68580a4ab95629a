"""Integration test: the latency dashboard and its alarms exist as synthesized, read back from CloudWatch.

One test case: a LatencyDashboard over the test model with a TPM quota (so the quota alarm is
defined too) and a small QueuedInference added to it. Assertions: GetDashboard returns the
dashboard with the Bedrock TTFT, latency, throttle and quota metrics in its body, each where the
synthesized body has it; DescribeAlarms returns every alarm the construct lists in `alarms`, one
call per alarm (a response may hold 4,096 bytes, fewer than five alarm definitions). CloudFormation accepting the dashboard
body and the metric math is what this verifies beyond the offline template tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest  # noqa: E402
from genai_pacer import QueuedInference, planning  # noqa: E402
from genai_pacer.observe.dashboard import LatencyDashboard, TpmQuota, WatchedModel  # noqa: E402

from integ._sdk_check import render  # noqa: E402
from integ._support import alarm_exists, destroy_on_delete, model, new_app  # noqa: E402

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


def metric_paths(stack: cdk.Stack, dashboard: Any) -> dict[str, str]:
    """Each METRICS name -> the first place it has in the synthesized dashboard body, as the assertion
    handler's flattened paths name it (`DashboardBody.widgets.2.properties.metrics.0.1`)."""
    body = json.loads(render(stack.resolve(dashboard.node.default_child.dashboard_body)))
    paths: dict[str, str] = {}

    def walk(value: Any, path: list[str]) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, [*path, key])
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, [*path, str(index)])
        elif value in METRICS and "metrics" in path:
            paths.setdefault(value, ".".join(["DashboardBody", *path]))

    walk(body, [])
    missing = [name for name in METRICS if name not in paths]
    if missing:
        raise ValueError(f"the dashboard body has no metric {missing}: the assertions could not find them either")
    return paths


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = ObservabilityStack(app, "IntegObservability")
    integ = IntegTest(app, "Observability", test_cases=[stack], stack_update_workflow=False)
    dashboard = stack.dashboard
    # GetDashboard's whole answer (a body of about 12 KB) is above the 4,096 bytes CloudFormation takes
    # from a custom resource ("Response object is too long"): each call keeps one metric's place in the
    # body, which the handler parses into paths, and expects the metric's name there.
    for metric, path in metric_paths(stack, dashboard.dashboard).items():
        integ.assertions.aws_api_call(
            "CloudWatch", "getDashboard", {"DashboardName": dashboard.dashboard.dashboard_name}
        ).assert_at_path(path, ExpectedResult.string_like_regexp(f"^{metric}$"))  # not exact(): see alarm_exists
    for alarm in dashboard.alarms:
        alarm_exists(integ.assertions, alarm.alarm_name)
    return app


if __name__ == "__main__":
    build_app().synth()
