"""The shared ledger's edge cases for a process consumer, QuotaPacer on SharedLedger (issue 25's
done-criteria: a consumer that dies holding tokens, a throttled ledger, skewed clocks), beside those
test_ledger and test_ledger_pacer hold at the ledger's level (a malformed item, hostile slots, a
lagging clock, DynamoDB's errors). Against moto's DynamoDB, on fake clocks: nothing reads the wall clock."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pacer_runtime.ledger import LedgerHold, SharedLedger
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer
from test_ledger import (
    EPOCH,
    TABLE,
    Clock,
    Flaky,
    client_error,
    consistent,
    dynamodb,
    item,
    ledger,
    own_client,
)

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

WINDOW = 60.0
SKEW = 1.0  # SharedLedger's default, QuotaLedger's clock_skew default


def pacer(client, clock, consumer, **options) -> QuotaPacer:
    shared = ledger(client, clock, consumer, poll_seconds=0.01, max_poll_seconds=0.01)
    return QuotaPacer(1_000, clock=clock, poll_seconds=0.005, ledger=shared, fallback_tpm=100, **options)


def test_a_process_that_dies_holding_tokens_through_its_pacer_holds_them_until_their_window_passes(dynamodb):
    clock = Clock()
    dying, alive = pacer(dynamodb, clock, "a"), pacer(own_client(), clock, "b")
    assert dying.admit(900).hold is not None  # and then its process dies: the ticket never settles
    del dying
    clock.now += 1 + WINDOW + SKEW - 0.1  # the hold's second, the window and the skew: not yet passed
    with pytest.raises(AdmissionRejected, match="shared ledger"):
        alive.admit(300, max_wait_seconds=0)
    clock.now += 0.2
    ticket = alive.admit(300, max_wait_seconds=0)
    assert ticket.hold is not None
    view = consistent(dynamodb)
    assert view.held == 300 and view.consumers == {"b": 300}  # a's h# left with its last slot
    assert not [name for name in view.slots if name.endswith("#a")]  # the dead process's slot was removed


def test_a_ledger_that_keeps_throttling_falls_back_to_the_static_share_with_the_metric(dynamodb, capsys):
    """DynamoDB throttles every write (a hot partition): the ledger retries with backoff, then the pacer
    falls back to its static share (fallback_tpm, never unbounded), says so in the log and in the
    LedgerFallbacks metric, and asks the ledger again ledger_retry_seconds later."""
    clock = Clock()
    throttling = Flaky(dynamodb, [client_error("ProvisionedThroughputExceededException")] * 4)
    shared = ledger(throttling, clock, dynamodb_retries=3)
    one = QuotaPacer(1_000, clock=clock, poll_seconds=0.005, ledger=shared, fallback_tpm=100)
    assert one.admit(80).hold is None  # admitted on the fallback, not in the ledger
    assert throttling.calls == 4 and shared.counts["throttled"] == 4  # the first try and 3 retries
    with pytest.raises(AdmissionRejected):
        one.admit(80, max_wait_seconds=0)  # 160 > the fallback's 100: bounded by the static share
    assert one.stats().ledger_fallbacks == 1
    out = capsys.readouterr().out
    emf = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    assert [(e["LedgerFallbacks"], e["LedgerId"]) for e in emf] == [(1, "m")]
    assert "ProvisionedThroughputExceededException" in out
    assert item(dynamodb) == {}  # nothing was written while DynamoDB throttled
    clock.now += 5  # ledger_retry_seconds later the ledger (now answering) is asked again
    assert one.admit(80, max_wait_seconds=0).hold is not None
    assert consistent(dynamodb).held == 80


@st.composite
def skewed_runs(draw):
    """Three processes whose clocks are off true time by at most half the skew each (so any two differ
    by at most the skew, the difference the ledger tolerates), and a run of their calls: each step
    advances true time, or jumps to just before the end of an earlier hold's minute (where an early
    removal would show), then one process reserves, or settles one of its holds."""
    offsets = draw(st.lists(st.floats(min_value=-SKEW / 2, max_value=SKEW / 2), min_size=3, max_size=3))
    steps = draw(st.lists(st.tuples(
        st.sampled_from(["reserve", "settle", "probe"]), st.floats(min_value=0, max_value=9), st.integers(0, 2),
        st.integers(1, 400), st.floats(min_value=0, max_value=2 * SKEW), st.integers(0, 50)), min_size=5, max_size=20))
    return offsets, steps


_EXAMPLES = iter(range(1_000_000))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run=skewed_runs())
def test_clocks_skewed_within_the_tolerance_never_free_a_charge_bedrock_still_counts(dynamodb, run):
    """Bedrock counts a charge until a minute after its call started, which is no earlier than its
    reservation. Whatever the order of the processes' writes, with clocks within the tolerated skew,
    no slot holding a charge Bedrock still counts is ever removed, the item always adds up (held = its
    slots), and the window never holds more than the quota."""
    offsets, steps = run
    quota = 2_000
    ledger_id = f"skew-{next(_EXAMPLES)}"  # a fresh item per example, in the fixture's one table
    true = Clock(EPOCH + 0.37)
    processes = [SharedLedger(TABLE, ledger_id=ledger_id, consumer=f"p{i}", quota_tpm=quota, floor_tpm=quota / 3,
                              client=dynamodb, clock=(lambda o=offset: true.now + o), sleep=lambda _: None)
                 for i, offset in enumerate(offsets)]
    holds: list[tuple[float, LedgerHold]] = []  # (true reservation time, hold)
    unsettled: list[tuple[int, LedgerHold]] = []
    key = {"pk": {"S": "quota#" + ledger_id}}
    for kind, advance, who, tokens, before_end, pick in steps:
        if kind == "probe" and holds:  # just before (or after) an earlier hold's minute ends
            true.now = max(true.now, holds[pick % len(holds)][0] + WINDOW - before_end)
        else:
            true.now += advance
        mine = [entry for entry in unsettled if entry[0] == who]
        if kind == "settle" and mine:
            unsettled.remove(mine[-1])
            hold = mine[-1][1]
            processes[who].settle(hold, math.floor(hold.tokens / 2))
        else:
            outcome = processes[who].try_reserve(tokens)  # a write: it removes the slots it sees expired
            if isinstance(outcome, LedgerHold):
                holds.append((true.now, outcome))
                unsettled.append((who, outcome))
        stored = dynamodb.get_item(TableName=TABLE, Key=key, ConsistentRead=True).get("Item", {})
        slot_names = {name for name in stored if name.startswith("s#")}
        counted = [h for started, h in holds if true.now < started + WINDOW]
        assert all(h.slot in slot_names for h in counted), (true.now, [h.slot for h in counted], sorted(slot_names))
        held = float(stored.get("held", {"N": "0"})["N"])
        assert held == sum(float(stored[name]["N"]) for name in slot_names) <= quota
