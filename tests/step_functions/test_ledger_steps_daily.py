"""The daily token quota in the Step Functions ledger steps (issue 25): a state machine's reservation,
settlement and release count the day in the d#<UTC day> attribute the processes' SharedLedger counts,
under the same rules, so a Map cannot run past a daily quota the processes respect, nor they past what
the Map spent. Executed offline with StateMachineRunner against moto's DynamoDB and the emulator; the
state machine's EnteredTime is frozen at the case's own moment, the processes' clock is the same one."""

from __future__ import annotations

import datetime
import json

import pytest
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import BoundedMap, ConverseRequest, ModelQuota, QuotaLedger
from genai_pacer.step_functions import ledger_steps
from genai_pacer.step_functions.ledger_steps import CONDITIONAL_CHECK_FAILED
from genai_pacer.testing import StateMachineRunner
from genai_pacer.testing.sfn import _interpreter
from helpers import new_stack, refused
from moto.stepfunctions.parser.asl.component.state import state as moto_state
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, SharedLedger
from test_ledger_steps import (
    BURNDOWN,
    KEY,
    MAX_TOKENS,
    MODEL,
    MODEL_ID,
    PROMPT_TOKENS,
    QUOTA_TPM,
    RESERVED,
    _flat_definition,
    emulator,
    failed_errors,
    item_of,
    slots,
)

DAY = "2027-01-15"
TRIES = 20  # the refused tries of a state machine whose day is spent (test_a_map_cannot_run_past_the_day_a_process_spent)
#: 2027-01-15T12:00:00.250Z: the moment every execution's states are entered, and the processes' clock.
MOMENT = datetime.datetime(2027, 1, 15, 12, 0, 0, 250_000, tzinfo=datetime.UTC)
MIDNIGHT = datetime.datetime(2027, 1, 16, tzinfo=datetime.UTC).timestamp()


class _FrozenNow:
    def __init__(self, moment: datetime.datetime) -> None:
        self.moment = moment

    def now(self, tz: datetime.tzinfo | None = None) -> datetime.datetime:
        return self.moment.astimezone(tz) if tz is not None else self.moment


class _DatetimeModule:
    """What moto's State reads EnteredTime from (datetime.datetime.now(tz=...)), at a fixed moment."""

    timezone = datetime.timezone

    def __init__(self, moment: datetime.datetime) -> None:
        self.datetime = _FrozenNow(moment)


@pytest.fixture
def entered(monkeypatch) -> datetime.datetime:
    """Every state is entered at MOMENT (moto writes "2027-01-15T12:00:00.250000+00:00"), so the hold's
    slot and day are the case's, whatever the wall clock says."""
    monkeypatch.setattr(moto_state, "datetime", _DatetimeModule(MOMENT))
    return MOMENT


@pytest.fixture
def no_waits(monkeypatch) -> list[float]:
    """The reservation's Retry waits nothing (the waits are recorded): a refusal that lasts runs its
    tries at once."""
    waits: list[float] = []
    monkeypatch.setattr(_interpreter._ScaledTime, "wait", lambda self, seconds, env=None: waits.append(seconds))
    return waits


def shares_and_ledger(stack, consumer: str, **quota_props):
    """The quota (tpm_quota 400,000, burndown 5), the consumer's share (half of it, an hour a day), the
    Interactive process's (0.4) and their ledger: the plan the consumer takes, and the ledger."""
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=QUOTA_TPM, burndown=BURNDOWN, **quota_props)
    profile = quota.profile(input_tokens=PROMPT_TOKENS, output_tokens=200, max_tokens=MAX_TOKENS)
    plan = quota.share(consumer, profile, fraction=0.5, call_seconds=4, hours_per_day=1)
    quota.share("Interactive", profile, fraction=0.4, call_seconds=4, hours_per_day=1)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    # the Interactive process (process()) takes part through the ledger's variables: held by no construct of the
    # app, its share would otherwise count outside the ledger and take its TPM from the minute and the day
    ledger.environment("Interactive")
    return plan, ledger


def daily_stack(daily_token_quota: float | None = None, *, keep_free: float = 0.0):
    stack = new_stack()
    plan, ledger = shares_and_ledger(stack, "Summaries", keep_free=keep_free, daily_token_quota=daily_token_quota)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=MAX_TOKENS))
    return stack, ledger


def process(runner: StateMachineRunner, ledger: QuotaLedger, clock=None) -> SharedLedger:
    """A process consumer of the same quota, with the ledger's daily quota (what QuotaLedger.environment
    gives it), on the case's clock."""
    return SharedLedger(runner.physical_name(ledger.table), ledger_id=MODEL_ID, consumer="Interactive",
                        quota_tpm=ledger.quota_tpm, floor_tpm=160_000, daily_tokens=ledger.daily_tokens,
                        client=runner.dynamodb, clock=clock or MOMENT.timestamp, sleep=lambda _: None,
                        poll_seconds=0.01, max_poll_seconds=0.02)


def day_of(item: dict) -> dict[str, int]:
    return {name: int(value["N"]) for name, value in item.items() if name.startswith("d#")}


def test_a_calls_reservation_settlement_and_release_count_on_its_slots_day(entered):
    stack, ledger = daily_stack()
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.run({"items": [{"prompt": "Summarize this."}]}).raise_for_status()
        settled = item_of(runner, ledger)
        bedrock.fail_next("ValidationException")  # the next call fails: its hold comes back, to the day too
        failed = runner.run({"items": [{"prompt": "And this."}]})
        after = item_of(runner, ledger)
    assert list(slots(settled)) == ["s#12:00:00#Summaries"]
    charged = int(settled["held"]["N"])
    assert charged < RESERVED and day_of(settled) == {f"d#{DAY}": charged}  # the day keeps the settlement
    assert not failed.succeeded and "InvokeModel release" in [e["stateEnteredEventDetails"]["name"] for e in
                                                               failed.history if "stateEnteredEventDetails" in e]
    assert day_of(after) == {f"d#{DAY}": charged} and int(after["held"]["N"]) == charged


def test_a_map_cannot_run_past_the_day_a_process_spent(entered, no_waits, monkeypatch):
    """The window is free, the day is not: the state machine's reservation is refused on the day alone,
    calls nothing, and fails once its tries are spent. With a budget of TRIES tries, not the 135 of a real
    state machine (test_ledger_steps checks that number in the definition): every try runs the same states,
    and the whole budget offline takes several seconds of the test suite's."""
    monkeypatch.setattr(ledger_steps, "LEDGER_RETRY_ATTEMPTS", TRIES)
    daily = 10_000
    stack, ledger = daily_stack(daily)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        worker = process(runner, ledger)
        hold = worker.try_reserve(daily - RESERVED + 1)  # one token too many for the state machine's 3,000
        assert isinstance(hold, LedgerHold)
        worker.settle(hold, hold.tokens)
        # a minute later a process removes the slot from the window; the day keeps its tokens
        assert process(runner, ledger, clock=lambda: MOMENT.timestamp() + 120).sweep() == hold.tokens
        run = runner.run({"items": [{"prompt": "Summarize this."}]})
        item = item_of(runner, ledger)
    assert int(item["held"]["N"]) == 0  # the window had room for every try
    assert not run.succeeded and run.error == CONDITIONAL_CHECK_FAILED
    # the first try and every retry refused, never a model call; and each refused try's want refused too
    # (the day cannot hold it: a process refused for the day writes none), but for the last try's
    assert failed_errors(run) == [CONDITIONAL_CHECK_FAILED] * (2 * TRIES + 1) and run.model_calls == 0
    assert "w#Summaries" not in item and "wanted" not in item
    assert len(no_waits) == TRIES
    assert day_of(item) == {f"d#{DAY}": daily - RESERVED + 1}  # the refused tries added nothing


def test_what_a_map_spent_counts_on_the_day_a_process_reserves_on(entered):
    daily = 3 * RESERVED
    stack, ledger = daily_stack(daily)
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": [{"prompt": "Summarize this."}, {"prompt": "And this."}]}).raise_for_status()
        spent = day_of(item_of(runner, ledger))[f"d#{DAY}"]
        worker = process(runner, ledger, clock=lambda: MOMENT.timestamp() + 120)  # the Map's minute has passed
        refusal = worker.try_reserve(daily - spent + 1)
        assert isinstance(refusal, LedgerRefusal)
        assert refusal.reason.startswith(f"the day's tokens are spent: {spent:,} of the daily token quota of "
                                         f"{daily:,} on {DAY} (UTC)")
        assert refusal.ready_in == pytest.approx(MIDNIGHT - MOMENT.timestamp() - 120)
        assert isinstance(worker.try_reserve(daily - spent), LedgerHold)  # what the Map left of the day
        item = item_of(runner, ledger)
    assert spent == sum(call.input_tokens + call.output_tokens * BURNDOWN for call in run.invocations)
    assert day_of(item) == {f"d#{DAY}": daily}


def test_the_ledgers_day_is_the_daily_quota_less_what_keep_free_keeps(entered):
    """The day every consumer shares is to the daily quota what quota_tpm is to the TPM quota, and the
    state machine's ceiling is that day less its reservation."""
    for daily, keep_free, expected in ((None, 0.0, QUOTA_TPM * 1_440), (None, 0.1, 360_000 * 1_440),
                                       (1_000_000, 0.1, 900_000)):
        stack, ledger = daily_stack(daily, keep_free=keep_free)
        assert ledger.daily_tokens == expected
        states = json.loads(_flat_definition(stack))["States"]["Map"]["ItemProcessor"]["States"]
        reserve = states["InvokeModel reserve"]["Parameters"]
        assert reserve["ExpressionAttributeValues"][":day"] == {"N": str(expected - RESERVED)}
        assert reserve["ExpressionAttributeNames"]["#day.$"] == "$.day"


def test_a_reservation_the_whole_day_cannot_hold_is_refused_at_synth():
    problems = refused(lambda: daily_stack(RESERVED - 1))
    assert any(p.startswith(f"request: a call reserves {RESERVED:,} tokens, more than the ledger's whole day "
                            f"({RESERVED - 1:,} tokens") for p in problems), problems


def test_a_scheduled_precompute_key_counts_on_the_day(entered):
    """ScheduledPrecompute keeps its slot and day under $.ledger, not in the envelope."""
    import aws_cdk as cdk
    from aws_cdk import aws_scheduler as scheduler
    from genai_pacer import AnswerStore, ScheduledPrecompute

    stack = new_stack()
    plan, ledger = shares_and_ledger(stack, "Notes")
    items = [{"key": f"ticker-morning#t{i}", "ticker": f"T{i}"} for i in range(2)]
    notes = ScheduledPrecompute(
        stack, "Notes", answer_store=AnswerStore(stack, "Store"), model=MODEL, max_concurrency=plan, items=items,
        ledger=ledger,
        request=ConverseRequest(prompt=sfn.JsonPath.format("Write the note for {}.", sfn.JsonPath.string_at("$.item.ticker")),
                                max_tokens=MAX_TOKENS),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_LONDON),
    )
    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": items}, state_machine=notes.state_machine).raise_for_status()
        item = runner.dynamodb.get_item(TableName=runner.physical_name(ledger.table), Key=KEY, ConsistentRead=True)["Item"]
    assert run.output["written"] == 2
    assert day_of(item) == {f"d#{DAY}": int(item["held"]["N"])} == {
        f"d#{DAY}": sum(call.input_tokens + call.output_tokens * BURNDOWN for call in run.invocations)}
