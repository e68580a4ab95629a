"""pacer_runtime.streaming: complete sentences from ConverseStream, with TTFT and OTPS, on real event streams.

The streams are botocore's own EventStream parsing frames encoded the way bedrock-runtime sends
them (genai_pacer.testing.eventstream), served by a Stubber, delivered in small byte chunks: an
in-stream throttle arrives as the same EventStreamError a real client raises.
"""

from __future__ import annotations

import json

import boto3
import botocore.parsers
import pytest
from botocore.eventstream import EventStream
from botocore.stub import Stubber
from genai_pacer.testing.eventstream import event, exception
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pacer_runtime import (
    SentenceSplitter,
    build_converse_request,
    is_throttle,
    metrics,
    sentences,
    stream_sentences,
)

MODEL = "us.anthropic.claude-3-5-haiku-20241022-v1:0"


class _Raw:
    """The HTTP body botocore's EventStream reads, in chunks of `size` bytes (frames split anywhere)."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.closed = data, size, False

    def stream(self):
        for start in range(0, len(self.data), self.size):
            yield self.data[start:start + self.size]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return boto3.client("bedrock-runtime", region_name="us-east-1")


def stub_stream(client, frames: list[bytes], *, chunk: int = 7) -> _Raw:
    """Queue one ConverseStream response whose stream is `frames`; returns the raw body (to see it closed)."""
    shape = client.meta.service_model.operation_model("ConverseStream").output_shape.members["stream"]
    raw = _Raw(b"".join(frames), chunk)
    response: dict = {"stream": {}}  # validated by the Stubber as an empty stream...
    stubber = Stubber(client)
    stubber.add_response("converse_stream", response)
    stubber.activate()
    # ...then swapped for botocore's real parser over the encoded frames.
    response["stream"] = EventStream(raw, shape, botocore.parsers.EventStreamJSONParser(), "ConverseStream")
    return raw


def answer_frames(deltas: list[str], *, output_tokens: int = 12, served: str = "standard") -> list[bytes]:
    return [
        event("messageStart", {"role": "assistant"}),
        *[event("contentBlockDelta", {"delta": {"text": d}, "contentBlockIndex": 0}) for d in deltas],
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": "end_turn"}),
        event("metadata", {"usage": {"inputTokens": 40, "outputTokens": output_tokens, "totalTokens": 40 + output_tokens},
                           "metrics": {"latencyMs": 420}, "performanceConfig": {"latency": served}}),
    ]


REQUEST = build_converse_request(MODEL, prompt="Tell me about the weather.", inference_config={"maxTokens": 200},
                                 latency="optimized")


def test_sentences_arrive_one_by_one_and_the_result_carries_usage_ttft_and_otps(client):
    raw = stub_stream(client, answer_frames(["It is sun", "ny today. Tomor", "row brings rain", "! Take an umbrella."],
                                            served="optimized"))
    stream = stream_sentences(client, REQUEST)
    seen = []
    for sentence in stream:
        seen.append((sentence, len(stream.text)))  # how much text had arrived when the sentence was handed over
    assert [s for s, _ in seen] == ["It is sunny today.", "Tomorrow brings rain!", "Take an umbrella."]
    # Each sentence was yielded as soon as the text after its end mark arrived, not at the end.
    assert [arrived for _, arrived in seen] == [len("It is sunny today. Tomor"),
                                                len("It is sunny today. Tomorrow brings rain! Take an umbrella."),
                                                len("It is sunny today. Tomorrow brings rain! Take an umbrella.")]
    result = stream.result
    assert result.text == "It is sunny today. Tomorrow brings rain! Take an umbrella."
    assert (result.input_tokens, result.output_tokens, result.stop_reason) == (40, 12, "end_turn")
    assert (result.served_latency, result.service_latency_ms) == ("optimized", 420)
    assert result.first_token_ms is not None and 0 <= result.first_token_ms <= result.latency_ms
    assert stream.first_token_ms == pytest.approx(result.first_token_ms, abs=0.1)
    assert stream.delivered == [s for s, _ in seen]
    assert not raw.closed  # read to the end, nothing to release


def test_a_throttle_midway_keeps_what_was_delivered_and_raises_the_stream_error(client):
    frames = answer_frames(["First sentence. Second sen", "tence is cut"])[:3]  # start and two deltas
    stub_stream(client, [*frames, exception("throttlingException", "Too many tokens, please wait")], chunk=5)
    stream = stream_sentences(client, REQUEST)
    delivered = []
    with pytest.raises(Exception) as raised:
        for sentence in stream:
            delivered.append(sentence)
    assert is_throttle(raised.value)  # EventStreamError, camelCase code, as from AWS
    assert delivered == ["First sentence."]  # completed before the error; the half sentence is not spoken
    assert stream.text == "First sentence. Second sentence is cut"  # what arrived, for an apology or a re-ask
    assert stream.result is None  # no usage: the call did not finish


def test_stopping_early_closes_the_stream_and_leaves_no_result(client):
    raw = stub_stream(client, answer_frames(["One. Two. ", "Three. Four."]))
    stream = stream_sentences(client, REQUEST)
    for sentence in stream:
        assert sentence == "One."
        break
    assert raw.closed and stream.result is None


def test_a_stream_is_read_once(client):
    stub_stream(client, answer_frames(["Only once."]))
    stream = stream_sentences(client, REQUEST)
    assert list(stream) == ["Only once."]
    with pytest.raises(RuntimeError, match="read once"):
        iter(stream)


def test_the_streamed_call_publishes_ttft_otps_reservation_and_mode(client, capsys):
    stub_stream(client, answer_frames(["A calm day. ", "Clear skies."], output_tokens=30, served="standard"))
    stream = stream_sentences(client, REQUEST)
    list(stream)
    figures = metrics.emit_call(stream.result, model_id=MODEL, request=stream.request)
    line = json.loads(capsys.readouterr().out)
    directive = line["_aws"]["CloudWatchMetrics"][0]
    names = [m["Name"] for m in directive["Metrics"]]
    assert {metrics.TIME_TO_FIRST_TOKEN_MS, metrics.OUTPUT_TOKENS_PER_SECOND, metrics.RESERVED_TOKENS} <= set(names)
    assert line[metrics.RESERVED_TOKENS] == 40 + 200  # input + maxTokens, what the quota held at the start
    assert line[metrics.TIME_TO_FIRST_TOKEN_MS] == stream.result.first_token_ms
    # Asked for optimized, served at standard: the fallback is counted, and said in the log line.
    assert (line[metrics.OPTIMIZED_SERVED_STANDARD], line["RequestedLatency"], line["ServedLatency"]) == (
        1, "optimized", "standard")
    assert figures.fell_back and directive["Dimensions"] == [["ModelId"]]


# --- the sentence splitter ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
        ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
        ("Use a tool, e.g. a hammer. Then stop.", ["Use a tool, e.g. a hammer.", "Then stop."]),
        ("J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it.", "It is long."]),
        ("Pi is 3.14 roughly. Yes.", ["Pi is 3.14 roughly.", "Yes."]),
        ("Wait... what? Really.", ["Wait... what?", "Really."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("(It rained.) We stayed in.", ["(It rained.)", "We stayed in."]),
        ("1. Open the app. 2. Sign in.", ["1. Open the app.", "2. Sign in."]),
        ("Steps:\n- open the app\n- sign in", ["Steps:", "- open the app", "- sign in"]),
        ("天气很好。我们出去吧！好的？", ["天气很好。", "我们出去吧！", "好的？"]),
        ("no end mark at all", ["no end mark at all"]),
        ("the model stops mid", ["the model stops mid"]),
        ("", []),
        ("   \n\n  ", []),
        ("Trailing space.   ", ["Trailing space."]),
    ],
)
def test_sentence_boundaries(text, expected):
    assert list(sentences([text])) == expected


def test_max_chars_cuts_a_long_run_at_a_space():
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa. Short."
    assert list(sentences([text], max_chars=20)) == [
        "alpha beta gamma", "delta epsilon zeta", "eta theta iota", "kappa.", "Short."]
    assert all(len(s) <= 20 for s in sentences([text], max_chars=20))
    assert list(sentences(["x" * 25], max_chars=10)) == ["x" * 10, "x" * 10, "x" * 5]  # no space: a hard cut


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "80"])
def test_max_chars_must_be_a_positive_whole_number(bad):
    with pytest.raises(ValueError, match="max_chars=.* must be a positive whole number"):
        SentenceSplitter(max_chars=bad)


def test_a_splitter_refuses_non_text_and_feeding_after_finish():
    splitter = SentenceSplitter()
    with pytest.raises(TypeError, match="a delta must be text"):
        splitter.feed(b"bytes")  # type: ignore[arg-type]
    assert splitter.feed("Done. ") == []
    assert splitter.finish() == ["Done."]
    assert splitter.finish() == []
    with pytest.raises(ValueError, match="feed\\(\\) after finish\\(\\)"):
        splitter.feed("more")


_PIECES = st.sampled_from(
    ["Hello", " world", ".", " ", "!", "?", "...", "\n", "Dr", "e.g", "J", "3", "14", "x", "Y", '"', ")", "。",
     "It", " is", " fine", "\u00a0", "1", "\u3000", "\t", "…", "」", "！"]
)


@pytest.mark.parametrize(
    ("deltas", "max_chars"),
    [
        # white space that opened a delta after a boundary used to count toward max_chars
        (['"Y\xa0 \n', " is"], 2),
        (["。\xa0", "\xa0 14e.g"], 3),
        (["x?...\n", " It!It"], 5),
        (["e.g。\xa0", "\xa0e.g"], 2),
    ],
)
def test_white_space_at_the_start_of_a_delta_does_not_move_a_cut(deltas, max_chars):
    assert list(sentences(deltas, max_chars=max_chars)) == list(sentences(["".join(deltas)], max_chars=max_chars))


@settings(max_examples=300, deadline=None)
@example(pieces=["e.g", "。", "\xa0", "\xa0", "e.g"], cuts=[5], max_chars=2)  # found by this test
@given(pieces=st.lists(_PIECES, max_size=40), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
       max_chars=st.one_of(st.none(), st.integers(min_value=1, max_value=30)))
def test_sentences_do_not_depend_on_where_the_deltas_split(pieces, cuts, max_chars):
    text = "".join(pieces)
    points = sorted({c % (len(text) + 1) for c in cuts})
    deltas = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    whole = list(sentences([text], max_chars=max_chars))
    assert list(sentences(deltas, max_chars=max_chars)) == whole
    # Nothing is lost or invented: the sentences are the text's non-space characters, in order.
    assert "".join("".join(whole).split()) == "".join(text.split())
    assert all(s == s.strip() and s for s in whole)
    if max_chars is not None:
        assert all(len(s) <= max_chars for s in whole)
