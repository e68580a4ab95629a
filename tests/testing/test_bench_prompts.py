"""The benchmark's prompts format (issue 26, first layer): text lines and recorded Converse
requests, read by the one parser the local bench and the deployed replay share
(lambda/pacer_runtime/prompts.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from genai_pacer.testing import ModelSpec
from genai_pacer.testing.bench import Prompt, PromptError, converse_request, load_prompts
from genai_pacer.testing.cli import main
from genai_pacer.testing.experiments import quota_plan
from genai_pacer.testing.specs import ANSWER_TOKENS_KEY
from hypothesis import given
from hypothesis import strategies as st

MODEL = "us.amazon.nova-lite-v1:0"
SECRET = "the customer's private question"  # must never appear in an error message
RECORDED = {
    "id": "chat-1",
    "system": [{"text": "You are terse."}, {"cachePoint": {"type": "default"}}],
    "messages": [
        {"role": "user", "content": [{"text": "What is a token?"}]},
        {"role": "assistant", "content": [{"text": "A piece of text."}]},
        {"role": "user", "content": [{"text": "And a quota?"}]},
    ],
    "inferenceConfig": {"maxTokens": 300, "temperature": 0.2},
    "additionalModelRequestFields": {"top_k": 40},
    "performanceConfig": {"latency": "standard"},
    "expected_output_tokens": 25,
}


def write(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_a_recorded_request_is_replayed_as_recorded_on_the_benchs_model(tmp_path):
    text_line = {"prompt": "hi", "expected_output_tokens": 20, "system": "s"}
    bare = {"messages": [{"role": "user", "content": [{"text": "no hint"}]}]}
    recorded, text, without = load_prompts(write(tmp_path, RECORDED, text_line, bare))
    assert recorded.id == "chat-1" and recorded.expected_output_tokens == 25 and recorded.max_tokens == 300
    assert recorded.source.endswith("prompts.jsonl:1") and without.id == "3"
    fields = {key: value for key, value in RECORDED.items() if key not in ("id", "expected_output_tokens")}
    assert converse_request(recorded, MODEL) == {
        "modelId": MODEL, **fields, "requestMetadata": {ANSWER_TOKENS_KEY: "25"},
    }
    # The text line becomes the same Converse call as before the recorded format existed.
    assert converse_request(text, MODEL, max_tokens=50, latency="optimized") == {
        "modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "hi"}]}], "system": [{"text": "s"}],
        "inferenceConfig": {"maxTokens": 50}, "performanceConfig": {"latency": "optimized"},
        "requestMetadata": {ANSWER_TOKENS_KEY: "20"},
    }
    # Without expected_output_tokens the request carries no answer-length hint.
    assert converse_request(without, MODEL) == {"modelId": MODEL, **bare}
    assert without.expected_output_tokens is None


def test_the_runs_max_tokens_and_latency_win_over_the_recorded_ones_and_the_recording_is_not_changed(tmp_path):
    (recorded,) = load_prompts(write(tmp_path, RECORDED))
    request = converse_request(recorded, MODEL, max_tokens=64, latency="optimized", answer_hint=False)
    assert request["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.2}
    assert request["performanceConfig"] == {"latency": "optimized"} and "requestMetadata" not in request
    request["messages"].clear()
    assert converse_request(recorded, MODEL)["inferenceConfig"] == {"maxTokens": 300, "temperature": 0.2}
    assert len(converse_request(recorded, MODEL)["messages"]) == 3


MESSAGES = [{"role": "user", "content": [{"text": SECRET}]}]
REFUSALS = [
    ({"modelId": "m", "messages": MESSAGES},
     r"'modelId' not allowed in a recorded Converse request \(allowed: messages, system, inferenceConfig, "
     r"additionalModelRequestFields, performanceConfig, id, expected_output_tokens\); modelId: the benchmark's "
     r"model decides"),
    ({"toolConfig": {"tools": []}, "messages": MESSAGES}, r"'toolConfig' not allowed .*toolConfig: tool use is not supported by the replay yet"),
    ({"requestMetadata": {}, "messages": MESSAGES}, r"requestMetadata: the benchmark sets requestMetadata itself"),
    ({"guardrailConfig": {}, "serviceTier": {}, "messages": MESSAGES}, r"'guardrailConfig', 'serviceTier' not allowed"),
    ({"prompt": SECRET, "messages": MESSAGES, "expected_output_tokens": 3}, r"has both 'prompt' .* and 'messages'"),
    ({"messages": []}, r"'messages' must be a non-empty list of Converse messages, not an empty list"),
    ({"messages": MESSAGES, "expected_output_tokens": 0}, r"'expected_output_tokens' must be a positive integer, got 0"),
    ({"messages": [{"role": "user", "content": SECRET}]},
     r"not a valid Converse request \(botocore's bedrock-runtime Converse input shape\):\n"
     r"Invalid type for parameter messages\[0\]\.content: a string, valid types: <class 'list'>, <class 'tuple'>"),
    ({"messages": [{"role": "customer", "content": [{"text": SECRET}]}]},
     r"Invalid value for parameter messages\[0\]\.role: a string, valid values: user, assistant"),
    ({"messages": MESSAGES, "system": SECRET}, r"Invalid type for parameter system: a string"),
    ({"messages": MESSAGES, "inferenceConfig": {"maxTokens": 0}},
     r"Invalid value for parameter inferenceConfig\.maxTokens: the number 0, valid min value: 1"),
    ({"messages": MESSAGES, "inferenceConfig": {"max_tokens": 10}},
     r"Unknown parameter in inferenceConfig: 'max_tokens', must be one of: maxTokens"),
    ({"messages": MESSAGES, "performanceConfig": {"latency": "fast"}},
     r"performanceConfig\.latency: a string, valid values: standard, optimized"),
    ({"messages": MESSAGES, "id": True}, r"'id' must be a string, not a boolean"),
    ({"prompt": SECRET, "expected_output_tokens": 3, "category": "chat"},
     r"'category' not allowed in a text line \(allowed: prompt, system, id, expected_output_tokens\)"),
    ({"prompt": SECRET, "expected_output_tokens": 3, "system": [{"text": SECRET}]},
     r"'system' in a text line must be a non-empty string, not a list; a list of SystemContentBlocks belongs in a "
     r"recorded Converse request"),
    ({"prompt": SECRET}, r"'expected_output_tokens' must be a positive integer, got None"),
    ({"expected_output_tokens": 3}, r"needs a non-empty string 'prompt' \(a text line\) or a 'messages' list"),
    ([SECRET], r"a line is a JSON object, not a list"),
]


@pytest.mark.parametrize(("line", "message"), REFUSALS, ids=[str(i) for i in range(len(REFUSALS))])
def test_a_line_that_cannot_be_replayed_is_refused_by_file_and_line_without_quoting_the_prompt(tmp_path, line, message):
    path = write(tmp_path, {"prompt": "fine", "expected_output_tokens": 1}, line)
    with pytest.raises(PromptError, match=rf"(?s)prompts\.jsonl:2: .*?{message}") as refused:
        load_prompts(path)
    assert SECRET not in str(refused.value)


def test_a_plan_that_needs_each_answer_length_names_the_line_without_one(tmp_path):
    path = write(tmp_path, RECORDED, {"messages": MESSAGES})
    with pytest.raises(PromptError, match=r"prompts\.jsonl:2: no 'expected_output_tokens'; the quota plan needs each "
                                          r"prompt's answer length"):
        quota_plan(load_prompts(path), ModelSpec(MODEL))
    plan = quota_plan(load_prompts(write(tmp_path, RECORDED)), ModelSpec(MODEL))
    assert plan["mean_input_tokens"] > 0  # the recorded text blocks count as input


def test_the_bench_replays_a_recorded_file_against_the_emulator(tmp_path, capsys):
    path = write(tmp_path, RECORDED, {"messages": MESSAGES, "expected_output_tokens": 7})
    code = main(["bench", "--emulator", "--prompts", str(path), "--model-id", MODEL, "--requests", "4", "--warmup", "0",
                 "--concurrency", "2", "--time-scale", "50", "--out", str(tmp_path / "r")])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["succeeded"] == 4 and summary["failed"] == 0
    assert summary["output_tokens"]["p50"] == 16  # two answers of 25 tokens, two of 7: the hints reached the model
    rows = (tmp_path / "r" / "bench.csv").read_text()
    assert "chat-1" in rows and SECRET not in rows


def test_the_bench_refuses_a_bad_recorded_file_with_its_line(tmp_path, capsys):
    path = write(tmp_path, {"modelId": "other", "messages": MESSAGES})
    assert main(["bench", "--emulator", "--prompts", str(path), "--model-id", MODEL]) == 2
    err = capsys.readouterr().err
    assert "prompts.jsonl:1: 'modelId' not allowed" in err and SECRET not in err


def test_without_botocore_the_bench_still_imports_and_reads_recorded_lines(tmp_path):
    """The bench imports without boto3 (tests/test_consumer.py); the parser checks shapes with botocore
    only where it is installed."""
    path = write(tmp_path, {"messages": [{"role": "user", "content": "not a list"}]})
    script = (
        "import sys\n"
        "sys.modules['boto3'] = sys.modules['botocore'] = None\n"
        "from genai_pacer.testing.bench import load_prompts\n"
        f"(prompt,) = load_prompts({str(path)!r})\n"
        "print(repr(prompt.input_text))\n"  # a shape botocore would refuse counts as no text, not a crash
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "''", result.stderr


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(str.strip)
BLOCKS = st.lists(st.fixed_dictionaries({"text": TEXT}), min_size=1, max_size=3)
REQUESTS = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": BLOCKS}),
                          min_size=1, max_size=4)},
    optional={
        "system": BLOCKS,
        "inferenceConfig": st.fixed_dictionaries({}, optional={"maxTokens": st.integers(1, 10_000),
                                                               "temperature": st.floats(0, 1),
                                                               "stopSequences": st.lists(TEXT, max_size=2)}),
        "additionalModelRequestFields": st.dictionaries(st.sampled_from(["top_k", "reasoning"]), st.integers(0, 100)),
        "performanceConfig": st.fixed_dictionaries({"latency": st.sampled_from(["standard", "optimized"])}),
    },
)


@given(REQUESTS)
def test_any_valid_recorded_request_round_trips_to_the_same_converse_call(request):
    (prompt,) = load_prompts_from_text(json.dumps(request))
    assert converse_request(prompt, MODEL) == {"modelId": MODEL, **request}
    assert prompt.input_text == "".join(
        block["text"] for block in [*request.get("system", []), *(b for m in request["messages"] for b in m["content"])]
    )


def load_prompts_from_text(text: str) -> list[Prompt]:
    from genai_pacer._internal.runtime_constants import prompts_module

    parsed: list[Prompt] = prompts_module().parse_prompts(text, "hypothesis")
    return parsed


def test_a_recordings_max_tokens_is_what_the_report_counts_as_reserved_unless_the_run_sets_one(tmp_path):
    from genai_pacer.testing import BedrockEmulator
    from genai_pacer.testing.bench import BenchConfig, run_benchmark

    prompts = load_prompts(write(tmp_path, RECORDED))
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=50) as emulator:
        client = emulator.client()
        recorded = run_benchmark(client, prompts, BenchConfig(model_id=MODEL, requests=1, warmup=0, time_scale=50))
        capped = run_benchmark(client, prompts, BenchConfig(model_id=MODEL, requests=1, warmup=0, time_scale=50,
                                                            max_tokens=100))
    (first,), (second,) = recorded.samples, capped.samples
    def prompt_tokens(sample):  # the recording has a cache point: the second call reads what the first wrote
        return sample.input_tokens + sample.cache_write_tokens + sample.cache_read_tokens

    assert first.reserved == prompt_tokens(first) + 300  # not the model's 8,192
    assert second.reserved == prompt_tokens(second) + 100


def test_the_handlers_parse_with_the_same_file_the_bench_loads(tmp_path):
    """One parser: the replay Lambda imports pacer_runtime.prompts (shipped in every handler asset), the
    bench loads the same file by path; and the handlers describe values with its rule."""
    import pacer_runtime.bedrock
    import pacer_runtime.prompts
    from genai_pacer._internal.runtime_constants import prompts_module

    assert Path(pacer_runtime.prompts.__file__).resolve() == Path(prompts_module().__file__).resolve()
    assert pacer_runtime.bedrock._kind is pacer_runtime.prompts.describe
    text = write(tmp_path, RECORDED).read_text()
    (handler,) = pacer_runtime.prompts.parse_prompts(text, "s3://bucket/prompts.jsonl")
    (bench,) = load_prompts(tmp_path / "prompts.jsonl")
    assert handler.converse_request(MODEL) == bench.converse_request(MODEL) and handler.source == "s3://bucket/prompts.jsonl:1"


def test_the_quota_experiment_refuses_a_recorded_line_without_an_answer_length_before_it_runs(tmp_path, capsys):
    path = write(tmp_path, RECORDED, {"messages": MESSAGES})
    assert main(["experiments", "--which", "quota", "--prompts", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "prompts.jsonl:2: no 'expected_output_tokens'; the quota plan needs each prompt's answer length" in err
    assert SECRET not in err and not list((tmp_path / "out").glob("*.json"))


def test_the_parsers_converse_names_are_botocores():
    """AWS facts the parser relies on, held to botocore's bedrock-runtime model."""
    import botocore.session
    from genai_pacer._internal.runtime_constants import prompts_module

    prompts = prompts_module()
    model = botocore.session.get_session().get_service_model(prompts.CONVERSE_SERVICE)
    shape = model.operation_model(prompts.CONVERSE_OPERATION).input_shape
    assert set(prompts.RECORDED_FIELDS) | set(prompts.REFUSED) <= set(shape.members)
    assert tuple(shape.members["performanceConfig"].members["latency"].enum) == prompts.LATENCY_MODES


def test_parse_each_keeps_every_lines_prompt_or_its_error_in_order():
    """What a deployed replay reads: one bad line is reported by file:line and the rest still replay."""
    from pacer_runtime.prompts import Prompt as RuntimePrompt
    from pacer_runtime.prompts import PromptError as RuntimePromptError
    from pacer_runtime.prompts import parse_each

    text = '{"prompt": "a", "expected_output_tokens": 3}\n\nnot json\n{"prompt": "b", "expected_output_tokens": 4}\n'
    parsed = parse_each(text, "s3://b/p.jsonl")
    assert [type(item) for item in parsed] == [RuntimePrompt, RuntimePromptError, RuntimePrompt]
    assert str(parsed[1]).startswith("s3://b/p.jsonl:3: not JSON")
    assert [item.id for item in parsed if isinstance(item, RuntimePrompt)] == ["1", "4"]
    assert parse_each("\n", "empty") == []
