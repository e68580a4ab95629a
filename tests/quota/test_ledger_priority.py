"""Priorities in the shared quota ledger (issue 25: "optional priorities (interactive before batch) decide
who waits first"): a consumer of a higher priority that waits to borrow writes its want, and a borrowing
call of a lower priority leaves that much free, so under contention the interactive consumer is served
first; floors are kept whatever the priorities. Against moto's DynamoDB, on one fake clock."""

from __future__ import annotations

import pytest
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, LedgerView, SharedLedger
from pacer_runtime.ledger_layout import PRIORITY_VARIABLE, PRIORITY_WAITING
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer
from test_ledger import TABLE, Clock, consistent, dynamodb, item, ledger, own_client

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger


def consumers(dynamodb, clock, *, interactive: str | None = "interactive", floor: float = 0):
    """A filler holding most of the window, a consumer that may be interactive, and a batch one, each
    its own process (its own client), all borrowing (floor 0 unless given)."""
    filler = ledger(dynamodb, clock, "filler", floor_tpm=0)
    first = ledger(own_client(), clock, "first", floor_tpm=0, **({"priority": interactive} if interactive else {}))
    batch = ledger(own_client(), clock, "batch", floor_tpm=floor)
    return filler, first, batch


def contend(dynamodb, clock, first: SharedLedger, batch: SharedLedger, filler: SharedLedger) -> list[str]:
    """The window is full; `first` asks for 700 and waits; the filler's call ends; then both ask again,
    the batch consumer first (it is faster, or luckier): who is served, in order."""
    hold = filler.try_reserve(900)
    assert isinstance(hold, LedgerHold)
    assert isinstance(first.try_reserve(700), LedgerRefusal)  # waits: 900 + 700 > 1,000
    filler.release(hold)  # room for one of them, not both (700 + 500 > 1,000)
    served = []
    for consumer, tokens in ((batch, 500), (first, 700), (batch, 500)):
        if isinstance(consumer.try_reserve(tokens), LedgerHold):
            served.append(consumer.consumer)
    return served


def test_under_contention_the_interactive_consumer_is_served_before_the_batch_one(dynamodb):
    clock = Clock()
    filler, interactive, batch = consumers(dynamodb, clock)
    assert contend(dynamodb, clock, interactive, batch, filler) == ["first"]
    view = consistent(dynamodb)
    assert view.consumers == {"filler": 0, "first": 700}
    assert "first" not in view.wants  # served: its want is gone, and nothing is kept for it any more
    assert PRIORITY_WAITING not in item(dynamodb)


def test_without_priorities_the_same_contention_serves_whoever_asks_first(dynamodb):
    """The control: two batch consumers, the same calls: the faster one borrows the room."""
    clock = Clock()
    filler, other, batch = consumers(dynamodb, clock, interactive=None)
    assert contend(dynamodb, clock, other, batch, filler) == ["batch", "batch"]  # "first" never gets its 700
    assert consistent(dynamodb).consumers == {"filler": 0, "batch": 1_000}


def test_the_batch_consumer_refused_for_the_interactive_one_is_told_why_and_served_after_it(dynamodb):
    clock = Clock()
    filler, interactive, batch = consumers(dynamodb, clock)
    hold = filler.try_reserve(900)
    assert isinstance(interactive.try_reserve(700), LedgerRefusal)
    filler.release(hold)
    refused = batch.try_reserve(500)
    assert isinstance(refused, LedgerRefusal) and "first" in refused.reason and "700" in refused.reason
    assert isinstance(batch.try_reserve(300), LedgerHold)  # what the interactive consumer does not wait for
    assert isinstance(interactive.try_reserve(700), LedgerHold)
    assert consistent(dynamodb).held == 1_000


def test_a_floor_is_kept_whatever_the_priorities(dynamodb):
    """A batch consumer within its floor is admitted while an interactive one waits to borrow."""
    clock = Clock()
    filler, interactive, batch = consumers(dynamodb, clock, floor=500)
    hold = filler.try_reserve(900)
    assert isinstance(interactive.try_reserve(700), LedgerRefusal)
    filler.release(hold)
    assert isinstance(batch.try_reserve(500), LedgerHold)  # within its floor: not kept for anyone
    assert isinstance(interactive.try_reserve(700), LedgerRefusal)  # 500 + 700 > 1,000
    assert consistent(dynamodb).consumers == {"filler": 0, "batch": 500}


def test_equal_priorities_keep_free_only_what_floor_owners_wait_for(dynamodb):
    clock = Clock()
    filler = ledger(dynamodb, clock, "filler", floor_tpm=0)
    one = ledger(own_client(), clock, "one", floor_tpm=0, priority="interactive")
    two = ledger(own_client(), clock, "two", floor_tpm=0, priority="interactive")
    hold = filler.try_reserve(900)
    assert isinstance(one.try_reserve(700), LedgerRefusal)
    filler.release(hold)
    assert isinstance(two.try_reserve(500), LedgerHold)  # one does not outrank two: who asks first is served


def test_a_want_is_kept_for_want_seconds_and_then_no_longer(dynamodb):
    """An interactive consumer that stopped waiting (its process ended) keeps nothing free for long:
    after want_seconds its want is stale, borrowers ignore it, and the next write removes the flag the
    state machines read."""
    clock = Clock()
    filler, interactive, batch = consumers(dynamodb, clock)
    hold = filler.try_reserve(900)
    assert isinstance(interactive.try_reserve(700), LedgerRefusal)
    assert PRIORITY_WAITING in item(dynamodb)  # the state machines' sign that someone outranks them
    filler.release(hold)
    clock.now += 5.1  # want_seconds (5) later, and it never asked again
    assert isinstance(batch.try_reserve(500), LedgerHold)
    assert PRIORITY_WAITING not in item(dynamodb)
    consistent(dynamodb)


def test_the_sweeper_removes_a_stale_waiting_flag(dynamodb):
    clock = Clock()
    filler, interactive, _ = consumers(dynamodb, clock)
    filler.try_reserve(900)
    interactive.try_reserve(700)
    clock.now += 5.1
    sweeper = ledger(own_client(), clock, "quota-sweeper", floor_tpm=0)
    sweeper.sweep()
    assert PRIORITY_WAITING not in item(dynamodb)
    assert consistent(dynamodb).held == 900  # the filler's hold is still in its window


def test_a_want_that_is_not_a_want_is_repaired_not_trusted(dynamodb, capsys):
    clock = Clock()
    ledger(dynamodb, clock, "a", floor_tpm=0).try_reserve(100)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #w = :w, #p = :p",
                         ExpressionAttributeNames={"#w": "w#x", "#p": PRIORITY_WAITING},
                         ExpressionAttributeValues={":w": {"S": "2027-01-15T08:00:00.000Z 900 urgent borrowing"},
                                                    ":p": {"N": "1"}})
    a = ledger(own_client(), clock, "b", floor_tpm=0)  # a process that reads the item first
    assert isinstance(a.try_reserve(900), LedgerHold)  # nothing kept for a want that does not parse
    raw = item(dynamodb)
    assert "w#x" not in raw and PRIORITY_WAITING not in raw and a.counts["repairs"] == 1
    assert "w#x is not a want" in capsys.readouterr().out


def test_a_priority_is_read_from_the_environment_and_a_bad_one_refused_by_name(dynamodb):
    from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT, LEDGER_PRIORITY_VARIABLE

    assert LEDGER_PRIORITY_VARIABLE == PRIORITY_VARIABLE
    env = dict(zip(LEDGER_ENVIRONMENT, (TABLE, "m", "Assistant", "1000", "0", "1000", "1", "1440000"), strict=True))
    assert SharedLedger.from_environment({**env, PRIORITY_VARIABLE: "interactive"}, client=dynamodb).priority == "interactive"
    assert SharedLedger.from_environment(env, client=dynamodb).priority == "batch"  # the default, the lowest
    with pytest.raises(ValueError, match="priority='urgent' must be one of 'batch', 'interactive'"):
        SharedLedger.from_environment({**env, PRIORITY_VARIABLE: "urgent"}, client=dynamodb)


def test_quota_pacers_in_two_processes_serve_the_interactive_one_first(dynamodb):
    """The same contention through QuotaPacer, as each process's handler uses it."""
    clock = Clock()

    def pacer(consumer: str, **options) -> QuotaPacer:
        shared = ledger(own_client(), clock, consumer, floor_tpm=0, poll_seconds=0.01, max_poll_seconds=0.01, **options)
        return QuotaPacer(1_000, clock=clock, poll_seconds=0.005, ledger=shared, fallback_tpm=100)

    filler, interactive, batch = pacer("filler"), pacer("assistant", priority="interactive"), pacer("nightly")
    ticket = filler.admit(900)
    with pytest.raises(AdmissionRejected):
        interactive.admit(700, max_wait_seconds=0)  # it waits: its want is in the item
    ticket.release()
    refused = batch.ledger.try_reserve(500)  # what the batch pacer's ledger answers it now
    assert isinstance(refused, LedgerRefusal) and "assistant" in refused.reason  # the room is kept for the assistant
    assert interactive.admit(700, max_wait_seconds=0).hold is not None
    assert batch.admit(300, max_wait_seconds=0).hold is not None  # then the batch pacer takes what is left
    view: LedgerView = consistent(dynamodb)
    assert view.consumers == {"filler": 0, "assistant": 700, "nightly": 300}
