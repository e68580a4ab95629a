"""Pre-computation: morning notes for a known list of tickers generated before the 09:00 peak, each
product's review summary made overnight by Bedrock batch jobs, and a router that serves both by key
(calling the model only for keys the store does not hold)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import AnswerStore, ConverseRequest, ModelQuota, planning
from genai_pacer.precompute.batch import BatchPrecompute
from genai_pacer.precompute.router import AnswerRouter
from genai_pacer.precompute.scheduled import ScheduledPrecompute

from constructs import Construct

from .settings import ReferenceSettings

#: The keys known before the peak: one morning note per ticker.
TICKERS = ("AAPL", "AMZN", "GOOGL", "META", "MSFT", "NVDA", "TSLA", "JPM", "V", "WMT")


class PrecomputeStack(cdk.Stack):
    """quota: the app's ModelQuota for the model; the scheduled run and the router draw their shares
    from it (the batch jobs run on the batch quotas, not on it)."""

    def __init__(self, scope: Construct, id: str, *, quota: ModelQuota, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        profile = quota.profile(input_tokens=800, output_tokens=350, max_tokens=planning.size_max_tokens(450).max_tokens)
        # The run takes under an hour, before the peak: a small share of the quota, one hour a day.
        rate = quota.share("MorningNotes", profile, fraction=0.1, call_seconds=8, hours_per_day=1)
        # The router calls the model only on a miss; its function's reserved concurrency caps those calls.
        router_share = quota.share("Router", profile, calls=2, call_seconds=8)
        # One store for every writer and reader: the scheduled run, the batch loader and the
        # router's write-back.
        self.answer_store = AnswerStore(self, "Answers", answer_ttl=cdk.Duration.days(7))
        self.scheduled = ScheduledPrecompute(
            self,
            "MorningNotes",
            answer_store=self.answer_store,
            model=settings.model,
            request=ConverseRequest(
                system="You write a short, factual pre-market note for an equity analyst.",
                prompt=sfn.JsonPath.format("Write this morning's note for {}.", sfn.JsonPath.string_at("$.item.ticker")),
                max_tokens=profile.max_tokens,
                # Nobody waits on a pre-computation run: Flex, served after standard traffic at a
                # discount (docs/tiers.md). The service tiers page lists the default model, Amazon Nova 2
                # Lite, for Flex and Priority (read in a copy of 2026-02-15; settings.py).
                service_tier="flex",
            ),
            max_concurrency=rate,  # fitted to the inline Map's 1..40
            schedule=scheduler.ScheduleExpression.cron(
                minute="0", hour="6", week_day="MON-FRI", time_zone=cdk.TimeZone.AMERICA_NEW_YORK
            ),
            items=[{"key": f"ticker-morning#{ticker}", "ticker": ticker} for ticker in TICKERS],
        )
        # Each product's review summary, made overnight by Bedrock batch jobs (cheaper, and off the
        # on-demand quota interactive users share) and loaded into the same store.
        self.batch = BatchPrecompute(
            self,
            "ReviewSummaries",
            model=settings.model,
            answer_store=self.answer_store,
            max_tokens=planning.size_max_tokens(350).max_tokens,
            system_prompt="You summarize customer reviews in three sentences, citing no reviewer by name.",
            # The account's quota of batch jobs in flight for this model (Service Quotas); the
            # per-job record quotas keep their documented defaults.
            max_concurrent_jobs=10,
            job_name_prefix="review-summaries",
        )
        self.router = AnswerRouter(
            self,
            "Router",
            answer_store=self.answer_store,
            model=settings.model,
            # A miss is answered from the key alone, so no caller chooses what is stored under a key.
            prompts={
                "ticker-morning#{ticker}": "Write this morning's note for {ticker}.",
                "review-summary#{product}": "Summarize the reviews of product {product} in three sentences.",
            },
            max_age=cdk.Duration.hours(24),
            # A miss has a user waiting: Priority, served ahead of standard and Flex traffic (the same
            # page lists the default model for it; see the scheduled run above).
            service_tier="priority",
            max_output_tokens=profile.max_tokens,
            reserved_concurrency=router_share,  # 2 misses in flight: the router holds the share it is given
        )
        cdk.CfnOutput(self, "RouterUrl", value=self.router.url.url if self.router.url else "")
        cdk.CfnOutput(self, "AnswerTable", value=self.answer_store.table.table_name)
        cdk.CfnOutput(self, "PrecomputeStateMachine", value=self.scheduled.state_machine.state_machine_arn)
        cdk.CfnOutput(self, "BatchStateMachine", value=self.batch.state_machine.state_machine_arn)
        cdk.CfnOutput(self, "BatchItemsBucket", value=self.batch.items_bucket.bucket_name)
