"""Deferred returns in the shared quota ledger (pacer_runtime.ledger, "Deferred returns"): a settlement
below its hold is carried by the consumer and written with its next reservation, so a call costs one
ledger write at steady state; what matters is written at once. Against moto's DynamoDB on a fake epoch
clock; writes are counted by a client wrapper."""

from __future__ import annotations

import pytest
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, SharedLedger
from pacer_runtime.quota_pacer import QuotaPacer
from test_ledger import EPOCH, TABLE, Atomic, Clock, consistent, dynamodb, item, ledger

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

DAY = "2027-01-15"  # EPOCH's UTC day
MIDNIGHT = 1_800_057_600.0  # 2027-01-16T00:00:00Z


class Counting(Atomic):
    """Atomic, and counts the UpdateItem requests sent (a failed condition counts: DynamoDB charges it)."""

    def __init__(self, client) -> None:
        super().__init__(client)
        self.writes = 0

    def update_item(self, **request):
        self.writes += 1
        return super().update_item(**request)


def test_at_steady_state_a_call_costs_one_ledger_write(dynamodb):
    """Ten calls in a row, each reserving 300 and settling to 100: ten writes, not twenty (the old
    protocol wrote each settlement on its own), and the window holds exactly what each settled."""
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=10_000, floor_tpm=10_000)
    for _ in range(10):
        hold = a.try_reserve(300)
        assert isinstance(hold, LedgerHold)
        clock.now += 0.5  # the call runs
        a.settle(hold, 100)
        clock.now += 0.5
    assert counting.writes == 10
    # the last call's return is still carried: the window holds 9 x 100 + 300
    assert consistent(dynamodb).held == 1_200 and a.deferred_tokens == 200
    a.flush()
    assert consistent(dynamodb).held == 1_000 and counting.writes == 11


def test_a_pacers_call_costs_one_ledger_write_and_none_after_the_call(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    pacer = QuotaPacer(1_000, clock=clock, ledger=ledger(counting, clock, quota_tpm=100_000, floor_tpm=100_000))
    for _ in range(5):
        ticket = pacer.admit(300)
        before = counting.writes
        ticket.settle(input_tokens=60, output_tokens=40)
        assert counting.writes == before  # nothing written after the call: it returns at once
        clock.now += 1
    assert counting.writes == 5


def test_a_deferred_return_rides_along_the_next_reservation_and_counts_as_its_room(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=1_000, floor_tpm=1_000, defer_below_fill=1)
    first = a.try_reserve(700)
    a.settle(first, 200)  # 500 come back, not written yet
    assert consistent(dynamodb).held == 700 and counting.writes == 1
    clock.now += 3  # another second, another slot
    second = a.try_reserve(600)  # 700 + 600 > 1,000, but 200 + 600 fits: the return is this write's room
    assert isinstance(second, LedgerHold) and counting.writes == 2
    view = consistent(dynamodb)
    assert view.held == 800 and sorted(t for _, _, t in view.slots.values()) == [200, 600]
    assert view.days == {DAY: 800} and a.deferred_tokens == 0


def test_a_settlement_above_the_hold_is_written_at_once(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock)
    hold = a.try_reserve(300)
    a.settle(hold, 450)  # a longer answer than the hold: Bedrock charges more, the ledger must too, now
    assert counting.writes == 2 and consistent(dynamodb).held == 450 and a.deferred_tokens == 0


def test_returns_are_written_at_once_when_the_window_is_nearly_full(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=1_000, floor_tpm=1_000)  # defer_below_fill: 0.75
    low = a.try_reserve(300)
    a.settle(low, 100)  # the window holds 30% of the quota: deferred
    assert counting.writes == 1 and a.deferred_tokens == 200
    more = a.try_reserve(500)  # carries the 200: 600 held
    a.settle(more, 400)  # 60%: deferred
    assert counting.writes == 2 and a.deferred_tokens == 100
    big = a.try_reserve(350)  # carries the 100: 850 held
    a.settle(big, 50)  # 85%: the 300 back matter to whoever asks next, written at once
    assert counting.writes == 4 and a.deferred_tokens == 0
    assert consistent(dynamodb).held == 100 + 400 + 50


def test_returns_are_written_within_the_bounded_delay(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=1_000, floor_tpm=1_000, settle_delay_seconds=2)
    first, second = a.try_reserve(300), a.try_reserve(100)
    a.settle(first, 100)
    clock.now += 1.9
    assert counting.writes == 2 and a.deferred_tokens == 200
    clock.now += 0.2  # the first return is settle_delay_seconds old: the next settlement writes both
    a.settle(second, 50)
    assert counting.writes == 3 and a.deferred_tokens == 0 and consistent(dynamodb).held == 150


def test_returns_are_written_at_once_when_another_consumer_waits_within_its_floor(dynamodb):
    clock = Clock()
    a, b = ledger(dynamodb, clock, "a", defer_below_fill=1), ledger(dynamodb, clock, "b", defer_below_fill=1)
    borrowed = a.try_reserve(900)  # a's floor is 500: 400 of it borrowed
    assert isinstance(b.try_reserve(400), LedgerRefusal)  # b waits within its floor, and says so (w#b)
    a.view(refresh=True)
    a.settle(borrowed, 300)  # someone waits: the 600 are written at once, not carried
    assert a.deferred_tokens == 0 and consistent(dynamodb).held == 300
    assert isinstance(b.try_reserve(400), LedgerHold)


def test_a_return_for_a_slot_that_left_the_window_is_dropped(dynamodb):
    """Bedrock ignores a late settlement: the return is not written, neither into a slot the same write
    removes as expired nor into one another writer removed; no slot is made again."""
    clock = Clock()
    a = ledger(dynamodb, clock, defer_below_fill=1)
    hold = a.try_reserve(300)
    a.settle(hold, 100)  # deferred
    clock.now += 62.5  # the slot left the window (second + window + skew)
    a.view(refresh=True)  # a fresh view: the write removes the expired slots it sees (FRESH_VIEW_SECONDS)
    again = a.try_reserve(50)  # removes the old slot, and must not ADD to it in the same write
    assert isinstance(again, LedgerHold) and a.counts["late"] == 1 and a.deferred_tokens == 0
    view = consistent(dynamodb)
    assert view.held == 50 and list(view.slots) == [again.slot]


def test_a_return_for_a_slot_another_writer_removed_meanwhile_fails_the_write_and_the_retry_drops_it(dynamodb):
    """a's clock is 1 s behind b's: b removes a's slot while a still sees it in the window; a's write
    carrying the return is refused by attribute_exists and retried on the fresh item without it."""
    slow, fast = Clock(), Clock()
    a = ledger(Atomic(dynamodb), slow, "a", defer_below_fill=1)
    b = ledger(dynamodb, fast, "b", floor_tpm=0)
    hold = a.try_reserve(300)
    a.settle(hold, 100)  # deferred
    fast.now = EPOCH + 62.2  # past second + window + skew on b's clock
    slow.now = EPOCH + 61.2  # not on a's
    assert isinstance(b.try_reserve(10), LedgerHold)  # removes a's slot
    assert isinstance(a.try_reserve(20), LedgerHold)  # fails once on attribute_exists, then goes without it
    assert a.counts["conflicts"] == 1 and a.deferred_tokens == 200  # kept until it leaves a's own window
    view = consistent(dynamodb)
    assert view.held == 30 and view.consumers == {"a": 20, "b": 10}
    assert hold.slot not in item(dynamodb)  # not made again by an ADD
    slow.now = EPOCH + 62.1  # now past a's window too: dropped, never written
    a.flush()
    assert a.counts["late"] == 1 and a.deferred_tokens == 0 and consistent(dynamodb).held == 30


def test_a_dying_consumers_deferred_return_does_not_leak_tokens(dynamodb):
    """A process that dies carrying returns leaves its holds in the window (never less than Bedrock
    counts), and they leave with it: nothing is held after, nothing was ever given back twice."""
    clock = Clock()
    dying, alive = ledger(dynamodb, clock, "dying", defer_below_fill=1), ledger(dynamodb, clock, "alive")
    hold = dying.try_reserve(600)
    dying.settle(hold, 100)  # 500 would come back with its next write; the process dies first
    assert dying.deferred_tokens == 500
    del dying
    assert consistent(dynamodb).held == 600  # the whole hold still counts
    clock.now += 62.1
    assert isinstance(alive.try_reserve(900), LedgerHold)  # the dead slot is removed, with its 600
    view = consistent(dynamodb)
    assert view.held == 900 and view.consumers == {"alive": 900}  # its h# left with its last slot


def test_a_return_across_midnight_goes_to_its_own_day(dynamodb):
    clock = Clock(MIDNIGHT - 0.5)
    a = ledger(dynamodb, clock, defer_below_fill=1)
    hold = a.try_reserve(300)
    a.settle(hold, 100)
    clock.now = MIDNIGHT + 0.5
    assert isinstance(a.try_reserve(50), LedgerHold)  # carries yesterday's return to yesterday's counter
    assert consistent(dynamodb).days == {"2027-01-15": 100, "2027-01-16": 50}


def test_a_reservation_refused_keeps_its_returns_for_the_next_try(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=1_000, floor_tpm=1_000, defer_below_fill=1)
    hold = a.try_reserve(600)
    a.settle(hold, 500)  # 100 back, carried
    refused = a.try_reserve(600)  # 500 + 600 > 1,000 even with them: refused, nothing written
    assert isinstance(refused, LedgerRefusal) and a.deferred_tokens == 100
    assert counting.writes == 1
    assert isinstance(a.try_reserve(400), LedgerHold) and a.deferred_tokens == 0
    assert consistent(dynamodb).held == 900


def test_settle_delay_zero_writes_every_settlement_at_once(dynamodb):
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, settle_delay_seconds=0)
    a.settle(a.try_reserve(300), 100)
    assert counting.writes == 2 and consistent(dynamodb).held == 100


def test_bad_deferral_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="defer_below_fill"):
        SharedLedger(TABLE, ledger_id="m", consumer="a", quota_tpm=100, defer_below_fill=1.5, client=object())
    with pytest.raises(ValueError, match="settle_delay_seconds"):
        SharedLedger(TABLE, ledger_id="m", consumer="a", quota_tpm=100, settle_delay_seconds=-1, client=object())


def test_many_deferred_returns_go_in_writes_of_at_most_max_returns(dynamodb):
    import re

    from pacer_runtime import ledger as runtime_ledger

    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=1_000_000, floor_tpm=1_000_000, defer_below_fill=1, settle_delay_seconds=1_000)
    holds = []
    for _ in range(runtime_ledger.MAX_RETURNS + 5):  # one slot a second
        holds.append(a.try_reserve(10))
        clock.now += 1
    for hold in holds:  # each settled lower: 45 returns, each for a slot of its own
        a.settle(hold, 4)
    assert a.deferred_tokens == 6 * len(holds) and counting.writes == len(holds)
    sent: list[dict] = []
    original = counting.update_item
    counting.update_item = lambda **request: (sent.append(request), original(**request))[1]  # type: ignore[method-assign]
    a.flush()
    assert len(sent) == 2 and a.deferred_tokens == 0  # 40, then 5
    operators = re.compile(r"\b(?:AND|OR|NOT|attribute_not_exists|attribute_exists|attribute_type)\b|<=|>=|<>|=|<|>")
    for request in sent:
        assert len(operators.findall(request["ConditionExpression"])) <= runtime_ledger.MAX_EXPRESSION_OPERATORS
    view = consistent(dynamodb)
    assert view.held == 4 * len(holds)


def test_a_stale_view_removes_no_expired_slot_unless_it_needs_the_room(dynamodb):
    """Another writer has likely removed what a view seconds old shows expired: pinning those slots
    would fail the write (a conflict, one write more), so it leaves them to a fresh view, unless it
    needs their room. A lone writer (no other consumer's slot in its view) does not read first."""
    clock, counting = Clock(), Counting(dynamodb)
    a = ledger(counting, clock, quota_tpm=1_000, floor_tpm=1_000)
    first = a.try_reserve(600)
    clock.now += 63  # the 600 left the window; a's view is 63 s old
    small = a.try_reserve(300)  # fits beside the expired 600: one write, no removal pinned
    assert isinstance(small, LedgerHold) and counting.writes == 2
    assert first.slot in item(dynamodb) and consistent(dynamodb).held == 900
    clock.now += 2  # stale again, and 300 more only fit without the expired 600
    assert isinstance(a.try_reserve(300), LedgerHold) and counting.writes == 3
    assert a.counts["reads"] == 1  # its first use's only
    view = consistent(dynamodb)
    assert first.slot not in view.slots and view.held == 600
