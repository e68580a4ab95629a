"""A state machine refused within its floor writes its want (issue 25): w#<consumer> as a process writes it,
so a process consumer borrowing beyond its floor leaves the state machine's reservation free while the want
is recent, and the state machine's admitted reservation removes it. Executed offline with StateMachineRunner
against moto's DynamoDB and the Bedrock emulator, the process being pacer_runtime's SharedLedger."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from genai_pacer.step_functions import ledger_steps
from genai_pacer.step_functions.ledger_steps import CONDITIONAL_CHECK_FAILED
from genai_pacer.testing import StateMachineRunner
from genai_pacer.testing.sfn import _interpreter
from moto.stepfunctions.parser.asl.component.intrinsic.function.statesfunction.math_operations import (
    math_random,
)
from moto.stepfunctions.parser.asl.component.state import state as moto_state
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
from test_ledger_steps_daily import _DatetimeModule

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


#: The second every state of the case is entered, near its end: the want's time is its whole second, so the
#: fraction (0.9 s) is what a want's time loses (WANT_TIME_FORMAT).
LATE_IN_A_SECOND = datetime(2027, 1, 15, 12, 0, 0, 900_000, tzinfo=UTC)
#: The next try's states before its want lands (the slot Pass, the reservation, the Choice, the want task:
#: tens of milliseconds each on AWS), generously.
STATES_BETWEEN_SECONDS = 0.5


class _LongestWait:
    """States.MathRandom's draw at its end, as moto draws it (random.Random(seed).randint(start, end)):
    every wait of the reservation loop is the longest it can be."""

    class Random:
        def __init__(self, seed=None) -> None:
            self.seed = seed  # moto seeds its draw; the longest needs none

        def randint(self, start: int, end: int) -> int:
            return end


@pytest.fixture
def longest_waits(monkeypatch) -> datetime:
    """Every state entered at LATE_IN_A_SECOND, every wait drawn at its longest and passing no time."""
    monkeypatch.setattr(math_random, "random", _LongestWait)
    monkeypatch.setattr(moto_state, "datetime", _DatetimeModule(LATE_IN_A_SECOND))
    return LATE_IN_A_SECOND


def test_a_state_machine_within_its_floor_keeps_its_room_across_its_longest_wait(monkeypatch, longest_waits):
    """The window is full (a process borrowed all of it), so the state machine's call, within its floor, is
    refused and writes its want before each wait. At its longest wait (8 s) the borrower's hold ends, and the
    borrower, configured by QuotaLedger's environment, tries to borrow the room again at the end of that wait,
    its clock the ledger's clock_skew ahead: the want written before the wait is still recent, so the borrower
    leaves the room free and the state machine takes it at its next try. (Before: the processes kept a want
    5 s, so at an 8 s wait the want had lapsed, the borrower took the room for a minute and the call kept
    waiting.)"""
    stack, ledger, _ = ledger_stack()
    moment = longest_waits.timestamp()
    ahead = [0.0]
    variables = {name: stack.resolve(value) for name, value in ledger.consumer_variables("Busy", 0).items()}
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        variables["GENAI_PACER_LEDGER_TABLE"] = runner.physical_name(ledger.table)
        busy = SharedLedger.from_environment(variables, client=runner.dynamodb, clock=lambda: moment + ahead[0],
                                             sleep=lambda _: None)
        room = int(ledger.quota_tpm) - RESERVED + 1  # the window leaves the state machine 1 token short
        holds = [busy.try_reserve(room)]
        assert isinstance(holds[0], LedgerHold)
        waits: list[float] = []
        probes: list = []

        def wait(self, seconds: float, env=None) -> None:  # passes no time: the case's clock is `ahead`
            waits.append(seconds)
            if len(waits) == 3:  # the longest wait: the borrower's hold ends, and it borrows again at the wait's end
                busy.release(holds[0])
                ahead[0] = waits[-1] + STATES_BETWEEN_SECONDS + ledger.clock_skew.to_seconds()
                probes.append(busy.try_reserve(room))
                if isinstance(probes[-1], LedgerHold):  # took the room: give it back, so the run ends
                    busy.release(probes[-1])

        monkeypatch.setattr(_interpreter._ScaledTime, "wait", wait)
        run = runner.run(PROMPT).raise_for_status()
        item = item_of(runner, ledger)
    (probe,) = probes
    assert isinstance(probe, LedgerRefusal), f"the borrower took the room after a {waits[-1]} s wait: the want lapsed"
    assert "Summaries" in probe.reason  # it left the state machine's want free
    assert waits == list(ledger_steps.LEDGER_RETRY_WAIT_CAPS)  # each drawn at its cap, the last the longest
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED] * 3 and run.model_calls == 1  # admitted at its next try
    assert "w#Summaries" not in item  # served: its want removed
    # QuotaLedger's environment sets the want's life: the longest wait, the whole second, the skew and a margin
    assert busy.want_seconds == ledger.want_seconds == 12
