"""Requested versus served tier on every Step Functions model call (issue 37, part 2): each construct's
state machine, executed offline against the emulator, carries the tier a call asked for beside the tier
Bedrock's response named, a reservation overflowing to default included, and a response that names no
tier neither fails the call nor invents one."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import (
    BedrockModel,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    ModelQuota,
    ParallelPrompts,
    QuotaLedger,
)
from genai_pacer.step_functions.model_tasks import SERVED_TIER_PATH
from genai_pacer.testing import BedrockEmulator, ManualClock, ModelSpec
from genai_pacer.testing.sfn import StateMachineRunner
from helpers import all_states, definition, new_stack, only

NOVA = "amazon.nova-lite-v1:0"
MODEL = BedrockModel.from_id(NOVA)


def reservation(**spec) -> BedrockEmulator:
    """A reservation of 60 output tokens a minute: with max_tokens=50 it holds the first call, and the
    calls after it overflow to default (the emulator's Reserved tier, as the service tiers page says)."""
    return BedrockEmulator([ModelSpec(NOVA, reserved_input_tpm=1_000, reserved_output_tpm=60, answer_tokens=20, **spec)],
                           clock=ManualClock(instant=True))


def reserved(prompt: str = "p", **options) -> ConverseRequest:
    return ConverseRequest(prompt=prompt, max_tokens=50, service_tier="reserved", **options)


def prompts(n: int) -> dict:
    return {"items": [{"prompt": f"q{i}"} for i in range(n)]}


def test_a_map_item_carries_the_tier_it_asked_for_and_the_tier_that_served_it():
    stack = new_stack()
    built = BoundedMap(stack, "Map", max_concurrency=1, model=MODEL,
                       request=reserved(sfn.JsonPath.string_at("$.prompt")))
    with reservation() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(prompts(3), state_machine=built.state_machine).raise_for_status()
    asked_and_served = [(call.service_tier, call.served_tier) for call in run.invocations]
    assert asked_and_served == [("reserved", "reserved"), ("reserved", "default"), ("reserved", "default")]
    assert [item["serviceTier"] for item in run.output] == [{"requested": r, "served": s} for r, s in asked_and_served]
    assert all(item["text"] for item in run.output)


def test_a_response_that_names_no_tier_is_answered_with_the_tier_asked_for_only(monkeypatch):
    """botocore's ConverseResponse.serviceTier is optional: a definite $.ServiceTier.Type would fail the
    task (States.Runtime) after the call was served and billed."""
    from genai_pacer.testing import responses

    monkeypatch.setattr(responses, "served_tier", lambda record: {})  # Bedrock's response names no tier
    stack = new_stack()
    built = BoundedMap(stack, "Map", max_concurrency=2, model=MODEL, request=reserved(sfn.JsonPath.string_at("$.prompt")))
    with reservation() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(prompts(2), state_machine=built.state_machine).raise_for_status()
    assert [item["serviceTier"] for item in run.output] == [{"requested": "reserved"}] * 2
    assert all(item["text"] for item in run.output)


def test_a_call_without_a_tier_keeps_its_answer_and_its_definition_as_before():
    stack = new_stack()
    built = BoundedMap(stack, "Map", max_concurrency=2, model=MODEL,
                       request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=50))
    states = all_states(definition(only(cdk.assertions.Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))
    assert not [name for name in states if "served tier" in name]
    assert not any("servedTiers" in json.dumps(state) for state in states.values())
    with reservation() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(prompts(2), state_machine=built.state_machine).raise_for_status()
    assert all(set(item) == {"text", "stopReason", "usage"} for item in run.output)


def test_a_deploy_time_tier_is_recorded_as_the_value_the_parameter_took():
    stack = new_stack()
    tier = cdk.CfnParameter(stack, "Tier", type="String", default="reserved").value_as_string
    built = BoundedMap(stack, "Map", max_concurrency=1, model=MODEL,
                       request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=50, service_tier=tier))  # type: ignore[arg-type]
    with reservation() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(prompts(2), state_machine=built.state_machine).raise_for_status()
    assert [item["serviceTier"] for item in run.output] == [{"requested": "reserved", "served": "reserved"},
                                                             {"requested": "reserved", "served": "default"}]


def test_a_distributed_maps_children_carry_both_tiers_in_the_results_they_write():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Items")
    built = BoundedDistributedMap(stack, "Catalog", max_concurrency=1, model=MODEL, items_bucket=bucket,
                                  items_key="items.jsonl", request=reserved(sfn.JsonPath.string_at("$.prompt")))
    with reservation() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(bucket), Key="items.jsonl",
                             Body="".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(2)))
        run = runner.run({}, state_machine=built.state_machine).raise_for_status()
        written = run.output["ResultWriterDetails"]  # the Map Run's manifest, then its SUCCEEDED files
        manifest = json.loads(runner.s3.get_object(Bucket=written["Bucket"], Key=written["Key"])["Body"].read())
        children = [child for file in manifest["ResultFiles"]["SUCCEEDED"]
                    for child in json.loads(runner.s3.get_object(Bucket=written["Bucket"], Key=file["Key"])["Body"].read())]
    tiers = {json.loads(child["Input"])["prompt"]: json.loads(child["Output"])["serviceTier"] for child in children}
    assert tiers == {"q0": {"requested": "reserved", "served": "reserved"}, "q1": {"requested": "reserved", "served": "default"}}
    assert [(call.service_tier, call.served_tier) for call in run.invocations] == [("reserved", "reserved"), ("reserved", "default")]


def test_parallel_prompts_put_each_tiered_branchs_tiers_beside_the_answers_and_in_the_synthesis():
    stack = new_stack()
    review = ParallelPrompts(
        stack, "Review", model=MODEL,
        prompts={"Pros": reserved("List the pros."), "Cons": ConverseRequest(prompt="List the cons.", max_tokens=50)},
        synthesis=reserved("Weigh them."),
    )
    with reservation() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({}, state_machine=review.state_machine).raise_for_status()
    by_tier = [(call.service_tier, call.served_tier) for call in run.invocations]
    assert sorted(by_tier, key=str) == sorted([("reserved", "reserved"), (None, None), ("reserved", "default")], key=str)
    assert set(run.output["answers"]) == {"Pros", "Cons"}
    assert set(run.output["tiers"]) == {"Pros"}  # the untiered branch asked for nothing to compare
    served = {run.output["tiers"]["Pros"]["served"], run.output["synthesis"]["serviceTier"]["served"]}
    assert served == {"reserved", "default"}  # one held by the reservation, one overflowed
    assert run.output["synthesis"]["serviceTier"]["requested"] == "reserved"


@pytest.mark.parametrize("suffix", [" served tier", " served tier unreported"])  # "?" is refused anyway
def test_a_prompt_named_like_a_tier_state_is_refused_naming_it(suffix):
    from genai_pacer import InvalidPropsError

    with pytest.raises(InvalidPropsError, match=f"prompt name 'Pros{suffix}' is taken"):
        ParallelPrompts(new_stack(), "Review", model=MODEL, prompts={f"Pros{suffix}": reserved(), "Cons": reserved()})


def test_a_ledger_paced_call_records_the_tiers_beside_its_settlement():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000)
    plan = quota.share("Map", quota.profile(input_tokens=100, output_tokens=20, max_tokens=50), fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    built = BoundedMap(stack, "Map", max_concurrency=plan, model=MODEL, ledger=ledger,
                       request=reserved(sfn.JsonPath.string_at("$.prompt")))
    with reservation(tpm_quota=1_000_000) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(prompts(2), state_machine=built.state_machine).raise_for_status()
    assert sorted(item["serviceTier"]["served"] for item in run.output) == sorted(c.served_tier for c in run.invocations)
    assert all(item["serviceTier"]["requested"] == "reserved" and item["text"] for item in run.output)


def test_the_served_tier_path_is_botocores_response_member_in_step_functions_casing():
    """ConverseResponse.serviceTier (a ServiceTier whose `type` is the tier) in the SDK integration's
    PascalCase; selected through a filter on the response object, an indefinite path."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    response = model.operation_model("Converse").output_shape
    assert "serviceTier" in response.members and "serviceTier" not in response.required_members
    assert list(response.members["serviceTier"].members) == ["type"]
    assert SERVED_TIER_PATH == "$[?(@.ServiceTier)].ServiceTier.Type"


def test_the_runner_filters_an_object_as_jayway_jsonpath_does():
    """A filter on an object tests the object itself and an indefinite path answers a list (Jayway
    JsonPath's PredicatePathToken and README), where jsonpath_ng would filter the object's values."""
    from genai_pacer.testing.sfn import _interpreter

    stack = new_stack()
    BoundedMap(stack, "Map", max_concurrency=1, model=MODEL, request=reserved())
    with StateMachineRunner(stack):
        assert _interpreter._extract_json(SERVED_TIER_PATH, {"ServiceTier": {"Type": "flex"}, "StopReason": "x"}) == ["flex"]
        assert _interpreter._extract_json(SERVED_TIER_PATH, {"StopReason": "x"}) == []
        assert _interpreter._extract_json("$.a[?(@.t)].t", {"a": [{"t": 1}, {"u": 2}]}) == [1]


def test_a_ledger_paced_call_placed_beside_its_item_keeps_the_item_and_records_the_tiers():
    from genai_pacer import TaskOptions

    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000)
    plan = quota.share("Map", quota.profile(input_tokens=100, output_tokens=20, max_tokens=50), fraction=0.5, call_seconds=4)
    built = BoundedMap(stack, "Map", max_concurrency=plan, model=MODEL, ledger=QuotaLedger(stack, "Ledger", quota=quota),
                       request=reserved(sfn.JsonPath.string_at("$.prompt")), task_options=TaskOptions(result_path="$.answer"))
    with reservation(tpm_quota=1_000_000) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(prompts(2), state_machine=built.state_machine).raise_for_status()
    assert sorted(item["prompt"] for item in run.output) == ["q0", "q1"]
    assert sorted(item["answer"]["serviceTier"]["served"] for item in run.output) == ["default", "reserved"]


def test_a_ledger_paced_scheduled_run_stores_both_tiers_after_settling():
    from aws_cdk import aws_scheduler as scheduler
    from genai_pacer import AnswerStore, ScheduledPrecompute
    from pacer_runtime import answers

    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000)
    plan = quota.share("Notes", quota.profile(input_tokens=100, output_tokens=20, max_tokens=50), fraction=0.3, call_seconds=4)
    store = AnswerStore(stack, "Store")
    items = [{"key": f"ticker-morning#t{i}", "ticker": f"T{i}"} for i in range(2)]
    notes = ScheduledPrecompute(
        stack, "Notes", answer_store=store, model=MODEL, max_concurrency=plan, items=items,
        ledger=QuotaLedger(stack, "Ledger", quota=quota), request=reserved("Write the note."),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_LONDON),
    )
    with reservation(tpm_quota=1_000_000) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": items}, state_machine=notes.state_machine).raise_for_status()
        stored = [answers.get_answer(runner.dynamodb, runner.physical_name(store.table), i["key"]) for i in items]
    assert run.output["written"] == 2
    assert sorted((a.requested_tier, a.served_tier) for a in stored) == sorted(
        (c.service_tier, c.served_tier) for c in run.invocations) == [("reserved", "default"), ("reserved", "reserved")]
