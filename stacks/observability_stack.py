"""Where the reference app's seconds and tokens go: the latency and quota dashboard, with alarms,
over the model every reference stack calls, its quota and the orchestration stack's plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from genai_pacer import planning
from genai_pacer.observe.dashboard import LatencyDashboard, TpmQuota, WatchedModel

from constructs import Construct

from .settings import ReferenceSettings


class ObservabilityStack(cdk.Stack):
    """The dashboard of the reference model; pass the other reference stacks' constructs to show them too.

    queued_inference: a QueuedInference to add (queue, worker, its calls). Default: none.
    workflows: state machines (BoundedMap, ParallelPrompts, ...) to add. Default: none.
    model_quota: the ModelQuota the workflows draw their shares from: the quota graph's plan line is
        what its consumers draw at their caps. Default: a plan of the review-summary profile at the
        rate the whole quota sustains.
    answer_routers: AnswerRouters whose hit, miss and stale rates to show. Default: none.
    experiments: PromptExperiments whose variants and guards to show. Default: none.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        queued_inference: Any | None = None,
        workflows: Sequence[Any] = (),
        model_quota: Any | None = None,
        answer_routers: Sequence[Any] = (),
        experiments: Sequence[Any] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        # The orchestration stack's review-summary profile at the rate its quota sustains: the plan
        # the quota graph draws, and the reservation its state machines hold (they publish no
        # per-call metrics of their own).
        profile = planning.TokenProfile(
            input_tokens=2_500,
            output_tokens=300,
            max_tokens=planning.size_max_tokens(400).max_tokens,
            burndown=settings.burndown,
        )
        rate = planning.sustainable_rate(profile, tpm_quota=settings.tpm_quota, call_seconds=6)
        plan = planning.plan_tpm(profile, requests_per_minute=rate.requests_per_minute, call_seconds=6)
        self.dashboard = LatencyDashboard(
            self,
            "Latency",
            models=[
                WatchedModel(
                    settings.model,
                    quota=TpmQuota.from_model_quota(model_quota)
                    if model_quota is not None
                    else TpmQuota.from_plan(plan, tpm_quota=settings.tpm_quota),
                    burndown=settings.burndown,
                )
            ],
        )
        if queued_inference is not None:
            self.dashboard.add_queued_inference(queued_inference)
        for workflow in workflows:
            self.dashboard.add_state_machine(workflow)
        for router in answer_routers:
            self.dashboard.add_answer_router(router)
        for experiment in experiments:
            self.dashboard.add_prompt_experiment(experiment)
        cdk.CfnOutput(self, "DashboardName", value=self.dashboard.dashboard.dashboard_name)
