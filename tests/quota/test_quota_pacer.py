"""QuotaPacer with a fake clock: admission, settlement, adaptation, deadline rejection, thread safety,
and how it composes with Converse, call_with_backoff and run_side_by_side (botocore Stubber)."""

from __future__ import annotations

import json
import math
import random
import socket
import threading
import time
from functools import partial

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore.stub import Stubber
from genai_pacer import planning
from genai_pacer.quota.model_quota import PACER_ENVIRONMENT
from hypothesis import given
from hypothesis import strategies as st
from pacer_runtime.quota_pacer import ENVIRONMENT, AdmissionRejected, QuotaPacer, estimate_input_tokens
from pacer_runtime.side_by_side import Backoff, call_with_backoff, run_side_by_side

MODEL = "us.anthropic.claude-3-5-haiku-20241022-v1:0"


class FakeClock:
    """A clock that moves only when a test says so (thread-safe enough: one writer)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def pacer(clock: FakeClock, tpm: float = 10_000, **options) -> QuotaPacer:
    return QuotaPacer(tpm, clock=clock, poll_seconds=0.005, **options)


GUARD_SECONDS = 30  # how long a test waits for a thread before it fails: a guard against a hang, not a measurement


def finished(thread: threading.Thread) -> bool:
    thread.join(timeout=GUARD_SECONDS)
    return not thread.is_alive()


def wait_until(condition, what: str) -> None:
    """Poll until `condition()` holds; fail (instead of hanging the suite) if it never does."""
    deadline = time.monotonic() + GUARD_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {GUARD_SECONDS} s: the pacer hangs")
        threading.Event().wait(0.001)


# --- the arithmetic ------------------------------------------------------------------------------


@given(
    input_tokens=st.integers(0, 50_000),
    output_tokens=st.integers(0, 4_000),
    extra=st.integers(1, 4_000),
    burndown=st.sampled_from([1, 5, 10, 15]),
    cache_write=st.integers(0, 5_000),
    cache_read=st.integers(0, 5_000),
)
def test_property_the_ledger_charges_what_the_planner_plans(input_tokens, output_tokens, extra, burndown, cache_write,
                                                            cache_read):
    profile = planning.TokenProfile(input_tokens, output_tokens, output_tokens + extra, burndown, cache_write, cache_read)
    notes = QuotaPacer(1e9, burndown=burndown, hold_output_burndown=False)
    safe = QuotaPacer(1e9, burndown=burndown)
    assert notes.reservation(input_tokens, profile.max_tokens, cache_write_tokens=cache_write,
                             cache_read_tokens=cache_read) == profile.reserved
    assert safe.reservation(input_tokens, profile.max_tokens, cache_write_tokens=cache_write,
                            cache_read_tokens=cache_read) == profile.reserved + profile.max_tokens * (burndown - 1)
    assert notes.settlement(input_tokens, output_tokens, cache_write_tokens=cache_write) == profile.settled
    # while a call runs the safe hold is never below what it can settle to
    assert safe.reservation(input_tokens, profile.max_tokens, cache_write_tokens=cache_write) >= profile.settled


def test_the_environment_names_match_the_quota_constructs():
    assert ENVIRONMENT == PACER_ENVIRONMENT


def test_from_environment_reads_the_share():
    built = QuotaPacer.from_environment({"GENAI_PACER_TPM": "50000", "GENAI_PACER_RPM": "12.5",
                                         "GENAI_PACER_BURNDOWN": "5"}, max_wait_seconds=3)
    assert (built.tpm, built.rpm, built.burndown, built.max_wait_seconds) == (50_000, 12.5, 5, 3)
    with pytest.raises(ValueError, match="GENAI_PACER_TPM is not set"):
        QuotaPacer.from_environment({})
    with pytest.raises(ValueError, match="GENAI_PACER_TPM='lots' is not a number"):
        QuotaPacer.from_environment({"GENAI_PACER_TPM": "lots"})


# --- admission and settlement --------------------------------------------------------------------


def test_a_call_is_admitted_only_while_its_reservation_fits_the_window():
    clock = FakeClock()
    ledger = pacer(clock)
    ledger.admit(4_000)
    clock.advance(10)
    ledger.admit(4_000)
    assert ledger.stats().held_tokens == 8_000
    with pytest.raises(AdmissionRejected) as rejected:
        ledger.admit(4_000, max_wait_seconds=0)
    # the first charge leaves the window 60 s (+0.5 s margin) after it started: 60.5 s from t=10
    assert rejected.value.earliest_start_seconds == pytest.approx(50.5)
    assert rejected.value.late is False and rejected.value.reservation == 4_000
    assert "a call reserving 4,000 tokens cannot start within 0.00 s: the window holds 8,000 of 10,000" in str(rejected.value)
    assert "It was not sent: shed it" in str(rejected.value)
    assert ledger.stats().rejected_at_once == 1 and ledger.stats().waiting == 0


def test_settling_below_the_hold_frees_room_at_once():
    clock = FakeClock()
    ledger = pacer(clock)
    first = ledger.admit(4_000)
    ledger.admit(4_000)
    assert first.settle(input_tokens=600, output_tokens=80) == 680
    assert ledger.stats().held_tokens == 4_680
    ledger.admit(4_000, max_wait_seconds=0)  # fits now
    assert ledger.stats().settled_tokens == 680


def test_settling_above_the_hold_charges_the_difference_like_bedrock():
    """With the notes' reading (max_tokens held without burndown) a 5x model settles above its hold."""
    clock = FakeClock()
    ledger = pacer(clock, burndown=5, hold_output_burndown=False)
    ticket = ledger.admit(ledger.reservation(1_000, 400))
    assert ticket.reserved == 1_400
    assert ticket.settle(input_tokens=1_000, output_tokens=300) == 2_500
    assert ledger.stats().held_tokens == 2_500


def test_charges_leave_the_window_a_minute_after_they_started_and_late_settlements_do_not_count():
    clock = FakeClock()
    ledger = pacer(clock, expiry_margin_seconds=0)
    ticket = ledger.admit(9_000)
    clock.advance(59.9)
    assert ledger.stats().held_tokens == 9_000
    clock.advance(0.1)
    assert ledger.stats().held_tokens == 0 and ledger.stats().in_window == 0
    ticket.settle(input_tokens=5_000, output_tokens=5_000)  # a call longer than the window
    assert ledger.stats().held_tokens == 0
    ledger.admit(9_000, max_wait_seconds=0)


def test_rpm_counts_calls_in_the_window():
    clock = FakeClock()
    ledger = pacer(clock, rpm=2)
    ledger.admit(10)
    ledger.admit(10)
    with pytest.raises(AdmissionRejected) as rejected:
        ledger.admit(10, max_wait_seconds=5)
    assert rejected.value.earliest_start_seconds == pytest.approx(60.5)


def test_a_reservation_larger_than_the_share_is_refused_before_it_waits():
    ledger = pacer(FakeClock())
    with pytest.raises(ValueError, match=r"a reservation of 10,001 tokens exceeds the share's 10,000 TPM"):
        ledger.admit(10_001)
    for bad in (0, -1, 2.5, True, "100", None):
        with pytest.raises(ValueError, match="must be a positive whole number of tokens"):
            ledger.admit(bad)  # type: ignore[arg-type]


def test_the_planner_and_the_pacer_refuse_a_quota_below_one_reservation_alike():
    """Issue 35.7: one rule at synth and at run time. For a call that holds its reservation a whole
    minute (60 s), one call at a time needs exactly its reservation; below it the planner plans
    nothing and the pacer admits nothing, each naming the quota and the reservation."""
    profile = planning.TokenProfile(input_tokens=2_000, output_tokens=300, max_tokens=900)
    for tpm in (profile.reserved - 1, profile.reserved):
        ledger = QuotaPacer(tpm, hold_output_burndown=False, clock=FakeClock())
        reservation = ledger.reservation(profile.input_tokens, profile.max_tokens)
        assert reservation == profile.reserved == 2_900
        if tpm < reservation:
            with pytest.raises(ValueError, match=r"a reservation of 2,900 tokens exceeds the share's 2,899 TPM"):
                ledger.admit(reservation)
            with pytest.raises(ValueError, match=r"tpm_quota \(2,899 TPM\) cannot sustain one call at a time: each "
                               r"call reserves 2,900 tokens; Bedrock would throttle every call"):
                planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=60)
        else:
            ledger.admit(reservation).settle(input_tokens=profile.input_tokens, output_tokens=profile.output_tokens)
            assert planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=60).max_concurrency == 1


def test_an_empty_window_admits_a_reservation_above_a_lowered_limit():
    clock = FakeClock()
    ledger = pacer(clock)
    ledger.admit(100).throttled()  # limit 7,000
    assert ledger.stats().limit_tpm == 7_000
    ledger.admit(9_000, max_wait_seconds=0)  # the window is empty: it would wait forever otherwise (AdmissionRejected)
    assert ledger.stats().held_tokens == 9_000


def test_calls_are_admitted_in_arrival_order():
    clock = FakeClock()
    ledger = pacer(clock)
    ledger.admit(6_000)
    order: list[str] = []
    big = threading.Thread(daemon=True, target=lambda: (ledger.admit(9_000), order.append("big")))
    big.start()
    wait_until(lambda: ledger.stats().waiting >= 1, "the big call to wait")
    small = threading.Thread(daemon=True, target=lambda: (ledger.admit(1_000), order.append("small")))
    small.start()
    wait_until(lambda: ledger.stats().waiting >= 2, "the small call to queue behind it")
    assert order == []  # the small one would fit (7,000) but waits behind the big one
    clock.advance(61)
    assert finished(big) and finished(small)
    assert order == ["big", "small"]


# --- adaptation ----------------------------------------------------------------------------------


def test_a_throttle_lowers_the_limit_once_per_round_and_settlement_restores_it():
    clock = FakeClock()
    ledger = pacer(clock, tpm=100_000)
    early = [ledger.admit(1_000) for _ in range(3)]
    early[0].throttled()
    assert ledger.limit_tpm == 70_000
    assert ledger.stats().held_tokens == 2_000  # a throttled call is not charged
    early[1].throttled()  # admitted under the old limit: the same news, no second decrease
    assert ledger.limit_tpm == 70_000
    later = ledger.admit(1_000)
    later.throttled()
    assert ledger.limit_tpm == 49_000
    stats = ledger.stats()
    assert (stats.throttled, stats.decreases) == (3, 2)
    early[2].settle(input_tokens=10_000, output_tokens=0)  # +0.1 x 10,000
    assert ledger.limit_tpm == 50_000
    for _ in range(100):
        ledger.admit(10).settle(input_tokens=10_000, output_tokens=0)
        clock.advance(61)
    assert ledger.limit_tpm == 100_000  # never above the share


def test_the_last_call_admitted_before_a_decrease_brings_the_same_news_and_the_first_after_new_news():
    """At the boundary of a round: the call admitted just before the decrease saw the old limit (its
    throttle lowers nothing more); the first one admitted after it saw the new limit (it does)."""
    ledger = pacer(FakeClock(), tpm=100_000)
    first, last_before = ledger.admit(1_000), ledger.admit(1_000)
    first.throttled()
    assert ledger.limit_tpm == 70_000
    last_before.throttled()
    assert (ledger.limit_tpm, ledger.stats().decreases) == (70_000, 1)
    ledger.admit(1_000).throttled()  # the first call admitted under 70,000
    assert (ledger.limit_tpm, ledger.stats().decreases) == (49_000, 2)


def test_the_limit_never_falls_below_min_fraction():
    ledger = pacer(FakeClock(), tpm=100_000, min_fraction=0.2)
    for _ in range(10):
        ledger.admit(10).throttled()
    assert ledger.limit_tpm == 20_000


def test_a_ticket_ends_once():
    ledger = pacer(FakeClock())
    ticket = ledger.admit(100)
    ticket.settle(input_tokens=10, output_tokens=10)
    for end in (partial(ticket.settle, input_tokens=1, output_tokens=1), partial(ticket.settle, input_tokens=None,
                output_tokens=1), ticket.throttled, ticket.release):
        with pytest.raises(RuntimeError, match="already settled, throttled or released"):
            end()


# --- what a caller gives it ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q: q.reserve(-500, 1_000), "input_tokens=-500"),  # used to admit a hold of 500
        (lambda q: q.reserve("5", 100), "input_tokens='5'"),
        (lambda q: q.reserve(10, 0), "max_tokens=0"),
        (lambda q: q.reserve(10, True), "max_tokens=True"),
        (lambda q: q.reserve(10, 2.5), "max_tokens=2.5"),
        (lambda q: q.reserve(10, 100, cache_read_tokens=-1), "cache_read_tokens=-1"),
        (lambda q: q.reserve(10, 100, cache_write_tokens=None), "cache_write_tokens=None"),
        (lambda q: q.reserve(10, 100, max_wait_seconds=math.nan), "max_wait_seconds=nan"),
        (lambda q: q.admit(100, max_wait_seconds=math.nan), "max_wait_seconds=nan"),  # used to mean no deadline
        (lambda q: q.admit(100, max_wait_seconds=-1), "max_wait_seconds=-1"),
        (lambda q: q.admit(100, max_wait_seconds="5"), "max_wait_seconds='5'"),
        (lambda q: q.admit(100, start_by=math.nan), "start_by=nan"),
        (lambda q: q.admit(100, start_by=math.inf), "start_by=inf"),
        (lambda q: q.converse(object(), {**REQUEST, "inferenceConfig": {"maxTokens": True}}),
         "inferenceConfig.maxTokens=True"),  # used to reserve one token
        (lambda q: q.converse(object(), {**REQUEST, "inferenceConfig": {"maxTokens": 0}}), "inferenceConfig.maxTokens=0"),
        (lambda q: q.converse(object(), {**REQUEST, "inferenceConfig": {"maxTokens": "200"}}),
         "inferenceConfig.maxTokens='200'"),
    ],
)
def test_bad_call_arguments_are_refused_by_name_and_hold_nothing(call, message):
    ledger = pacer(FakeClock(), tpm=100_000, max_wait_seconds=5)
    with pytest.raises(ValueError) as error, call(ledger):
        pytest.fail("the call was admitted")
    assert message in str(error.value)
    stats = ledger.stats()
    assert (stats.admitted, stats.held_tokens, stats.waiting) == (0, 0, 0)


def test_a_clock_that_steps_back_is_taken_as_no_time_passing():
    """The window keeps each charge's age: a step back of 15 minutes no longer blocks the share for
    15 minutes plus the window."""
    clock = FakeClock()
    clock.now = 1_000.0
    ledger = pacer(clock)
    ledger.admit(9_000)
    clock.now = 100.0  # stepped back 900 s
    ledger.stats()  # the pacer reads the clock (a waiting call polls it every poll_seconds)
    clock.advance(30)
    with pytest.raises(AdmissionRejected) as rejected:
        ledger.admit(9_000, max_wait_seconds=0)
    assert rejected.value.earliest_start_seconds == pytest.approx(30.5)  # 60.5 s after the charge started
    clock.advance(31)
    ledger.admit(9_000, max_wait_seconds=0)
    assert ledger.stats().clock_steps_back == 1


@pytest.mark.parametrize("reading", [math.nan, math.inf, None, "12"])
def test_a_clock_that_is_not_a_number_fails_the_call_instead_of_holding_forever(reading):
    clock = FakeClock()
    ledger = pacer(clock)
    ledger.admit(9_000)
    clock.now = reading  # type: ignore[assignment]
    errors: list[BaseException] = []

    def call() -> None:
        try:
            ledger.admit(9_000, max_wait_seconds=1)
        except BaseException as error:  # the outcome under test, whatever it is
            errors.append(error)

    caller = threading.Thread(daemon=True, target=call)
    caller.start()
    assert finished(caller), "a clock that is not a number made admit wait forever"
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert f"clock() returned {reading!r}, not a finite number of seconds" in str(errors[0])


@pytest.mark.parametrize(
    "usage",
    [{"input_tokens": None, "output_tokens": 80}, {"input_tokens": 300, "output_tokens": -5},
     {"input_tokens": 300, "output_tokens": 1.5}, {"input_tokens": 300, "output_tokens": 80, "cache_read_tokens": "x"}],
)
def test_usage_that_cannot_be_accounted_keeps_the_hold_and_is_counted(usage, capsys):
    ledger = pacer(FakeClock())
    ticket = ledger.admit(900)
    assert ticket.settle(**usage) == 900  # the hold stays as the charge; nothing is raised
    stats = ledger.stats()
    assert (stats.unaccounted, stats.settled_calls, stats.held_tokens) == (1, 0, 900)
    line = json.loads(capsys.readouterr().out)
    assert line["level"] == "WARNING" and line["held_tokens"] == 900
    assert set(line["usage_problem"]) == {name for name, value in usage.items()
                                          if not isinstance(value, int) or value < 0}


def test_release_frees_the_hold_without_adapting():
    ledger = pacer(FakeClock())
    ledger.admit(5_000).release()
    assert ledger.stats().held_tokens == 0 and ledger.limit_tpm == 10_000


# --- deadlines -----------------------------------------------------------------------------------


def test_a_waiting_call_starts_when_room_frees_before_its_deadline():
    clock = FakeClock()
    ledger = pacer(clock)
    ledger.admit(8_000)
    clock.advance(30)
    admitted: list[object] = []
    waiter = threading.Thread(daemon=True, target=lambda: admitted.append(ledger.admit(5_000, max_wait_seconds=31)))
    waiter.start()
    wait_until(lambda: ledger.stats().waiting >= 1, "the call to wait")
    clock.advance(31)  # t=61: the first charge left at 60.5
    assert finished(waiter)
    assert len(admitted) == 1 and ledger.stats().rejected_at_once == 0


def test_a_call_whose_prediction_turns_out_wrong_is_rejected_late_never_started_late():
    clock = FakeClock()
    ledger = pacer(clock, burndown=5, hold_output_burndown=False)
    ledger.admit(4_000)
    clock.advance(30)
    second = ledger.admit(4_000)
    clock.advance(1)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            ledger.admit(4_000, max_wait_seconds=30)  # predicted start 60.5 <= deadline 61
        except AdmissionRejected as error:
            errors.append(error)

    waiter = threading.Thread(daemon=True, target=wait)
    waiter.start()
    wait_until(lambda: ledger.stats().waiting >= 1, "the call to wait")
    second.settle(input_tokens=1_000, output_tokens=1_600)  # settles at 9,000: now 90.5 at the earliest
    assert finished(waiter)
    assert len(errors) == 1 and errors[0].late is True
    assert "waited and its deadline passed" in str(errors[0])
    assert ledger.stats().rejected_late == 1


def test_start_by_is_an_absolute_deadline_and_excludes_max_wait():
    clock = FakeClock()
    ledger = pacer(clock)
    ledger.admit(9_000)
    clock.advance(5)
    with pytest.raises(AdmissionRejected):
        ledger.admit(2_000, start_by=60)  # room at 60.5
    with pytest.raises(ValueError, match="pass max_wait_seconds or start_by, not both"):
        ledger.admit(2_000, start_by=100, max_wait_seconds=1)


def test_the_pacers_default_deadline_applies_to_every_call():
    clock = FakeClock()
    ledger = pacer(clock, max_wait_seconds=10)
    ledger.admit(9_000)
    with pytest.raises(AdmissionRejected, match="cannot start within 10.00 s"):
        ledger.admit(2_000)


# --- thread safety -------------------------------------------------------------------------------


class CheckedPacer(QuotaPacer):
    """Records every admission that would break the ledger's rule, checked under the pacer's lock."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.violations: list[str] = []

    def _admit(self, waiter, now):
        if self._charges and self._held + waiter.tokens > self._limit + 1e-6:
            self.violations.append(f"held {self._held} + {waiter.tokens} > limit {self._limit}")
        if abs(self._held - sum(c.tokens for c in self._charges)) > 1e-3:
            self.violations.append(f"held {self._held} != charges {sum(c.tokens for c in self._charges)}")
        return super()._admit(waiter, now)


def test_64_threads_share_one_pacer_without_breaking_the_ledger():
    clock = FakeClock()
    ledger = CheckedPacer(100_000, burndown=5, clock=clock, poll_seconds=0.01)
    threads, per_thread = 64, 15
    outcomes: list[str] = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(per_thread):
            ticket = ledger.admit(ledger.reservation(rng.randint(200, 2_000), 400))
            kind = rng.choice(["settle", "settle", "settle", "throttled", "release"])
            if kind == "settle":
                ticket.settle(input_tokens=rng.randint(200, 2_000), output_tokens=rng.randint(0, 400))
            else:
                getattr(ticket, kind)()
            with lock:
                outcomes.append(kind)

    workers = [threading.Thread(daemon=True, target=work, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + GUARD_SECONDS
    while any(worker.is_alive() for worker in workers) and time.monotonic() < deadline:
        clock.advance(10)
        threading.Event().wait(0.005)
    assert all(finished(worker) for worker in workers)
    stats = ledger.stats()
    assert ledger.violations == []
    assert len(outcomes) == stats.admitted == threads * per_thread
    assert stats.settled_calls == outcomes.count("settle") and stats.throttled == outcomes.count("throttled")
    assert stats.waiting == 0
    assert stats.held_tokens == pytest.approx(sum(c.tokens for c in ledger._charges))


# --- Converse, call_with_backoff, run_side_by_side -----------------------------------------------


def stubbed_client():
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                          config=Config(retries={"total_max_attempts": 1}))
    return client, Stubber(client)


def answer(input_tokens: int = 300, output_tokens: int = 120) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": "an answer"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": input_tokens, "outputTokens": output_tokens, "totalTokens": input_tokens + output_tokens},
        "metrics": {"latencyMs": 100},
    }


REQUEST = {"modelId": MODEL, "system": [{"text": "x" * 400}],
           "messages": [{"role": "user", "content": [{"text": "y" * 800}, {"cachePoint": {"type": "default"}}]}],
           "inferenceConfig": {"maxTokens": 200}}


def test_estimate_counts_the_text_of_system_and_messages():
    assert estimate_input_tokens(REQUEST) == 300  # 1,200 characters / 4; the cache point adds none
    assert estimate_input_tokens(REQUEST, chars_per_token=3) == 400


def test_converse_holds_the_reservation_and_settles_with_the_reported_usage():
    clock = FakeClock()
    ledger = pacer(clock, tpm=100_000, burndown=5)
    client, stub = stubbed_client()
    stub.add_response("converse", answer(input_tokens=600, output_tokens=100))
    with stub:
        result = ledger.converse(client, REQUEST)
    assert result.output_tokens == 100
    stats = ledger.stats()
    assert stats.settled_tokens == 600 + 100 * 5 and stats.held_tokens == 1_100
    # the prompt was twice the characters' estimate: the next estimate learns a fifth of the way
    assert ledger.estimate_input_tokens(REQUEST) == math.ceil(300 * (1 + 0.2 * (2 - 1)))


def test_a_throttled_converse_is_not_charged_and_lowers_the_limit():
    ledger = pacer(FakeClock(), tpm=100_000)
    client, stub = stubbed_client()
    stub.add_client_error("converse", "ThrottlingException", "Too many tokens", http_status_code=429)
    with stub, pytest.raises(ClientError):
        ledger.converse(client, REQUEST)
    stats = ledger.stats()
    assert (stats.throttled, stats.held_tokens, stats.limit_tpm) == (1, 0, 70_000)


def test_another_error_keeps_the_hold_because_bedrock_may_have_charged():
    ledger = pacer(FakeClock(), tpm=100_000)
    client, stub = stubbed_client()
    stub.add_client_error("converse", "ModelTimeoutException", "timed out", http_status_code=408)
    with stub, pytest.raises(ClientError):
        ledger.converse(client, REQUEST)
    assert ledger.stats().held_tokens == 300 + 200


def test_converse_needs_max_tokens_or_the_models_maximum():
    ledger = pacer(FakeClock(), tpm=100_000)
    request = {k: v for k, v in REQUEST.items() if k != "inferenceConfig"}
    with pytest.raises(ValueError, match="sets no inferenceConfig.maxTokens"):
        ledger.converse(object(), request)
    bigger = pacer(FakeClock(), tpm=100_000, model_max_tokens=8_192)
    client, stub = stubbed_client()
    stub.add_response("converse", answer())
    with stub:
        bigger.converse(client, request)
    assert bigger.stats().admitted == 1


def test_call_with_backoff_admits_each_attempt_again():
    ledger = pacer(FakeClock(), tpm=100_000)
    client, stub = stubbed_client()
    stub.add_client_error("converse", "ThrottlingException", "Too many tokens", http_status_code=429)
    stub.add_response("converse", answer())
    with stub:
        outcome = call_with_backoff(lambda: ledger.converse(client, REQUEST), sleep=lambda _: None)
    assert outcome.ok and (outcome.attempts, outcome.throttles) == (2, 1)
    assert (ledger.stats().admitted, ledger.stats().throttled, ledger.stats().settled_calls) == (2, 1, 1)


def test_a_rejected_call_is_shed_not_retried():
    clock = FakeClock()
    ledger = pacer(clock, tpm=1_000, max_wait_seconds=1)
    ledger.admit(900)
    outcome = call_with_backoff(lambda: ledger.converse(object(), REQUEST), backoff=Backoff(max_attempts=5))
    assert isinstance(outcome.error, AdmissionRejected) and outcome.attempts == 1


def test_run_side_by_side_through_one_pacer():
    ledger = pacer(FakeClock(), tpm=100_000)
    client, stub = stubbed_client()
    for _ in range(6):
        stub.add_response("converse", answer())
    with stub:
        outcomes = run_side_by_side([partial(ledger.converse, client, REQUEST) for _ in range(6)], max_in_flight=3)
    assert all(o.ok for o in outcomes)
    assert ledger.stats().settled_calls == 6 and ledger.stats().held_tokens == 6 * (300 + 120)


# --- bad configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tpm": 0}, "tpm=0 must be a finite number > 0"),
        ({"tpm": math.nan}, "tpm=nan must be a finite number > 0"),
        ({"tpm": math.inf}, "tpm=inf must be a finite number > 0"),
        ({"tpm": True}, "tpm=True must be a finite number > 0"),
        ({"tpm": "1000"}, "tpm='1000' must be a finite number > 0"),
        ({"rpm": 0}, "rpm=0 must be a finite number > 0"),
        ({"burndown": 0.5}, "burndown=0.5 must be a number in [1, 100]"),
        ({"max_wait_seconds": -1}, "max_wait_seconds=-1 must be a number in [0, inf]"),
        ({"max_wait_seconds": math.nan}, "max_wait_seconds=nan must be a number"),
        ({"decrease": 1}, "decrease=1 must be a number in (0, 1)"),
        ({"decrease": 0}, "decrease=0 must be a number in (0, 1)"),
        ({"recovery": -0.1}, "recovery=-0.1 must be a number in [0, 10]"),
        ({"min_fraction": 0}, "min_fraction=0 must be a number in [0.01, 1]"),
        ({"window_seconds": 0}, "window_seconds=0 must be a finite number > 0"),
        ({"expiry_margin_seconds": -1}, "expiry_margin_seconds=-1 must be a number in [0, inf]"),
        ({"chars_per_token": 0}, "chars_per_token=0 must be a finite number > 0"),
        ({"poll_seconds": 0}, "poll_seconds=0 must be a finite number > 0"),
        ({"model_max_tokens": 0}, "model_max_tokens=0 must be a positive integer"),
        ({"model_max_tokens": 10.5}, "model_max_tokens=10.5 must be a positive integer"),
        ({"hold_output_burndown": "yes"}, "hold_output_burndown='yes' must be True or False"),
        ({"clock": 5}, "clock=5 must be a function"),
    ],
)
def test_bad_configuration_is_refused_with_the_rule(options, message):
    options = {"tpm": 10_000, **options}
    with pytest.raises(ValueError) as error:
        QuotaPacer(**options)
    assert message in str(error.value)


def test_several_bad_settings_are_reported_together():
    with pytest.raises(ValueError) as error:
        QuotaPacer(0, burndown=0, decrease=2)
    assert str(error.value).count(" must be ") == 3


# --- against the emulator's ledger (real boto3 client) ----------------------------------------------


def test_the_pacers_ledger_holds_what_the_emulators_holds_after_real_calls():
    """Settlement uses the usage Bedrock reports, so once calls return (and nothing has left the
    window) the pacer holds exactly what the service's ledger holds, throttled calls excluded."""
    from genai_pacer.testing.emulator import BedrockEmulator, ModelSpec

    spec = ModelSpec(MODEL, tpm_quota=5_000, burndown=5, ttft_seconds=0.01, output_tokens_per_second=5_000,
                     jitter=0, answer_tokens=40)
    ledger = QuotaPacer(50_000, burndown=5)  # a share larger than the quota: the emulator throttles some calls
    request = {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "z" * 2_000}]}],
               "inferenceConfig": {"maxTokens": 100}}
    with BedrockEmulator([spec]) as bedrock:
        client = bedrock.client(retries={"total_max_attempts": 1})
        outcomes = [call_with_backoff(partial(ledger.converse, client, request), backoff=Backoff(max_attempts=1))
                    for _ in range(10)]
        held = bedrock.quota_used(MODEL)
    answered, throttled = sum(o.ok for o in outcomes), sum(o.throttles for o in outcomes)
    # each call reserves 500 + 100 and settles 500 + 40 x 5 = 700: the eighth finds 4,900 + 600 > 5,000
    assert (answered, throttled) == (7, 3)
    assert ledger.stats().throttled == throttled
    assert ledger.stats().held_tokens == held == answered * 700


# --- faults: a call Bedrock never saw, a call it may have seen, an answer without usage --------------


class FaultyEndpoint:
    """A loopback HTTP endpoint that reads each request whole, then (by `behaviour`) closes the
    connection without a word ("drop"), never answers ("hang"), or answers 200 with `body`."""

    def __init__(self, behaviour: str, body: dict | None = None) -> None:
        self.behaviour, self.body, self.requests = behaviour, body, 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._connections: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(daemon=True, target=self._serve)

    def __enter__(self) -> FaultyEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._thread.join(timeout=GUARD_SECONDS)
        for connection in [*self._connections, self._listener]:
            connection.close()

    def client(self, **config):
        return boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                            endpoint_url=f"http://127.0.0.1:{self._listener.getsockname()[1]}",
                            config=Config(retries={"total_max_attempts": 1}, **config))

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            self._connections.append(connection)
            data = b""
            while b"\r\n\r\n" not in data:
                data += connection.recv(65_536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += connection.recv(65_536)
            self.requests += 1
            if self.behaviour == "drop":
                connection.close()
            elif self.behaviour == "answer":
                payload = json.dumps(self.body).encode()
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return listener.getsockname()[1]


def emulated_haiku():
    from genai_pacer.testing.emulator import BedrockEmulator, ModelSpec

    return BedrockEmulator([ModelSpec(MODEL, tpm_quota=1_000_000, ttft_seconds=0.001, output_tokens_per_second=100_000,
                                      jitter=0, answer_tokens=20)])


BIG = {**REQUEST, "inferenceConfig": {"maxTokens": 600}}  # holds 300 + 600: a 1,000 TPM share has room for one


def refused_client(bedrock):
    return boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                        endpoint_url=f"http://127.0.0.1:{closed_port()}", config=Config(retries={"total_max_attempts": 1}))


def connect_timeout_client(bedrock):
    """The emulator's client, whose connection times out before the request is sent (botocore's own
    error, raised where its HTTP session raises it)."""
    client = bedrock.client(retries={"total_max_attempts": 1})

    def time_out(request, **_):
        raise ConnectTimeoutError(endpoint_url=request.url)

    client.meta.events.register("before-send.bedrock-runtime.Converse", time_out)
    return client


@pytest.mark.parametrize(("make_client", "error_type"), [(refused_client, EndpointConnectionError),
                                                          (connect_timeout_client, ConnectTimeoutError)])
def test_a_call_that_never_reached_bedrock_frees_its_hold_at_once(make_client, error_type):
    ledger = pacer(FakeClock(), tpm=1_000, max_wait_seconds=0)
    with emulated_haiku() as bedrock:
        with pytest.raises(error_type):
            ledger.converse(make_client(bedrock), BIG)
        assert bedrock.invocations == [] and ledger.stats().held_tokens == 0
        # the next call starts at once instead of being rejected for the next 60 s
        result = ledger.converse(bedrock.client(retries={"total_max_attempts": 1}), BIG)
        assert result.text and len(bedrock.invocations) == 1
    stats = ledger.stats()
    assert (stats.released, stats.settled_calls, stats.rejected_at_once) == (1, 1, 0)


@pytest.mark.parametrize(("behaviour", "config", "error_type"), [("drop", {}, ConnectionClosedError),
                                                                  ("hang", {"read_timeout": 0.2}, ReadTimeoutError)])
def test_a_call_bedrock_may_have_seen_keeps_its_hold(behaviour, config, error_type):
    """The request was sent: Bedrock may have reserved (and charged) it, so the share keeps the hold."""
    ledger = pacer(FakeClock(), tpm=1_000, max_wait_seconds=0)
    with FaultyEndpoint(behaviour) as endpoint:
        with pytest.raises(error_type):
            ledger.converse(endpoint.client(**config), BIG)
        assert endpoint.requests == 1
    assert ledger.stats().held_tokens == 900 and ledger.stats().released == 0
    with pytest.raises(AdmissionRejected) as rejected:
        ledger.converse(object(), BIG)
    assert rejected.value.earliest_start_seconds == pytest.approx(60.5)


ANSWER = {"output": {"message": {"role": "assistant", "content": [{"text": "an answer"}]}}, "stopReason": "end_turn",
          "metrics": {"latencyMs": 5}}


@pytest.mark.parametrize("usage", [{"inputTokens": 300, "outputTokens": -5, "totalTokens": 295}, None],
                         ids=["negative", "missing"])
def test_an_answer_whose_usage_cannot_be_accounted_is_returned_and_keeps_its_hold(usage, capsys):
    ledger = pacer(FakeClock(), tpm=1_000)
    body = ANSWER if usage is None else {**ANSWER, "usage": usage}
    with FaultyEndpoint("answer", body) as endpoint:
        result = ledger.converse(endpoint.client(), BIG)
    assert result.text == "an answer"
    stats = ledger.stats()
    assert (stats.unaccounted, stats.settled_calls, stats.held_tokens) == (1, 0, 900)
    assert "usage not accounted" in capsys.readouterr().out
