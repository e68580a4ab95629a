"""Queue-driven inference: review summaries enqueued by producers, answered by a bounded worker pool."""

from __future__ import annotations

import aws_cdk as cdk
from genai_pacer import QueuedInference, planning

from constructs import Construct

from .settings import ReferenceSettings


class QueuedInferenceStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        profile = planning.TokenProfile(
            input_tokens=1_500,
            output_tokens=250,
            max_tokens=planning.size_max_tokens(350).max_tokens,
            burndown=settings.burndown,
        )
        # Leave half of the quota to interactive traffic that shares it.
        rate = planning.sustainable_rate(profile, tpm_quota=settings.tpm_quota / 2, call_seconds=5)
        self.inference = QueuedInference(
            self,
            "ReviewSummaries",
            model=settings.model,
            max_concurrency=rate,  # fitted by the construct: clamped above 1000 with a warning, refused below 2
            # The worker caps each answer at the planned max_tokens: the reservation the plan assumed,
            # and the length its time budget (and so the function timeout) is sized for.
            max_output_tokens=profile.max_tokens,
        )
        cdk.CfnOutput(self, "QueueUrl", value=self.inference.queue.queue_url)
        cdk.CfnOutput(self, "AnswerTable", value=self.inference.table.table_name)
