"""Both of Bedrock's quota models in the emulator, on a ManualClock: bedrock-runtime's daily token
quota (TPM x 1,440 by default) and bedrock-mantle's separate input and output tokens per minute."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from genai_pacer import InvalidPropsError
from genai_pacer.testing import BedrockEmulator, ManualClock, ModelSpec, QuotaModel, approx_tokens
from test_emulator import NOVA, drive, error_of, in_thread, tiered, until

HI = approx_tokens("hi")  # the prompt `tiered` sends
MANTLE = QuotaModel(endpoint="bedrock-mantle")


def throttled(client, **call) -> tuple[str, int, str]:
    with pytest.raises(ClientError) as excinfo:
        tiered(client, "Converse", None, **call)
    return (*error_of(excinfo), excinfo.value.response["Error"]["Message"])


# ---- bedrock-runtime: the daily token quota ------------------------------------------------------


def test_the_daily_token_quota_defaults_to_tpm_x_1440():
    assert ModelSpec(NOVA, tpm_quota=1_000).daily_quota == 1_000 * 24 * 60
    assert ModelSpec(NOVA, tpm_quota=1_000, daily_token_quota=5_000).daily_quota == 5_000


def test_a_call_past_the_days_tokens_is_throttled_until_the_next_day_even_with_the_minute_free():
    clock = ManualClock(instant=True)
    spec = ModelSpec(NOVA, tpm_quota=100_000, daily_token_quota=2_500, jitter=0, max_output_tokens=4_000)
    with BedrockEmulator([spec], clock=clock) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        for _ in range(2):  # each reserves and settles 1 + 1,000: the TPM quota is never near
            tiered(client, "Converse", None, max_tokens=1_000, answer=1_000)
            clock.advance(60)
        assert emulator.quota_used(NOVA, "daily") == 2 * (HI + 1_000)
        assert emulator.quota_used(NOVA) == 0  # the minute is free
        assert throttled(client, max_tokens=1_000, answer=1_000) == (
            "ThrottlingException", 429, "Too many tokens per day, please wait before trying again.")
        assert emulator.quota_used(NOVA) == 0  # the refused call released its minute's reservation
        clock.advance(24 * 60 * 60 - clock.now())  # the emulator's next day of model time
        tiered(client, "Converse", None, max_tokens=1_000, answer=1_000)
        assert emulator.quota_used(NOVA, "daily") == HI + 1_000


def test_the_day_counts_settled_tokens_with_burndown():
    spec = ModelSpec(NOVA, burndown=5, jitter=0)
    with BedrockEmulator([spec], clock=ManualClock(instant=True)) as emulator:
        tiered(emulator.client(), "Converse", None, max_tokens=100, answer=20)
        assert emulator.quota_used(NOVA, "daily") == HI + 20 * 5


# ---- bedrock-mantle: input and output tokens per minute --------------------------------------------


def test_mantle_admission_checks_input_plus_max_tokens_against_the_input_quota():
    spec = ModelSpec(NOVA, tpm_quota=1_500, output_tpm_quota=100_000, jitter=0, max_output_tokens=4_000)
    clock = ManualClock()
    with BedrockEmulator([spec], quota=MANTLE, clock=clock) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        first = in_thread(lambda: tiered(emulator.client(), "Converse", None, max_tokens=1_000, answer=20))
        until(lambda: clock.sleepers == 1, "the first call is being served")
        assert emulator.quota_used(NOVA) == HI + 1_000  # held until it completes
        assert throttled(client, max_tokens=1_000) == (
            "ThrottlingException", 429, "Too many input tokens, please wait before trying again.")
        drive(clock, emulator)
        first.join()
        assert emulator.quota_used(NOVA) == HI  # settled to the input: max_tokens is returned
        assert emulator.quota_used(NOVA, "output") == 20
        again = in_thread(lambda: tiered(client, "Converse", None, max_tokens=1_000, answer=20))  # now it fits
        until(lambda: clock.sleepers == 1, "the same call is admitted")
        drive(clock, emulator)
        again.join()
    assert [i.outcome for i in emulator.invocations] == ["ok", "throttled", "ok"]


def test_mantle_throttles_new_calls_once_the_output_quota_is_spent_and_admits_them_a_minute_later():
    spec = ModelSpec(NOVA, tpm_quota=100_000, output_tpm_quota=1_000, jitter=0, max_output_tokens=4_000)
    clock = ManualClock(instant=True)
    with BedrockEmulator([spec], quota=MANTLE, clock=clock) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        tiered(client, "Converse", None, max_tokens=2_000, answer=1_000)
        assert emulator.quota_used(NOVA, "output") == 1_000
        assert emulator.quota_used(NOVA) == HI  # the input quota has room
        assert throttled(client) == ("ThrottlingException", 429, "Too many output tokens, please wait before trying again.")
        clock.advance(60)
        tiered(client, "Converse", None)


def test_mantle_counts_output_as_it_is_streamed():
    spec = ModelSpec(NOVA, tpm_quota=100_000, output_tpm_quota=100_000, jitter=0, ttft_seconds=0.5,
                     output_tokens_per_second=10)
    clock = ManualClock()
    with BedrockEmulator([spec], quota=MANTLE, clock=clock) as emulator:
        stream = in_thread(lambda: tiered(emulator.client(), "ConverseStream", None, max_tokens=200, answer=100))
        until(lambda: clock.sleepers == 1, "the call waits for its first token")
        clock.advance(0.5 + 5)  # about five seconds of decoding at 10 tokens a second
        ttft = 0.5 + HI / spec.prefill_tokens_per_second
        sent = 1 + int((0.5 + 5 - ttft) * 10)  # the first token, then 10 a second
        until(lambda: emulator.quota_used(NOVA, "output") == sent, "half the answer is counted")
        drive(clock, emulator)
        stream.join()
        assert emulator.quota_used(NOVA, "output") == 100


def test_mantle_has_no_rpm_and_no_daily_quota_and_needs_an_output_quota():
    with pytest.raises(InvalidPropsError) as refused:
        BedrockEmulator([ModelSpec(NOVA, rpm_quota=10, daily_token_quota=1_000)], quota=MANTLE)
    message = str(refused.value)
    assert "no output_tpm_quota" in message
    assert "rpm_quota=10" in message and "no requests-per-minute quota" in message
    assert "daily_token_quota=1000" in message
    with pytest.raises(InvalidPropsError, match="output_tpm_quota=500, a bedrock-mantle quota"):
        BedrockEmulator([ModelSpec(NOVA, output_tpm_quota=500)])
    with pytest.raises(InvalidPropsError, match="reserve_output_with_burndown"):
        QuotaModel(endpoint="bedrock-mantle", reserve_output_with_burndown=True)
    with pytest.raises(InvalidPropsError, match="endpoint"):
        QuotaModel(endpoint="bedrock-agent")


def test_quota_used_names_the_pools_of_the_other_quota_model():
    with (BedrockEmulator([ModelSpec(NOVA)], clock=ManualClock(instant=True)) as emulator,
          pytest.raises(InvalidPropsError, match="'output' a bedrock-mantle one")):
        emulator.quota_used(NOVA, "output")
