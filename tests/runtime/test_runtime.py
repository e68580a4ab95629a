"""lambda/pacer_runtime: the client factory, Converse request building and the Converse call."""

from __future__ import annotations

import re

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pacer_runtime import (
    Backoff,
    RequestError,
    bedrock_client,
    build_converse_request,
    call_with_backoff,
    converse,
    converse_stream,
    is_throttle,
    run_side_by_side,
)

MODEL = "us.amazon.nova-lite-v1:0"


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return bedrock_client(region_name="us-east-1", max_pool_connections=40, max_attempts=3)


def test_client_pool_and_retries_are_sized(client):
    config = client.meta.config
    assert config.max_pool_connections == 40
    assert config.retries == {"total_max_attempts": 3, "mode": "standard"}  # the first call and 2 retries
    assert client.meta.service_model.service_name == "bedrock-runtime"


def test_client_rejects_a_pool_of_zero_and_no_attempts():
    with pytest.raises(ValueError, match="max_pool_connections=0 must be a whole number >= 1"):
        bedrock_client(max_pool_connections=0)
    with pytest.raises(ValueError, match="max_attempts=0 must be a whole number >= 1"):
        bedrock_client(max_attempts=0)


def test_parameters_go_where_converse_expects_them():
    request = build_converse_request(
        MODEL,
        prompt="Tag this article",
        system="You tag articles.",
        inference_config={"temperature": 0.1, "maxTokens": 600},
        additional_fields={"top_k": 40},
        latency="optimized",
    )
    assert request == {
        "modelId": MODEL,
        "messages": [{"role": "user", "content": [{"text": "Tag this article"}]}],
        "system": [{"text": "You tag articles."}],
        "inferenceConfig": {"temperature": 0.1, "maxTokens": 600},
        "additionalModelRequestFields": {"top_k": 40},
        "performanceConfig": {"latency": "optimized"},
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(), "exactly one of prompt"),
        (dict(prompt="a", messages=[{"role": "user"}]), "exactly one of prompt"),
        (dict(prompt="   "), "prompt must be a non-empty string"),
        (dict(messages=[]), "messages must be a non-empty list"),
        (
            dict(prompt="a", inference_config={"top_k": 5}),
            "put model-specific parameters such as top_k in additionalModelRequestFields",
        ),
        (dict(prompt="a", inference_config={"maxTokens": 0}), "maxTokens=0 must be a positive integer"),
        (dict(prompt="a", latency="fast"), "latency='fast' must be 'standard' or 'optimized'"),
        (dict(prompt="a", system=""), "system must be a non-empty string"),
    ],
)
def test_misplaced_or_missing_parameters_are_request_errors(kwargs, message):
    with pytest.raises(RequestError, match=message):
        build_converse_request(MODEL, **kwargs)


def converse_response(text="Hello", served="standard"):
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15, "cacheReadInputTokens": 4},
        "metrics": {"latencyMs": 321},
        "performanceConfig": {"latency": served},
    }


def test_converse_returns_text_usage_and_the_mode_that_served_it(client):
    request = build_converse_request(MODEL, prompt="Hi", latency="optimized")
    with Stubber(client) as stub:
        stub.add_response("converse", converse_response(served="standard"), request)
        result = converse(client, request)
    assert (result.text, result.input_tokens, result.output_tokens, result.cache_read_tokens) == (
        "Hello",
        12,
        3,
        4,
    )
    assert result.service_latency_ms == 321 and result.stop_reason == "end_turn"
    assert result.served_latency == "standard"  # asked for optimized, quota fell back: visible, not an error
    assert result.first_token_ms is None and result.output_tokens_per_second is None  # not streamed


def test_throttles_are_recognized(client):
    request = build_converse_request(MODEL, prompt="Hi")
    with Stubber(client) as stub:
        stub.add_client_error("converse", "ThrottlingException", "Too many tokens", 429)
        with pytest.raises(ClientError) as caught:
            converse(client, request)
    assert is_throttle(caught.value)
    validation = ClientError({"Error": {"Code": "ValidationException", "Message": "bad"}}, "Converse")
    assert not is_throttle(validation)
    assert not is_throttle(ValueError("x"))


def test_a_session_can_be_supplied(monkeypatch):
    session = boto3.session.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="eu-west-1")
    assert bedrock_client(session=session).meta.region_name == "eu-west-1"


def throttle() -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "Too many tokens"}}, "Converse")


def test_backoff_waits_a_full_jitter_delay_that_doubles_to_its_cap():
    backoff = Backoff(base_seconds=1, cap_seconds=5, max_attempts=8)
    import random

    rng = random.Random(4)
    for retry, ceiling in [(0, 1), (1, 2), (2, 4), (3, 5), (6, 5)]:
        delays = [backoff.delay(retry, rng) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling * 0.9 and min(delays) < ceiling * 0.1  # spread over the whole range


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(base_seconds=0), "base_seconds=0 must be a finite number > 0"),
        (dict(base_seconds=5, cap_seconds=1), "cap_seconds=1 >= base_seconds"),
        (dict(max_attempts=0), "max_attempts=0 must be a whole number >= 1"),
    ],
)
def test_backoff_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


def test_call_with_backoff_retries_throttles_then_succeeds():
    results = iter([throttle(), throttle(), "answer"])
    sleeps = []

    def call():
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result

    outcome = call_with_backoff(call, backoff=Backoff(base_seconds=1, cap_seconds=8), sleep=sleeps.append)
    assert (outcome.value, outcome.attempts, outcome.throttles, outcome.ok) == ("answer", 3, 2, True)
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 1 and 0 <= sleeps[1] <= 2


def test_call_with_backoff_stops_at_once_on_other_errors_and_after_the_last_attempt():
    def invalid():
        raise ClientError({"Error": {"Code": "ValidationException", "Message": "bad"}}, "Converse")

    outcome = call_with_backoff(invalid, sleep=lambda _: None)
    assert (outcome.attempts, outcome.throttles, outcome.ok) == (1, 0, False)

    def always_throttled():
        raise throttle()

    outcome = call_with_backoff(always_throttled, backoff=Backoff(max_attempts=3), sleep=lambda _: None)
    assert (outcome.attempts, outcome.throttles) == (3, 3) and is_throttle(outcome.error)


def test_side_by_side_keeps_input_order_and_reports_one_failure_without_losing_the_others():
    def failing():
        raise ValueError("bad prompt")

    calls = [lambda: "a", failing, lambda: "c", lambda: "d"]
    seen = []
    outcomes = run_side_by_side(calls, max_in_flight=2, on_done=lambda index, outcome: seen.append(index))
    assert [o.value for o in outcomes] == ["a", None, "c", "d"]
    assert str(outcomes[1].error) == "bad prompt" and outcomes[1].attempts == 1  # not a throttle: no retry
    assert sorted(seen) == [0, 1, 2, 3]


def test_side_by_side_runs_calls_at_the_same_time():
    """Four calls that each wait for all four: they finish only if all are in flight together."""
    import threading

    barrier = threading.Barrier(4, timeout=10)
    outcomes = run_side_by_side([barrier.wait] * 4, max_in_flight=4)
    assert all(o.ok for o in outcomes)


def test_side_by_side_never_exceeds_its_bound():
    import threading

    lock, state = threading.Lock(), {"now": 0, "peak": 0}
    gate = threading.Event()

    def call():
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            if state["peak"] == 3:
                gate.set()
        gate.wait(timeout=2)  # hold the slot until three are in flight (or give up)
        with lock:
            state["now"] -= 1

    run_side_by_side([call] * 9, max_in_flight=3)
    assert state["peak"] == 3
    with pytest.raises(ValueError, match="max_in_flight=0 must be a whole number >= 1"):
        run_side_by_side([call], max_in_flight=0)


def test_in_stream_throttles_are_recognized():
    from botocore.exceptions import EventStreamError

    error = EventStreamError({"Error": {"Code": "throttlingException", "Message": "slow down"}}, "ConverseStream")
    assert is_throttle(error)


def test_converse_stream_collects_text_usage_and_first_token(client):
    stream = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "Hel"}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": "lo"}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
        {"metadata": {"usage": {"inputTokens": 5, "outputTokens": 2}, "metrics": {"latencyMs": 90},
                      "performanceConfig": {"latency": "optimized"}}},
    ]
    fake = type("Client", (), {"converse_stream": lambda self, **_: {"stream": iter(stream)}})()
    result = converse_stream(fake, build_converse_request(MODEL, prompt="Hi"))
    assert (result.text, result.output_tokens, result.stop_reason, result.served_latency) == (
        "Hello", 2, "end_turn", "optimized")
    assert result.first_token_ms is not None and result.first_token_ms <= result.latency_ms


def test_the_library_exposes_the_same_runtime_module_the_handlers_ship():
    import pacer_runtime
    from genai_pacer import runtime

    assert runtime.run_side_by_side is pacer_runtime.run_side_by_side
    assert sorted(runtime.__all__) == sorted(pacer_runtime.__all__)


def test_planning_testing_and_runtime_import_without_starting_the_cdk():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "import sys, genai_pacer.planning, genai_pacer.testing, genai_pacer.runtime; print('aws_cdk' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": f"{root / 'constructs'}", "PATH": ""})
    assert result.stdout.strip() == "False", result.stderr


def test_output_tokens_per_second_is_decode_speed_after_the_first_token():
    from pacer_runtime import ConverseResult

    def result(output, first_token_ms, latency_ms):
        return ConverseResult("", 3_000, output, 0, 0, "end_turn", latency_ms, None, "standard", first_token_ms)

    # The worked figures: TTFT about 1 s, 300 tokens in 6 s and 600 tokens in 11 s both decode at 60/s.
    assert result(300, 1_000, 6_000).output_tokens_per_second == 60.0
    assert result(600, 1_000, 11_000).output_tokens_per_second == 60.0
    assert result(300, None, 6_000).output_tokens_per_second is None  # not streamed: no first token time
    assert result(0, 1_000, 1_000).output_tokens_per_second is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda rt: rt.run_side_by_side([lambda: 1], max_in_flight=float("nan")), "max_in_flight=nan must be a whole number >= 1"),
        (lambda rt: rt.run_side_by_side([lambda: 1], max_in_flight="3"), "max_in_flight='3' must be a whole number"),
        (lambda rt: rt.BoundedCalls(3.5), "max_in_flight=3.5 must be a whole number"),
        (lambda rt: rt.BoundedCalls(True), "max_in_flight=True must be a whole number"),
        (lambda rt: rt.Backoff(base_seconds=float("inf")), "Backoff base_seconds=inf must be a finite number"),
        (lambda rt: rt.Backoff(max_attempts=2.5), "Backoff max_attempts=2.5 must be a whole number"),
        (lambda rt: rt.bedrock_client(max_attempts=1.5, region_name="us-east-1"), "max_attempts=1.5 must be a whole number"),
        (lambda rt: rt.bedrock_client(max_pool_connections=float("nan"), region_name="us-east-1"), "max_pool_connections=nan"),
        (lambda rt: rt.bedrock_client(read_timeout=0, region_name="us-east-1"), "read_timeout=0 must be a finite number > 0"),
        (lambda rt: rt.build_converse_request(None, prompt="x"), "model_id=None must be a model id"),
    ],
)
def test_runtime_helpers_refuse_bad_arguments_at_once(make, message):
    # NaN workers used to make a pool that never started (a hang); strings failed deep inside
    import genai_pacer.runtime as rt

    with pytest.raises(ValueError, match=re.escape(message)):
        make(rt)


def test_a_handler_importing_the_runtime_does_not_load_the_experiment_and_retrieval_modules():
    # every library handler imports pacer_runtime at cold start; the two modules only some need load on use
    import subprocess
    import sys
    from pathlib import Path

    lambda_dir = Path(__file__).resolve().parents[2] / "lambda"
    code = ("import sys, pacer_runtime\n"
            "assert not {'pacer_runtime.experiment', 'pacer_runtime.retrieval'} & set(sys.modules), sorted(sys.modules)\n"
            "from pacer_runtime import experiment, retrieval\n"
            "assert pacer_runtime.experiment is experiment and callable(retrieval.build_retrieve_request)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=lambda_dir, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
