"""The shared ledger at scale (issue 25, "cheap at scale"): the quota item keeps only the consumers
holding something in the window (an h# leaves with its consumer's last slot), and a stale view is
read again before a write it would lose (a failed condition is charged as a write of the whole item).
Against moto's DynamoDB, on a fake clock every ledger shares."""

from __future__ import annotations

from pacer_runtime.ledger import LedgerHold, LedgerRefusal, LedgerView
from test_ledger import TABLE, Clock, consistent, dynamodb, item, ledger

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger


class Counting:
    """The client, counting what the ledger sends."""

    def __init__(self, client) -> None:
        self.client, self.writes, self.reads, self.failed = client, 0, 0, 0

    def update_item(self, **request):
        self.writes += 1
        try:
            return self.client.update_item(**request)
        except self.client.exceptions.ConditionalCheckFailedException:
            self.failed += 1
            raise

    def get_item(self, **request):
        self.reads += 1
        return self.client.get_item(**request)


def test_a_consumers_h_leaves_with_its_last_slot_and_the_removal_is_pinned(dynamodb):
    """b's last slot leaves the window: the writer that removes it removes h#b too (a consumer without
    a hold costs the item nothing), pinned to the value it saw, so a reservation of b in between fails
    that write and the retry lowers h#b instead. held = the slots' sum and h#c = c's hold throughout."""
    clock = Clock()
    a, b = ledger(dynamodb, clock, "a"), ledger(dynamodb, clock, "b")
    assert isinstance(b.try_reserve(100), LedgerHold)
    clock.now += 62.1  # b's slot left the window
    assert isinstance(a.try_reserve(100), LedgerHold)
    assert "h#b" not in item(dynamodb) and consistent(dynamodb).consumers == {"a": 100}

    assert isinstance(b.try_reserve(100), LedgerHold)  # back: ADD onto an absent h# starts from 0
    clock.now += 62.1
    a.view(refresh=True)  # a sees b's slot expired, and b holding nothing else
    assert isinstance(b.try_reserve(100), LedgerHold)  # b's stale view leaves its expired slot: h#b = 200
    assert consistent(dynamodb).consumers["b"] == 200
    assert isinstance(a.try_reserve(100), LedgerHold)  # its removal of h#b (pinned to 100) fails; the retry lowers it
    assert a.counts["conflicts"] == 1
    view = consistent(dynamodb)
    assert view.consumers == {"a": 100, "b": 100} and view.held == 200


def test_a_state_machines_reservation_onto_an_absent_h_and_a_sweep_keep_the_invariant(dynamodb):
    """A Step Functions consumer's reservation (ledger_steps: ADD #mine, IF attribute_not_exists(#mine)
    OR #mine <= :mine) works when its h# is absent, and a sweep removes a consumer's h# with its last
    slot as a reservation does."""
    clock = Clock()
    a = ledger(dynamodb, clock, "a")
    assert isinstance(a.try_reserve(100), LedgerHold)
    slot = "s#08:00:00#map"
    dynamodb.update_item(
        TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="ADD #held :r, #mine :r, #slot :r",
        ConditionExpression="(attribute_not_exists(#held) OR (attribute_type(#held, :number) AND #held <= :total)) AND "
                            "(attribute_not_exists(#mine) OR (attribute_type(#mine, :number) AND #mine <= :mine))",
        ExpressionAttributeNames={"#held": "held", "#mine": "h#map", "#slot": slot},
        ExpressionAttributeValues={":r": {"N": "50"}, ":total": {"N": "950"}, ":mine": {"N": "450"},
                                   ":number": {"S": "N"}})
    assert consistent(dynamodb).consumers == {"a": 100, "map": 50}
    clock.now += 62.1
    assert a.sweep() == 150
    raw = item(dynamodb)
    assert "h#map" not in raw and "h#a" not in raw and raw["held"] == {"N": "0"}
    assert consistent(dynamodb).slots == {}


def test_a_repair_leaves_out_the_h_of_a_consumer_without_a_slot(dynamodb, capsys):
    """A malformed item is rebuilt from its valid slots; a consumer without one keeps no h# (absent is 0)."""
    clock = Clock()
    a = ledger(dynamodb, clock, "a")
    assert isinstance(a.try_reserve(100), LedgerHold)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #h = :h",
                         ExpressionAttributeNames={"#h": "h#gone"}, ExpressionAttributeValues={":h": {"N": "70"}})
    fresh = ledger(dynamodb, clock, "fresh")
    assert isinstance(fresh.try_reserve(100), LedgerHold) and fresh.counts["repairs"] == 1
    raw = item(dynamodb)
    assert "h#gone" not in raw and consistent(dynamodb).consumers == {"a": 100, "fresh": 100}
    assert "repaired" in capsys.readouterr().out


def test_a_stale_view_reads_before_a_write_it_would_lose(dynamodb):
    """A view seconds old that needs its expired slots' room (another writer removed them) or that
    would leave the window nearly full (another writer filled it) is read again first: one read, and
    no failed write (each of which DynamoDB charges as a write of the whole item)."""
    clock, counting = Clock(), Counting(dynamodb)
    a, b = ledger(dynamodb, clock, "a"), ledger(counting, clock, "b")
    assert isinstance(a.try_reserve(400), LedgerHold)
    assert isinstance(b.try_reserve(400), LedgerHold)  # b's view: a's 400 and its own
    clock.now += 62.1
    assert isinstance(a.try_reserve(100), LedgerHold)  # removes both expired slots
    reads, writes = counting.reads, counting.writes
    assert isinstance(b.try_reserve(600), LedgerHold)  # only fits without the expired 800, which a removed
    assert (counting.reads - reads, counting.writes - writes, counting.failed, b.counts["conflicts"]) == (1, 1, 0, 0)
    assert consistent(dynamodb).held == 700

    clock.now += 5  # b's view is stale again, and says 700 of 1,000 are held; a takes 250 meanwhile
    assert isinstance(a.try_reserve(250), LedgerHold)
    reads, writes = counting.reads, counting.writes
    refused = b.try_reserve(100)  # 800 would be held in b's view (> 75%): read first, and refused on it
    assert isinstance(refused, LedgerRefusal) and "full" in refused.reason
    assert (counting.reads - reads, counting.writes - writes, counting.failed) == (1, 0, 0)
    view: LedgerView = consistent(dynamodb)
    assert view.held == 950 and view.consumers == {"a": 350, "b": 600}


def test_a_consumer_that_lost_a_removal_reads_before_its_next_one(dynamodb):
    """Writers racing for the same freed room (many consumers retry when the same slot leaves): a view
    under a second old pins an expired slot another writer has just removed, and fails. A consumer
    that lost such a removal reads before its next one for a window, even from a view under a second
    old, so the next race costs a read, not a failed write."""
    clock, counting = Clock(), Counting(dynamodb)
    a, b = ledger(dynamodb, clock, "a"), ledger(counting, clock, "b")
    assert isinstance(ledger(dynamodb, clock, "dead").try_reserve(500), LedgerHold)
    clock.now += 1
    assert isinstance(ledger(dynamodb, clock, "dead2").try_reserve(400), LedgerHold)
    clock.now += 61.1  # dead's 500 left the window; dead2's 400 has not yet
    a.view(refresh=True)
    b.view(refresh=True)
    clock.now += 0.1
    assert isinstance(a.try_reserve(500), LedgerHold)  # removes dead's slot
    assert isinstance(b.try_reserve(100), LedgerHold)  # b's view pinned it too: lost, then admitted on the fresh item
    assert (b.counts["conflicts"], counting.failed) == (1, 1)
    clock.now += 0.9  # dead2's 400 leave; b's view is 0.9 s old
    assert isinstance(a.try_reserve(100), LedgerHold)  # a removes them first
    reads = counting.reads
    assert isinstance(b.try_reserve(100), LedgerHold)  # b reads first this time: no failed write
    assert (b.counts["conflicts"], counting.failed, counting.reads - reads) == (1, 1, 1)
    view = consistent(dynamodb)
    assert view.held == 800 and view.consumers == {"a": 600, "b": 200}


def test_consumers_waiting_for_the_same_freed_room_read_before_removing_it_and_a_lone_writer_does_not(dynamodb):
    """At saturation every waiting consumer tries again when the same slot leaves the window: a view
    read before that (even under a second old) pinning another consumer's slot is read again first, so
    the one that comes second costs a read, not a failed write. A lone writer removing its own slots
    never reads first."""
    clock = Clock()
    a, b = Counting(dynamodb), Counting(dynamodb)
    first, second = ledger(a, clock, "a"), ledger(b, clock, "b")
    assert isinstance(ledger(dynamodb, clock, "dead").try_reserve(500), LedgerHold)
    clock.now += 61.5  # dead's 500 leave the window at + 62
    first.view(refresh=True)
    second.view(refresh=True)
    clock.now += 0.6
    assert isinstance(first.try_reserve(500), LedgerHold) and (a.reads, a.failed) == (2, 0)  # read, then removed
    assert isinstance(second.try_reserve(300), LedgerHold) and (b.reads, b.failed) == (2, 0)  # read: already gone
    assert consistent(dynamodb).consumers == {"a": 500, "b": 300}

    solo_client = Counting(dynamodb)
    solo = ledger(solo_client, clock, "solo", ledger_id="solo", floor_tpm=1_000)
    assert isinstance(solo.try_reserve(900), LedgerHold)
    clock.now += 61.5
    solo.view(refresh=True)
    reads = solo_client.reads
    clock.now += 0.6
    assert isinstance(solo.try_reserve(500), LedgerHold)  # removes its own expired 900 without reading first
    assert (solo_client.reads - reads, solo_client.writes, solo_client.failed) == (0, 2, 0)


def test_a_bedrock_mantle_consumers_h_and_oh_leave_with_their_last_slots(dynamodb):
    """Both windows: a dead consumer's input and output holds leave the window, and the writer that
    removes its last slots of each family removes its h# and its oh# too."""
    from test_ledger_mantle import mantle

    clock = Clock()
    assert isinstance(mantle(dynamodb, clock, "dead").try_reserve(2_000, 300), LedgerHold)
    clock.now += 62.1
    assert isinstance(mantle(dynamodb, clock, "alive").try_reserve(1_000, 200), LedgerHold)
    raw = item(dynamodb)
    assert "h#dead" not in raw and "oh#dead" not in raw
    view = consistent(dynamodb)
    assert (view.held, view.output_held, view.consumers, view.output_consumers) == (
        1_000, 200, {"alive": 1_000}, {"alive": 200})
