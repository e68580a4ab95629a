"""A state machine refused within its floor writes its want (issue 25): w#<consumer> as a process writes it,
so a process consumer borrowing beyond its floor leaves the state machine's reservation free while the want
is recent, and the state machine's admitted reservation removes it. Executed offline with StateMachineRunner
against moto's DynamoDB and the Bedrock emulator, the process being pacer_runtime's SharedLedger."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from genai_pacer.step_functions.ledger_steps import CONDITIONAL_CHECK_FAILED
from genai_pacer.testing import StateMachineRunner
from genai_pacer.testing.sfn import _interpreter
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, LedgerView, SharedLedger
from test_ledger_steps import (
    BURNDOWN,
    KEY,
    MODEL_ID,
    RESERVED,
    emulator,
    failed_errors,
    item_of,
    ledger_stack,
    states_entered,
)

PROMPT = {"items": [{"prompt": "Summarize this."}]}
FLOOR = 200_000  # ledger_stack's Summaries share: half of 400,000


def borrower(runner: StateMachineRunner, ledger) -> SharedLedger:
    """A process consumer with no floor: everything it holds is borrowed."""
    return SharedLedger(runner.physical_name(ledger.table), ledger_id=MODEL_ID, consumer="Busy",
                        quota_tpm=ledger.quota_tpm, floor_tpm=0, client=runner.dynamodb, poll_seconds=0.01,
                        max_poll_seconds=0.02, want_seconds=60)


def test_a_state_machine_refused_within_its_floor_writes_its_want_which_a_borrower_leaves_free(monkeypatch):
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        busy = borrower(runner, ledger)
        room = int(ledger.quota_tpm) - RESERVED + 1  # the window leaves the state machine 1 token short
        holds = [busy.try_reserve(room)]
        assert isinstance(holds[0], LedgerHold)
        seen: list[dict] = []
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:  # the reservation's wait after the refused try
            if not seen:
                item = item_of(runner, ledger)
                seen.append(item)
                busy.release(holds[0])
                again = busy.try_reserve(room)  # borrowing: it must leave the state machine's want free
                seen.append({"again": again, "item": item_of(runner, ledger)})
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        before = time.time()
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED]  # refused once, then admitted
    assert "InvokeModel ledger want" in states_entered(run)
    wanted = seen[0]
    when, tokens = wanted["w#Summaries"]["S"].split(" ")
    assert tokens == str(RESERVED) and wanted["wanted"] == {"S": when} and wanted["wanted_by"] == {"S": "Summaries"}
    # the form the processes write and compare (pacer_runtime.ledger._iso_ms), the second the want state was entered
    at = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S.000Z").replace(tzinfo=UTC).timestamp()
    assert int(before) - 1 <= at <= time.time()
    assert LedgerView.parse(wanted, time.time()).wants == {"Summaries": (when, float(RESERVED))}
    assert isinstance(seen[1]["again"], LedgerRefusal)  # the borrower left the want free
    assert "Summaries" in seen[1]["again"].reason
    (call,) = run.invocations
    assert "w#Summaries" not in item  # served: its reservation removed its want
    assert int(item["h#Summaries"]["N"]) == call.input_tokens + call.output_tokens * BURNDOWN


def test_a_state_machine_refused_beyond_its_floor_writes_no_want(monkeypatch):
    stack, ledger, _ = ledger_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        second = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        runner.dynamodb.put_item(TableName=runner.physical_name(ledger.table), Item={  # its floor is all held
            **KEY, "held": {"N": str(FLOOR)}, "h#Summaries": {"N": str(FLOOR)}, f"s#{second}#Summaries": {"N": str(FLOOR)}})
        busy = borrower(runner, ledger)
        hold = busy.try_reserve(int(ledger.quota_tpm) - FLOOR - RESERVED + 1)
        assert isinstance(hold, LedgerHold)
        seen: list[dict] = []
        original = _interpreter._ScaledTime.wait

        def wait(self, seconds: float, env=None) -> None:
            if not seen:
                seen.append(item_of(runner, ledger))
                busy.release(hold)
            original(self, seconds, env)

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run(PROMPT).raise_for_status()
    # refused, and the want's condition failed too (ignored: the loop went on)
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED] * 2
    assert "w#Summaries" not in seen[0] and "wanted" not in seen[0]  # a borrower waits for no one's room
    assert run.model_calls == 1
