"""Step Functions model tasks in the shared quota ledger (issue 25, layer 3), executed offline with
StateMachineRunner against moto's DynamoDB and the Bedrock emulator: a call reserves before it runs,
settles to input + cache writes + output x burndown, returns its hold when it fails, waits when the
ledger is full and goes on once there is room, and shares the item with a process consumer
(pacer_runtime's SharedLedger) in both directions. Then what synth writes and refuses."""

from __future__ import annotations

import json
import time
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import (
    BedrockModel,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    ModelQuota,
    NativeRequest,
    ParallelPrompts,
    QuotaLedger,
    TaskOptions,
)
from genai_pacer.quota.ledger import LEADING_KEYS
from genai_pacer.step_functions import ledger_steps
from genai_pacer.step_functions.ledger_steps import (
    CONDITIONAL_CHECK_FAILED,
    DYNAMODB_RETRY_ERRORS,
    LEDGER_RETRY_ATTEMPTS,
)
from genai_pacer.testing import BedrockEmulator, ModelSpec, StateMachineRunner
from genai_pacer.testing.sfn import _interpreter
from helpers import new_stack, policy_statements, refused, resources, template_of
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, SharedLedger

MODEL_ID = "us.amazon.nova-lite-v1:0"
MODEL = BedrockModel.from_id(MODEL_ID)
BURNDOWN = 5
MAX_TOKENS = 400
PROMPT_TOKENS = 1_000  # the share profile's input: what a state machine reserves for the prompt
RESERVED = PROMPT_TOKENS + MAX_TOKENS * BURNDOWN  # 3,000
QUOTA_TPM = 400_000
KEY = {"pk": {"S": "quota#" + MODEL_ID}}


def ledger_stack(stack: cdk.Stack | None = None, *, request: ConverseRequest | None = None, **props):
    stack = stack or new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    profile = quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS)
    plan = quota.share("Summaries", profile, fraction=0.5, call_seconds=4)
    quota.share("Interactive", profile, fraction=0.4, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    # the Interactive share's process consumer (process_consumer) takes part through the ledger's variables: held by
    # no construct of the app, it would otherwise count outside the ledger (QuotaLedger.outside_shares)
    ledger.environment("Interactive")
    request = request or ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS)
    props = {"model": MODEL, "ledger": ledger, **props}
    summaries = BoundedMap(stack, "Summaries", max_concurrency=plan, request=request, **props)
    return stack, ledger, summaries


def emulator(**spec):
    return BedrockEmulator([ModelSpec(MODEL_ID, tpm_quota=1_000_000, burndown=BURNDOWN, answer_tokens=120, **spec)],
                           time_scale=50)


def item_of(runner: StateMachineRunner, ledger: QuotaLedger) -> dict:
    return runner.dynamodb.get_item(TableName=runner.physical_name(ledger.table), Key=KEY, ConsistentRead=True)["Item"]


def slots(item: dict) -> dict[str, int]:
    return {name: int(value["N"]) for name, value in item.items() if name.startswith("s#")}


def process_consumer(runner: StateMachineRunner, ledger: QuotaLedger, **options) -> SharedLedger:
    """Another consumer of the same quota: a QuotaPacer's ledger in some process (the Interactive share)."""
    return SharedLedger(runner.physical_name(ledger.table), ledger_id=MODEL_ID, consumer="Interactive",
                        quota_tpm=ledger.quota_tpm, floor_tpm=160_000, client=runner.dynamodb,
                        **{"poll_seconds": 0.01, "max_poll_seconds": 0.02, **options})


def states_entered(run) -> list[str]:
    return [e["stateEnteredEventDetails"]["name"] for e in run.history if "stateEnteredEventDetails" in e]


def failed_errors(run) -> list[str]:
    return [e["taskFailedEventDetails"]["error"] for e in run.history if "taskFailedEventDetails" in e]


# --- executed -----------------------------------------------------------------------------------


def test_a_call_reserves_then_settles_to_input_plus_cache_writes_plus_output_times_burndown():
    cached = "Background: " + "the quarterly report covers revenue and costs. " * 60
    request = ConverseRequest(messages=[{"Role": "user", "Content": [
        {"Text": cached}, {"CachePoint": {"Type": "default"}}, {"Text": "Summarize it."}]}], max_tokens=MAX_TOKENS)
    stack, ledger, _ = ledger_stack(request=request)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": [{"id": 1}]}).raise_for_status()
        item = item_of(runner, ledger)
    (call,) = run.invocations
    assert call.cache_write_tokens > 0  # the branch that adds cache writes ran
    charged = call.input_tokens + call.cache_write_tokens + call.output_tokens * BURNDOWN
    assert list(slots(item).values()) == [charged]
    assert item["held"] == {"N": str(charged)} and item["h#Summaries"] == {"N": str(charged)}
    assert "expires_at" not in item  # a state machine cannot set the TTL, so it never lets TTL drop its holds
    # the answer is the call's narrowed answer, as without a ledger
    assert run.output == [{"text": run.output[0]["text"], "stopReason": "end_turn",
                           "usage": {"inputTokens": call.input_tokens, "outputTokens": call.output_tokens}}]


def test_the_slot_is_the_second_the_call_started_and_the_reservation_is_the_pacers():
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        before = time.time()
        run = runner.run({"items": [{"prompt": "Summarize: " + "good battery, " * 40}]}).raise_for_status()
        item = item_of(runner, ledger)
    from pacer_runtime.ledger import LedgerView

    (name,) = slots(item)
    started, consumer, _ = LedgerView.parse(item, time.time()).slots[name]  # as the runtime reads it
    assert name == "s#" + time.strftime("%H:%M:%S", time.gmtime(started)) + "#Summaries"  # s#<UTC time of day>#<consumer>
    assert consumer == "Summaries" and int(before) - 1 <= started <= time.time()
    (call,) = run.invocations
    # settled = reserved + delta: the settle step's delta is what the charge adds to the 3,000 reserved
    assert slots(item)[name] == call.input_tokens + call.output_tokens * BURNDOWN
    assert states_entered(run).index("InvokeModel reserve") < states_entered(run).index("InvokeModel")


def test_a_failed_call_returns_its_hold_and_fails_with_the_calls_error():
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        bedrock.fail_next("ValidationException")  # not retried: the call fails after its hold was taken
        run = runner.run({"items": [{"prompt": "Summarize this."}]})
        item = item_of(runner, ledger)
    assert not run.succeeded and run.error == "BedrockRuntime.ValidationException"
    assert "InvokeModel release" in states_entered(run)
    # reserved 3,000 (the slot exists), then returned at once: nothing is held
    assert list(slots(item).values()) == [0] and item["held"] == {"N": "0"} and item["h#Summaries"] == {"N": "0"}


def test_a_refused_reservation_waits_without_calling_the_model_and_proceeds_once_there_is_room(monkeypatch):
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        other = process_consumer(runner, ledger)
        hold = other.try_reserve(int(ledger.quota_tpm) - RESERVED + 1)  # one token too many for the state machine
        assert isinstance(hold, LedgerHold)
        waits: list[float] = []
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:  # the Retry's wait: the other consumer's call ends meanwhile
            waits.append(seconds)
            if len(waits) == 2:
                other.release(hold)
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run({"items": [{"prompt": "Summarize this."}]}).raise_for_status()
        item = item_of(runner, ledger)
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED] * 2  # refused twice, then admitted
    assert len(waits) == 2 and run.model_calls == 1 and run.throttled == 0  # waited in the ledger, not in a throttle
    # each refused try entered the states docs/quota.md prices (LEDGER_STATES_PER_REFUSAL), then the call went on
    entered = states_entered(run)
    refusals = [s for s in entered if s in ("InvokeModel ledger try again?", "InvokeModel ledger want",
                                             "InvokeModel ledger wait", "InvokeModel ledger slot again")] + ["InvokeModel reserve"] * (
        entered.count("InvokeModel reserve") - 1)
    assert len(refusals) == 2 * ledger_steps.LEDGER_STATES_PER_REFUSAL
    (call,) = run.invocations
    assert int(item["h#Summaries"]["N"]) == call.input_tokens + call.output_tokens * BURNDOWN
    assert int(item["held"]["N"]) == int(item["h#Summaries"]["N"])  # the released hold is gone


def test_a_process_consumer_sees_the_state_machines_holds_and_removes_them_once_they_leave_the_window():
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.run({"items": [{"prompt": "Summarize this."}, {"prompt": "And this."}]}).raise_for_status()
        item = item_of(runner, ledger)
        settled = int(item["h#Summaries"]["N"])
        other = process_consumer(runner, ledger)
        view = other.view(refresh=True)
        assert view.problems == [] and other.live_tokens(view, time.time(), "Summaries") == settled
        room = int(ledger.quota_tpm) - settled
        assert isinstance(other.try_reserve(room + 1), LedgerRefusal)  # the state machine's holds count
        # A consumer whose clock is past the window removes them (what a crashed execution's hold relies on):
        later = process_consumer(runner, ledger, clock=lambda: time.time() + 120)
        assert isinstance(later.try_reserve(room + 1), LedgerHold)
        item = item_of(runner, ledger)
    # its h# left with its last slot (the item keeps only the consumers holding something in the window)
    assert "h#Summaries" not in item and not any(name.endswith("#Summaries") for name in slots(item))
    assert int(item["held"]["N"]) == room + 1


def test_a_non_object_item_and_an_answer_kept_beside_the_input_both_work():
    stack, ledger, _ = ledger_stack(request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS),
                                    task_options=TaskOptions(result_path="$.answer"))
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": [{"prompt": "Summarize this.", "id": 7}]}).raise_for_status()
    (answer,) = run.output
    assert answer["id"] == 7 and answer["prompt"] == "Summarize this."  # the item is back, unchanged
    assert set(answer) == {"id", "prompt", "answer"} and answer["answer"]["stopReason"] == "end_turn"
    # an item that is a plain string: the envelope wraps it, and the prompt reads it as $
    stack, ledger, _ = ledger_stack(request=ConverseRequest(prompt=sfn.JsonPath.string_at("$"), max_tokens=MAX_TOKENS))
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": ["Summarize this."]}).raise_for_status()
        item = item_of(runner, ledger)
    assert set(run.output[0]) == {"text", "stopReason", "usage"} and len(slots(item)) == 1
    assert run.invocations[0].input_tokens == run.output[0]["usage"]["inputTokens"]


# --- synth --------------------------------------------------------------------------------------


def test_the_state_machine_may_update_only_its_quotas_item():
    stack, ledger, summaries = ledger_stack()
    template = template_of(stack).to_json()
    table_id = next(iter(resources(template, "AWS::DynamoDB::Table")))
    sweeper_role = {"Ref": stack.get_logical_id(ledger.sweeper_function.role.node.default_child)}
    on_ledger = [s for p in resources(template, "AWS::IAM::Policy").values() if sweeper_role not in p["Properties"]["Roles"]
                 for s in p["Properties"]["PolicyDocument"]["Statement"] if table_id in json.dumps(s["Resource"])]
    assert on_ledger and all(s["Action"] == "dynamodb:UpdateItem" for s in on_ledger)  # the sweeper's: tests/quota
    assert all(s["Condition"] == {"ForAllValues:StringEquals": {LEADING_KEYS: ["quota#" + MODEL_ID]}} for s in on_ledger)
    consumer = summaries.ledger_consumer
    assert (consumer.name, consumer.floor_tpm, consumer.reservation(MAX_TOKENS)) == ("Summaries", 200_000, RESERVED)


def test_a_customer_managed_table_key_is_granted_through_dynamodb_only():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    plan = quota.share("Summaries", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.5, call_seconds=4)
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    ledger = QuotaLedger(stack, "Ledger", quota=quota, encryption_key=key)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS))
    kms_statements = [s for s in policy_statements(template_of(stack)) if str(s["Action"]).startswith("['kms:")
                      or (isinstance(s["Action"], list) and s["Action"][0].startswith("kms:"))]
    # the state machine's and the sweeper's (which removes the expired slots): each through DynamoDB only
    assert [s["Condition"] for s in kms_statements] == [{"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}}] * 2


def test_a_refused_reservation_waits_a_jittered_capped_backoff_and_tries_again_in_a_new_slot():
    stack, _, _ = ledger_stack()
    definition = json.dumps(template_of(stack).to_json())
    states = json.loads(_flat_definition(stack))["States"]["Map"]["ItemProcessor"]["States"]
    assert "Retry" not in states["InvokeModel reserve"]  # a Retry would try again in the slot of the first try
    refusal, throttle = states["InvokeModel reserve"]["Catch"]
    assert refusal["ErrorEquals"] == [CONDITIONAL_CHECK_FAILED] and refusal["Next"] == "InvokeModel ledger try again?"
    assert throttle["ErrorEquals"] == list(DYNAMODB_RETRY_ERRORS) and throttle["Next"] == "InvokeModel ledger throttled again?"
    (too_often,) = states["InvokeModel ledger throttled again?"]["Choices"]
    # DynamoDB failing past its tries: the call goes on without the ledger (test_ledger_steps_fallback)
    assert too_often == {"Variable": "$.throttled.count", "NumericGreaterThanEquals": ledger_steps.DYNAMODB_RETRY_ATTEMPTS,
                         "Next": "InvokeModel ledger fallback metric"}
    assert states["InvokeModel ledger throttled"]["Next"] == "InvokeModel ledger wait"
    (give_up,) = states["InvokeModel ledger try again?"]["Choices"]
    assert give_up == {"Variable": "$.retries", "NumericGreaterThanEquals": LEDGER_RETRY_ATTEMPTS,
                       "Next": "InvokeModel failed"}
    assert states["InvokeModel ledger wait"] == {"Type": "Wait", "SecondsPath": "$.wait", "Next": "InvokeModel ledger slot again"}
    first, again = states["InvokeModel ledger slot"]["Parameters"], states["InvokeModel ledger slot again"]["Parameters"]
    assert first["wait.$"] == "States.MathRandom(1, 2)" and first["retries"] == 0 and first["backoff"] == 1
    assert again["wait.$"] == "States.MathRandom(1, States.ArrayGetItem(States.Array(2, 4, 8), $.backoff))"
    assert again["backoff.$"] == "States.ArrayGetItem(States.Array(1, 2, 2), $.backoff)"
    assert again["slot.$"] == first["slot.$"] and again["input.$"] == "$.input"
    assert states["InvokeModel ledger slot again"]["Next"] == "InvokeModel reserve"
    assert states["InvokeModel reserve"]["Parameters"]["ExpressionAttributeValues"][":total"] == {"N": str(QUOTA_TPM - RESERVED)}
    assert "InvokeModel settle" in definition


def _flat_definition(stack: cdk.Stack) -> str:
    (machine,) = resources(template_of(stack), "AWS::StepFunctions::StateMachine").values()
    body = machine["Properties"]["DefinitionString"]
    return body if isinstance(body, str) else "".join(p if isinstance(p, str) else "X" for p in body["Fn::Join"][1])


def test_each_prop_combination_the_ledger_cannot_pace_is_refused_by_name():
    # no share of the quota is the Map's: a state machine reserves the share profile's prompt
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    problems = refused(lambda: BoundedMap(stack, "Map", max_concurrency=4, model=MODEL, ledger=ledger,
                                          request=ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS)))
    assert any(p.startswith("ledger: no share of ModelQuota Quota") for p in problems), problems
    # a native body, a selection of one's own, a deploy-time max_tokens, another model's ledger, an item processor
    for build, start in (
        (lambda s: {"request": NativeRequest({"prompt": "Hi"})}, "request: ledger= settles"),
        (lambda s: {"task_options": TaskOptions(result_selector={"t.$": "$.Output"})}, "task_options.result_selector with ledger="),
        (lambda s: {"request": ConverseRequest(prompt="Hi", max_tokens=cdk.CfnParameter(s, "Max", type="Number").value_as_number)},
         "request.max_tokens is a deploy-time number"),
        (lambda s: {"model": BedrockModel.from_id("us.amazon.nova-pro-v1:0")}, "ledger=QuotaLedger Ledger keeps the quota of model"),
        (lambda s: {"ledger": "table"}, "ledger='table' is a str"),
    ):
        stack = new_stack()
        problems = refused(lambda stack=stack, build=build: ledger_stack(stack, **build(stack)))
        assert any(p.startswith(start) for p in problems), (start, problems)


def test_a_reservation_above_the_quota_is_refused_at_synth():
    problems = refused(lambda: ledger_stack(request=ConverseRequest(prompt="Hi", max_tokens=100_000)))
    assert any("a call reserves 501,000 tokens" in p for p in problems), problems


def test_an_item_processor_with_a_ledger_is_refused():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    problems = refused(lambda: BoundedMap(stack, "Map", max_concurrency=4, ledger=ledger,
                                          item_processor=sfn.Pass(stack, "Mine")))
    assert any(p.startswith("ledger is set with item_processor") for p in problems), problems


@pytest.mark.parametrize("name", ["Summaries", "O'Brien {team}"])
def test_a_share_name_with_intrinsic_reserved_characters_names_its_slot_exactly(name):
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    plan = quota.share(name, quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Map", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.run({"items": [{"prompt": "Hi"}]}).raise_for_status()
        item = item_of(runner, ledger)
    assert [s.split("#", 2)[2] for s in slots(item)] == [name]


def test_a_distributed_maps_child_executions_reserve_and_settle_in_the_ledger():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    plan = quota.share("Catalog", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    bucket = s3.Bucket(stack, "Items")
    catalog = BoundedDistributedMap(stack, "Catalog", max_concurrency=plan, model=MODEL, ledger=ledger, items_bucket=bucket,
                                    items_key="items.jsonl",
                                    request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(bucket), Key="items.jsonl",
                             Body="".join(json.dumps({"prompt": f"Describe product {i}."}) + "\n" for i in range(3)))
        bedrock.fail_next("ValidationException")  # one call fails: its hold comes back, the others settle
        run = runner.run({}, state_machine=catalog.state_machine)
        item = item_of(runner, ledger)
    assert not run.succeeded  # tolerated_failure_percentage=0: the failed item fails the run, as without a ledger
    settled = [call for call in run.invocations if call.outcome == "ok"]
    assert len(settled) == 2
    charged = sum(call.input_tokens + call.output_tokens * BURNDOWN for call in settled)
    assert int(item["h#Catalog"]["N"]) == charged == int(item["held"]["N"])
    assert sum(slots(item).values()) == charged


def parallel_stack(*, synthesis_model: BedrockModel | None = None):
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    quota.share("Review", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                calls=2, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    review = ParallelPrompts(
        stack, "Review", model=MODEL, ledger=ledger, synthesis_model=synthesis_model,
        prompts={"Pros": ConverseRequest(prompt="List the pros.", max_tokens=MAX_TOKENS),
                 "Cons": ConverseRequest(prompt="List the cons.", max_tokens=MAX_TOKENS)},
        synthesis=ConverseRequest(prompt=sfn.JsonPath.format(
            "Weigh these: {}", sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.answers"))), max_tokens=MAX_TOKENS),
    )
    return stack, ledger, review


def test_parallel_prompts_branches_and_their_synthesis_reserve_and_settle_in_the_ledger():
    stack, ledger, review = parallel_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"topic": "the plan"}, state_machine=review.state_machine).raise_for_status()
        item = item_of(runner, ledger)
    assert set(run.output) == {"answers", "synthesis"} and set(run.output["answers"]) == {"Pros", "Cons"}
    assert set(run.output["synthesis"]) == {"text", "stopReason", "usage"}
    assert len(run.invocations) == 3
    charged = sum(call.input_tokens + call.output_tokens * BURNDOWN for call in run.invocations)
    assert int(item["h#Review"]["N"]) == charged == int(item["held"]["N"]) == sum(slots(item).values())


def test_a_synthesis_on_another_model_is_not_charged_to_this_quota():
    other = BedrockModel.from_id("us.amazon.nova-pro-v1:0")
    stack, ledger, review = parallel_stack(synthesis_model=other)
    spec = ModelSpec(other.model_id, tpm_quota=1_000_000, answer_tokens=50)
    with BedrockEmulator([ModelSpec(MODEL_ID, tpm_quota=1_000_000, burndown=BURNDOWN, answer_tokens=120), spec],
                         time_scale=50) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({}, state_machine=review.state_machine).raise_for_status()
        item = item_of(runner, ledger)
    ours = [call for call in run.invocations if call.model_id == MODEL_ID]
    assert len(ours) == 2 and len(run.invocations) == 3
    assert int(item["held"]["N"]) == sum(call.input_tokens + call.output_tokens * BURNDOWN for call in ours)


@pytest.mark.parametrize("suffix", [" settle", " ledger want", " ledger fallback metric", " ledger fallback wait",
                                    " ledger fallback call"])
def test_a_prompt_named_like_a_ledger_state_is_refused(suffix):
    """A prompt "Pros" has the states "Pros settle", "Pros ledger fallback call" and so on: a prompt of
    such a name would clash with them."""
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    quota.share("Review", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                calls=2, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    request = ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS)
    problems = refused(lambda: ParallelPrompts(stack, "Review", model=MODEL, ledger=ledger,
                                               prompts={"Pros": request, "Pros" + suffix: request}))
    assert any(p.startswith(f"prompt name 'Pros{suffix}' ends like the ledger's own states") for p in problems), problems


def test_a_scheduled_precompute_run_reserves_and_settles_each_key_and_a_failed_key_returns_its_hold():
    from aws_cdk import aws_scheduler as scheduler
    from genai_pacer import AnswerStore, ScheduledPrecompute

    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
    plan = quota.share("Notes", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.3, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    store = AnswerStore(stack, "Store")
    items = [{"key": f"ticker-morning#t{i}", "ticker": f"T{i}"} for i in range(3)]
    notes = ScheduledPrecompute(
        stack, "Notes", answer_store=store, model=MODEL, max_concurrency=plan, items=items, ledger=ledger,
        request=ConverseRequest(prompt=sfn.JsonPath.format("Write the note for {}.", sfn.JsonPath.string_at("$.item.ticker")),
                                max_tokens=MAX_TOKENS),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_LONDON),
        tolerated_failed_keys=1,
    )
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        bedrock.fail_next("ValidationException")  # one key's call fails: its hold comes back, the key is listed
        run = runner.run({"items": items}, state_machine=notes.state_machine).raise_for_status()
        item = item_of(runner, ledger)
    assert (run.output["written"], run.output["failed"]) == (2, 1)
    settled = [call for call in run.invocations if call.outcome == "ok"]
    charged = sum(call.input_tokens + call.output_tokens * BURNDOWN for call in settled)
    assert int(item["h#Notes"]["N"]) == charged == int(item["held"]["N"]) == sum(slots(item).values())
    assert notes.ledger_consumer is not None and notes.ledger_consumer.name == "Notes"


def ledger_warnings(stack: cdk.Stack) -> list[str]:
    from aws_cdk.assertions import Annotations, Match

    return [str(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
            if "genai-pacer:ledger-state-machines-only" in str(m.entry.data)]


def test_a_ledger_only_state_machines_use_gets_a_sweeper_and_without_it_is_warned_until_a_process_consumer_exists():
    from aws_cdk import aws_iam as iam

    stack, ledger, _ = ledger_stack()
    assert ledger.sweeper_function is not None and ledger_warnings(stack) == []

    def without_sweeper() -> tuple[cdk.Stack, QuotaLedger]:
        stack = new_stack()
        quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN)
        plan = quota.share("Summaries", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200,
                                                      max_tokens=MAX_TOKENS), fraction=0.5, call_seconds=4)
        ledger = QuotaLedger(stack, "Ledger", quota=quota, sweeper=False)
        BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
                   request=ConverseRequest(prompt="Hi", max_tokens=MAX_TOKENS))
        return stack, ledger

    stack, _ = without_sweeper()
    (warning,) = ledger_warnings(stack)
    assert warning.startswith("QuotaLedger Ledger is used by state machines only (Test/Summaries)")
    stack, ledger = without_sweeper()
    ledger.grant_use(iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    assert ledger_warnings(stack) == []


def test_with_only_a_state_machine_in_the_ledger_the_sweeper_frees_old_holds_and_the_next_reservation_is_admitted():
    """Holds a crashed or finished execution left a few minutes ago fill the quota; no process consumer
    writes the item. The sweeper's handler (invoked here directly, on the test's clock) removes them, and
    the state machine's next reservation goes through at its first try."""
    from quota_sweeper import handler as sweeper

    stack, ledger, _ = ledger_stack()
    function = ledger.sweeper_function
    assert function is not None
    env = template_of(stack).to_json()["Resources"][stack.get_logical_id(function.node.default_child)]["Properties"][
        "Environment"]["Variables"]
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        table = runner.physical_name(ledger.table)
        old = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 180))
        full = int(ledger.quota_tpm) - RESERVED + 1  # one token too many for the next reservation
        runner.dynamodb.put_item(TableName=table, Item={**KEY, "held": {"N": str(full)}, "h#Summaries": {"N": str(full)},
                                                        f"s#{old}#Summaries": {"N": str(full)}})

        class Context:
            def get_remaining_time_in_millis(self) -> int:
                return 1_000  # one sweep

        result = sweeper.handler({}, Context(), environ={**env, "GENAI_PACER_LEDGER_TABLE": table},
                                 client=runner.dynamodb, clock=time.time)
        assert result == {"sweeps": 1, "tokensRemoved": full}
        run = runner.run({"items": [{"prompt": "Summarize this."}]}).raise_for_status()
        item = item_of(runner, ledger)
    assert failed_errors(run) == []  # admitted at once: the stale holds no longer count
    (call,) = run.invocations
    assert list(slots(item).values()) == [call.input_tokens + call.output_tokens * BURNDOWN] == [int(item["held"]["N"])]


def test_the_state_machines_attribute_names_are_the_runtimes():
    """A state machine writes the item SharedLedger reads: the same names, kept equal here."""
    from genai_pacer.step_functions import ledger_steps
    from pacer_runtime import ledger as runtime

    assert (ledger_steps.HELD, ledger_steps.CONSUMER_PREFIX, ledger_steps.SLOT_PREFIX) == (
        runtime.HELD, runtime.CONSUMER_PREFIX, runtime.SLOT_PREFIX)
    assert runtime.SLOT_FORMAT == "%H:%M:%S"  # what the slot Pass cuts EnteredTime to: its UTC time of day


@pytest.mark.parametrize("burndown", [1, 15])
def test_the_settlement_multiplies_output_by_any_published_burndown_with_additions_alone(burndown):
    """15 needs two charge states (at most 10 intrinsics in a field); 1 needs one."""
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=burndown)
    plan = quota.share("Summaries", quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS),
                       fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    spec = ModelSpec(MODEL_ID, tpm_quota=1_000_000, burndown=burndown, answer_tokens=120)
    with BedrockEmulator([spec], time_scale=50) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": [{"prompt": "Summarize this."}]}).raise_for_status()
        item = item_of(runner, ledger)
    (call,) = run.invocations
    assert int(item["h#Summaries"]["N"]) == call.input_tokens + call.output_tokens * burndown
    charges = [name for name in states_entered(run) if name.startswith("InvokeModel charge output")]
    assert len(charges) == (2 if burndown == 15 else 1)


def test_every_ledger_task_retries_dynamodbs_throttles():
    from genai_pacer.step_functions.ledger_steps import DYNAMODB_RETRY_ERRORS

    stack, _, _ = ledger_stack()
    states = json.loads(_flat_definition(stack))["States"]["Map"]["ItemProcessor"]["States"]
    for name in ("InvokeModel settle", "InvokeModel release"):  # the same slot, which the reservation wrote
        assert [r for r in states[name]["Retry"] if set(r["ErrorEquals"]) == set(DYNAMODB_RETRY_ERRORS)], name
    # the reservation's throttles go back through a new slot (test_ledger_steps_faults executes it)
    assert [c for c in states["InvokeModel reserve"]["Catch"] if set(c["ErrorEquals"]) == set(DYNAMODB_RETRY_ERRORS)]


def test_what_the_ledger_adds_to_the_bill_is_what_docs_quota_states():
    """A Standard workflow pays per state transition, retries included: the states the ledger adds to
    each call, counted offline against the same BoundedMap without it, and the Retry's ceiling are
    what docs/quota.md prices for the user."""
    entered = {}
    for with_ledger in (False, True):
        stack = new_stack()
        if with_ledger:
            _, _, summaries = ledger_stack(stack)
        else:
            summaries = BoundedMap(stack, "Summaries", max_concurrency=4, model=MODEL,
                                   request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
        with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
            run = runner.run({"items": [{"prompt": "a"}, {"prompt": "b"}]}, state_machine=summaries.state_machine)
        entered[with_ledger] = len(run.raise_for_status().states_entered)
    assert (entered[True] - entered[False]) / 2 == ledger_steps.LEDGER_STATES_PER_CALL
    docs = " ".join((Path(__file__).parents[2] / "docs" / "quota.md").read_text().split())
    price = ledger_steps.STATE_TRANSITION_USD
    assert f"${price * 1_000:.3f} per 1,000 state transitions" in docs
    assert f"each call enters {ledger_steps.LEDGER_STATES_PER_CALL} more states, about " \
           f"${ledger_steps.LEDGER_STATES_PER_CALL * price * 1_000:.2f} per 1,000 calls" in docs
    per_refusal = ledger_steps.LEDGER_STATES_PER_REFUSAL
    assert f"each refused try enters {per_refusal} more" in docs
    assert f"up to {LEDGER_RETRY_ATTEMPTS} tries for a call that waits the whole 10 minutes, " \
           f"{LEDGER_RETRY_ATTEMPTS * per_refusal} transitions, up to " \
           f"${LEDGER_RETRY_ATTEMPTS * per_refusal * price * 1_000:.2f} per 1,000 such calls" in docs
