"""Every construct that takes a model accepts aws_bedrock_alpha's IBedrockInvokable shape and builds
the same template as with the BedrockModel it names; a prompt router is refused naming the prop
(issue 23). The alpha-shaped fakes live in tests/invokables.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template
from genai_pacer import (
    AnswerStore,
    BatchPrecompute,
    BedrockModel,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    InvalidPropsError,
    ParallelPrompts,
    QueuedInference,
    ScheduledPrecompute,
)
from genai_pacer.experiments.prompt_experiment import ExperimentVariant, PromptExperiment, TextPrompt
from genai_pacer.observe.dashboard import LatencyDashboard
from genai_pacer.precompute.router import AnswerRouter
from helpers import normalized
from invokables import HAIKU, FakeCrossRegionProfile, FakeFoundationModel, FakePromptRouter


def _scheduled(stack: cdk.Stack, model: Any) -> None:
    ScheduledPrecompute(
        stack, "Notes", answer_store=AnswerStore(stack, "Store"), model=model, max_concurrency=2,
        request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.item.ticker"), max_tokens=50),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"), items=[{"key": "k#1", "ticker": "A"}],
    )


def _request() -> ConverseRequest:
    return ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=50)


BUILDERS: dict[str, Callable[[cdk.Stack, Any], Any]] = {
    "BoundedMap": lambda stack, model: BoundedMap(stack, "Map", model=model, max_concurrency=2, request=_request()),
    "BoundedDistributedMap": lambda stack, model: BoundedDistributedMap(
        stack, "Distributed", model=model, max_concurrency=2, request=_request(),
        items_bucket=s3.Bucket(stack, "Items", enforce_ssl=True), items_key="items.jsonl"),
    "ParallelPrompts": lambda stack, model: ParallelPrompts(
        stack, "Parallel", model=model, prompts={"Pros": ConverseRequest(prompt="List the pros.", max_tokens=50)}),
    "QueuedInference": lambda stack, model: QueuedInference(stack, "Queue", model=model, max_concurrency=2),
    "AnswerRouter": lambda stack, model: AnswerRouter(
        stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model, prompts={"t#{x}": "Say {x}."}),
    "ScheduledPrecompute": _scheduled,
    "LatencyDashboard": lambda stack, model: LatencyDashboard(stack, "Dashboard", models=[model]),
    "PromptExperiment": lambda stack, model: PromptExperiment(
        stack, "Experiment", experiment_name="exp", control="a",
        variants=[ExperimentVariant("a", model, 50, TextPrompt("Say {{x}}")),
                  ExperimentVariant("b", model, 50, TextPrompt("Tell {{x}}"))]),
    "BatchPrecompute": lambda stack, model: BatchPrecompute(
        stack, "Batch", model=model, answer_store=AnswerStore(stack, "Store"), max_tokens=100),
}


def _template(build: Callable[[cdk.Stack, Any], Any], model: Any) -> dict:
    stack = cdk.Stack(cdk.App(), "Invokable", env=cdk.Environment(account="111122223333", region="us-east-1"))
    build(stack, model)
    return normalized(Template.from_stack(stack).to_json())


@pytest.mark.parametrize("construct", sorted(BUILDERS))
def test_an_invokable_builds_what_the_bedrock_model_it_names_builds(construct):
    build = BUILDERS[construct]
    profile = FakeCrossRegionProfile("us", FakeFoundationModel(HAIKU))
    assert _template(build, profile) == _template(build, BedrockModel.inference_profile(f"us.{HAIKU}"))


@pytest.mark.parametrize("construct", sorted(BUILDERS))
def test_a_prompt_router_is_refused_naming_the_prop(construct):
    with pytest.raises(InvalidPropsError, match=r"model(s\[0\])?: .*router"):
        _template(BUILDERS[construct], FakePromptRouter())
