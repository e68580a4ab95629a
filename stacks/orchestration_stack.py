"""Throttle-safe Step Functions: a Parallel fan-out with synthesis, and inline and distributed Maps
whose MaxConcurrency comes from the quota plan."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import BoundedMap, ParallelPrompts, StateMachineOptions, planning

from constructs import Construct

from .settings import ReferenceSettings

ANTHROPIC_VERSION = "bedrock-2023-05-31"


def anthropic_request(prompt: str | dict, max_tokens: int) -> dict:
    """An Anthropic Messages request body; `prompt` may be a JsonPath reference."""
    return {
        "anthropic_version": ANTHROPIC_VERSION,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }


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

        # A review summary: answers rarely exceed 400 tokens, so max_tokens is sized from that p99.
        sizing = planning.size_max_tokens(400)
        profile = planning.TokenProfile(
            input_tokens=2_500, output_tokens=300, max_tokens=sizing.max_tokens, burndown=settings.burndown
        )
        rate = planning.sustainable_rate(profile, tpm_quota=settings.tpm_quota, call_seconds=6)

        review = sfn.JsonPath.string_at("$.review")
        ParallelPrompts(
            self,
            "ReviewDigest",
            model=settings.model,
            prompts={
                "Summary": anthropic_request(
                    sfn.JsonPath.format("Summarize this review: {}", review), sizing.max_tokens
                ),
                "Sentiment": anthropic_request(sfn.JsonPath.format("Rate the sentiment of: {}", review), 50),
                "Issues": anthropic_request(
                    sfn.JsonPath.format("List product issues in: {}", review), sizing.max_tokens
                ),
            },
            synthesis=anthropic_request(
                sfn.JsonPath.format(
                    "Write a digest from these analyses: {}",
                    sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$")),
                ),
                sizing.max_tokens,
            ),
        )

        # The morning ticker summaries: a few dozen items from the execution input.
        BoundedMap(
            self,
            "TickerSummaries",
            max_concurrency=min(rate.max_concurrency, 40),
            model=settings.model,
            body=anthropic_request(
                sfn.JsonPath.format("Summarize the news for {}", sfn.JsonPath.string_at("$.ticker")),
                sizing.max_tokens,
            ),
            items_path="$.tickers",
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
        BoundedMap(
            self,
            "CatalogDescriptions",
            mode="distributed",
            max_concurrency=rate.max_concurrency,
            model=settings.model,
            body=anthropic_request(
                sfn.JsonPath.format(
                    "Describe this product for the catalog: {}", sfn.JsonPath.string_at("$.product")
                ),
                sizing.max_tokens,
            ),
            items_bucket=catalog,
            items_key="catalog/items.jsonl",
            tolerated_failure_percentage=1,
            state_machine_options=StateMachineOptions(timeout=cdk.Duration.hours(12)),
        )
