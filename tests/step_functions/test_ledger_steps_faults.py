"""The shared ledger's edge cases for a Step Functions consumer (issue 25's done-criteria: a consumer that
dies holding tokens, a throttled ledger, skewed clocks, a malformed item), executed offline with
StateMachineRunner against moto's DynamoDB and the Bedrock emulator, beside a process consumer
(pacer_runtime's SharedLedger) of the same quota. DynamoDB's throttles are injected into moto's backend,
so the state machine meets them through the optimized integration as it would on AWS."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from genai_pacer.step_functions.ledger_steps import CONDITIONAL_CHECK_FAILED, DYNAMODB_RETRY_ATTEMPTS
from genai_pacer.testing import StateMachineRunner
from genai_pacer.testing.sfn import _interpreter
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, LedgerView, _parse_slot
from test_ledger_steps import (
    BURNDOWN,
    KEY,
    RESERVED,
    emulator,
    failed_errors,
    item_of,
    ledger_stack,
    process_consumer,
    slots,
    states_entered,
)

THROTTLE = "ProvisionedThroughputExceededException"
PROMPT = {"items": [{"prompt": "Summarize this."}]}


def throttle_state_machine(monkeypatch, kind: str, times: int, consumer: str = "Summaries") -> list[str]:
    """DynamoDB throttles the state machine's next `times` writes of `kind` ("reserve" or "settle"), as a
    hot partition would; every other write (the process consumer's) goes through. Patched before the
    runner starts, so the runner's own wrapper of moto's backend wraps this one and restores it."""
    from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException
    from moto.dynamodb.models import DynamoDBBackend

    original = DynamoDBBackend.update_item
    raised: list[str] = []

    def update_item(self, table_name, key, **request):
        ours = (request.get("expression_attribute_names") or {}).get("#mine") == "h#" + consumer
        reserve = "REMOVE #ttl" in request["update_expression"]
        release = (request.get("expression_attribute_values") or {}).get(":d") == {"N": str(-RESERVED)}
        matches = reserve if kind == "reserve" else not reserve and not release
        if ours and matches and len(raised) < times:
            raised.append(kind)
            raise DynamodbException(ERROR_TYPE_PREFIX + THROTTLE, "The level of configured provisioned throughput "
                                    "for the table was exceeded")
        return original(self, table_name, key, **request)

    monkeypatch.setattr(DynamoDBBackend, "update_item", update_item)
    return raised


def slot_start(name: str) -> float:
    """The slot's start as every reader of the ledger reads it (its time of day nearest the clock)."""
    start, _ = _parse_slot(name, time.time())
    assert start is not None, name
    return start


def test_a_throttled_reservation_is_retried_and_the_call_goes_on_once_dynamodb_answers(monkeypatch):
    stack, ledger, _ = ledger_stack()
    raised = throttle_state_machine(monkeypatch, "reserve", 2)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    assert raised == ["reserve"] * 2 and failed_errors(run) == ["DynamoDB." + THROTTLE] * 2
    (call,) = run.invocations
    assert int(item["held"]["N"]) == int(item["h#Summaries"]["N"]) == call.input_tokens + call.output_tokens * BURNDOWN


def test_a_ledger_that_keeps_throttling_is_left_for_the_floor_never_unbounded(monkeypatch):
    """When DynamoDB throttles past the reservation's tries, the call goes on without the ledger, paced to
    the share's floor (ledger_steps, "When DynamoDB fails"), as a process falls back to its static share: the
    item is answered, nothing is held or settled in the item, and LedgerFallbacks is published by LedgerId.
    (Before, the call failed with the throttle, having called nothing: a state machine had no fallback.)
    test_ledger_steps_fallback.py holds the Map, the wait's seconds and the other constructs."""
    stack, ledger, _ = ledger_stack()
    raised = throttle_state_machine(monkeypatch, "reserve", 100)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(PROMPT).raise_for_status()
        stored = runner.dynamodb.get_item(TableName=runner.physical_name(ledger.table), Key=KEY,
                                          ConsistentRead=True).get("Item")
    assert len(raised) == DYNAMODB_RETRY_ATTEMPTS + 1  # the first try and every retry, then the fallback
    assert run.model_calls == 1 and run.output[0]["stopReason"] == "end_turn"
    assert "InvokeModel ledger fallback call" in states_entered(run) and stored is None


def test_an_execution_whose_settlement_never_lands_keeps_its_hold_until_the_window_passes_and_no_longer(monkeypatch):
    """The state machine's equivalent of a consumer that dies holding tokens: its settlement fails past
    its Retry (DynamoDB throttling), so the reservation stays in the item. The answer still goes on (it is
    paid for). A process consumer whose clock is ahead of Step Functions' by less than the skew at the
    window's end removes nothing early; once the slot's window and the skew have passed, its next write
    removes the hold."""
    stack, ledger, _ = ledger_stack()
    throttle_state_machine(monkeypatch, "settle", 100)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
        assert run.model_calls == 1 and run.output[0]["stopReason"] == "end_turn"
        assert "InvokeModel settle" in states_entered(run)
        (name,) = slots(item)
        assert slots(item) == {name: RESERVED} and int(item["held"]["N"]) == RESERVED  # the hold, not the charge
        start = slot_start(name)
        room = int(ledger.quota_tpm) - RESERVED
        early = process_consumer(runner, ledger, clock=lambda: start + 61.9)  # slot second + window + 0.9 s
        assert isinstance(early.try_reserve(room + 1), LedgerRefusal)
        assert slots(item_of(runner, ledger))[name] == RESERVED
        late = process_consumer(runner, ledger, clock=lambda: start + 62.1)  # past second + window + skew (1 s)
        assert isinstance(late.try_reserve(room + 1), LedgerHold)
        item = item_of(runner, ledger)
    assert name not in item and "h#Summaries" not in item and int(item["held"]["N"]) == room + 1  # h# left with its slot


def test_a_process_whose_clock_lags_step_functions_writes_into_the_state_machines_second():
    """Step Functions names the slot from its own clock (EnteredTime); a process five seconds behind
    it adopts that second for its hold rather than naming an older one, so its hold cannot leave the
    window before the state machine's, and the item adds up."""
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.run(PROMPT).raise_for_status()
        (name,) = slots(item_of(runner, ledger))
        start = slot_start(name)
        lagging = process_consumer(runner, ledger, clock=lambda: start - 5)
        hold = lagging.try_reserve(100)
        assert isinstance(hold, LedgerHold)
        assert hold.slot == name.replace("#Summaries", "#Interactive")
        view = LedgerView.parse(item_of(runner, ledger))
    assert view.problems == [] and view.consumers["Interactive"] == 100


def test_a_malformed_item_makes_the_state_machine_wait_until_a_process_repairs_it_never_trusted(monkeypatch):
    """A state machine cannot repair the item: a `held` that is not a number fails its reservation's
    condition (attribute_type), so it waits in its Retry as on a full window, calling nothing; the next
    process consumer's write repairs the item from its valid slots, and the state machine goes on."""
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        table = runner.physical_name(ledger.table)
        runner.dynamodb.put_item(TableName=table, Item={**KEY, "held": {"S": "lots"}, "h#Summaries": {"N": "5"},
                                                        "mystery": {"N": "1"}})
        other = process_consumer(runner, ledger)
        waits: list[float] = []
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:  # the refused reservation's wait: a process writes the item meanwhile
            waits.append(seconds)
            if len(waits) == 2:
                hold = other.try_reserve(100)
                assert isinstance(hold, LedgerHold)
                other.release(hold)
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED] * 2 and run.model_calls == 1
    assert other.counts["repairs"] == 1
    view = LedgerView.parse(item)
    (call,) = run.invocations
    assert view.problems == [] and "mystery" not in item
    assert view.held == view.consumers["Summaries"] == call.input_tokens + call.output_tokens * BURNDOWN


@pytest.mark.parametrize("kind", ["reserve", "settle"])
def test_the_injected_throttle_reaches_only_the_state_machines_writes(monkeypatch, kind):
    """The fault injector above throttles what it says and nothing else (a process's writes go through)."""
    stack, ledger, _ = ledger_stack()
    raised = throttle_state_machine(monkeypatch, kind, 1)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        other = process_consumer(runner, ledger)
        assert isinstance(other.try_reserve(100), LedgerHold) and raised == []
        run = runner.run(PROMPT).raise_for_status()
    assert raised == [kind] and failed_errors(run) == ["DynamoDB." + THROTTLE]


class _MovingNow:
    """What moto's State reads EnteredTime from (datetime.datetime.now(tz=...)), at a moment the test moves."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def now(self, tz=None) -> datetime:
        return self.moment.astimezone(tz) if tz is not None else self.moment


class _DatetimeModule:
    timezone = __import__("datetime").timezone

    def __init__(self, now: _MovingNow) -> None:
        self.datetime = now


def test_a_reservation_admitted_after_a_long_wait_is_counted_for_the_minute_after_its_call_starts(monkeypatch):
    """A refused reservation waits and tries again (about 10 minutes at most). Bedrock counts the call from
    when it starts, after the wait; the hold must count as long. Each try names its slot when it is made,
    so after a wait of more than a minute the admitted hold sits in the slot of its own try, not one that
    already left the window: the next process write keeps it while Bedrock still counts the call."""
    from moto.stepfunctions.parser.asl.component.state import state as moto_state

    start = datetime(2027, 1, 15, 12, 0, 0, 250_000, tzinfo=UTC)
    now = _MovingNow(start)
    monkeypatch.setattr(moto_state, "datetime", _DatetimeModule(now))
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        full = process_consumer(runner, ledger, clock=lambda: now.moment.timestamp())
        hold = full.try_reserve(int(ledger.quota_tpm) - RESERVED + 1)
        assert isinstance(hold, LedgerHold)
        waits: list[float] = []
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:  # the first wait lasts 70 s of the case's time, then there is room
            waits.append(seconds)
            if len(waits) == 1:
                now.moment = start + timedelta(seconds=70)
                full.release(hold)
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run(PROMPT).raise_for_status()
        (call,) = run.invocations
        charged = call.input_tokens + call.output_tokens * BURNDOWN
        # 5 s after the call started (12:01:10): Bedrock counts it for 55 s more
        later = process_consumer(runner, ledger, clock=lambda: now.moment.timestamp() + 5)
        assert isinstance(later.try_reserve(1), LedgerHold)
        view = LedgerView.parse(item_of(runner, ledger))
    assert view.consumers.get("Summaries") == charged


def test_a_throttled_reservation_tries_again_in_the_slot_of_the_second_it_is_retried(monkeypatch):
    """DynamoDB's throttles are waited out as refusals are, each try in a slot of its own second: a
    reservation admitted after throttles (up to DYNAMODB_RETRY_ATTEMPTS waits of up to 8 s) counts for the
    minute after its call starts, not for the minute after its first try."""
    from moto.stepfunctions.parser.asl.component.state import state as moto_state

    start = datetime(2027, 1, 15, 12, 0, 0, 250_000, tzinfo=UTC)
    now = _MovingNow(start)
    monkeypatch.setattr(moto_state, "datetime", _DatetimeModule(now))
    stack, ledger, _ = ledger_stack()
    raised = throttle_state_machine(monkeypatch, "reserve", 1)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:  # the throttled try's wait: 8 s of the case's time
            now.moment = start + timedelta(seconds=8)
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    assert raised == ["reserve"] and failed_errors(run) == ["DynamoDB." + THROTTLE] and run.model_calls == 1
    assert list(slots(item)) == ["s#12:00:08#Summaries"]
