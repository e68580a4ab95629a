"""The shared quota ledger (pacer_runtime.ledger) against moto's DynamoDB: the arithmetic, the
conditional writes, floors and borrowing, expiry of a dead holder's hold, hostile items, DynamoDB's
throttles and errors, clock skew, and QuotaPacer across "processes" (pacers with their own clients).
Time is a fake epoch clock every ledger shares; nothing here reads the wall clock."""

from __future__ import annotations

import threading

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from genai_pacer.quota.ledger import (
    LEDGER_ENVIRONMENT,
    LEDGER_KEY_PREFIX,
    LEDGER_PARTITION_KEY,
    LEDGER_TTL_ATTRIBUTE,
)
from moto import mock_aws
from pacer_runtime import ledger as runtime_ledger
from pacer_runtime.ledger import LedgerError, LedgerHold, LedgerRefusal, LedgerView, SharedLedger

TABLE = "ledger"
EPOCH = 1_800_000_000.0  # 2027-01-15T08:00:00Z


class Clock:
    def __init__(self, now: float = EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def dynamodb():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        yield client


class Atomic:
    """A client whose calls on the table run one at a time, as DynamoDB runs writes to one item:
    "Individual write operations such as UpdateItem are atomic and always operate on the most recent
    version of the item, regardless of concurrency" (DynamoDB developer guide,
    BestPractices_ImplementingVersionControl.html). moto evaluates a condition and applies the update
    in Python with no lock, so threads racing on one item through moto alone can both pass a
    condition only one of them would pass in DynamoDB. Every process keeps its own (stale) view:
    the races the protocol must survive are all still there."""

    LOCK = threading.Lock()

    def __init__(self, client) -> None:
        self.client = client

    def update_item(self, **request):
        with self.LOCK:
            return self.client.update_item(**request)

    def get_item(self, **request):
        with self.LOCK:
            return self.client.get_item(**request)


def own_client() -> Atomic:
    """Another process's client: its own boto3 client, onto the same (in-process) DynamoDB."""
    return Atomic(boto3.client("dynamodb", region_name="us-east-1"))


def ledger(client, clock, consumer="a", **options) -> SharedLedger:
    settings = {"ledger_id": "m", "quota_tpm": 1_000, "floor_tpm": 500, "client": client, "clock": clock,
                "sleep": lambda _: None, **options}
    return SharedLedger(TABLE, consumer=consumer, **settings)


def item(client) -> dict:
    return client.get_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, ConsistentRead=True).get("Item", {})


def consistent(client) -> LedgerView:
    """The item parses without problems: held and every h# equal the sums of their slots."""
    view = LedgerView.parse(item(client))
    assert view.problems == [], view.problems
    return view


def test_the_construct_and_the_runtime_agree_on_names():
    """Both read one file, lambda/pacer_runtime/ledger_layout.py (the constructs by its path, without boto3)."""
    from genai_pacer._internal.runtime_constants import ledger_layout
    from pacer_runtime import ledger_layout as runtime_layout

    assert ledger_layout().__file__ == runtime_layout.__file__
    assert runtime_ledger.ENVIRONMENT == LEDGER_ENVIRONMENT
    assert (runtime_ledger.PARTITION_KEY, runtime_ledger.KEY_PREFIX, runtime_ledger.TTL_ATTRIBUTE) == (
        LEDGER_PARTITION_KEY, LEDGER_KEY_PREFIX, LEDGER_TTL_ATTRIBUTE)


def test_reserve_settle_and_release_add_and_subtract_and_keep_the_invariant(dynamodb):
    clock = Clock()
    a = ledger(dynamodb, clock, settle_delay_seconds=0)  # every settlement written at once (no deferred returns)
    first, second = a.try_reserve(300), a.try_reserve(100)
    assert isinstance(first, LedgerHold) and isinstance(second, LedgerHold)
    assert consistent(dynamodb).held == 400
    a.settle(first, 120.4)  # a settlement rounds up: the ledger never holds less than Bedrock charges
    assert consistent(dynamodb).held == 221
    a.release(second)  # a call Bedrock never saw returns its hold at once
    view = consistent(dynamodb)
    assert view.held == 121 and view.consumers == {"a": 121}
    assert item(dynamodb)[LEDGER_TTL_ATTRIBUTE]["N"] == str(int(EPOCH) + runtime_ledger.TTL_GRACE_SECONDS)


def test_the_quota_is_never_overdrawn_and_a_refusal_says_when_room_frees(dynamodb):
    clock = Clock()
    a = ledger(dynamodb, clock, floor_tpm=1_000)
    assert isinstance(a.try_reserve(700), LedgerHold)
    clock.now += 10
    refused = a.try_reserve(400)
    assert isinstance(refused, LedgerRefusal) and "full" in refused.reason
    # the 700 leave one window + one slot second + the skew after their second started
    assert refused.ready_in == pytest.approx(60 + 1 + 1 - 10)
    assert consistent(dynamodb).held == 700


def test_a_floor_is_served_before_borrowers_and_borrowing_uses_what_others_leave(dynamodb):
    clock = Clock()
    a, b = ledger(dynamodb, clock, "a"), ledger(dynamodb, clock, "b")
    assert not a.try_reserve(500).borrowed
    borrowed = a.try_reserve(400)
    assert borrowed.borrowed  # b's unused floor
    refused = b.try_reserve(300)  # within b's floor, but a borrowed the room
    assert isinstance(refused, LedgerRefusal) and refused.within_floor
    assert item(dynamodb)["w#b"]["S"].endswith(" 300")  # b says what it waits for
    again = a.try_reserve(50)
    assert isinstance(again, LedgerRefusal) and "b wait within their floors: 300 tokens are kept" in again.reason
    a.settle(borrowed, 100)  # the borrowed hold settles lower: 400 free, 300 of them kept for b
    assert a.try_reserve(50).borrowed  # borrowing goes on beside what b waits for
    assert isinstance(a.try_reserve(60), LedgerRefusal)  # but never into it
    assert isinstance(b.try_reserve(300), LedgerHold)
    assert "w#b" not in item(dynamodb)  # served: nothing is kept for b any more
    assert a.try_reserve(50).borrowed  # the last 50
    assert consistent(dynamodb).consumers == {"a": 700, "b": 300}


def test_a_want_written_after_a_borrowers_view_fails_the_borrow_which_sees_it_on_retry(dynamodb):
    clock = Clock()
    a, b = ledger(dynamodb, clock, "a"), ledger(dynamodb, clock, "b")
    a.try_reserve(500)
    a.try_reserve(300)  # borrowed: a's view says 200 are free
    b.try_reserve(400)  # within b's floor; refused, and b wants 400 (a has not seen it)
    refused = a.try_reserve(100)  # a's write pinned the want it saw: it fails, and the retry sees b's
    assert isinstance(refused, LedgerRefusal) and "b wait within their floors" in refused.reason
    assert a.counts["conflicts"] == 1 and consistent(dynamodb).held == 800


def test_a_burst_cap_bounds_what_a_consumer_borrows(dynamodb):
    clock = Clock()
    a = ledger(dynamodb, clock, floor_tpm=200, burst_tpm=600)
    assert isinstance(a.try_reserve(600), LedgerHold)
    refused = a.try_reserve(10)
    assert isinstance(refused, LedgerRefusal) and "burst cap" in refused.reason
    with pytest.raises(ValueError, match="burst cap"):
        a.try_reserve(601)


def test_a_dead_holders_hold_leaves_with_its_window_and_the_next_writer_removes_it(dynamodb):
    clock = Clock()
    dead, alive = ledger(dynamodb, clock, "dead"), ledger(dynamodb, clock, "alive")
    hold = dead.try_reserve(900)  # and then its process dies: never settled
    clock.now += 61.9  # its second + the window, within the skew: still held
    assert isinstance(alive.try_reserve(200), LedgerRefusal)
    clock.now += 0.2  # past second + window + skew
    assert isinstance(alive.try_reserve(200), LedgerHold)
    view = consistent(dynamodb)
    assert view.held == 200 and view.consumers == {"alive": 200}
    assert not [name for name in view.slots if name.endswith("#dead")]
    assert "h#dead" not in item(dynamodb)  # its h# left with its last slot: the item keeps no idle consumer
    dead.settle(hold, 10)  # a settlement after the window: nothing is charged again
    assert consistent(dynamodb).held == 200 and dead.counts["late"] == 1


def test_concurrent_consumers_with_their_own_clients_never_overdraw(dynamodb):
    """32 threads, each a process of its own (its own ledger and client), race for 100 x 50 tokens
    against a quota of 1,000: exactly 20 holds win, whatever the interleaving."""
    clock = Clock()
    lock = threading.Lock()
    held: list[int] = []

    def racer(index: int) -> None:
        mine = ledger(own_client(), clock, f"c{index % 4}", floor_tpm=250,
                      conflict_retries=64)
        for _ in range(3):
            outcome = mine.try_reserve(50)
            if isinstance(outcome, LedgerHold):
                with lock:
                    held.append(outcome.tokens)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    view = consistent(dynamodb)
    assert view.held == sum(held) <= 1_000
    assert sum(held) == 1_000  # and the quota is used: every refusal was a real one


def test_a_malformed_item_is_repaired_not_trusted_and_other_quotas_are_untouched(dynamodb, capsys):
    clock = Clock()
    a = ledger(dynamodb, clock)
    a.try_reserve(300)
    other = ledger(dynamodb, clock, ledger_id="other")
    other.try_reserve(100)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}},
                         UpdateExpression="SET #h = :bad, #x = :x, #s = :s",
                         ExpressionAttributeNames={"#h": "held", "#x": "mystery", "#s": "s#not-a-time#a"},
                         ExpressionAttributeValues={":bad": {"S": "lots"}, ":x": {"N": "1"}, ":s": {"N": "5"}})
    fresh = ledger(dynamodb, clock)
    hold = fresh.try_reserve(200)
    assert isinstance(hold, LedgerHold) and fresh.counts["repairs"] == 1
    view = consistent(dynamodb)
    assert view.held == 500 and "mystery" not in view.raw and "s#not-a-time#a" not in view.raw
    logged = capsys.readouterr().out
    assert "repaired" in logged and "held is not a finite number" in logged and "mystery is not an attribute" in logged
    assert LedgerView.parse(dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "quota#other"}})["Item"]).held == 100


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("s#2027-01-15T07:59:59#x", {"N": "-100000"}, "tokens >= 0"),  # would lend the quota tokens it never had
    ("s#2099-01-01T00:00:00#x", {"N": "900"}, "ahead of this clock"),  # would never leave the window
    ("s#09:00:00#x", {"N": "900"}, "ahead of this clock"),  # an hour ahead of 08:00 (a time of day: the nearest)
    ("s#99:00:00#x", {"N": "900"}, "not a slot"),  # no time of day
])
def test_a_hostile_slot_that_would_let_the_quota_be_overdrawn_or_blocked_is_repaired_away(dynamodb, capsys, name, value, reason):
    clock = Clock()
    a = ledger(dynamodb, clock, floor_tpm=1_000)
    a.try_reserve(300)
    tokens = int(value["N"])
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #s = :v ADD #h :t, #c :t",
                         ExpressionAttributeNames={"#s": name, "#h": "held", "#c": "h#x"},
                         ExpressionAttributeValues={":v": value, ":t": {"N": str(tokens)}})
    assert isinstance(a.try_reserve(700), LedgerHold)  # exactly the quota: neither more nor less
    assert isinstance(a.try_reserve(1), LedgerRefusal)
    view = consistent(dynamodb)
    assert view.held == 1_000 and name not in view.raw
    assert reason in capsys.readouterr().out


def test_a_write_stays_within_dynamodbs_expression_limits_however_full_the_item(dynamodb):
    """60 consumers all wanting within their floors, 100 expired slots: the borrowing write that
    removes them stays within 300 operators and 4 KB per expression (Constraints.html); the slots
    past MAX_CLEANUP go with the next write."""
    import re

    clock = Clock()
    for index in range(100):  # 100 dead holders, one slot each
        ledger(dynamodb, clock, f"dead{index}", floor_tpm=5).try_reserve(5)
    clock.now += 70  # every slot has left the window
    for index in range(60):  # 60 consumers waiting within their floors: they wrote their wants
        ledger(dynamodb, clock, f"w{index}", floor_tpm=0, burst_tpm=1_000)
        dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #w = :t",
                             ExpressionAttributeNames={"#w": f"w#w{index}"},
                             ExpressionAttributeValues={":t": {"S": "2027-01-15T07:00:00.000Z"}})  # long ago
    sent: list[dict] = []

    class Watching(Atomic):
        def update_item(self, **request):
            sent.append(request)
            return super().update_item(**request)

    borrower = ledger(Watching(dynamodb), clock, "borrower", floor_tpm=0)
    assert isinstance(borrower.try_reserve(10), LedgerHold)
    operators = re.compile(r"\b(?:AND|OR|NOT|attribute_not_exists|attribute_exists|attribute_type)\b|<=|>=|<>|=|<|>")
    for request in sent:
        for expression in (request.get("ConditionExpression", ""), request["UpdateExpression"]):
            assert len(expression.encode()) <= runtime_ledger.MAX_EXPRESSION_BYTES
            assert len(operators.findall(expression)) <= runtime_ledger.MAX_EXPRESSION_OPERATORS
    assert len(consistent(dynamodb).slots) == 100 - runtime_ledger.MAX_CLEANUP + 1
    borrower.try_reserve(10)
    assert len(consistent(dynamodb).slots) == 100 - 2 * runtime_ledger.MAX_CLEANUP + 1  # the same second: one slot


class Flaky:
    """A client whose update_item fails with the given errors first, then passes through."""

    def __init__(self, client, errors):
        self.client, self.errors, self.calls = client, list(errors), 0

    def update_item(self, **request):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.client.update_item(**request)

    def get_item(self, **request):
        return self.client.get_item(**request)


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "UpdateItem")


def test_a_throttled_write_is_retried_with_backoff(dynamodb):
    sleeps: list[float] = []
    flaky = Flaky(dynamodb, [client_error("ProvisionedThroughputExceededException"), client_error("ThrottlingException")])
    a = ledger(flaky, Clock(), sleep=sleeps.append)
    assert isinstance(a.try_reserve(100), LedgerHold)
    assert flaky.calls == 3 and len(sleeps) == 2 and a.counts["throttled"] == 2


def test_what_can_never_succeed_is_not_retried(dynamodb):
    flaky = Flaky(dynamodb, [client_error("ResourceNotFoundException")])
    with pytest.raises(LedgerError, match="not retried") as raised:
        ledger(flaky, Clock()).try_reserve(100)
    assert flaky.calls == 1 and raised.value.code == "ResourceNotFoundException" and not raised.value.retryable


def test_a_throttle_that_never_ends_raises_after_the_retries(dynamodb):
    flaky = Flaky(dynamodb, [client_error("RequestLimitExceeded")] * 10)
    with pytest.raises(LedgerError, match="kept failing") as raised:
        ledger(flaky, Clock(), dynamodb_retries=2).try_reserve(100)
    assert flaky.calls == 3 and raised.value.retryable


def test_a_settlement_whose_answer_was_lost_is_not_repeated(dynamodb):
    clock = Clock()
    flaky = Flaky(dynamodb, [])
    a = ledger(flaky, clock)
    hold = a.try_reserve(300)
    flaky.errors.append(ReadTimeoutError(endpoint_url="http://dynamodb"))
    a.settle(hold, 10)  # deferred: nothing written yet
    with pytest.raises(LedgerError, match="not repeated"):
        a.flush()
    assert consistent(dynamodb).held == 300  # the hold stays: it leaves with its window
    assert a.deferred_tokens == 0  # and the return is never written again (it may have been applied)
    a.flush()
    assert flaky.calls == 2 and consistent(dynamodb).held == 300


def test_a_lagging_clock_writes_into_the_newest_slot_and_a_leading_cleaner_within_the_skew_frees_nothing_early(dynamodb):
    on_time, lagging, leading = Clock(), Clock(EPOCH - 5), Clock()
    ledger(dynamodb, on_time, "a").try_reserve(100)
    late = ledger(dynamodb, lagging, "b").try_reserve(100)
    assert late.slot.startswith("s#08:00:00#")  # the others' second, not five seconds earlier
    leading.now = EPOCH + 61.5  # a cleaner 0.5 s ahead of the others' clock when the window ends
    ledger(dynamodb, leading, "c", floor_tpm=0).try_reserve(10)
    assert consistent(dynamodb).held == 210  # nothing removed before second + window + skew
    far = Clock(EPOCH - 3600)  # a clock an hour behind still keeps the invariant
    ledger(dynamodb, far, "d").try_reserve(1)
    consistent(dynamodb)


def test_bad_settings_are_refused_by_name(dynamodb):
    with pytest.raises(ValueError) as refused:
        SharedLedger("", ledger_id="m", consumer="a#b", quota_tpm=0, floor_tpm=-1, client=dynamodb)
    for name in ("table_name", "consumer", "quota_tpm", "floor_tpm"):
        assert name in str(refused.value)
    with pytest.raises(ValueError, match="burst_tpm"):
        SharedLedger(TABLE, ledger_id="m", consumer="a", quota_tpm=100, floor_tpm=50, burst_tpm=40, client=dynamodb)


def test_a_charge_bedrock_already_took_is_counted_without_a_ceiling_and_leaves_with_its_window(dynamodb):
    """SharedLedger.charge: tokens the ledger never admitted (a reserved call Bedrock served at default)
    count for every consumer at once, even past the quota, and leave like any slot."""
    clock = Clock()
    a, b = ledger(dynamodb, clock), ledger(dynamodb, clock, "b")
    assert isinstance(a.try_reserve(900), LedgerHold)
    a.charge(300.2)  # spent whatever the ledger says: 1,201 held of a 1,000 quota
    view = consistent(dynamodb)
    assert (view.held, view.consumers, view.days) == (1_201, {"a": 1_201}, {"2027-01-15": 1_201})
    assert isinstance(b.try_reserve(1), LedgerRefusal)  # every consumer sees it
    clock.now += 62.1  # its second + the window + the skew
    assert isinstance(b.try_reserve(1_000), LedgerHold)
    assert consistent(dynamodb).held == 1_000 and a.counts["charged"] == 1
    with pytest.raises(ValueError, match="tokens=-1 must be a finite number >= 0"):
        a.charge(-1)


def test_a_charge_on_a_malformed_item_repairs_it_first(dynamodb, capsys):
    clock = Clock()
    a = ledger(dynamodb, clock)
    a.try_reserve(100)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #h = :bad",
                         ExpressionAttributeNames={"#h": "h#a"}, ExpressionAttributeValues={":bad": {"S": "many"}})
    fresh = ledger(dynamodb, clock)
    fresh.view(refresh=True)
    fresh.charge(50)
    assert consistent(dynamodb).held == 150 and fresh.counts["repairs"] == 1
    assert "h#a is not a finite number" in capsys.readouterr().out


def test_a_slot_is_named_by_its_utc_time_of_day_and_read_back_as_the_nearest_such_moment():
    """The slot name leaves the day out (a smaller item: one write unit per KB); read back against the
    reader's clock, a slot named just before midnight is yesterday's a second after it, and a name of
    an earlier version (with its date) still reads as its second."""
    midnight = 1_800_057_600.0  # 2027-01-16T00:00:00Z
    item = {"s#23:59:59#a": {"N": "5"}, "s#00:00:00#b": {"N": "7"}, "s#2027-01-15T23:59:58#c": {"N": "1"},
            "held": {"N": "13"}, "h#a": {"N": "5"}, "h#b": {"N": "7"}, "h#c": {"N": "1"}}
    view = LedgerView.parse(item, midnight + 1)
    assert view.problems == []
    assert {name: start - midnight for name, (start, _, _) in view.slots.items()} == {
        "s#23:59:59#a": -1, "s#00:00:00#b": 0, "s#2027-01-15T23:59:58#c": -2}
    assert LedgerView.parse(item, midnight - 3_600).slots["s#00:00:00#b"][0] == midnight  # an hour before: still the nearest
