"""A share drawn at service_tier="reserved" whose calls the Reserved tier reservation holds completely
(issues 25 and 37): ModelQuota gives it no on-demand TPM, so its environment sets GENAI_PACER_TPM=0.
The pacer built from that environment must start, admit its reserved calls through the reservation,
and never send the overflow unbounded: with the shared ledger unusable it waits for the ledger or is
rejected naming why; without a ledger it is rejected at once. The environment is the one a user's
app synthesizes (ModelQuota + QuotaLedger); DynamoDB is moto's; time is a fake epoch clock."""

from __future__ import annotations

import threading

import pytest
from pacer_runtime.ledger import LedgerHold, SharedLedger
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer
from test_ledger import TABLE, Clock, Flaky, client_error, dynamodb, own_client
from test_ledger_pacer import Answers
from test_quota_pacer import finished, wait_until

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

MODEL = "us.amazon.nova-2-lite-v1:0"
RESERVED = {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "p"}]}],
            "inferenceConfig": {"maxTokens": 200}, "serviceTier": {"type": "reserved"}}


def reserved_only_quota():
    """An app's quota: a reservation of 1,000 input and 1,000 output tokens a minute, and one share
    drawn at the Reserved tier whose one call a minute (10 in, 200 out) it holds completely."""
    from genai_pacer import BedrockModel, ModelQuota
    from helpers import new_stack

    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=BedrockModel.from_id(MODEL), tpm_quota=400_000,
                       reserved_input_tpm=1_000, reserved_output_tpm=1_000)
    profile = quota.profile(input_tokens=10, output_tokens=200, max_tokens=200)
    quota.share("Interactive", profile, calls=1, call_seconds=60, service_tier="reserved")
    return stack, quota


def ledger_environment() -> dict[str, str]:
    """QuotaLedger.environment of the reserved-only share, its table name resolved to moto's table."""
    from genai_pacer import QuotaLedger

    stack, quota = reserved_only_quota()
    env = QuotaLedger(stack, "Ledger", quota=quota).environment("Interactive")
    assert env["GENAI_PACER_TPM"] == "0"  # the defect's input: no on-demand room of its own
    # the minute and the burst cap are tokens resolved at synth (QuotaLedger.shared_tpm)
    return {name: (TABLE if name.endswith("_TABLE") else stack.resolve(value)) for name, value in env.items()}


def process(env: dict[str, str], clock: Clock, consumer: str, client=None) -> QuotaPacer:
    """One Lambda instance's pacer, as QuotaPacer.from_environment() builds it at init (own DynamoDB clients)."""
    env = {**env, "GENAI_PACER_LEDGER_CONSUMER": consumer}
    shared = SharedLedger.from_environment(env, client=client or own_client(), clock=clock, sleep=lambda _: None)
    reserved = SharedLedger.reservation_from_environment(env, client=own_client(), clock=clock, sleep=lambda _: None)
    return QuotaPacer.from_environment(env, ledger=shared, reserved_ledger=reserved, clock=clock, poll_seconds=0.005)


def test_a_share_the_reservation_holds_completely_starts_and_its_reserved_calls_go_through_the_reservation(dynamodb):
    clock = Clock()
    pacer = process(ledger_environment(), clock, "one")  # before: "fallback_tpm=0.0 must be > 0" at init
    assert (pacer.fallback_tpm, pacer.tpm) == (0, 400_000)  # no static share; borrows up to the burst cap
    client = Answers("reserved")
    assert pacer.converse(client, RESERVED).served_tier == "reserved"
    assert client.calls == 1
    stats = pacer.stats()
    assert (stats.admitted, stats.reserved_overflows, stats.reserved_output_held) == (0, 0, 200)
    assert pacer.ledger is not None and pacer.ledger.view(refresh=True).held == 0  # the on-demand ledger untouched
    assert pacer.reserved_ledger is not None and pacer.reserved_ledger.view(refresh=True).output_held == 200


def test_with_the_ledger_down_and_the_reservation_full_the_overflow_is_rejected_not_sent(dynamodb, capsys):
    clock = Clock()
    env = ledger_environment()
    other = process(env, clock, "two")
    assert other.reserved_ledger is not None
    assert isinstance(other.reserved_ledger.try_reserve(10, 1_000), LedgerHold)  # another instance's call in flight
    down = Flaky(own_client(), [client_error("AccessDeniedException")])
    pacer = process(env, clock, "one", client=down)
    client = Answers("default")
    with pytest.raises(AdmissionRejected, match=r"shared ledger cannot be used .*AccessDenied.* fallback_tpm=0") as raised:
        pacer.converse(client, RESERVED, max_wait_seconds=1)  # the ledger is retried only in 5 s
    assert client.calls == 0  # the overflow was never sent
    assert raised.value.late is False
    stats = pacer.stats()
    assert (stats.reserved_overflows, stats.admitted, stats.ledger_fallbacks, stats.rejected_at_once) == (1, 0, 0, 1)
    assert "which is none (fallback_tpm=0)" in capsys.readouterr().out
    assert down.calls == 1


def test_with_the_ledger_down_the_overflow_waits_for_the_ledger_and_borrows_through_it(dynamodb):
    clock = Clock()
    env = ledger_environment()
    other = process(env, clock, "two")
    assert other.reserved_ledger is not None
    assert isinstance(other.reserved_ledger.try_reserve(10, 1_000), LedgerHold)
    down = Flaky(own_client(), [client_error("AccessDeniedException")])
    pacer = process(env, clock, "one", client=down)
    client = Answers("default")
    results: list = []
    caller = threading.Thread(target=lambda: results.append(pacer.converse(client, RESERVED, max_wait_seconds=30)),
                              daemon=True)
    caller.start()
    wait_until(lambda: down.calls == 1 and pacer.stats().waiting == 1 and not pacer._ledger_busy,
               "the overflow to wait for the unusable ledger")
    assert client.calls == 0  # no static share: nothing is sent while the ledger cannot be used
    clock.now += 5  # ledger_retry_seconds: the ledger is asked again, and now it answers
    assert finished(caller)
    assert client.calls == 1 and results[0].served_tier == "default"
    assert pacer.stats().admitted == 1 and pacer.stats().ledger_fallbacks == 0
    assert pacer.ledger is not None  # borrowed through the shared on-demand ledger, which every process reads
    assert other.ledger is not None and other.ledger.view(refresh=True).consumers == {"one": 210}


def test_without_a_ledger_the_share_starts_and_only_its_calls_the_reservation_holds_are_sent():
    _, quota = reserved_only_quota()
    env = quota.pacer_environment("Interactive")
    assert env["GENAI_PACER_TPM"] == "0"
    pacer = QuotaPacer.from_environment(env, clock=Clock())  # before: "tpm=0.0 must be a finite number > 0"
    client = Answers("reserved", "reserved")
    assert pacer.converse(client, RESERVED).served_tier == "reserved"
    for request in ({**RESERVED, "serviceTier": {"type": "default"}},  # another tier: no on-demand room at all
                    {**RESERVED, "inferenceConfig": {"maxTokens": 900}}):  # 200 + 900 > 1,000: overflows
        with pytest.raises(AdmissionRejected, match=r"this share has no on-demand TPM \(tpm=0"):
            pacer.converse(client, request)
    assert client.calls == 1
    stats = pacer.stats()
    assert (stats.rejected_at_once, stats.reserved_overflows, stats.admitted) == (2, 1, 0)


def test_tpm_zero_is_refused_without_a_reservation_naming_it():
    with pytest.raises(ValueError, match=r"tpm=0 must be a finite number > 0 .*0 only with reserved_input_tpm"):
        QuotaPacer(0)
    with pytest.raises(ValueError, match=r"fallback_tpm=-1 must be a number in \[0, inf\]"):
        QuotaPacer(1_000, fallback_tpm=-1)
