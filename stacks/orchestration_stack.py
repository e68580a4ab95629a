"""Throttle-safe Step Functions: a Parallel fan-out with synthesis, and inline and distributed Maps
whose MaxConcurrency comes from the quota plan."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import (
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    ModelQuota,
    ParallelPrompts,
    StateMachineOptions,
    SyncExecutionUrl,
    planning,
)

from constructs import Construct

from .settings import ReferenceSettings


def secure_bucket(scope: Construct, id: str, **props) -> s3.Bucket:
    """An S3-encrypted, TLS-only, private bucket."""
    return s3.Bucket(
        scope,
        id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        **props,
    )


class OrchestrationStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)

        # One quota for every consumer of the model in the app (this stack's workflows, the queue
        # worker, the pre-computation and router, the experiment's evaluator): each draws a named
        # share, and synth fails when the shares overdraw it (sized each against the whole quota,
        # the three consumers below alone would allow 23 calls in flight against a plan of 10).
        self.quota = quota = ModelQuota(
            self, "ModelQuota", model=settings.model, tpm_quota=settings.tpm_quota, burndown=settings.burndown
        )
        # A review summary: answers rarely exceed 400 tokens, so max_tokens is sized from that p99.
        sizing = planning.size_max_tokens(400)
        profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=sizing.max_tokens)

        review = sfn.JsonPath.string_at("$.review")

        def ask(template: str, value: str, max_tokens: int = sizing.max_tokens) -> ConverseRequest:
            return ConverseRequest(prompt=sfn.JsonPath.format(template, value), max_tokens=max_tokens)

        # Three independent analyses side by side, then one digest from their texts, on a user's
        # path: an EXPRESS workflow the caller waits on through a signed function URL.
        self.digest = digest = ParallelPrompts(
            self,
            "ReviewDigest",
            model=settings.model,
            prompts={
                "Summary": ask("Summarize this review: {}", review),
                "Sentiment": ask("Rate the sentiment of: {}", review, max_tokens=50),
                "Issues": ask("List product issues in: {}", review),
            },
            synthesis=ask(
                "Write a digest from these analyses: {}",
                sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.answers")),
            ),
            state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS),
        )
        # Parallel width applies per execution: three branches at once (the synthesis runs after them).
        # The URL runs one execution at a time, so the digest's share holds three calls.
        quota.share("ReviewDigest", profile, calls=3, executions=1, call_seconds=6)
        digest_url = SyncExecutionUrl(
            self, "ReviewDigestUrl", state_machine=digest.state_machine, max_concurrent_executions=1
        )
        cdk.CfnOutput(self, "ReviewDigestEndpoint", value=digest_url.url.url)

        # The morning ticker summaries: a few dozen items from the execution input.
        self.tickers = BoundedMap(
            self,
            "TickerSummaries",
            # one run of the morning summaries at a time (executions=1, the default)
            max_concurrency=quota.share("TickerSummaries", profile, fraction=0.16, call_seconds=6),
            model=settings.model,
            request=ask("Summarize the news for {}", sfn.JsonPath.string_at("$.ticker")),
            items_path="$.tickers",
            expected_items=60,
        )

        # Overnight catalog re-description: items from S3 in a distributed Map.
        access_logs = secure_bucket(
            self, "AccessLogs", object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED
        )
        cdk.Validations.of(access_logs).acknowledge(
            cdk.Acknowledgment(
                id="AwsSolutions-S1",
                reason="this bucket receives the server access logs; logging it to itself would loop",
            )
        )
        catalog = secure_bucket(
            self,
            "Catalog",
            versioned=True,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="catalog/",
        )
        self.catalog = BoundedDistributedMap(
            self,
            "CatalogDescriptions",
            # one overnight run at a time
            max_concurrency=quota.share(
                "CatalogDescriptions", profile, fraction=0.16, call_seconds=6, hours_per_day=8
            ),
            model=settings.model,
            request=ask("Describe this product for the catalog: {}", sfn.JsonPath.string_at("$.product")),
            items_bucket=catalog,
            items_key="catalog/items.jsonl",
            tolerated_failure_percentage=1,
            state_machine_options=StateMachineOptions(timeout=cdk.Duration.hours(12)),
        )
