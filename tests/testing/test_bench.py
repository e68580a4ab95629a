"""The benchmark: its arithmetic on synthetic timings, and short runs against the emulator."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import genai_pacer
import pytest
from genai_pacer.testing import BedrockEmulator, ModelSpec
from genai_pacer.testing.bench import (
    BenchConfig,
    Prompt,
    Sample,
    load_prompts,
    percentile,
    percentiles,
    run_benchmark,
    summarize,
    write_report,
)
from genai_pacer.testing.cli import main
from genai_pacer.testing.experiments import quota_plan

MODEL = "us.amazon.nova-lite-v1:0"


def test_percentile_interpolates_between_ranks():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 50.5
    assert percentile(values, 90) == pytest.approx(90.1)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert percentile([3, 1, 2], 0) == 1 and percentile([3, 1, 2], 100) == 3  # order does not matter


def test_percentiles_say_when_the_tail_is_too_thin():
    assert percentiles(list(range(100))).note == ""
    # one percentile "needs", two "need" (trial finding F11: "p99 need at least")
    assert percentiles(list(range(40))).note == "40 samples: p99 needs at least 100 samples to describe a tail"
    assert percentiles([1.0] * 5).note == "5 samples: p90, p99 need at least 10, 100 samples to describe a tail"
    assert percentiles([]).n == 0 and percentiles([]).note == "no samples"


def test_rate_percentiles_describe_the_slow_tail():
    rates = list(range(1, 101))  # output tokens per second: the slow requests are the low ones
    summary = percentiles(rates, lower_is_worse=True)
    assert (summary.p50, summary.p90, summary.p99) == (50.5, pytest.approx(10.9), pytest.approx(1.99))


def sample(index, *, ttft=0.5, e2e=2.5, output=100, error=None, warmup=False, throttles=0, started=None):
    return Sample(index=index, prompt_id=str(index), warmup=warmup,
                  started_s=float(index) if started is None else started, e2e_s=e2e, ttft_s=ttft,
                  otps=output / (e2e - ttft), input_tokens=1_000, output_tokens=0 if error else output,
                  attempts=1 + throttles, throttles=throttles, error=error, served_latency=None if error else "standard",
                  reserved=0 if error else 1_000 + 400, settled=0 if error else 1_000 + output * 5)


def test_summary_counts_goodput_throttles_errors_and_quota_use():
    samples = [sample(0, warmup=True, ttft=9.0)]  # warm-up: excluded everywhere
    samples += [sample(i) for i in range(1, 9)]  # 8 good: TTFT 0.5 s, 50 tokens/s
    samples += [sample(9, ttft=2.0, e2e=4.0, throttles=2)]  # slow start: misses the TTFT target
    samples += [sample(10, error="ThrottlingException", throttles=4)]  # failed after retries
    config = BenchConfig(model_id=MODEL, tpm_quota=100_000, ttft_target_s=1.0, otps_target=40, burndown=5)
    summary = summarize(samples, config)
    assert (summary["requests"], summary["succeeded"], summary["failed"]) == (10, 9, 1)
    assert summary["errors"] == {"ThrottlingException": 1}
    assert summary["throttles"] == 6 and summary["attempts"] == 16
    assert summary["goodput"]["requests"] == 8 and summary["goodput"]["fraction"] == 0.8
    assert summary["ttft_s"]["n"] == 9 and summary["ttft_s"]["p50"] == 0.5
    assert summary["otps"]["p50"] == 50.0
    # Busy from t=1 to t=9 + 4 = 13 s; 9 answers settle 1,000 + 100 x 5 = 1,500 tokens each.
    assert summary["duration_s"] == 12.0
    assert summary["tpm"]["settled"] == pytest.approx(9 * 1_500 / (12 / 60), abs=0.1)
    assert summary["tpm"]["reserved"] == pytest.approx(9 * 1_400 / (12 / 60), abs=0.1)
    assert summary["tpm"]["settled_pct_of_quota"] == round(100 * 9 * 1_500 / (12 / 60) / 100_000, 1)


def test_config_refuses_ambiguous_load():
    with pytest.raises(ValueError, match="exactly one of concurrency"):
        BenchConfig(model_id=MODEL, concurrency=4, rate_per_minute=60)
    with pytest.raises(ValueError, match="exactly one of concurrency"):
        BenchConfig(model_id=MODEL, concurrency=None)
    with pytest.raises(ValueError, match="concurrency=0 must be >= 1"):
        BenchConfig(model_id=MODEL, concurrency=0)
    with pytest.raises(ValueError, match="requests=0 must be >= 1"):
        BenchConfig(model_id=MODEL, requests=0)
    with pytest.raises(ValueError, match="time_scale=0 must be > 0"):
        BenchConfig(model_id=MODEL, time_scale=0)


def test_load_prompts_reads_jsonl_and_names_the_bad_line(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "hi", "expected_output_tokens": 20}\n\n{"id": "b", "prompt": "yo", "expected_output_tokens": 5, "system": "s"}\n')
    assert load_prompts(good) == [Prompt("hi", 20, "1"), Prompt("yo", 5, "b", "s")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "expected_output_tokens": 20}\n{"prompt": "x", "expected_output_tokens": 0}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: 'expected_output_tokens' must be a positive integer, got 0"):
        load_prompts(bad)
    (tmp_path / "broken.jsonl").write_text('{"prompt": "hi", "expected_output_tokens": 2}\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not JSON"):
        load_prompts(tmp_path / "broken.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(tmp_path / "empty.jsonl")


PROMPTS = [Prompt("Summarize: " + "words " * 200, 40, "a"), Prompt("Tag this.", 10, "b")]


def test_streaming_run_against_the_emulator_reports_server_usage(tmp_path):
    spec = ModelSpec(MODEL, output_tokens_per_second=80, ttft_seconds=0.4)
    with BedrockEmulator([spec], time_scale=20) as emulator:
        client = emulator.client(max_pool_connections=4)
        config = BenchConfig(model_id=MODEL, requests=8, concurrency=4, warmup=2, max_tokens=100,
                             time_scale=20, tpm_quota=spec.tpm_quota, ttft_target_s=5)
        seen = []
        report = run_benchmark(client, PROMPTS, config, progress=lambda done, total, s: seen.append((done, total)))
    measured = [s for s in report.samples if not s.warmup]
    assert len(report.samples) == 10 and len(measured) == 8
    assert seen[-1] == (10, 10)
    by_prompt = {s.prompt_id: s.output_tokens for s in measured}
    assert by_prompt == {"a": 40, "b": 10}  # the expected lengths, as the server reported them
    assert all(s.ttft_s is not None and s.attempts == 1 for s in measured)
    # OTPS is undefined when a loaded machine reads a whole stream at once (first and last token at one
    # instant): such a sample has none, as the report's arithmetic expects, and the others have a rate
    assert all(s.otps is None or s.otps > 0 for s in measured) and any(s.otps is not None for s in measured)
    assert all(s.reserved == s.input_tokens + 100 for s in measured)
    assert report.summary["succeeded"] == 8 and report.summary["goodput"]["fraction"] == 1.0
    paths = write_report(report, tmp_path, "run")
    assert [p.name for p in paths] == ["run.json", "run.csv", "run.png"]
    assert json.loads(paths[0].read_text())["summary"]["requests"] == 8
    rows = list(csv.DictReader(paths[1].open()))
    assert len(rows) == 10 and rows[0]["prompt_id"] in ("a", "b")
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_throttles_inside_sdk_retries_are_counted_not_hidden_in_latency():
    # 1,000 TPM: each request reserves about 60 + 500 tokens, so concurrent ones get throttled.
    spec = ModelSpec(MODEL, tpm_quota=1_000, ttft_seconds=0.5)
    with BedrockEmulator([spec], time_scale=60) as emulator:
        client = emulator.client(max_pool_connections=4, retries={"total_max_attempts": 2, "mode": "standard"})
        config = BenchConfig(model_id=MODEL, requests=6, concurrency=4, warmup=0, max_tokens=500,
                             streaming=False, time_scale=60)
        report = run_benchmark(client, PROMPTS, config)
        server_throttles = sum(i.outcome == "throttled" for i in emulator.invocations)
    assert server_throttles > 0
    assert report.summary["throttles"] == server_throttles  # every throttle the server sent is counted
    assert report.summary["attempts"] == len(emulator.invocations)
    assert report.summary["failed"] == sum(1 for s in report.samples if s.error == "ThrottlingException")
    assert all(s.ttft_s is None and s.otps is None for s in report.samples)  # non-streaming: no TTFT


def test_open_loop_run_sends_every_request():
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=50) as emulator:
        config = BenchConfig(model_id=MODEL, requests=6, concurrency=None, rate_per_minute=600, warmup=0,
                             time_scale=50, seed=3)
        report = run_benchmark(emulator.client(max_pool_connections=8), PROMPTS, config)
    assert report.summary["requests"] == 6 and report.summary["succeeded"] == 6


def test_cli_bench_writes_reports_and_rejects_bad_input(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello there", "expected_output_tokens": 12}\n')
    code = main(["bench", "--emulator", "--prompts", str(prompts), "--model-id", MODEL, "--requests", "3",
                 "--warmup", "0", "--concurrency", "2", "--time-scale", "50", "--out", str(tmp_path / "r")])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["succeeded"] == 3 and summary["output_tokens"]["p50"] == 12
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["bench.csv", "bench.json", "bench.png"]
    prompts.write_text('{"prompt": ""}\n')
    assert main(["bench", "--emulator", "--prompts", str(prompts), "--model-id", MODEL]) == 2
    assert "needs a non-empty string 'prompt'" in capsys.readouterr().err


def test_cli_bench_without_prompts_replays_the_sample_shipped_in_the_package(tmp_path, capsys):
    """The README's bench command named bench/prompts.jsonl, which a pip install does not have (issue 34.15)."""
    from genai_pacer.testing.bench import SAMPLE_PROMPTS
    from genai_pacer.testing.cli import parser

    assert SAMPLE_PROMPTS.is_relative_to(Path(genai_pacer.__file__).parent)  # inside the package the wheel ships
    assert len(load_prompts(SAMPLE_PROMPTS)) == 48
    code = main(["bench", "--emulator", "--model-id", MODEL, "--requests", "2", "--warmup", "0", "--concurrency", "2",
                 "--time-scale", "200", "--out", str(tmp_path / "r")])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["succeeded"] == 2
    assert f"benchmark: 48 prompts (the sample shipped with genai-pacer, {SAMPLE_PROMPTS}; pass --prompts to replay " \
           "yours)" in captured.err
    assert parser().parse_args(["experiments"]).prompts is None  # experiments defaults to the same sample


def test_quota_plan_sizes_max_tokens_and_the_cap_with_the_planner():
    spec = ModelSpec(MODEL, tpm_quota=60_000, burndown=5, ttft_seconds=0.5, prefill_tokens_per_second=1_000,
                     output_tokens_per_second=50)
    prompts = [Prompt("x" * 4_000, 100), Prompt("x" * 4_000, 300)]  # 1,000 input tokens each
    plan = quota_plan(prompts, spec)
    assert plan["p99_output_tokens"] == math.ceil(100 + 200 * 0.99)  # 298
    assert plan["max_tokens"] == math.ceil(298 * 1.1)
    # call = 0.5 + 1,000/1,000 + 200/50 = 5.5 s; settled = 1,000 + 200 x 5 = 2,000 > reserved, so
    # settlement binds: 60,000 / 2,000 = 30 requests/min, x 5.5 s / 60 = 2.75 -> 2 in flight.
    assert plan["call_seconds"] == 5.5 and plan["settled_per_request"] == 2_000
    assert plan["sustainable_requests_per_minute"] == 30.0 and plan["max_concurrency"] == 2


def test_cli_bench_against_a_running_emulator_needs_no_aws_credentials(tmp_path, monkeypatch, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello there", "expected_output_tokens": 4}\n')
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=50) as emulator:
        code = main(["bench", "--endpoint-url", emulator.endpoint_url, "--prompts", str(prompts), "--model-id", MODEL,
                     "--requests", "2", "--warmup", "0", "--no-stream", "--out", str(tmp_path / "r")])
        served = len(emulator.invocations)
    assert code == 0 and served == 2
    assert json.loads(capsys.readouterr().out)["succeeded"] == 2


def test_cli_model_flags_become_the_emulated_model():
    from genai_pacer.testing.cli import _spec, parser

    args = parser().parse_args(["emulator", "--model-id", MODEL, "--rpm", "50", "--optimized-tpm", "9000",
                                "--burndown", "5", "--otps", "90"])
    spec = _spec(args)
    assert (spec.rpm_quota, spec.burndown, spec.output_tokens_per_second) == (50, 5, 90)
    assert spec.tpm_quota == 400_000 and spec.latency_optimized.tpm_quota == 9_000


# ---- the command line: every input error is one line and a non-zero exit, never a traceback ----------

def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """Run `genai-pacer argv` in-process: (exit status, stderr). An escaping exception fails the test."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own exit for a bad flag
        code = exit_.code
    return code, capsys.readouterr().err


@pytest.fixture
def no_aws(tmp_path, monkeypatch):
    """No credentials and no Region from anywhere botocore looks."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


BENCH = ["bench", "--prompts", "{ok}", "--model-id", MODEL, "--requests", "1", "--warmup", "0", "--out", "{out}"]
BAD_INPUT = [
    # (case, argv, what the one line says)
    ("missing prompts file", ["bench", "--emulator", "--prompts", "{missing}", "--model-id", MODEL],
     "missing.jsonl: No such file or directory"),
    ("prompts file is a directory", ["bench", "--emulator", "--prompts", "{tmp}", "--model-id", MODEL],
     "Is a directory"),
    ("malformed line", ["bench", "--emulator", "--prompts", "{malformed}", "--model-id", MODEL],
     "malformed.jsonl:2: not JSON"),
    ("empty prompts file", ["bench", "--emulator", "--prompts", "{empty}", "--model-id", MODEL], "no prompts"),
    ("not a number", [*BENCH, "--emulator", "--concurrency", "x"], "argument --concurrency: 'x' is not an integer >= 1"),
    ("zero concurrency", [*BENCH, "--emulator", "--concurrency", "0"], "'0' is not an integer >= 1"),
    ("zero rate", [*BENCH, "--emulator", "--rate", "0"], "argument --rate: '0' is not a number > 0"),
    ("rate and concurrency", [*BENCH, "--emulator", "--rate", "5", "--concurrency", "2"], "not allowed with argument"),
    ("no requests", [*BENCH, "--emulator", "--requests", "0"], "argument --requests"),
    ("negative warm-up", [*BENCH, "--emulator", "--warmup", "-1"], "argument --warmup: '-1' is not an integer >= 0"),
    ("no attempts", [*BENCH, "--emulator", "--max-attempts", "0"], "argument --max-attempts"),
    ("zero TPM, once silently the default", [*BENCH, "--emulator", "--tpm", "0"], "argument --tpm: '0'"),
    ("zero time scale", [*BENCH, "--emulator", "--time-scale", "0"], "argument --time-scale"),
    ("NaN burndown", [*BENCH, "--emulator", "--burndown", "nan"], "argument --burndown: 'nan' is not a number >= 1"),
    ("unknown flag", [*BENCH, "--emulator", "--fast"], "unrecognized arguments: --fast"),
    ("missing model id", ["bench", "--emulator", "--prompts", "{ok}"], "required: --model-id"),
    ("Region with the emulator", [*BENCH, "--emulator", "--region", "us-east-1"], "--region is for real Bedrock"),
    ("emulator flags for real Bedrock", [*BENCH, "--region", "us-east-1", "--otps", "90", "--jitter", "0"],
     "--otps, --jitter: only for the in-process emulator"),
    ("time scale for real Bedrock", [*BENCH, "--region", "us-east-1", "--time-scale", "5"], "real Bedrock runs in real time"),
    ("no Region for real Bedrock", BENCH, "real Bedrock needs a Region: pass --region"),
    ("no credentials for real Bedrock", [*BENCH, "--region", "us-east-1"], "no AWS credentials found for real Bedrock"),
    ("--out under a file", [*BENCH, "--emulator", "--out", "{ok}/results"], "Not a directory"),
    ("experiments without their prompts", ["experiments", "--prompts", "{missing}"], "No such file or directory"),
    ("port out of range", ["emulator", "--port", "70000"], "argument --port: '70000' is not an integer >= 0 and <= 65535"),
]


@pytest.mark.parametrize(("argv", "says"), [case[1:] for case in BAD_INPUT], ids=[case[0] for case in BAD_INPUT])
def test_cli_input_errors_are_one_line_and_exit_2(argv, says, tmp_path, capsys, no_aws):
    files = {"ok": tmp_path / "ok.jsonl", "malformed": tmp_path / "malformed.jsonl", "empty": tmp_path / "empty.jsonl",
             "missing": tmp_path / "missing.jsonl", "tmp": tmp_path, "out": tmp_path / "out"}
    files["ok"].write_text('{"prompt": "hello there", "expected_output_tokens": 4}\n')
    files["malformed"].write_text('{"prompt": "fine", "expected_output_tokens": 4}\n{"prompt": \n')
    files["empty"].write_text("\n")
    code, err = _cli([arg.format(**files) for arg in argv], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert says in err
    assert not (tmp_path / "out").exists()  # refused before the run: no report, no model call


def test_cli_input_error_from_the_installed_command_has_no_traceback(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    command = Path(sys.executable).with_name("genai-pacer")
    result = subprocess.run([str(command), "bench", "--emulator", "--prompts", str(tmp_path / "missing.jsonl"),
                             "--model-id", MODEL], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == f"genai-pacer bench: {tmp_path / 'missing.jsonl'}: No such file or directory\n"


def test_cli_bench_exits_1_when_no_request_succeeded(tmp_path, capsys, no_aws):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello there", "expected_output_tokens": 4}\n')
    with BedrockEmulator([ModelSpec("us.amazon.nova-pro-v1:0")], time_scale=50) as emulator:  # serves another model
        code, err = _cli(["bench", "--endpoint-url", emulator.endpoint_url, "--prompts", str(prompts),
                          "--model-id", MODEL, "--requests", "3", "--warmup", "0", "--max-attempts", "1",
                          "--out", str(tmp_path / "r")], capsys)
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("genai-pacer bench: none of the 3 requests succeeded (") and "x3)" in last
    assert json.loads((tmp_path / "r" / "bench.json").read_text())["summary"]["failed"] == 3  # the report is kept


def test_make_bench_emulates_the_reference_stacks_current_model_with_its_burndown():
    """`make bench` once emulated Claude 3.5 Haiku, past its Bedrock end of life (2026-06-19)."""
    import re

    from genai_pacer import BedrockModel

    from stacks.settings import CONTEXT_DEFAULTS

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    settings = dict(re.findall(r"^(BENCH_MODEL|BENCH_BURNDOWN) := (\S+)$", makefile, re.MULTILINE))
    assert settings == {"BENCH_MODEL": CONTEXT_DEFAULTS["model_id"][0], "BENCH_BURNDOWN": CONTEXT_DEFAULTS["burndown"][0]}
    assert BedrockModel.from_id(settings["BENCH_MODEL"]).retirement is None
    bench_lines = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert bench_lines.count("--model-id $(BENCH_MODEL)") == bench_lines.count("--burndown $(BENCH_BURNDOWN)") == 2


def _bench_script(name: str):
    """A script of bench/ as a module (bench/ is no package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _tier_bench():
    return _bench_script("service_tier_experiment")


def test_the_tier_benchmark_sends_the_same_arrivals_at_each_class_tier_then_all_at_default():
    """Its figures mean something only if the tiered run asks for (and is served at) each arrival's class
    and the untiered run sends the very same arrivals at default; no timing is asserted."""
    bench = _tier_bench()
    plan = bench.arrivals(seed=4, count=9, per_minute=600)
    assert plan == bench.arrivals(seed=4, count=9, per_minute=600)  # both scenarios get this one plan
    assert {klass for _, klass in plan} == set(bench.TIERS)
    prompts = bench.load_prompts(bench.DEFAULT_PROMPTS)
    tiered, untiered = (bench.run(scenario, plan, prompts, seed=4, slots=2, max_queue_seconds=600, time_scale=200)
                        for scenario in ("tiered", "untiered"))
    assert [(r["class"], r["asked"], r.get("served")) for r in tiered] == [(k, k, k) for _, k in plan]
    assert [(r["class"], r["asked"], r.get("served")) for r in untiered] == [(k, "default", "default") for _, k in plan]
    figures = bench.summary(tiered)
    assert sum(figures[k]["requests"] for k in bench.TIERS) == 9
    assert all(figures[k]["refused"] == 0 and figures[k]["ttft_s_p50"] is not None for k in bench.TIERS)


def _priority_flex_bench():
    return _bench_script("priority_flex_experiment")


def test_the_priority_flex_benchmark_reports_each_regime_load_and_arm_and_shows_what_the_tiers_do(tmp_path):
    """A tiny run on the ManualClock (model time moves only once every call is blocked, so the figures
    are the seed's, on any machine): the report's structure, and the two effects the scenario is built
    to show. Serving-bound (one slot), Priority's interactive calls jump the queue the untiered ones
    wait in; quota-bound, the one on-demand quota throttles Priority too. One attempt per call: no
    client backoff, so no two calls wake at the same step and race."""
    bench = _priority_flex_bench()
    out = tmp_path / "pf.json"
    assert bench.main(["--loads", "2", "--seeds", "1", "--requests", "24", "--slots", "1", "--quota-tpm", "20000",
                       "--attempts", "1", "--manual-clock", "0.1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["clock"] == "ManualClock, 0.1 model s a step"
    assert set(report["results"]) == {"quota-bound", "serving-bound"}
    for regime in report["results"].values():
        entry = regime["loads"]["2x"]
        assert regime["capacity_calls_per_minute"] > 0
        for arm in bench.ARMS:
            (run,) = entry["runs"][arm]
            assert run["seed"] == 0
            assert sum(run[k]["requests"] for k in bench.CLASSES) == 24
            for klass in bench.CLASSES:
                assert set(entry["spread"][arm][klass]) == set(bench.METRICS)
                assert {"mean", "min", "max", "ci95"} <= set(entry["spread"][arm][klass]["ttft_s_p99"])
        assert set(entry["tiered_minus_untiered"]["interactive"]) == set(bench.METRICS)
    table = out.with_suffix(".md").read_text().splitlines()
    assert len(table) == 2 + 2 * 2 and table[2].startswith("| quota-bound | 2x | tiered |")

    serving = report["results"]["serving-bound"]["loads"]["2x"]["runs"]
    tiered, untiered = serving["tiered"][0]["interactive"], serving["untiered"][0]["interactive"]
    assert tiered["ttft_s_p50"] < untiered["ttft_s_p50"] and tiered["ttft_s_p99"] < untiered["ttft_s_p99"]
    quota = report["results"]["quota-bound"]["loads"]["2x"]["runs"]["tiered"][0]
    assert quota["interactive"]["throttled_attempts"] > 0  # Priority has no room of its own in the quota
    assert quota["interactive"]["failed"] == quota["interactive"]["throttled_attempts"]  # one attempt each


def test_the_priority_flex_benchmark_sends_the_same_arrivals_to_both_arms_at_their_tiers():
    """The arms are paired: the same seed gives the same arrivals, classes and prompts; the tiered arm
    asks (and is served, or the run raises) priority for interactive calls and flex for background ones,
    the untiered arm default for both."""
    bench = _priority_flex_bench()
    prompts = bench.load_prompts(bench.DEFAULT_PROMPTS)
    plan = bench.arrivals(3, 10, 120, 0.5, prompts)
    assert plan == bench.arrivals(3, 10, 120, 0.5, prompts)
    assert {klass for _, klass, _ in plan} == set(bench.CLASSES)
    spec = bench.model_spec("serving-bound", quota_tpm=80_000, slots=2, max_queue_seconds=600)
    for arm, asked in (("tiered", bench.TIERS), ("untiered", {k: "default" for k in bench.CLASSES})):
        records = bench.run(arm, plan, spec, seed=3, attempts=1, time_scale=1, step=0.1)
        assert [(r["class"], r["asked"], r["arrived_s"]) for r in records] == [
            (klass, asked[klass], round(at, 4)) for at, klass, _ in plan]
        assert all("error" not in r and r["ttft_s"] <= r["e2e_s"] for r in records)
