"""A bedrock-mantle consumer waiting within its floor keeps its output tokens free too: its want carries
the output it waits for ("<time> <tokens> o<output>[ <priority>[ borrowing]]"), and a borrowing call
leaves that much of the output window free while the want is recent, as it leaves the input. Before,
a want kept the input window only, so borrowers could keep taking the output room a floor owner
waited for. Against moto's DynamoDB, on one fake clock."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, LedgerView, SharedLedger, _iso_ms, _parse_want
from pacer_runtime.ledger_layout import PRIORITIES
from test_ledger import EPOCH, TABLE, Clock, consistent, dynamodb, item, ledger, own_client
from test_ledger_mantle import mantle

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger


def owner_waits_for_the_output_window(dynamodb, clock, ledger_id: str = "m") -> tuple[SharedLedger, SharedLedger]:
    """A borrower (no floor) holds 900 of the 1,000 output tokens; the floor owner (500 output tokens of
    floor) asks for 400 within its floor and is refused by the output window alone: it writes its want."""
    borrower = mantle(dynamodb, clock, "borrower", ledger_id=ledger_id, floor_tpm=0, output_floor_tpm=0)
    owner = mantle(own_client(), clock, "owner", ledger_id=ledger_id)
    hold = borrower.try_reserve(1_000, 900)
    assert isinstance(hold, LedgerHold) and hold.borrowed
    refused = owner.try_reserve(1_000, 400)  # 1,000 + 1,000 input fits; 900 + 400 output does not
    assert isinstance(refused, LedgerRefusal) and refused.within_floor
    assert refused.reason == "the quota's output window is full"
    borrower.release(hold)  # the output window is empty again: the borrower asks first
    return borrower, owner


def test_a_floor_owner_refused_by_the_output_window_wants_its_output_too(dynamodb):
    clock = Clock()
    owner_waits_for_the_output_window(dynamodb, clock)
    assert item(dynamodb)["w#owner"] == {"S": f"{_iso_ms(EPOCH)} 1000 o400"}
    view = consistent(dynamodb)
    assert (view.wants, view.want_output) == ({"owner": (_iso_ms(EPOCH), 1_000)}, {"owner": 400})


def test_a_borrower_leaves_the_output_a_floor_owner_waits_for_free(dynamodb):
    clock = Clock()
    borrower, owner = owner_waits_for_the_output_window(dynamodb, clock)
    refused = borrower.try_reserve(100, 700)  # the input window has room; 700 + 400 kept > 1,000 output
    assert isinstance(refused, LedgerRefusal) and not refused.within_floor
    assert refused.reason == "owner wait within their floors: 400 output tokens are kept for them"
    assert isinstance(borrower.try_reserve(100, 600), LedgerHold)  # what the owner does not wait for
    assert isinstance(owner.try_reserve(1_000, 400), LedgerHold)  # its floor, back: 600 + 400
    view = consistent(dynamodb)
    assert (view.output_held, view.output_consumers) == (1_000, {"borrower": 600, "owner": 400})
    assert "owner" not in view.wants and "owner" not in view.want_output  # served: nothing kept any more


def test_a_served_want_keeps_no_output_free(dynamodb):
    clock = Clock()
    borrower, owner = owner_waits_for_the_output_window(dynamodb, clock)
    assert isinstance(borrower.try_reserve(100, 700), LedgerRefusal)  # kept while the owner waits
    served = owner.try_reserve(1_000, 400)
    assert isinstance(served, LedgerHold)
    owner.release(served)
    assert isinstance(borrower.try_reserve(100, 1_000), LedgerHold)  # the whole output window


def test_an_output_want_is_kept_for_want_seconds_and_then_no_longer(dynamodb):
    clock = Clock()
    borrower, _ = owner_waits_for_the_output_window(dynamodb, clock)
    clock.now += 4.9
    assert isinstance(borrower.try_reserve(100, 700), LedgerRefusal)
    clock.now += 0.2  # want_seconds (5) after the want, and the owner never asked again
    assert isinstance(borrower.try_reserve(100, 700), LedgerHold)


def test_a_bedrock_runtime_want_is_written_and_read_as_before(dynamodb):
    """No output part on a bedrock-runtime ledger, and wants without one (bedrock-runtime's, Step
    Functions', and mantle wants written before this) keep no output free."""
    clock = Clock()
    filler = ledger(dynamodb, clock, "filler", floor_tpm=0)
    assert isinstance(filler.try_reserve(900), LedgerHold)
    owner = ledger(own_client(), clock, "owner", floor_tpm=500)
    assert isinstance(owner.try_reserve(400), LedgerRefusal)
    assert item(dynamodb)["w#owner"] == {"S": f"{_iso_ms(EPOCH)} 400"}
    view = consistent(dynamodb)
    assert (view.wants, view.want_output) == ({"owner": (_iso_ms(EPOCH), 400)}, {})
    # a mantle item holding an input-only want (an earlier version's): the output window is not kept
    borrower, _ = owner_waits_for_the_output_window(dynamodb, clock, ledger_id="earlier")
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#earlier"}}, UpdateExpression="SET #w = :w",
                         ExpressionAttributeNames={"#w": "w#owner"},
                         ExpressionAttributeValues={":w": {"S": f"{_iso_ms(EPOCH)} 1000"}})
    borrower.view(refresh=True)
    assert isinstance(borrower.try_reserve(100, 1_000), LedgerHold)


@pytest.mark.parametrize("bad", ["o", "o-400", "o4.5", "o1e3", "o400x", "oops", "o0400000000000000",
                                 "o400 o400", "o400 urgent", "interactive o400", "o400 batch lending", "o٤٠٠"])
def test_a_malformed_output_part_is_repaired_not_trusted(dynamodb, capsys, bad):
    clock = Clock()
    borrower = mantle(dynamodb, clock, "borrower", floor_tpm=0, output_floor_tpm=0)
    borrower.try_reserve(100, 10)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #w = :w",
                         ExpressionAttributeNames={"#w": "w#x"},
                         ExpressionAttributeValues={":w": {"S": f"{_iso_ms(EPOCH)} 100 {bad}"}})
    fresh = mantle(own_client(), clock, "fresh", floor_tpm=0, output_floor_tpm=0)  # reads the item first
    assert isinstance(fresh.try_reserve(100, 990), LedgerHold)  # nothing kept for a want that does not parse
    assert "w#x" not in item(dynamodb) and fresh.counts["repairs"] == 1
    assert "w#x is not a want ('<time> <tokens>[ o<output>][ <priority>[ borrowing]]')" in capsys.readouterr().out


def test_no_priority_reads_as_an_output_part():
    assert not [name for name in PRIORITIES if name.startswith("o")]  # "o..." after the tokens is the output


@settings(max_examples=60)
@given(tokens=st.integers(0, 10**9), output=st.integers(0, 10**15 - 1),
       priority=st.sampled_from([None, *PRIORITIES]), borrowing=st.booleans(), part=st.text(st.characters(exclude_characters=" "), max_size=18))
def test_a_want_reads_back_what_was_written_and_nothing_else_as_its_output(tokens, output, priority, borrowing, part):
    tail = "" if priority is None else f" {priority}" + (" borrowing" if borrowing else "")
    when = _iso_ms(EPOCH)
    rank = None if priority is None else (PRIORITIES.index(priority), borrowing)
    assert _parse_want({"S": f"{when} {tokens} o{output}{tail}"}) == ((when, tokens), rank, output)
    assert _parse_want({"S": f"{when} {tokens}{tail}"}) == ((when, tokens), rank, 0)
    whole = part.isascii() and part.isdigit() and len(part) <= 15
    parsed = _parse_want({"S": f"{when} {tokens} o{part}{tail}"})
    assert parsed == (((when, tokens), rank, int(part)) if whole else None)


_EXAMPLES = iter(range(1_000_000))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tries=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 3_000), st.integers(1, 600),
                                st.floats(min_value=0, max_value=0.5)), min_size=1, max_size=8))
def test_borrowers_never_take_the_output_a_waiting_floor_owner_is_owed(dynamodb, tries):
    """However two borrowers ask after the floor owner's want (any sizes, any order, within
    want_seconds), the output window keeps the 400 output tokens it waits for, and its call is then
    admitted: its floor, guaranteed on the output window too."""
    clock = Clock()
    ledger_id = f"owed-{next(_EXAMPLES)}"  # a fresh item per example, in the fixture's one table
    first, owner = owner_waits_for_the_output_window(dynamodb, clock, ledger_id)
    second = mantle(own_client(), clock, "second", ledger_id=ledger_id, floor_tpm=0, output_floor_tpm=0)
    key = {"pk": {"S": "quota#" + ledger_id}}
    for who, tokens, output, advance in tries:
        clock.now += advance
        (first, second)[who].try_reserve(tokens, output)
        view = LedgerView.parse(dynamodb.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"], clock.now)
        assert view.problems == [] and view.output_held <= 1_000 - 400
    assert isinstance(owner.try_reserve(1_000, 400), LedgerHold)
