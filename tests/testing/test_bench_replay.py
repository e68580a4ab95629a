"""The load replay's measurement and summary (issue 26, second layer): one file,
lambda/pacer_runtime/replay.py, that the local bench loads by path and a deployed replay's Lambda
imports as pacer_runtime.replay, so the two cannot measure or summarize differently."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from dataclasses import asdict, fields
from pathlib import Path

import pacer_runtime.metrics
import pacer_runtime.replay as runtime
import pytest
from genai_pacer import stats
from genai_pacer.quota.planning import TokenProfile
from genai_pacer.testing import BedrockEmulator, ModelSpec, bench
from hypothesis import given
from hypothesis import strategies as st

MODEL = "us.amazon.nova-lite-v1:0"
PROMPT_TEXT = "the customer's private question"
ANSWER_TEXT = "the model's private answer"
REPLAY = Path(runtime.__file__)


def test_the_measurement_module_imports_with_the_standard_library_alone():
    """What a deployed replay's Lambda ships and what the bench loads without boto3: no genai_pacer,
    no boto3, no botocore, nothing outside the standard library."""
    script = (
        "import importlib.util, sys\n"
        "for name in ('boto3', 'botocore', 'genai_pacer', 'pacer_runtime'):\n"
        "    sys.modules[name] = None\n"
        "before = set(sys.modules)\n"
        f"spec = importlib.util.spec_from_file_location('replay_alone', {str(REPLAY)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['replay_alone'] = module\n"
        "spec.loader.exec_module(module)\n"
        "added = {name.split('.')[0] for name in set(sys.modules) - before} - {'replay_alone'}\n"
        "print(sorted(added - set(sys.stdlib_module_names)))\n"
        "print(module.summarize([], module.BenchConfig(model_id='m'))['requests'])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "0"]


def test_the_bench_and_every_report_use_the_runtime_files_arithmetic():
    from genai_pacer._internal.runtime_constants import replay_module

    assert Path(replay_module().__file__).resolve() == REPLAY.resolve()
    assert bench.summarize is replay_module().summarize and bench.Sample is replay_module().Sample
    assert stats.percentile is replay_module().percentile  # the A/B verdict's and retrieval tuning's p99 too
    assert runtime.SERVICE_TIER_MEMBER == pacer_runtime.metrics.SERVICE_TIER_MEMBER


SAMPLES = st.lists(
    st.builds(
        lambda index, warmup, started, e2e, ttft, otps, output, throttles, error, served, max_tokens: runtime.Sample(
            index=index, prompt_id=f"p{index % 4}", warmup=warmup, started_s=started, e2e_s=e2e,
            ttft_s=None if error or ttft is None else min(ttft, e2e), otps=None if error else otps,
            input_tokens=500, output_tokens=0 if error else output, attempts=1 + throttles, throttles=throttles,
            error=error, served_latency=None if error else served,
            reserved=0 if error else 500 + max_tokens, settled=0 if error else 500 + output * 5),
        st.integers(0, 10_000), st.booleans(), st.floats(0, 600), st.floats(0.01, 120), st.none() | st.floats(0, 10),
        st.none() | st.floats(0.1, 500), st.integers(0, 4_000), st.integers(0, 5),
        st.none() | st.sampled_from(["ThrottlingException", "ModelTimeoutException"]),
        st.sampled_from(["standard", "optimized"]), st.integers(4_000, 8_192)),
    max_size=40,
)
CONFIGS = st.builds(
    runtime.BenchConfig, model_id=st.just(MODEL), warmup=st.integers(0, 8), burndown=st.sampled_from([1.0, 5.0]),
    tpm_quota=st.none() | st.floats(1_000, 10_000_000), ttft_target_s=st.none() | st.floats(0.1, 5),
    otps_target=st.none() | st.floats(1, 200), e2e_target_s=st.none() | st.floats(1, 60),
    time_scale=st.sampled_from([1.0, 20.0]),
)


@given(SAMPLES, CONFIGS)
def test_the_local_bench_and_the_runtime_module_summarize_the_same_records_identically(samples, config):
    """The same records, the same report: summary, JSON document and CSV; also after a round trip
    through JSON, as records a deployed run writes to S3 and a last step reads back."""
    local = bench.summarize([bench.Sample(**asdict(s)) for s in samples], config)
    assert local == runtime.summarize(samples, config)
    read_back = [runtime.Sample(**json.loads(json.dumps(asdict(s)))) for s in samples]
    assert runtime.summarize(read_back, config) == local
    assert json.dumps(runtime.report_document(config, local)) == json.dumps({"config": asdict(config), "summary": local})


def test_write_report_writes_the_runtime_modules_json_and_csv(tmp_path):
    records = [runtime.Sample(i, "a", i == 0, float(i), 2.0, 0.5, 40.0, 100, 60, served_latency="standard",
                              attempts=1, reserved=600, settled=160) for i in range(3)]
    config = runtime.BenchConfig(model_id=MODEL, warmup=1)
    report = bench.BenchReport(config, records, runtime.summarize(records, config))
    json_path, csv_path, *_ = bench.write_report(report, tmp_path, "run")
    assert json.loads(json_path.read_text()) == json.loads(json.dumps(runtime.report_document(config, report.summary)))
    buffer = io.StringIO(newline="")
    runtime.write_csv(buffer, records)
    assert csv_path.read_bytes().decode() == buffer.getvalue()


@given(st.integers(0, 200_000), st.integers(0, 8_192), st.integers(1, 8_192), st.sampled_from([1.0, 5.0]),
       st.integers(0, 50_000), st.integers(0, 50_000))
def test_a_records_quota_charge_is_the_planners(input_tokens, output_tokens, max_tokens, burndown, writes, reads):
    max_tokens = max(max_tokens, output_tokens)
    profile = TokenProfile(input_tokens=input_tokens, output_tokens=output_tokens, max_tokens=max_tokens,
                           burndown=burndown, cache_write_tokens=writes, cache_read_tokens=reads)
    assert runtime.charge(input_tokens=input_tokens, output_tokens=output_tokens, max_tokens=max_tokens,
                          burndown=burndown, cache_write_tokens=writes, cache_read_tokens=reads) == (
        profile.reserved, profile.settled)


class Clock:
    """The case's own clock, advanced by the fake service as it answers."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Counter:
    def __init__(self, attempts: int, throttles: int) -> None:
        self.counts = (attempts, throttles)

    def take(self) -> tuple[int, int]:
        return self.counts


USAGE = {"inputTokens": 1_200, "outputTokens": 90, "totalTokens": 1_290, "cacheReadInputTokens": 300}


class FakeBedrock:
    """Converse and ConverseStream answers in botocore's parsed shapes, on the case's clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def converse(self, **request):
        self.clock.t += 2.5
        return {"output": {"message": {"role": "assistant", "content": [{"text": ANSWER_TEXT}]}},
                "stopReason": "end_turn", "usage": USAGE, "metrics": {"latencyMs": 2_400},
                "performanceConfig": {"latency": "optimized"}, "serviceTier": {"type": "priority"}}

    def converse_stream(self, **request):
        def events():
            yield {"messageStart": {"role": "assistant"}}
            self.clock.t += 0.4  # time to first token
            yield {"contentBlockDelta": {"delta": {"text": ANSWER_TEXT}, "contentBlockIndex": 0}}
            self.clock.t += 1.8  # 90 tokens decoded in 1.8 s: 50 tokens/s
            yield {"contentBlockDelta": {"delta": {"text": " more"}, "contentBlockIndex": 0}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            yield {"metadata": {"usage": USAGE, "metrics": {"latencyMs": 2_150},
                                "performanceConfig": {"latency": "optimized"}, "serviceTier": {"type": "flex"}}}

        return {"stream": events()}


def measure(streaming: bool, client=None, *, time_scale: float = 1.0) -> runtime.Sample:
    clock = Clock()
    sample = runtime.Sample(3, "chat-1", False, clock() * time_scale)
    return runtime.measure(client or FakeBedrock(clock), {"modelId": MODEL, "messages": [
        {"role": "user", "content": [{"text": PROMPT_TEXT}]}]}, sample, streaming=streaming,
        now=lambda: clock() * time_scale, counter=Counter(3, 2), max_tokens=1_000, burndown=5, time_scale=time_scale,
        clock=clock)


def test_a_stream_is_measured_from_its_events_and_the_answer_is_not_kept():
    sample = measure(streaming=True)
    assert (sample.ttft_s, sample.otps, sample.e2e_s) == (0.4, 50.0, 2.2)
    assert (sample.input_tokens, sample.output_tokens, sample.cache_read_tokens) == (1_200, 90, 300)
    assert (sample.attempts, sample.throttles, sample.error, sample.served_latency) == (3, 2, None, "optimized")
    assert sample.served_tier == "flex"  # the stream's metadata event names the tier that served it
    assert (sample.reserved, sample.settled) == (1_200 + 300 + 1_000, 1_200 + 90 * 5)
    record = json.dumps(asdict(sample))
    assert ANSWER_TEXT not in record and PROMPT_TEXT not in record and "more" not in record


def test_a_converse_answer_has_no_ttft_and_a_time_scaled_run_reports_model_seconds():
    sample = measure(streaming=False, time_scale=20)
    assert (sample.ttft_s, sample.otps, sample.e2e_s, sample.output_tokens) == (None, None, 50.0, 90)
    assert sample.served_tier == "priority"  # Converse's serviceTier.type
    assert ANSWER_TEXT not in json.dumps(asdict(sample))


class Refusing:
    def converse_stream(self, **request):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": PROMPT_TEXT}}, "ConverseStream")


def test_a_failed_request_records_its_error_code_not_its_message():
    sample = measure(streaming=True, client=Refusing())
    assert (sample.error, sample.output_tokens, sample.reserved, sample.attempts) == ("ThrottlingException", 0, 0, 3)
    assert PROMPT_TEXT not in json.dumps(asdict(sample))


def test_records_hold_measurements_only():
    """The record's text fields are an id, an error code and a latency mode; anything else is a number."""
    text = {f.name for f in fields(runtime.Sample) if "str" in str(f.type)}
    assert text == {"prompt_id", "error", "served_latency", "served_tier"}
    assert [f.name for f in fields(runtime.Sample)] == runtime.CSV_FIELDS


@pytest.mark.parametrize("streaming", [True, False])
def test_a_run_against_the_emulator_writes_no_prompt_or_answer_text(tmp_path, streaming):
    prompts = bench.load_prompts(_prompts(tmp_path))
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=50) as emulator:
        client = emulator.client()
        answer = client.converse(**bench.converse_request(prompts[0], MODEL))["output"]["message"]["content"][0]["text"]
        report = bench.run_benchmark(client, prompts, bench.BenchConfig(
            model_id=MODEL, requests=2, warmup=0, concurrency=1, streaming=streaming, time_scale=50))
    json_path, csv_path, *_ = bench.write_report(report, tmp_path / "out")
    written = json_path.read_text() + csv_path.read_text()
    assert report.summary["succeeded"] == 2 and answer.strip()
    assert PROMPT_TEXT not in written and answer.strip() not in written
    assert [row["prompt_id"] for row in csv.DictReader(csv_path.open())] == ["chat-1", "chat-1"]


def _prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"id": "chat-1", "messages": [{"role": "user", "content": [{"text": PROMPT_TEXT}]}],
                                "expected_output_tokens": 12}) + "\n")
    return path


def test_the_served_tier_member_is_botocores_on_both_apis():
    """serviceTier.type on the Converse response and on ConverseStream's metadata event, with the
    tiers the report counts, as the installed botocore model has them."""
    from botocore.session import get_session

    model = get_session().get_service_model("bedrock-runtime")
    converse = model.operation_model("Converse").output_shape.members[runtime.SERVICE_TIER_MEMBER]
    metadata = model.shape_for("ConverseStreamMetadataEvent").members[runtime.SERVICE_TIER_MEMBER]
    assert converse.name == metadata.name == "ServiceTier"
    assert set(converse.members["type"].enum) == {"default", "priority", "flex", "reserved"}


@pytest.mark.parametrize("streaming", [True, False])
def test_the_report_counts_the_tier_that_served_each_request(streaming):
    """Against the emulator, which answers a priority request from the priority tier: the record names
    it and the summary counts it, so a run shows whether Priority was actually served."""
    prompts = [bench.Prompt("Tag this ticket", 5, "tag")]
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=50) as emulator:
        client = emulator.client()
        counter = runtime.AttemptCounter.of(client)
        samples = []
        for index, tier in enumerate(["priority", "priority", None]):
            request = bench.converse_request(prompts[0], MODEL)
            if tier:
                request["serviceTier"] = {"type": tier}
            sample = runtime.Sample(index, "tag", False, 0.0)
            samples.append(runtime.measure(client, request, sample, streaming=streaming, now=lambda: 1.0,
                                           counter=counter, max_tokens=100))
    assert [s.served_tier for s in samples] == [i.served_tier for i in emulator.invocations]
    assert [s.served_tier for s in samples][:2] == ["priority", "priority"]
    summary = runtime.summarize(samples, runtime.BenchConfig(model_id=MODEL, warmup=0))
    assert summary["served_tier"] == {"priority": 2}  # a response naming no tier is counted under none


def test_arrivals_are_a_seeded_poisson_schedule():
    schedule = runtime.arrivals(2.0, 4_000, seed=7)
    assert schedule == runtime.arrivals(2.0, 4_000, seed=7) and schedule != runtime.arrivals(2.0, 4_000, seed=8)
    assert schedule[0] == 0 and schedule == sorted(schedule)
    gaps = [b - a for a, b in zip(schedule, schedule[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    assert abs(mean - 0.5) < 0.05  # the mean gap is 1/rate (standard error 0.5/sqrt(4000) = 0.008)
    # Exponential gaps: the share longer than the mean is e^-1 (0.368), not the half a uniform spread gives.
    assert abs(sum(gap > mean for gap in gaps) / len(gaps) - math.exp(-1)) < 0.03
    assert runtime.arrivals(1.0, 0) == []
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="rate_per_s"):
            runtime.arrivals(bad, 3)
    with pytest.raises(ValueError, match="n=-1"):
        runtime.arrivals(1.0, -1)


def test_the_local_open_loop_takes_its_schedule_from_the_runtime_file(monkeypatch):
    """One copy of the arrival schedule: the local bench's open loop asks replay.arrivals for it."""
    from genai_pacer._internal.runtime_constants import replay_module

    asked = []
    original = replay_module().arrivals

    def recording(rate_per_s, n, seed):
        asked.append((rate_per_s, n, seed))
        return original(rate_per_s, n, seed)

    monkeypatch.setattr(replay_module(), "arrivals", recording)
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=200) as emulator:
        config = bench.BenchConfig(model_id=MODEL, requests=3, warmup=1, concurrency=None, rate_per_minute=6_000,
                                   time_scale=200, seed=3)
        report = bench.run_benchmark(emulator.client(), [bench.Prompt("Tag it", 3, "t")], config)
    assert asked == [(100.0, 4, 3)] and report.summary["succeeded"] == 3
