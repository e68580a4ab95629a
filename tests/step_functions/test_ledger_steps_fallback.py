"""When DynamoDB throttles or cannot serve a state machine's reservation past its tries (issue 25: "each
consumer falls back to its guaranteed floor locally (never to unbounded) and publishes a metric saying
so"): the call goes on without the ledger, after a Wait that keeps the construct's calls at once within its
share's floor, and publishes LedgerFallbacks as the processes do. Executed offline with StateMachineRunner
(DynamoDB's throttles injected into moto's backend, as in test_ledger_steps_faults), then what synth writes
for each of the four constructs that take ledger=."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import (
    AnswerStore,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    ModelQuota,
    QuotaLedger,
    ScheduledPrecompute,
)
from genai_pacer.step_functions.ledger_steps import DYNAMODB_RETRY_ATTEMPTS
from genai_pacer.testing import StateMachineRunner
from genai_pacer.testing.sfn import ServiceError, _interpreter
from helpers import all_states, definition_with_refs, new_stack, policy_statements, refused, template_of
from test_ledger_steps import (
    BURNDOWN,
    KEY,
    MAX_TOKENS,
    MODEL,
    MODEL_ID,
    PROMPT_TOKENS,
    QUOTA_TPM,
    RESERVED,
    emulator,
    ledger_stack,
    parallel_stack,
    states_entered,
)
from test_ledger_steps_faults import throttle_state_machine

#: What the processes publish for a fallback (pacer_runtime.metrics, QuotaPacer: LedgerFallbacks by LedgerId).
METRIC = {"Namespace": "GenaiPacer", "MetricName": "LedgerFallbacks", "Dimensions": [{"Name": "LedgerId", "Value": MODEL_ID}]}
#: The grant the fallback's metric needs, and no more: PutMetricData in that namespace only.
METRIC_STATEMENT = {"Action": "cloudwatch:PutMetricData", "Condition": {"StringEquals": {"cloudwatch:namespace": "GenaiPacer"}},
                    "Effect": "Allow", "Resource": "*"}


def record_waits(monkeypatch) -> list[tuple[str, float]]:
    """(state name, seconds) of every Wait state the executions enter, in the case's time."""
    waits: list[tuple[str, float]] = []
    original = _interpreter._ScaledTime.wait

    def wait(self, seconds: float, env=None) -> None:
        if env is not None:
            waits.append((env.states.context_object.context_object_data["State"]["Name"], seconds))
        original(self, seconds, env)

    monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
    return waits


def fallback_waits(waits: list[tuple[str, float]]) -> list[float]:
    return [seconds for name, seconds in waits if name.endswith(" ledger fallback wait")]


def moto_metrics(runner: StateMachineRunner) -> tuple[list[dict], float]:
    """The LedgerFallbacks metrics moto's CloudWatch holds, and their Sum."""
    cloudwatch = runner._boto3.client("cloudwatch", region_name="us-east-1")
    listed = cloudwatch.list_metrics(Namespace=METRIC["Namespace"])["Metrics"]
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    points = cloudwatch.get_metric_statistics(
        Namespace=METRIC["Namespace"], MetricName=METRIC["MetricName"], Dimensions=METRIC["Dimensions"],
        StartTime=now - timedelta(hours=1), EndTime=now + timedelta(minutes=5), Period=3600, Statistics=["Sum"],
    )["Datapoints"]
    return listed, sum(p["Sum"] for p in points)


# --- executed -----------------------------------------------------------------------------------


def test_a_map_whose_reservations_dynamodb_keeps_failing_answers_every_item_at_the_floors_pace(monkeypatch):
    """Three items, every reservation throttled: each item tries DYNAMODB_RETRY_ATTEMPTS + 1 times, then
    publishes LedgerFallbacks, waits the floor's seconds and calls without the ledger. Every item is
    answered, and nothing is written to the item (no hold, no settlement, no release)."""
    stack, ledger, _ = ledger_stack()
    raised = throttle_state_machine(monkeypatch, "reserve", 1_000)
    waits = record_waits(monkeypatch)
    items = {"items": [{"prompt": f"Summarize review {i}."} for i in range(3)]}
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(items).raise_for_status()
        stored = runner.dynamodb.get_item(TableName=runner.physical_name(ledger.table), Key=KEY,
                                          ConsistentRead=True).get("Item")
        listed, total = moto_metrics(runner)
    assert run.succeeded and [a["stopReason"] for a in run.output] == ["end_turn"] * 3 and run.model_calls == 3
    assert len(raised) == 3 * (DYNAMODB_RETRY_ATTEMPTS + 1)
    # The Summaries share: floor 200,000 TPM, calls of 4 s, the Map's MaxConcurrency 6 (its plan), r = 3,000:
    # w = ceil(6 x 3,000 x 60 / 200,000 - 4) = ceil(1.4) = 2 s before each fallback call
    assert fallback_waits(waits) == [2, 2, 2]
    entered = states_entered(run)
    assert entered.count("InvokeModel ledger fallback call") == 3 and entered.count("InvokeModel ledger fallback metric") == 3
    assert not {"InvokeModel", "InvokeModel settle", "InvokeModel release"} & set(entered)
    assert stored is None  # every write of the state machine was refused by the throttle, and it wrote no other
    assert [{k: m[k] for k in ("Namespace", "MetricName", "Dimensions")} for m in listed] == [METRIC]
    assert total == 3  # one a fallback, as a process counts its switches


class FailingCloudWatch:
    """CloudWatch refusing every PutMetricData; the runner checks each request against botocore's model."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def put_metric_data(self, **request: Any) -> dict:
        self.requests.append(request)
        raise ServiceError("InternalServiceFault", "Request processing has failed due to some unknown error")


def test_a_fallback_whose_metric_cannot_be_published_still_answers_the_item(monkeypatch):
    stack, ledger, _ = ledger_stack()
    throttle_state_machine(monkeypatch, "reserve", 100)
    cloudwatch = FailingCloudWatch()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock, services={"cloudwatch": cloudwatch}) as runner:
        run = runner.run({"items": [{"prompt": "Summarize this."}]}).raise_for_status()
    assert run.model_calls == 1 and run.output[0]["stopReason"] == "end_turn"
    (request,) = cloudwatch.requests
    assert request == {"Namespace": "GenaiPacer", "MetricData": [
        {"MetricName": "LedgerFallbacks", "Unit": "Count", "Value": 1, "Dimensions": [{"Name": "LedgerId", "Value": MODEL_ID}]}]}
    assert "InvokeModel ledger fallback wait" in states_entered(run)


def test_a_fallback_call_that_fails_fails_the_item_with_its_own_error_and_returns_no_hold(monkeypatch):
    """Nothing was held, so nothing is released: the call's error is the item's, as without a ledger."""
    stack, ledger, _ = ledger_stack()
    throttle_state_machine(monkeypatch, "reserve", 100)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        bedrock.fail_next("ValidationException")
        run = runner.run({"items": [{"prompt": "Summarize this."}]})
    assert not run.succeeded and run.error == "BedrockRuntime.ValidationException"
    assert "InvokeModel ledger fallback call" in states_entered(run) and "InvokeModel release" not in states_entered(run)


def test_a_reservation_that_dynamodb_lets_through_in_time_never_falls_back(monkeypatch):
    stack, _, _ = ledger_stack()
    throttle_state_machine(monkeypatch, "reserve", DYNAMODB_RETRY_ATTEMPTS)  # the last try goes through
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": [{"prompt": "Summarize this."}]}).raise_for_status()
    entered = states_entered(run)
    assert "InvokeModel settle" in entered and not [s for s in entered if "fallback" in s]


def precompute_stack() -> tuple[cdk.Stack, QuotaLedger, ScheduledPrecompute, list[dict]]:
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    plan = quota.share("Notes", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.3, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    items = [{"key": f"ticker-morning#t{i}", "ticker": f"T{i}"} for i in range(2)]
    notes = ScheduledPrecompute(
        stack, "Notes", answer_store=AnswerStore(stack, "Store"), model=MODEL, max_concurrency=plan, items=items,
        ledger=ledger,
        request=ConverseRequest(prompt=sfn.JsonPath.format("Write the note for {}.", sfn.JsonPath.string_at("$.item.ticker")),
                                max_tokens=MAX_TOKENS),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"),
    )
    return stack, ledger, notes, items


def test_a_scheduled_precompute_run_writes_every_key_through_the_fallback(monkeypatch):
    stack, ledger, notes, items = precompute_stack()
    throttle_state_machine(monkeypatch, "reserve", 1_000, consumer="Notes")
    waits = record_waits(monkeypatch)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": items}, state_machine=notes.state_machine).raise_for_status()
        stored = runner.dynamodb.get_item(TableName=runner.physical_name(ledger.table), Key=KEY,
                                          ConsistentRead=True).get("Item")
        listed, total = moto_metrics(runner)
    assert (run.output["written"], run.output["failed"]) == (2, 0) and run.model_calls == 2
    # Notes: floor 120,000 TPM, 4 s calls, MaxConcurrency 4 (one run at a time: the run lock), r = 3,000:
    # w = ceil(4 x 3,000 x 60 / 120,000 - 4) = 2 s
    assert fallback_waits(waits) == [2, 2]
    assert "Call model settle" not in states_entered(run) and stored is None
    assert [m["MetricName"] for m in listed] == ["LedgerFallbacks", "PrecomputeFailedKeys"] and total == 2


def test_parallel_prompts_branches_and_synthesis_fall_back_each_at_the_floors_pace(monkeypatch):
    stack, _, review = parallel_stack()
    throttle_state_machine(monkeypatch, "reserve", 1_000, consumer="Review")
    waits = record_waits(monkeypatch)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"topic": "the plan"}, state_machine=review.state_machine).raise_for_status()
    assert set(run.output["answers"]) == {"Pros", "Cons"} and run.output["synthesis"]["stopReason"] == "end_turn"
    # the Review share: calls=2 of 4 s, floor 60,000 TPM (30 calls a minute settling 2,000 tokens each),
    # r = 3,000, M = 2 branches: w = ceil(2 x 3,000 x 60 / 60,000 - 4) = 2 s, for the synthesis too (it may
    # overlap the branches of another execution, so it is paced as one of M)
    assert sorted((n, s) for n, s in waits if n.endswith(" ledger fallback wait")) == [("Cons ledger fallback wait", 2), ("Pros ledger fallback wait", 2),
                             ("Synthesis ledger fallback wait", 2)]


# --- synth --------------------------------------------------------------------------------------


def _map() -> tuple[cdk.Stack, Any]:
    stack = new_stack()
    return stack, ledger_stack(stack)[2]


def _burst_map() -> tuple[cdk.Stack, Any]:
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN, keep_free=0)
    plan = quota.share("Summaries", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.5, call_seconds=4, burst_tpm=300_000)
    return stack, BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL,
                             ledger=QuotaLedger(stack, "Ledger", quota=quota),
                             request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))


def _distributed() -> tuple[cdk.Stack, Any]:
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    plan = quota.share("Catalog", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.5, call_seconds=10, executions=2)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    return stack, BoundedDistributedMap(
        stack, "Catalog", max_concurrency=plan, model=MODEL, ledger=ledger, items_bucket=s3.Bucket(stack, "Items"),
        items_key="items.jsonl", request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))


def _parallel() -> tuple[cdk.Stack, Any]:
    stack, _, review = parallel_stack()
    return stack, review


def _precompute() -> tuple[cdk.Stack, Any]:
    stack, _, notes, _ = precompute_stack()
    return stack, notes


#: Each construct: how it is built, its Map's MaxConcurrency, M, and each fallback Wait's seconds,
#: w = max(0, ceil(M x r x 60 / floor - c)) with r = 3,000 (1,000 prompt + 400 max_tokens x burndown 5).
CONSTRUCTS: dict[str, tuple[Any, int | None, int, dict[str, int]]] = {
    # floor 200,000, c 4 s, M = its plan's 6: ceil(5.4 - 4)
    "BoundedMap": (_map, 6, 6, {"InvokeModel ledger fallback wait": 2}),
    # the burst cap in calls: burst_tpm 300,000 sustains MaxConcurrency 10, floor 200,000: ceil(9 - 4)
    "BoundedMap with a burst": (_burst_map, 10, 10, {"InvokeModel ledger fallback wait": 5}),
    # two executions of 8 each (100,000 TPM a slice, 10 s calls): M = 16, floor 200,000: ceil(14.4 - 10);
    # one execution's 8 alone would wait 0 s (7.2 - 10) and let up to twice the floor through
    "BoundedDistributedMap": (_distributed, 8, 16, {"InvokeModel ledger fallback wait": 5}),
    # M = 2 branches, floor 60,000 (2 calls of 4 s back to back, 2,000 settled each): ceil(6 - 4)
    "ParallelPrompts": (_parallel, None, 2,
                        {"Pros ledger fallback wait": 2, "Cons ledger fallback wait": 2, "Synthesis ledger fallback wait": 2}),
    # floor 120,000, c 4 s, M = MaxConcurrency 4 (one run at a time: the run lock): ceil(6 - 4)
    "ScheduledPrecompute": (_precompute, 4, 4, {"Call model ledger fallback wait": 2}),
}


@pytest.mark.parametrize("name", list(CONSTRUCTS))
def test_each_construct_waits_its_floors_seconds_before_a_fallback_call_and_may_publish_the_metric(name):
    build, cap, calls_at_once, expected = CONSTRUCTS[name]
    stack, built = build()
    template = template_of(stack).to_json()
    states = all_states(definition_with_refs(template))
    if cap is not None:
        maps = [s for s in states.values() if s["Type"] == "Map"]
        assert [m["MaxConcurrency"] for m in maps] == [cap]
    waits = {n: s for n, s in states.items() if n.endswith(" ledger fallback wait")}
    assert {n: s["Seconds"] for n, s in waits.items()} == expected
    for wait, state in waits.items():
        call = wait.removesuffix(" wait")
        # metric -> wait -> the call, without the ledger; the metric's failure goes on to the wait
        assert states[f"{call} metric"]["Next"] == wait and state["Next"] == f"{call} call"
        assert states[f"{call} metric"]["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": wait}]
        assert states[f"{call} metric"]["Resource"].endswith(":states:::aws-sdk:cloudwatch:putMetricData")
        assert "Catch" in states[f"{call} call"] and "Retry" in states[f"{call} call"]
    # the state machine's role may publish in the processes' namespace, nothing else
    statements = [s for s in policy_statements(template) if "cloudwatch:PutMetricData" in json.dumps(s["Action"])]
    assert statements == [METRIC_STATEMENT]
    assert built.ledger_consumer.calls_at_once == calls_at_once


def test_a_cap_the_fallback_cannot_pace_by_is_refused_by_name():
    def named_share(stack: cdk.Stack) -> QuotaLedger:
        quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
        quota.share("Summaries", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                    fraction=0.5, call_seconds=4)
        return QuotaLedger(stack, "Ledger", quota=quota)

    request = ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS)
    stack = new_stack()
    deploy_time = cdk.CfnParameter(stack, "Cap", type="Number").value_as_number
    problems = refused(lambda: BoundedMap(stack, "Summaries", max_concurrency=deploy_time, model=MODEL, request=request,
                                          ledger=named_share(stack)))
    assert any(p.startswith("max_concurrency is a deploy-time number, but with ledger=") for p in problems), problems
    stack = new_stack()
    problems = refused(lambda: BoundedMap(stack, "Summaries", max_concurrency=0, allow_unbounded=True, model=MODEL,
                                          request=request, ledger=named_share(stack)))
    assert any(p.startswith("max_concurrency=0 (unbounded) with ledger=") for p in problems), problems


def test_the_wait_is_the_floors_pace_for_the_calls_at_once():
    """M calls at once of c seconds each, each waiting w first, start at most M / (c + w) calls a second:
    at r tokens each, within the floor's floor / 60 tokens a second, and w is the least whole second so."""
    stack = new_stack()
    consumer = ledger_stack(stack)[2].ledger_consumer
    for r in (1, 500, RESERVED, 20_000):
        w = consumer.fallback_wait_seconds(r)
        m, c, floor = consumer.calls_at_once, consumer.call_seconds, consumer.floor_tpm
        assert m / (c + w) * r <= floor / 60 + 1e-9
        assert w == 0 or m / (c + w - 1) * r > floor / 60


def test_a_share_without_a_floor_keeps_failing_the_call_it_cannot_pace():
    """A reserved share whose part of the reservation holds its calls whole draws 0 TPM on demand: no floor
    to fall back to, so a reservation DynamoDB keeps failing fails the call as before, and nothing else."""
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN,
                       reserved_input_tpm=100_000, reserved_output_tpm=50_000)
    plan = quota.share("Summaries", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       calls=2, call_seconds=4, service_tier="reserved")
    summaries = BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=QuotaLedger(stack, "Ledger", quota=quota),
                           request=ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS, service_tier="reserved"))
    assert summaries.ledger_consumer.floor_tpm == 0
    template = template_of(stack).to_json()
    states = all_states(definition_with_refs(template))
    assert states["InvokeModel ledger throttled again?"]["Choices"][0]["Next"] == "InvokeModel failed"
    assert not [name for name in states if "fallback" in name]
    assert not [s for s in policy_statements(template) if "cloudwatch:PutMetricData" in json.dumps(s["Action"])]


def test_the_fallback_docs_quota_states_is_the_one_synth_writes():
    from pathlib import Path

    stack = new_stack()
    consumer = ledger_stack(stack)[2].ledger_consumer
    docs = " ".join((Path(__file__).parents[2] / "docs" / "quota.md").read_text().split())
    assert f"past its {DYNAMODB_RETRY_ATTEMPTS} retries" in docs
    assert "`w = max(0, ceil(M x r x 60 / floor_tpm - call_seconds))`" in docs
    assert (consumer.floor_tpm, consumer.calls_at_once, consumer.call_seconds, consumer.reservation(MAX_TOKENS)) == (
        200_000, 6, 4, 3_000)
    assert (f"A `BoundedMap` with a floor of 200,000 TPM, a plan of 6 calls at once of 4 s and `r` = 3,000 waits "
            f"{consumer.fallback_wait_seconds(3_000)} s before each fallback call") in docs


def test_a_fallback_wait_beyond_a_wait_states_limit_is_refused_naming_the_numbers():
    """Out of reach of a Map (at most 10,000 calls at once, a burndown of at most 100: w <= 6,000 x M s),
    so checked on the consumer directly: 200,000,000 calls at once of r = 3,000 within a floor of 200,000
    TPM would each wait 200,000,000 x 3,000 x 60 / 200,000 - 4 s, beyond a Wait state's 99,999,999 s."""
    import dataclasses

    from genai_pacer._internal.checks import Checks
    from genai_pacer.step_functions.ledger_steps import check_ledger_request

    _, _, built = ledger_stack()
    wide = dataclasses.replace(built.ledger_consumer, calls_at_once=200_000_000)
    check = Checks("ParallelPrompts")
    check_ledger_request(check, wide, ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS), None, name="prompts['Pros']")
    assert [p.id for p in check.problems] == ["ParallelPrompts.request.fallback-wait-above-wait-limit"]
    assert ("prompts['Pros']: a call reserves 3,000 tokens, and 200,000,000 of them at once within the share's floor of "
            "200,000 TPM would each wait 179,999,996 s") in str(check.problems[0]), check.problems
