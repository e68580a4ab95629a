"""Queue-driven inference: review summaries enqueued by producers, answered by a bounded worker pool."""

from __future__ import annotations

import aws_cdk as cdk
from genai_pacer import ModelQuota, QueuedInference, planning

from constructs import Construct

from .settings import ReferenceSettings


class QueuedInferenceStack(cdk.Stack):
    """quota: the app's ModelQuota for the model; the worker pool draws its share from it."""

    def __init__(self, scope: Construct, id: str, *, quota: ModelQuota, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        profile = quota.profile(input_tokens=1_500, output_tokens=250, max_tokens=planning.size_max_tokens(350).max_tokens)
        # The rest of the quota serves the app's other consumers and interactive traffic.
        rate = quota.share("ReviewSummaries", profile, fraction=0.2, call_seconds=5)
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
