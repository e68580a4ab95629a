"""The shared ledger keeping a bedrock-mantle quota (SharedLedger(output_quota_tpm=...)) against moto's
DynamoDB: input and output holds in the one item, both bounded by the same add/subtract-only
conditional writes; output counted from its settlement; a consumer dying with held input and output
tokens, a malformed output attribute, skewed clocks; and QuotaPacer(input_tpm, output_tpm) across
"processes". Time is a fake epoch clock every ledger shares."""

from __future__ import annotations

import threading

import pytest
from pacer_runtime.ledger import OUTPUT_HELD, LedgerHold, LedgerRefusal, SharedLedger
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer
from test_ledger import EPOCH, TABLE, Clock, Flaky, client_error, consistent, dynamodb, item, own_client

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger


def mantle(client, clock, consumer="a", **options) -> SharedLedger:
    settings = {"ledger_id": "m", "quota_tpm": 10_000, "floor_tpm": 5_000, "output_quota_tpm": 1_000,
                "output_floor_tpm": 500, "client": client, "clock": clock, "sleep": lambda _: None, **options}
    return SharedLedger(TABLE, consumer=consumer, **settings)


def test_input_and_output_are_held_in_one_write_and_the_output_settles_from_now(dynamodb):
    clock = Clock()
    a = mantle(dynamodb, clock)
    hold = a.try_reserve(2_500, 400)  # input + cache writes + max_tokens; max_tokens on the output window
    assert isinstance(hold, LedgerHold) and hold.output_slot == "o#08:00:00#a"
    view = consistent(dynamodb)
    assert (view.held, view.output_held, view.days) == (2_500, 400, {})  # no day on bedrock-mantle
    assert a.counts["writes"] == 1
    clock.now += 30
    a.settle(hold, 2_100, 300)
    view = consistent(dynamodb)
    assert (view.held, view.output_held) == (2_100, 300)
    assert {name: tokens for name, (_, _, tokens) in view.output_slots.items()} == {
        "o#08:00:00#a": 0, "o#08:00:30#a": 300}  # counted when it was generated
    released = a.try_reserve(1_000, 200)
    a.release(released)
    view = consistent(dynamodb)
    assert (view.held, view.output_held, view.output_consumers) == (2_100, 300, {"a": 300})
    clock.now += 32.1  # the input slot (t=0) leaves; the output counted at t=30 stays a minute more
    a.view(refresh=True)  # a fresh view removes what left the window (a stale one leaves it: FRESH_VIEW_SECONDS)
    a.try_reserve(1, 1)
    view = consistent(dynamodb)
    assert (view.held, view.output_held) == (1, 301)


def test_the_output_window_refuses_with_the_input_window_free_and_says_when_room_frees(dynamodb):
    clock = Clock()
    a, b = mantle(dynamodb, clock), mantle(dynamodb, clock, "b")
    a.settle(a.try_reserve(500, 900), 100, 800)
    refusal = b.try_reserve(300, 300)
    assert isinstance(refusal, LedgerRefusal) and refusal.reason == "the quota's output window is full"
    assert refusal.ready_in == pytest.approx(62)  # the 800 output tokens' second + window + skew
    assert isinstance(b.try_reserve(300, 200), LedgerHold)  # 800 + 200 fits
    assert consistent(dynamodb).output_held == 1_000


def test_a_consumer_that_dies_holding_input_and_output_tokens_frees_both_with_its_window(dynamodb):
    clock = Clock()
    dead, alive = mantle(dynamodb, clock, "dead"), mantle(dynamodb, clock, "alive")
    hold = dead.try_reserve(9_000, 900)  # and its process dies: never settled
    clock.now += 61.9
    assert isinstance(alive.try_reserve(2_000, 200), LedgerRefusal)
    clock.now += 0.2
    assert isinstance(alive.try_reserve(2_000, 200), LedgerHold)
    view = consistent(dynamodb)
    assert (view.held, view.output_held) == (2_000, 200)
    assert not [name for name in (*view.slots, *view.output_slots) if name.endswith("#dead")]
    dead.settle(hold, 8_000, 700)  # the answer arrives after all: its output still counts, from now
    view = consistent(dynamodb)
    assert (view.held, view.output_held, view.output_consumers["dead"]) == (2_000, 900, 700)
    assert dead.counts["late"] == 1


def test_a_malformed_output_attribute_is_repaired_from_the_slots_not_trusted(dynamodb, capsys):
    clock = Clock()
    a = mantle(dynamodb, clock)
    a.try_reserve(1_000, 300)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #o = :bad, #x = :x",
                         ExpressionAttributeNames={"#o": OUTPUT_HELD, "#x": "o#not-a-time#a"},
                         ExpressionAttributeValues={":bad": {"S": "lots"}, ":x": {"N": "5"}})
    fresh = mantle(dynamodb, clock)
    assert isinstance(fresh.try_reserve(1_000, 300), LedgerHold) and fresh.counts["repairs"] == 1
    view = consistent(dynamodb)
    assert (view.held, view.output_held) == (2_000, 600) and "o#not-a-time#a" not in item(dynamodb)
    assert "oheld is not a finite number" in capsys.readouterr().out


def test_a_lagging_clock_counts_its_output_in_the_newest_second_and_a_leading_cleaner_frees_nothing_early(dynamodb):
    on_time, lagging, leading = Clock(), Clock(EPOCH - 5), Clock()
    a = mantle(dynamodb, on_time)
    a.settle(a.try_reserve(100, 100), 100, 100)
    late = mantle(dynamodb, lagging, "b")
    hold = late.try_reserve(100, 100)
    assert isinstance(hold, LedgerHold) and hold.output_slot == "o#08:00:00#b"  # not 5 s earlier
    late.settle(hold, 100, 50)
    assert "o#08:00:00#b" in consistent(dynamodb).output_slots
    leading.now = EPOCH + 61.5  # 0.5 s ahead of the others when the window ends: within the skew
    mantle(dynamodb, leading, "c", floor_tpm=0, output_floor_tpm=0).try_reserve(10, 10)
    assert consistent(dynamodb).output_held == 160  # nothing removed before second + window + skew


def test_concurrent_consumers_never_overdraw_the_output_window(dynamodb):
    """24 threads, each a process of its own, race for 100-token output holds against 1,000 output TPM
    (the input window has room for all): exactly 10 win, whatever the interleaving."""
    clock = Clock()
    lock = threading.Lock()
    won: list[int] = []

    def racer(index: int) -> None:
        mine = mantle(own_client(), clock, f"c{index % 4}", floor_tpm=2_500, output_floor_tpm=250, conflict_retries=64)
        for _ in range(2):
            outcome = mine.try_reserve(100, 100)
            if isinstance(outcome, LedgerHold):
                with lock:
                    won.append(outcome.output)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    view = consistent(dynamodb)
    assert view.output_held == sum(won) == 1_000 and view.held == 1_000


def test_bad_mantle_settings_and_calls_are_refused_by_name(dynamodb):
    clock = Clock()
    with pytest.raises(ValueError, match="daily_tokens=5000 with output_quota_tpm"):
        mantle(dynamodb, clock, daily_tokens=5_000)
    with pytest.raises(ValueError, match="output_floor_tpm=2000 <= output_burst_tpm=1000 <= output_quota_tpm=1000"):
        mantle(dynamodb, clock, output_floor_tpm=2_000)
    with pytest.raises(ValueError, match="output_floor_tpm/output_burst_tpm without output_quota_tpm"):
        SharedLedger(TABLE, ledger_id="m", consumer="a", quota_tpm=100, output_floor_tpm=5, client=dynamodb)
    a = mantle(dynamodb, clock)
    with pytest.raises(ValueError, match="output_tokens=None: a bedrock-mantle ledger holds the call's max_tokens"):
        a.try_reserve(100)
    with pytest.raises(ValueError, match="max_tokens=1,001 exceeds the consumer's output burst cap"):
        a.try_reserve(2_000, 1_001)
    hold = a.try_reserve(100, 10)
    assert isinstance(hold, LedgerHold)
    with pytest.raises(ValueError, match="output_tokens=None: a bedrock-mantle hold settles"):
        a.settle(hold, 90)
    runtime = SharedLedger(TABLE, ledger_id="r", consumer="a", quota_tpm=100, client=dynamodb, clock=clock)
    with pytest.raises(ValueError, match="output_tokens=5 is for a bedrock-mantle ledger"):
        runtime.try_reserve(10, 5)


# --- QuotaPacer(input_tpm, output_tpm) across processes -----------------------------------------------


def pacer(client, clock, consumer) -> QuotaPacer:
    shared = mantle(client, clock, consumer, poll_seconds=0.01, max_poll_seconds=0.01)
    return QuotaPacer(input_tpm=10_000, output_tpm=1_000, clock=clock, poll_seconds=0.005, ledger=shared,
                      fallback_tpm=1_000)


def test_mantle_pacers_in_two_processes_share_both_windows(dynamodb):
    clock = Clock()
    first, second = pacer(dynamodb, clock, "a"), pacer(own_client(), clock, "b")
    with first.reserve(input_tokens=500, max_tokens=800) as ticket:
        ticket.settle(input_tokens=480, output_tokens=700)
    view = consistent(dynamodb)
    assert (view.held, view.output_held) == (480, 700)
    with pytest.raises(AdmissionRejected, match="the quota's output window is full"):  # its own window is empty
        second.admit(second.reservation(500, 400), max_tokens=400, max_wait_seconds=1)
    with second.reserve(input_tokens=500, max_tokens=300) as ticket:  # 700 + 300 fits
        ticket.release()
    assert consistent(dynamodb).output_held == 700


def test_a_mantle_pacer_refuses_a_runtime_ledger_and_the_other_way_round(dynamodb):
    clock = Clock()
    runtime = SharedLedger(TABLE, ledger_id="r", consumer="a", quota_tpm=1_000, client=dynamodb, clock=clock)
    with pytest.raises(ValueError, match="a bedrock-mantle pacer needs one that keeps its output window too"):
        QuotaPacer(input_tpm=1_000, output_tpm=100, ledger=runtime)
    with pytest.raises(ValueError, match="this SharedLedger keeps a bedrock-mantle quota"):
        QuotaPacer(1_000, ledger=mantle(dynamodb, clock))


# --- the Reserved tier reservation, shared the same way (issue 37 part 4) ----------------------------


class Answers:
    """A Converse client answering 10 input and 200 output tokens, served at the tiers given in turn."""

    def __init__(self, *served: str) -> None:
        self.served, self.calls = list(served), 0

    def converse(self, **request):
        tier = self.served[self.calls]
        self.calls += 1
        return {"output": {"message": {"content": [{"text": "ok"}]}}, "stopReason": "end_turn",
                "usage": {"inputTokens": 10, "outputTokens": 200}, "serviceTier": {"type": tier}}


RESERVED = {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "p"}]}],
            "inferenceConfig": {"maxTokens": 200}, "serviceTier": {"type": "reserved"}}


def reserving_pacer(client, clock, consumer) -> QuotaPacer:
    """A process with the whole reservation as its local cap, sharing it through a two-budget ledger."""
    reservation = SharedLedger(TABLE, ledger_id="m#reserved", consumer=consumer, quota_tpm=1_000,
                               output_quota_tpm=300, client=client, clock=clock, sleep=lambda _: None)
    return QuotaPacer(10_000, clock=clock, poll_seconds=0.005, reserved_input_tpm=1_000, reserved_output_tpm=300,
                      reserved_ledger=reservation)


def reservation_item(client) -> dict:
    from pacer_runtime.ledger import LedgerView

    found = client.get_item(TableName=TABLE, Key={"pk": {"S": "quota#m#reserved"}}, ConsistentRead=True)["Item"]
    view = LedgerView.parse(found)
    assert view.problems == []
    return {"input": view.held, "output": view.output_held}


def test_the_reservation_is_shared_so_a_second_process_overflows_instead_of_overdrawing_it(dynamodb):
    """Before, each process held its own part of the reservation: process b, whose local budgets were
    empty, sent a reserved call that Bedrock then served at default. With the reservation in the shared
    ledger, b sees a's hold and overflows to the on-demand quota itself."""
    clock = Clock()
    a, b = reserving_pacer(dynamodb, clock, "a"), reserving_pacer(own_client(), clock, "b")
    assert a.converse(Answers("reserved"), RESERVED).served_tier == "reserved"
    assert reservation_item(dynamodb) == {"input": 10, "output": 200}  # settled: 10 input, 200 output
    client = Answers("default")
    b.converse(client, RESERVED)  # 200 + 200 output tokens > 300: not held as reserved
    stats = b.stats()
    assert (stats.reserved_overflows, stats.reserved_output_held, stats.admitted) == (1, 0, 1)
    assert reservation_item(dynamodb) == {"input": 10, "output": 200}
    clock.now += 62.1  # a's output leaves the shared reservation's window
    assert b.converse(Answers("reserved"), RESERVED).served_tier == "reserved"
    assert b.stats().reserved_output_held == 200


def test_a_reserved_call_throttled_returns_its_shared_hold(dynamodb):
    from botocore.exceptions import ClientError

    class Throttled:
        def converse(self, **request):
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Converse")

    clock = Clock()
    a = reserving_pacer(dynamodb, clock, "a")
    with pytest.raises(ClientError):
        a.converse(Throttled(), RESERVED)
    assert reservation_item(dynamodb) == {"input": 0, "output": 0}


def test_while_the_shared_reservation_cannot_be_used_a_process_holds_its_own_part_of_it(dynamodb, capsys):
    """DynamoDB throttles the reservation's item past the ledger's retries: the process holds reserved
    calls within its static part of the reservation (not all of it on its own say-so, which would
    overdraw it beside the other processes, and not none of it), overflows the rest, says so in
    LedgerFallbacks by the reservation's id, and asks the shared reservation again ledger_retry_seconds
    later. Before, every reserved call overflowed to the on-demand quota while the item was unusable."""
    import json

    clock = Clock()
    throttling = Flaky(dynamodb, [client_error("ThrottlingException")] * 3)
    reservation = SharedLedger(TABLE, ledger_id="m#reserved", consumer="a", quota_tpm=1_000, output_quota_tpm=300,
                               client=throttling, clock=clock, sleep=lambda _: None, dynamodb_retries=2)
    pacer = QuotaPacer(10_000, clock=clock, poll_seconds=0.005, reserved_input_tpm=1_000, reserved_output_tpm=300,
                       reserved_ledger=reservation, reserved_fallback_input_tpm=500, reserved_fallback_output_tpm=200)
    assert pacer.converse(Answers("reserved"), RESERVED).served_tier == "reserved"  # 200 output: its part holds it
    assert throttling.calls == 3  # the first try and 2 retries, then this process's part
    assert pacer.converse(Answers("default"), RESERVED).served_tier == "default"  # 200 + 200 > 200: overflows
    assert throttling.calls == 3  # not asked again within ledger_retry_seconds
    stats = pacer.stats()
    assert (stats.ledger_fallbacks, stats.reserved_overflows, stats.reserved_output_held) == (1, 1, 200)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [(e["LedgerFallbacks"], e["LedgerId"]) for e in emf if "LedgerFallbacks" in e] == [(1, "m#reserved")]
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "quota#m#reserved"}})  # nothing written
    clock.now += 5  # ledger_retry_seconds later the shared reservation (answering now) is asked again
    small = {**RESERVED, "inferenceConfig": {"maxTokens": 50}}  # 200 + 50 within the local cap of 300
    assert pacer.converse(Answers("reserved"), small).served_tier == "reserved"
    assert reservation_item(dynamodb) == {"input": 10, "output": 200}
    assert throttling.calls == 5  # its reservation and its settlement (output above the hold: written at once)


def test_a_reserved_fallback_needs_its_reserved_ledger_and_both_budgets():
    with pytest.raises(ValueError, match="reserved_fallback_input_tpm and reserved_fallback_output_tpm go together"):
        QuotaPacer(10_000, reserved_input_tpm=1_000, reserved_output_tpm=300, reserved_fallback_input_tpm=100)
    with pytest.raises(ValueError, match="without reserved_ledger: they are what this process holds"):
        QuotaPacer(10_000, reserved_input_tpm=1_000, reserved_output_tpm=300, reserved_fallback_input_tpm=100,
                   reserved_fallback_output_tpm=30)
    with pytest.raises(ValueError, match="reserved_fallback_output_tpm=-1"):
        QuotaPacer(10_000, reserved_input_tpm=1_000, reserved_output_tpm=300, reserved_fallback_input_tpm=100,
                   reserved_fallback_output_tpm=-1)


def test_a_reserved_ledger_must_keep_two_budgets_and_comes_with_the_local_caps(dynamodb):
    clock = Clock()
    one_budget = SharedLedger(TABLE, ledger_id="r", consumer="a", quota_tpm=1_000, client=dynamodb, clock=clock)
    with pytest.raises(ValueError, match="must be a SharedLedger keeping the reservation's input and output budgets"):
        QuotaPacer(10_000, reserved_input_tpm=1_000, reserved_output_tpm=300, reserved_ledger=one_budget)
    with pytest.raises(ValueError, match="reserved_ledger without reserved_input_tpm/reserved_output_tpm"):
        QuotaPacer(10_000, reserved_ledger=mantle(dynamodb, clock))


def test_the_sweeper_removes_expired_output_slots_too(dynamodb):
    clock = Clock()
    a = mantle(dynamodb, clock)
    a.settle(a.try_reserve(1_000, 400), 900, 350)
    clock.now += 62.1
    swept = mantle(dynamodb, clock, "sweeper", floor_tpm=0, output_floor_tpm=0)
    assert swept.sweep() == 900 + 350
    view = consistent(dynamodb)
    assert (view.held, view.output_held, view.slots, view.output_slots) == (0, 0, {}, {})


def test_two_processes_sharing_a_mantle_ledger_are_never_throttled_by_the_emulators_mantle_quota(dynamodb):
    """Two processes, each with the whole quota as its local cap (alone, each would overdraw it with the
    other), pace through one shared mantle ledger against the emulator enforcing bedrock-mantle's
    quotas: no call is throttled. Model time moves on a ManualClock only while every worker waits."""
    from genai_pacer.testing import BedrockEmulator, ManualClock, QuotaModel, approx_tokens
    from test_quota_pacer import finished, wait_until
    from test_quota_pacer_mantle import PROMPT, REQUEST, SPEC

    clock = ManualClock()
    processes = []
    for consumer in ("a", "b"):
        shared = SharedLedger(TABLE, ledger_id="m", consumer=consumer, quota_tpm=SPEC.tpm_quota, floor_tpm=3_000,
                              output_quota_tpm=SPEC.output_tpm_quota, output_floor_tpm=1_000, client=own_client(),
                              clock=lambda: EPOCH + clock.now(), sleep=lambda _: None, poll_seconds=0.5,
                              max_poll_seconds=1.0)
        processes.append(QuotaPacer(input_tpm=SPEC.tpm_quota, output_tpm=SPEC.output_tpm_quota, clock=clock.now,
                                    poll_seconds=0.002, expiry_margin_seconds=0, ledger=shared))
    errors: list[BaseException] = []
    calls = 4
    with BedrockEmulator([SPEC], quota=QuotaModel(endpoint="bedrock-mantle"), clock=clock) as bedrock:

        def worker(pacer: QuotaPacer) -> None:
            client = bedrock.client(retries={"total_max_attempts": 1})
            try:
                for _ in range(calls):
                    with pacer.reserve(approx_tokens(PROMPT), 500) as ticket:
                        usage = client.converse(**REQUEST)["usage"]
                        ticket.settle(input_tokens=usage["inputTokens"], output_tokens=usage["outputTokens"])
            except BaseException as error:  # reported below, not lost in the thread
                errors.append(error)

        threads = [threading.Thread(target=worker, args=(p,), daemon=True) for p in processes]
        for thread in threads:
            thread.start()

        def all_blocked() -> bool:
            # a waiter asking the ledger (a DynamoDB round trip) is not blocked: time must not pass under it
            waiting = sum(p.stats().waiting for p in processes if not p._ledger_busy)
            return clock.sleepers + waiting >= sum(t.is_alive() for t in threads)

        for _ in range(2_000):
            if not any(t.is_alive() for t in threads):
                break
            wait_until(all_blocked, "every worker waits for its pacer or its answer")
            clock.advance(1.0)
        assert all(finished(thread) for thread in threads), (clock.now(), [p.stats() for p in processes],
                                                              [i.outcome for i in bedrock.invocations], errors)
        outcomes = [i.outcome for i in bedrock.invocations]
    assert errors == []
    assert outcomes == ["ok"] * 2 * calls  # the two processes together never overdrew either quota
    assert sum(p.stats().settled_output_tokens for p in processes) == 2 * calls * 400
    assert clock.now() >= 60  # 3,200 output tokens at 2,000 a minute: the shared output window paced them
    assert all(p.stats().ledger_fallbacks == 0 for p in processes)


def test_a_settlement_on_a_malformed_item_repairs_it_first(dynamodb, capsys):
    clock = Clock()
    a = mantle(dynamodb, clock)
    hold = a.try_reserve(1_000, 300)
    dynamodb.update_item(TableName=TABLE, Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #o = :bad",
                         ExpressionAttributeNames={"#o": "oh#a"}, ExpressionAttributeValues={":bad": {"S": "many"}})
    a.view(refresh=True)
    a.settle(hold, 900, 250)  # an ADD onto the text would fail: the item is repaired, then settled
    view = consistent(dynamodb)
    assert (view.held, view.output_held, a.counts["repairs"]) == (900, 250, 1)
    assert "oh#a is not a finite number" in capsys.readouterr().out


def test_a_reserved_shares_environment_shares_the_reservation_through_the_quotas_ledger(dynamodb):
    """QuotaLedger.environment of a share drawn at the Reserved tier carries the reservation and the
    share's part of it; QuotaPacer.from_environment then holds reserved calls in the one reservation
    item every process shares (the quota's id + '#reserved'), which grant_use lets it write."""
    import aws_cdk as cdk
    from genai_pacer import BedrockModel, ModelQuota, QuotaLedger
    from genai_pacer.quota.ledger import LEDGER_RESERVED_ENVIRONMENT
    from helpers import new_stack, template_of

    stack = new_stack()
    model = BedrockModel.from_id("us.amazon.nova-2-lite-v1:0")
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, reserved_input_tpm=1_000,
                       reserved_output_tpm=300)
    profile = quota.profile(input_tokens=10, output_tokens=200, max_tokens=200)
    quota.share("Interactive", profile, calls=2, call_seconds=60, service_tier="reserved")  # some overflow: TPM > 0
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    env = ledger.environment("Interactive")
    assert [env[name] for name in LEDGER_RESERVED_ENVIRONMENT] == ["1000", "300", "1000", "300"]
    role = cdk.aws_iam.Role(stack, "Role", assumed_by=cdk.aws_iam.AccountRootPrincipal())
    ledger.grant_use(role)
    (statement,) = [s for p in template_of(stack).to_json()["Resources"].values() if p["Type"] == "AWS::IAM::Policy"
                    for s in p["Properties"]["PolicyDocument"]["Statement"] if "dynamodb:UpdateItem" in s["Action"]]
    keys = statement["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
    assert keys == ["quota#us.amazon.nova-2-lite-v1:0", "quota#us.amazon.nova-2-lite-v1:0#reserved"]

    clock = Clock()
    env = {name: ("ledger" if name.endswith("_TABLE") else stack.resolve(value)) for name, value in env.items()}
    one, two = (QuotaPacer.from_environment(env, ledger=SharedLedger.from_environment(
        {**env, "GENAI_PACER_LEDGER_CONSUMER": name}, client=own_client(), clock=clock), clock=clock)
        for name in ("one", "two"))
    assert one.reserved_ledger is not None and one.reserved_ledger.ledger_id == "us.amazon.nova-2-lite-v1:0#reserved"
    assert one.reserved_fallback_tpm == (1_000, 300)  # the share's own part, held while the item cannot be used
    request = {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "p"}]}],
               "inferenceConfig": {"maxTokens": 200}, "serviceTier": {"type": "reserved"}}
    assert one.converse(Answers("reserved"), request).served_tier == "reserved"
    two.converse(Answers("default"), request)  # 200 + 200 output > 300: the shared reservation is full
    assert (one.stats().reserved_overflows, two.stats().reserved_overflows) == (0, 1)
