"""QuotaPacer on bedrock-mantle's quota model (input_tpm, output_tpm): admission on both windows,
output counted from when it was generated, named refusals, and a paced run against the emulator
enforcing the same model that Bedrock never throttles (model time on a ManualClock, no sleeping)."""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError
from genai_pacer.quota import planning
from genai_pacer.testing import (
    ANSWER_TOKENS_KEY,
    BedrockEmulator,
    ManualClock,
    ModelSpec,
    QuotaModel,
    approx_tokens,
)
from pacer_runtime.quota_pacer import MANTLE_ENVIRONMENT, MANTLE_QUOTAS_DOC, AdmissionRejected, QuotaPacer
from test_quota_pacer import GUARD_SECONDS, FakeClock, finished, wait_until

NOVA = "us.amazon.nova-lite-v1:0"


def mantle(clock: FakeClock, input_tpm: float = 10_000, output_tpm: float = 1_000, **options) -> QuotaPacer:
    return QuotaPacer(input_tpm=input_tpm, output_tpm=output_tpm, clock=clock, poll_seconds=0.005, **options)


def test_the_mantle_constants_match_the_planners():
    assert MANTLE_QUOTAS_DOC == planning.MANTLE_QUOTAS_DOC


def test_input_plus_cache_writes_plus_max_tokens_is_held_on_input_and_max_tokens_on_output():
    clock = FakeClock()
    p = mantle(clock, expiry_margin_seconds=0)
    # cache reads do not count against the input quota (MANTLE_QUOTAS_DOC); cache writes are input
    assert p.reservation(2_000, 400, cache_write_tokens=100, cache_read_tokens=5_000) == 2_500
    ticket = p.admit(2_500, max_tokens=400)
    assert (p.stats().held_tokens, p.stats().output_held) == (2_500, 400)
    clock.advance(30)
    settled = ticket.settle(input_tokens=2_000, output_tokens=300, cache_write_tokens=100, cache_read_tokens=5_000)
    stats = p.stats()
    assert settled == 2_100 and (stats.held_tokens, stats.output_held, stats.settled_output_tokens) == (2_100, 300, 300)
    clock.advance(30)  # t=60: the input charge started at 0 leaves; the output counted at 30 stays
    assert (p.stats().held_tokens, p.stats().output_held) == (0, 300)
    clock.advance(30)  # t=90: a minute after the output was generated
    assert p.stats().output_held == 0


def test_a_call_waits_for_the_output_window_though_the_input_window_has_room():
    clock = FakeClock()
    p = mantle(clock)
    p.admit(200, max_tokens=800).settle(input_tokens=100, output_tokens=800)  # output counted at t=0
    with pytest.raises(AdmissionRejected, match="the output window 800 of 1,000 output tokens per minute") as rejected:
        p.admit(400, max_tokens=300, max_wait_seconds=10)
    assert rejected.value.earliest_start_seconds == pytest.approx(60.5)
    assert p.admit(400, max_tokens=200, max_wait_seconds=0).reserved == 400  # 800 + 200 fits
    admitted: list = []
    waiter = threading.Thread(target=lambda: admitted.append(p.admit(300, max_tokens=300)), daemon=True)
    waiter.start()
    wait_until(lambda: p.stats().waiting == 1, "the call waits for the output window")
    clock.advance(61)
    assert finished(waiter) and admitted[0].reserved == 300


def test_max_tokens_held_on_output_while_in_flight_covers_what_the_call_may_generate():
    clock = FakeClock()
    p = mantle(clock)
    running = p.admit(1_100, max_tokens=1_000)  # nothing generated yet, but it may generate 1,000
    with pytest.raises(AdmissionRejected, match="output window 1,000 of 1,000"):
        p.admit(101, max_tokens=1, max_wait_seconds=0)
    clock.advance(5)
    running.settle(input_tokens=100, output_tokens=50)
    assert p.admit(101, max_tokens=1, max_wait_seconds=0).reserved == 101


def test_a_throttle_or_a_release_returns_both_holds_and_an_unended_ticket_leaves_with_the_window():
    clock = FakeClock()
    p = mantle(clock, expiry_margin_seconds=0)
    p.admit(300, max_tokens=200).throttled()
    p.admit(300, max_tokens=200).release()
    assert (p.stats().held_tokens, p.stats().output_held) == (0, 0)
    p.admit(300, max_tokens=200)  # never ended: Bedrock may have served it
    clock.advance(60)
    assert (p.stats().held_tokens, p.stats().output_held) == (0, 0)


def test_a_throttle_lowers_the_output_limit_with_the_input_limit():
    clock = FakeClock()
    p = mantle(clock)
    p.admit(100, max_tokens=200)
    p.admit(100, max_tokens=100).throttled()
    assert p.limit_tpm == 7_000  # and the output limit is 1,000 x 0.7
    with pytest.raises(AdmissionRejected, match="output window 200 of 700"):
        p.admit(100, max_tokens=600, max_wait_seconds=0)
    assert p.admit(100, max_tokens=500, max_wait_seconds=0).reserved == 100


BOTH = {"input_tpm": 10_000, "output_tpm": 1_000}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"input_tpm": 1_000}, "input_tpm without output_tpm"),
        ({"output_tpm": 1_000}, "output_tpm without input_tpm"),
        ({**BOTH, "tpm": 5_000}, "tpm=5000 with input_tpm/output_tpm"),
        ({**BOTH, "input_tpm": 0}, "input_tpm=0 must be a finite number > 0"),
        ({**BOTH, "rpm": 10}, "rpm=10: bedrock-mantle enforces no requests-per-minute quota"),
        ({**BOTH, "burndown": 5}, "burndown=5: bedrock-mantle's input and output quotas count tokens 1:1"),
        ({**BOTH, "daily_tokens": 1_000}, "daily_tokens=1000: the daily token quota is bedrock-runtime's"),
        ({**BOTH, "reserved_input_tpm": 10, "reserved_output_tpm": 10}, "reserved_input_tpm/reserved_output_tpm"),
        ({**BOTH, "model_max_tokens": 4_096}, "model_max_tokens=4096: only QuotaPacer.converse reads it"),
    ],
)
def test_what_a_mantle_pacer_cannot_take_is_refused_by_name(options, message):
    with pytest.raises(ValueError) as error:
        QuotaPacer(**options)
    assert message in str(error.value)


def test_a_pacer_with_no_quota_at_all_names_tpm():
    with pytest.raises(ValueError, match="tpm=None must be a finite number > 0"):
        QuotaPacer()


def test_calls_are_refused_by_name_when_they_do_not_fit_the_model():
    runtime, p = QuotaPacer(10_000, clock=FakeClock()), mantle(FakeClock())
    with pytest.raises(ValueError, match="max_tokens=None: a bedrock-mantle pacer holds the call's max_tokens"):
        p.admit(100)
    with pytest.raises(ValueError, match="max_tokens=1,001 exceeds the share's output_tpm=1,000"):
        p.admit(1_100, max_tokens=1_001)
    with pytest.raises(ValueError, match="exceeds the share's 10,000 input_tpm"):
        p.admit(10_001, max_tokens=1)
    with pytest.raises(ValueError, match="max_tokens=100 is for a bedrock-mantle pacer"):
        runtime.admit(100, max_tokens=100)
    with pytest.raises(ValueError, match="the bedrock-mantle endpoint does not serve") as refused:
        p.converse(object(), {"messages": [], "inferenceConfig": {"maxTokens": 10}})
    assert "pacer.reserve(input_tokens, max_tokens)" in str(refused.value)
    assert p.stats().admitted == 0


def test_from_environment_reads_a_mantle_share():
    p = QuotaPacer.from_environment(dict(zip(MANTLE_ENVIRONMENT, ("600000", "40000"), strict=True)))
    assert (p.endpoint, p.input_tpm, p.output_tpm, p.tpm) == ("bedrock-mantle", 600_000, 40_000, 600_000)
    with pytest.raises(ValueError, match="input_tpm without output_tpm"):
        QuotaPacer.from_environment({MANTLE_ENVIRONMENT[0]: "600000"})
    with pytest.raises(ValueError, match="GENAI_PACER_OUTPUT_TPM='lots' is not a number"):
        QuotaPacer.from_environment({MANTLE_ENVIRONMENT[0]: "600000", MANTLE_ENVIRONMENT[1]: "lots"})


# --- against the emulator enforcing bedrock-mantle's quotas (real boto3 client) ---------------------

PROMPT = "a question of some length " * 40
SPEC = ModelSpec(NOVA, tpm_quota=6_000, output_tpm_quota=2_000, max_output_tokens=4_000, ttft_seconds=1.0,
                 prefill_tokens_per_second=1e9, output_tokens_per_second=100, jitter=0, answer_tokens=400)
REQUEST = {"modelId": NOVA, "messages": [{"role": "user", "content": [{"text": PROMPT}]}],
           "inferenceConfig": {"maxTokens": 500}, "requestMetadata": {ANSWER_TOKENS_KEY: "400"}}
WORKERS, CALLS = 4, 4  # 16 calls of 400 output tokens: 3.2 minutes of the 2,000 output TPM


def test_unpaced_calls_are_throttled_by_the_emulators_mantle_quota():
    """The control: the same calls without the pacer spend the output quota in five calls."""
    with BedrockEmulator([SPEC], quota=QuotaModel(endpoint="bedrock-mantle"), clock=ManualClock(instant=True)) as bedrock:
        client = bedrock.client(retries={"total_max_attempts": 1})
        outcomes = []
        for _ in range(WORKERS * CALLS):
            try:
                client.converse(**REQUEST)
                outcomes.append("ok")
            except ClientError as error:
                outcomes.append(error.response["Error"]["Message"])
    assert outcomes[:5] == ["ok"] * 5
    assert "Too many output tokens, please wait before trying again." in outcomes[5:]


def test_a_paced_run_is_never_throttled_by_the_emulators_mantle_quota():
    clock = ManualClock()
    p = QuotaPacer(input_tpm=SPEC.tpm_quota, output_tpm=SPEC.output_tpm_quota, clock=clock.now, poll_seconds=0.002,
                   expiry_margin_seconds=0)
    errors: list[BaseException] = []
    ended: list[int] = []  # one entry per worker that finished (list.append is atomic)
    with BedrockEmulator([SPEC], quota=QuotaModel(endpoint="bedrock-mantle"), clock=clock) as bedrock:

        def worker() -> None:
            client = bedrock.client(retries={"total_max_attempts": 1})
            try:
                for _ in range(CALLS):
                    with p.reserve(approx_tokens(PROMPT), 500) as ticket:
                        usage = client.converse(**REQUEST)["usage"]
                        ticket.settle(input_tokens=usage["inputTokens"], output_tokens=usage["outputTokens"])
            except BaseException as error:  # reported by the test below, not lost in the thread
                errors.append(error)
            finally:
                ended.append(1)

        def all_blocked() -> bool:
            # read each time: a worker that finishes while the driver waits must not be waited for
            return clock.sleepers + p.stats().waiting >= WORKERS - len(ended)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
        for thread in threads:
            thread.start()
        for _ in range(5_000):  # model time moves a second at a time, only while every worker is blocked
            if len(ended) == WORKERS:
                break
            wait_until(all_blocked, "every worker waits for the pacer or for its answer")
            clock.advance(1.0)
        assert all(finished(thread) for thread in threads), f"workers still running after {GUARD_SECONDS} s"
        input_used, output_used = bedrock.quota_used(NOVA), bedrock.quota_used(NOVA, "output")
        outcomes = [i.outcome for i in bedrock.invocations]
    assert errors == []
    assert outcomes == ["ok"] * WORKERS * CALLS
    stats = p.stats()
    assert (stats.throttled, stats.settled_calls, stats.settled_output_tokens) == (0, 16, 16 * 400)
    assert clock.now() >= 3 * 60  # the output quota paced it: 6,400 output tokens at 2,000 a minute
    assert (stats.held_tokens, stats.output_held) == (input_used, output_used)
