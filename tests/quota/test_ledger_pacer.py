"""QuotaPacer taking part in the shared quota ledger (pacer_runtime.ledger): pacers in several
"processes" (each its own pacer, ledger and DynamoDB client) sharing one quota item in moto's DynamoDB,
waiting for each other, returning holds, and falling back to the static share when the ledger cannot
be used. Time is a fake epoch clock every process shares; nothing here reads the wall clock."""

from __future__ import annotations

import json
import math
import threading

import boto3
import pytest
from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT
from pacer_runtime.ledger import SharedLedger
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer
from test_ledger import TABLE, Atomic, Clock, Flaky, client_error, consistent, dynamodb, ledger, own_client

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger



def pacer(client, clock, consumer, **options) -> QuotaPacer:
    shared = ledger(client, clock, consumer, poll_seconds=0.01, max_poll_seconds=0.01)
    return QuotaPacer(1_000, clock=clock, poll_seconds=0.005, ledger=shared, fallback_tpm=100, **options)


def test_pacers_in_two_processes_share_one_quota(dynamodb):
    clock = Clock()
    first, second = pacer(dynamodb, clock, "a"), pacer(own_client(), clock, "b")
    ticket = first.admit(900)
    assert ticket.hold is not None and ticket.hold.borrowed
    with pytest.raises(AdmissionRejected, match="shared ledger"):
        second.admit(300, max_wait_seconds=5)  # the shared window frees only when the 900 leave it
    ticket.settle(input_tokens=100, output_tokens=50)  # settles to 150: room for b at once
    assert second.admit(300, max_wait_seconds=5).hold is not None
    assert consistent(dynamodb).consumers == {"a": 150, "b": 300}
    assert second.stats().ledger_refusals >= 1


def test_a_waiting_call_is_admitted_when_another_process_frees_room(dynamodb):
    clock = Clock()
    first, second = pacer(Atomic(dynamodb), clock, "a"), pacer(own_client(), clock, "b")
    ticket = first.admit(900)
    admitted: list = []
    waiter = threading.Thread(target=lambda: admitted.append(second.admit(300)))
    waiter.start()
    until_refused = threading.Event()
    while not until_refused.wait(0.01):  # the waiter asked the ledger and was told to wait
        if second.stats().ledger_refusals or not waiter.is_alive():
            until_refused.set()
    assert not admitted
    ticket.release()  # a call Bedrock never saw, in the other process: its hold comes back at once
    clock.now += 1  # past the waiter's backoff (poll_seconds 0.01): it asks the ledger again
    waiter.join(timeout=30)
    assert admitted and admitted[0].hold is not None
    assert consistent(dynamodb).held == 300


class Recording(Atomic):
    """Atomic, and records `held` as every successful write left it."""

    def __init__(self, client, seen: list[float]) -> None:
        super().__init__(client)
        self.seen = seen

    def update_item(self, **request):
        answer = super().update_item(**request)
        self.seen.append(float(answer["Attributes"]["held"]["N"]))
        return answer


def test_pacers_in_two_processes_with_many_threads_never_hold_more_than_the_quota_between_them(dynamodb):
    """Two processes (a pacer and a ledger client each, one a borrower, one within its floor), four
    threads each, admitting, settling, releasing and throttling as calls do: after every write the
    ledger holds at most the quota, and at the end exactly what was settled and not released."""
    import random

    clock, seen = Clock(), []
    pacers = {name: QuotaPacer(1_000, clock=clock, poll_seconds=0.005, fallback_tpm=100,
                               ledger=ledger(Recording(boto3.client("dynamodb", region_name="us-east-1"), seen), clock,
                                             name, floor_tpm=floor, poll_seconds=0.01, max_poll_seconds=0.01))
              for name, floor in (("a", 300), ("b", 600))}
    kept: list[float] = []
    lock = threading.Lock()

    def worker(name: str, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(8):
            try:
                ticket = pacers[name].admit(rng.randint(50, 400), max_wait_seconds=0)
            except AdmissionRejected:
                continue
            ending = rng.choice(("settle", "settle", "release", "throttled"))
            if ending == "settle":
                charge = ticket.settle(input_tokens=rng.randint(0, 40), output_tokens=rng.randint(0, 10))
                with lock:
                    kept.append(charge)
            else:
                getattr(ticket, ending)()

    threads = [threading.Thread(target=worker, args=(name, seed)) for seed in range(4) for name in pacers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert seen and max(seen) <= 1_000
    deferred = sum(p.ledger.deferred_tokens for p in pacers.values() if p.ledger is not None)
    assert consistent(dynamodb).held == sum(math.ceil(k) for k in kept) + deferred  # returns not written yet
    for p in pacers.values():
        assert p.ledger is not None
        p.ledger.flush()
    view = consistent(dynamodb)
    assert view.held == sum(math.ceil(k) for k in kept)
    assert sum(p.stats().admitted for p in pacers.values()) > 8  # the quota was shared, not one process's


def test_a_throttled_call_returns_its_hold_to_the_ledger(dynamodb):
    clock = Clock()
    one = pacer(dynamodb, clock, "a")
    one.admit(400).throttled()
    assert consistent(dynamodb).held == 0


def test_an_unusable_ledger_falls_back_to_the_static_share_never_to_unbounded(dynamodb, capsys):
    clock = Clock()
    shared = ledger(Flaky(dynamodb, [client_error("AccessDeniedException")]), clock)
    one = QuotaPacer(1_000, clock=clock, poll_seconds=0.005, ledger=shared, fallback_tpm=100)
    assert one.admit(80).hold is None  # on the fallback
    with pytest.raises(AdmissionRejected):
        one.admit(80, max_wait_seconds=0)  # 160 > the fallback's 100
    assert one.stats().ledger_fallbacks == 1
    out = capsys.readouterr().out
    assert "falls back to its static share" in out
    emf = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    assert [(e["LedgerFallbacks"], e["LedgerId"]) for e in emf] == [(1, "m")]
    assert emf[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "LedgerFallbacks", "Unit": "Count"}]
    clock.now += 5  # ledger_retry_seconds later the ledger is asked again
    assert one.admit(80, max_wait_seconds=0).hold is not None


def test_from_environment_builds_the_pacer_and_its_ledger(dynamodb):
    env = dict(zip(LEDGER_ENVIRONMENT, (TABLE, "m", "Interactive", "360000", "200000", "300000", "1", "90000000"),
                   strict=True))
    env.update(GENAI_PACER_TPM="50000", GENAI_PACER_BURNDOWN="5")
    shared = SharedLedger.from_environment(env, client=dynamodb)
    built = QuotaPacer.from_environment(env, ledger=shared)
    assert (built.tpm, built.fallback_tpm, built.burndown) == (300_000, 50_000, 5)
    assert (shared.quota_tpm, shared.floor_tpm, shared.burst_tpm, shared.skew_seconds) == (360_000, 200_000, 300_000, 1)
    assert shared.daily_tokens == 90_000_000
    del env[LEDGER_ENVIRONMENT[-1]]  # a function configured before the day was set: the default day
    assert SharedLedger.from_environment(env, client=dynamodb).daily_tokens == 360_000 * 1_440
    assert shared.consumer == "Interactive" and shared.key == {"pk": {"S": "quota#m"}}
    with pytest.raises(ValueError, match="GENAI_PACER_LEDGER_ID"):
        SharedLedger.from_environment({LEDGER_ENVIRONMENT[0]: TABLE})


class Answers:
    """A Converse client that answers every call with 200 output tokens, served at the tiers given in turn."""

    def __init__(self, *served: str) -> None:
        self.served = list(served)
        self.calls = 0

    def converse(self, **request):
        tier = self.served[self.calls]
        self.calls += 1
        return {"output": {"message": {"content": [{"text": "ok"}]}}, "stopReason": "end_turn",
                "usage": {"inputTokens": 10, "outputTokens": 200}, "serviceTier": {"type": tier}}


def test_a_reserved_call_is_held_only_in_the_reservation_and_its_overflow_in_the_shared_ledger(dynamodb):
    """Ledger and reservation together (issues 25 and 37.4): a reserved call the reservation holds
    never touches the shared ledger; one it cannot hold (output budget 250, maxTokens 200) is admitted
    against the on-demand pool, locally and in the ledger; a default call is held in both too."""
    clock = Clock()
    one = pacer(dynamodb, clock, "a", reserved_input_tpm=1_000, reserved_output_tpm=250)
    client = Answers("reserved", "default", "default")  # the overflow: Bedrock's reservation is full too
    reserved = {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "p"}]}],
                "inferenceConfig": {"maxTokens": 200}, "serviceTier": {"type": "reserved"}}

    first = one.converse(client, reserved)
    assert first.served_tier == "reserved"
    assert consistent(dynamodb).held == 0  # the reservation held it: nothing in the shared ledger
    stats = one.stats()
    assert (stats.admitted, stats.in_window, stats.reserved_overflows) == (0, 0, 0)
    assert (stats.reserved_input_held, stats.reserved_output_held) == (10, 200)

    overflow = one.converse(client, reserved)  # 200 + 200 output tokens > 250: overflows to on-demand
    settled = math.ceil(one.settlement(overflow.input_tokens, overflow.output_tokens))
    assert consistent(dynamodb).consumers == {"a": settled}
    one.converse(client, {**reserved, "serviceTier": {"type": "default"}})
    assert consistent(dynamodb).consumers == {"a": 2 * settled}

    stats = one.stats()
    assert stats.admitted == 2 and stats.in_window == 2 and stats.held_tokens == 2 * one.settlement(10, 200)
    assert stats.reserved_overflows == 1
    assert (stats.reserved_input_held, stats.reserved_output_held) == (10, 200)  # still only the first call
    assert dict(stats.tiers) == {"reserved->reserved": 1, "reserved->default": 1, "default->default": 1}
    assert client.calls == 3


def test_a_reserved_call_bedrock_served_at_default_is_charged_to_the_shared_ledger(dynamodb):
    """Issue 37.4: the reservation held it locally, but Bedrock served it at default (another process
    used the reservation): every process must see that charge, so it goes into the shared ledger."""
    clock = Clock()
    one = pacer(dynamodb, clock, "a", reserved_input_tpm=1_000, reserved_output_tpm=1_000)
    other = pacer(own_client(), clock, "b")
    reserved = {"modelId": "m", "messages": [{"role": "user", "content": [{"text": "p"}]}],
                "inferenceConfig": {"maxTokens": 200}, "serviceTier": {"type": "reserved"}}
    result = one.converse(Answers("default"), reserved)
    charged = math.ceil(one.settlement(result.input_tokens, result.output_tokens))
    assert consistent(dynamodb).consumers == {"a": charged}  # before: 0, only process a's window knew
    assert one.stats().held_tokens == charged and one.stats().reserved_input_held == 0
    assert other.ledger is not None and other.ledger.view(refresh=True).held == charged
