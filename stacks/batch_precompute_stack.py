"""Batch pre-computation: each product's review summary made overnight by a Bedrock batch job and
loaded into the answer store the router serves from."""

from __future__ import annotations

import aws_cdk as cdk
from genai_pacer import AnswerStore, planning
from genai_pacer.batch_precompute import BatchPrecompute

from constructs import Construct

from .settings import ReferenceSettings


class BatchPrecomputeStack(cdk.Stack):
    """answer_store: share the store the router reads (e.g. another stack's). Default: a new one."""

    def __init__(self, scope: Construct, id: str, *, answer_store: AnswerStore | None = None, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        # Summaries rarely exceed 350 tokens: maxTokens from that p99, as on the on-demand path.
        sizing = planning.size_max_tokens(350)
        self.batch = BatchPrecompute(
            self,
            "ReviewSummaries",
            model=settings.model,
            answer_store=answer_store,
            max_tokens=sizing.max_tokens,
            system_prompt="You summarize customer reviews in three sentences, citing no reviewer by name.",
            # The account's quota of batch jobs in flight for this model (Service Quotas); the
            # per-job record quotas keep their documented defaults.
            max_concurrent_jobs=10,
            job_name_prefix="review-summaries",
        )
        cdk.CfnOutput(self, "StateMachineArn", value=self.batch.state_machine.state_machine_arn)
        cdk.CfnOutput(self, "ItemsBucket", value=self.batch.items_bucket.bucket_name)
        cdk.CfnOutput(self, "AnswerTable", value=self.batch.answer_store.table.table_name)
