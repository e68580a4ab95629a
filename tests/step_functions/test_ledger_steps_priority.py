"""Priorities and the Step Functions consumers of the shared ledger: a state machine takes part as batch.
While an interactive process waits (PRIORITY_WAITING in the item), a state machine beyond its floor is
refused even where the window has room, and goes on once the interactive consumer is served; within its
floor it is admitted as before. Executed offline with StateMachineRunner against moto's DynamoDB and the
Bedrock emulator, the processes being pacer_runtime's SharedLedger on the wall clock (as the runner's)."""

from __future__ import annotations

import time

from genai_pacer.step_functions.ledger_steps import CONDITIONAL_CHECK_FAILED, PRIORITY_WAITING
from genai_pacer.testing import StateMachineRunner
from genai_pacer.testing.sfn import _interpreter
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, SharedLedger
from test_ledger_steps import BURNDOWN, KEY, MODEL_ID, emulator, failed_errors, item_of, ledger_stack

PROMPT = {"items": [{"prompt": "Summarize this."}]}
FLOOR = 200_000  # ledger_stack's Summaries share: half of 400,000
NEED = 3_000


def process(runner: StateMachineRunner, ledger, consumer: str, floor: float, **options) -> SharedLedger:
    return SharedLedger(runner.physical_name(ledger.table), ledger_id=MODEL_ID, consumer=consumer,
                        quota_tpm=ledger.quota_tpm, floor_tpm=floor, client=runner.dynamodb, poll_seconds=0.01,
                        max_poll_seconds=0.02, want_seconds=60, **options)


def interactive_waiting(runner, ledger, *, summaries_at_floor: bool) -> tuple[SharedLedger, SharedLedger]:
    """The window full, an interactive process refused within its floor (its want and the flag written),
    then the filler's call ends: room again, but the interactive consumer has not asked yet."""
    if summaries_at_floor:  # the state machine's earlier calls hold its whole floor: its next call borrows
        second = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        runner.dynamodb.put_item(TableName=runner.physical_name(ledger.table), Item={
            **KEY, "held": {"N": str(FLOOR)}, "h#Summaries": {"N": str(FLOOR)}, f"s#{second}#Summaries": {"N": str(FLOOR)}})
    filler = process(runner, ledger, "Filler", 0)
    room = int(ledger.quota_tpm) - (FLOOR if summaries_at_floor else 0) - NEED + 1
    hold = filler.try_reserve(room)
    assert isinstance(hold, LedgerHold)
    interactive = process(runner, ledger, "Interactive", 160_000, priority="interactive")
    assert isinstance(interactive.try_reserve(NEED), LedgerRefusal)
    assert PRIORITY_WAITING in item_of(runner, ledger)
    filler.release(hold)
    return interactive, filler


def test_a_state_machine_beyond_its_floor_waits_while_an_interactive_consumer_waits_then_goes_on(monkeypatch):
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        interactive, _ = interactive_waiting(runner, ledger, summaries_at_floor=True)
        waits: list[float] = []
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:  # the reservation's wait: the interactive consumer asks again
            waits.append(seconds)
            if len(waits) == 2:
                assert isinstance(interactive.try_reserve(NEED), LedgerHold)  # served first, the flag removed
                assert PRIORITY_WAITING not in item_of(runner, ledger)
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    # refused twice though the window had room for both (its 200,000 + 3,000 of 400,000): batch waits; each
    # refused try's want refused too (it would borrow: a borrower writes no want)
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED] * 4 and run.model_calls == 1
    assert "w#Summaries" not in item
    (call,) = run.invocations
    assert int(item["h#Interactive"]["N"]) == NEED
    assert int(item["h#Summaries"]["N"]) == FLOOR + call.input_tokens + call.output_tokens * BURNDOWN


def test_a_state_machine_within_its_floor_is_admitted_while_an_interactive_consumer_waits():
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        interactive_waiting(runner, ledger, summaries_at_floor=False)
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    assert failed_errors(run) == [] and PRIORITY_WAITING in item  # floors are kept whatever the priorities
