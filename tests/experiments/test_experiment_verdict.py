"""The verdict: end to end through the emulator (two variants of different speed, a few thousand
users, real boto3 calls), the sample-ratio check catching an injected assignment bias, the
statistics against known answers, the report and chart, and bad input."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from genai_pacer import InvalidPropsError
from genai_pacer.experiments.verdict import (
    VariantData,
    chi_square_sf,
    read_log,
    sample_ratio_check,
    verdict,
    wilson,
)
from genai_pacer.testing import ModelSpec
from pacer_runtime import experiment as runtime
from pacer_runtime.experiment import Experiment, assign, call_variant, record_outcome

FAST, SLOW = "us.amazon.nova-lite-v1:0", "us.anthropic.claude-3-5-haiku-20241022-v1:0"
USERS = 2_000
THREADS = 32
DOCUMENT = {
    "experiment": "support", "salt": "e2e", "control": "control",
    "variants": [
        {"name": "control", "share": 80, "modelId": FAST, "prompt": {"template": "Answer: {{question}}"},
         "inferenceConfig": {"maxTokens": 64}},
        {"name": "slower", "share": 20, "modelId": SLOW, "prompt": {"template": "Think, then answer: {{question}}"},
         "inferenceConfig": {"maxTokens": 64}},
    ],
}


@pytest.fixture
def bedrock_emulator_models():
    # The treatment's model starts answering 0.6 s later; both decode 20 tokens at 60 tokens/s.
    return [ModelSpec(FAST, ttft_seconds=0.4, answer_tokens=20, jitter=0.15),
            ModelSpec(SLOW, ttft_seconds=1.0, answer_tokens=20, jitter=0.15)]


@pytest.fixture
def bedrock_emulator_time_scale():
    return 2_000.0  # a 0.7 s model call takes well under a millisecond of wall time


def run(client, experiment: Experiment, users: int) -> list[str]:
    """Every user asks once; a quarter of the control's users and a tenth of the treatment's say thumbs-up."""
    out = io.StringIO()

    def one(i: int) -> None:
        user = f"user-{i}"
        variant, _ = call_variant(client, experiment, user, variables={"question": f"order {i}?"})
        rate = 0.25 if variant.name == "control" else 0.10
        if random.Random(i).random() < rate:
            record_outcome(experiment, user, "thumbs_up")

    # 32 at once: each emulated call waits ~40 ms of wall time for TCP's delayed ACK (the emulator's
    # reply goes out in two writes), whatever the time scale.
    with contextlib.redirect_stdout(out), ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, range(users)))
    return out.getvalue().splitlines()


@pytest.fixture
def emulated_log(bedrock_emulator):
    experiment = Experiment.from_config(DOCUMENT)
    client = bedrock_emulator.client(max_pool_connections=THREADS, retries={"total_max_attempts": 1})
    lines = run(client, experiment, USERS)
    assert len(bedrock_emulator.invocations) == USERS  # every user's call really went through the emulator
    return experiment, client, lines


def test_the_verdict_detects_the_slower_variant_and_the_lower_thumbs_up_rate(emulated_log, tmp_path):
    experiment, _, lines = emulated_log
    data = read_log(lines, latency_field="ServiceLatencyMs")  # model time: independent of machine load
    result = verdict(data, split=experiment.shares, control="control", experiment="support")
    assert result.trustworthy, result.report()
    users = {v.name: v.users for v in result.variants}
    assert sum(users.values()) == USERS and all(v.calls == v.users for v in result.variants)
    for q in (50, 90):
        assert result.significant("slower", f"latency p{q}"), result.report()
    p50 = next(c for c in result.comparisons if c.metric == "latency p50")
    assert 400 < p50.difference < 800  # the 600 ms TTFT gap, within jitter
    assert result.significant("slower", "thumbs_up")
    assert not result.significant("slower", "error rate")
    report = result.report()
    assert report.index("Sample ratio: OK") < report.index("Differences against")
    path = result.chart(tmp_path / "verdict.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_an_injected_assignment_bias_is_caught_by_the_sample_ratio_check_first(bedrock_emulator, monkeypatch):
    """A broken assignment (a third of the treatment's users served the control, e.g. a process on a
    stale split) leaves the latency difference in place but fails the sample-ratio check."""
    experiment = Experiment.from_config(DOCUMENT)

    def biased(e: Experiment, unit_id: str) -> runtime.Variant:
        chosen = assign(e, unit_id)
        if chosen.name == "slower" and int(unit_id.rsplit("-", 1)[1]) % 3 == 0:
            return e.variant("control")
        return chosen

    monkeypatch.setattr(runtime, "assign", biased)
    client = bedrock_emulator.client(max_pool_connections=THREADS, retries={"total_max_attempts": 1})
    lines = run(client, experiment, USERS)
    result = verdict(read_log(lines, latency_field="ServiceLatencyMs"), split=experiment.shares, control="control")
    assert not result.trustworthy
    assert result.sample_ratio.p_value < 0.001
    report = result.report()
    assert report.index("SAMPLE RATIO MISMATCH") < report.index("latency p50")
    assert "Do not read" in report and "(untrustworthy: sample ratio mismatch)" in report


# ---- statistics against known answers --------------------------------------------------------


@pytest.mark.parametrize(("x", "df", "p"), [(3.841459, 1, 0.05), (6.634897, 1, 0.01), (10.827566, 1, 0.001),
                                            (5.991465, 2, 0.05), (16.918978, 9, 0.05), (0.454936, 1, 0.5)])
def test_chi_square_tail_matches_the_tables(x, df, p):
    assert chi_square_sf(x, df) == pytest.approx(p, rel=1e-4)


def test_wilson_interval_matches_the_textbook_example():
    rate = wilson(81, 263)  # Newcombe (1998): 0.2553 to 0.3662
    assert (round(rate.low, 4), round(rate.high, 4)) == (0.2553, 0.3662)
    assert wilson(0, 10).low == 0 and 0.25 < wilson(0, 10).high < 0.35


def test_the_sample_ratio_check_passes_a_fair_split_and_fails_a_skewed_one():
    assert sample_ratio_check({"a": 8_050, "b": 1_950}, {"a": 80, "b": 20}).ok
    skewed = sample_ratio_check({"a": 8_300, "b": 1_700}, {"a": 80, "b": 20})
    assert not skewed.ok and skewed.chi_square == pytest.approx(56.25)
    stray = sample_ratio_check({"a": 100, "b": 0, "c": 3}, {"a": 100, "b": 0, "c": 0})
    assert not stray.ok  # users in a variant with no share: broken by definition


def samples(name: str, n: int, mu: float, seed: int, thumbs: float = 0.0) -> VariantData:
    rng = random.Random(seed)
    data = VariantData(name)
    for i in range(n):
        unit = f"{name}-{i}"
        data.units.add(unit)
        data.latencies_ms.append(rng.lognormvariate(mu, 0.3))
        if rng.random() < thumbs:
            data.outcome_units.setdefault("thumbs_up", set()).add(unit)
    return data


def test_equal_variants_are_not_significant_and_intervals_cover_the_truth():
    a, b = samples("a", 3_000, 7.0, 1, 0.2), samples("b", 3_000, 7.0, 2, 0.2)
    result = verdict({"a": a, "b": b}, split={"a": 50, "b": 50}, control="a")
    assert not any(c.significant for c in result.comparisons), result.report()
    for variant in result.variants:
        p50 = variant.latency[0]
        assert p50.low <= math.exp(7.0) <= p50.high  # the log-normal's true median


def test_three_variants_are_compared_at_a_bonferroni_corrected_level():
    data = {n: samples(n, 1_000, mu, i) for i, (n, mu) in enumerate((("a", 7.0), ("b", 7.0), ("c", 7.2)))}
    result = verdict(data, split={"a": 34, "b": 33, "c": 33}, control="a", level=0.05)
    assert result.corrected_level == pytest.approx(0.025)
    assert result.significant("c", "latency p50") and not result.significant("b", "latency p50")
    assert "Bonferroni over 2 treatments" in result.report()


def test_read_log_takes_exported_lines_and_picks_one_experiment():
    lines = [
        '2026-11-30T03:00:00.000Z {"Experiment": "e1", "Variant": "a", "Unit": "u1", "LatencyMs": 100}',
        '{"Experiment": "e1", "Variant": "a", "Unit": "u2", "CallErrors": 1}',
        '{"Experiment": "e1", "Variant": "b", "Unit": "u3", "ThumbsUp": 1, "Outcome": "thumbs_up"}',
        '{"Experiment": "e2", "Variant": "a", "Unit": "u9", "LatencyMs": 5}',
        "START RequestId: abc", '{"level": "info"}', "{not json",
    ]
    with pytest.raises(ValueError, match=r"experiments \['e1', 'e2'\]; pass experiment="):
        read_log(lines)
    data = read_log(lines, experiment="e1")
    assert data["a"].users == 2 and data["a"].latencies_ms == [100.0] and data["a"].errors == 1
    assert data["b"].outcome_units == {"thumbs_up": {"u3"}} and data["b"].calls == 0


def test_metric_data_without_samples_gives_counts_and_rates():
    a, b = VariantData("a", unit_count=900, errors=9), VariantData("b", unit_count=100, errors=1)
    a.latencies_ms, b.latencies_ms = [1.0] * 891, [1.0] * 99
    result = verdict({"a": a, "b": b}, split={"a": 90, "b": 10}, control="a")
    assert result.trustworthy and result.variants[0].error_rate.value == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": {"a": 90, "b": 20}}, "split shares sum to 110, not 100"),
        ({"split": {"a": 100}}, "needs a control and at least one treatment"),
        ({"split": {"a": 50, "b": math.nan}}, r"split\['b'\]=nan is not a finite number"),
        ({"split": [("a", 50)]}, "split=.* is a list"),
        ({"control": "z"}, "control='z' is not in split"),
        ({"level": 0}, "level=0 must be greater than 0"),
        ({"level": 0.9}, "level=0.9 exceeds the maximum of 0.5"),
        ({"level": math.inf}, "level=inf is not a finite number"),
        ({"srm_level": -1}, "srm_level=-1 must be greater than 0"),
        ({"resamples": 10}, "resamples=10 is below the minimum of 100"),
        ({"resamples": 1.5}, "resamples=1.5 is not a whole number"),
        ({"seed": "x"}, "seed='x' is a str"),
        ({"data": [1]}, "data is list"),
        ({"data": {"zz": VariantData("zz")}}, r"variants \['zz'\] that split does not name"),
        # found by a new-user sweep: each was accepted (an empty log read as "Sample ratio: OK") or failed deep
        ({"data": {}}, "the data holds no users or calls for any variant of split"),
        ({"data": {"a": {"units": 3}}}, r"data\['a'\] is dict; pass VariantData"),
        ({"data": {"a": VariantData("a", units={"u"}, latencies_ms=[math.nan])}}, r"data\['a'\].latencies_ms holds values"),
        ({"split": {"a": 0, "b": 100}}, "control 'a' has share 0 in split"),
        ({"experiment": None}, "experiment is required"),
    ],
)
def test_bad_verdict_input_is_refused(kwargs, message):
    args = {"data": {"a": samples("a", 50, 7, 1), "b": samples("b", 50, 7, 2)}, "split": {"a": 50, "b": 50},
            "control": "a", **kwargs}
    data = args.pop("data")
    with pytest.raises(InvalidPropsError, match=message):
        verdict(data, **args)


def test_emf_lines_round_trip_through_the_verdict_reader():
    """The reader reads exactly what the runtime prints (not a hand-written imitation)."""
    from pacer_runtime.bedrock import ConverseResult

    experiment = Experiment.from_config(DOCUMENT)
    out = io.StringIO()
    result = ConverseResult("ok", 1, 2, 0, 0, "end_turn", 321.0, 300, "standard")
    with contextlib.redirect_stdout(out):
        variant = assign(experiment, "u")
        runtime.record_call(experiment, variant, "u", result)
        record_outcome(experiment, "u", "resolution")
    data = read_log(out.getvalue().splitlines())
    assert data[variant.name].latencies_ms == [321.0] and data[variant.name].users == 1
    assert list(data[variant.name].outcome_units) == ["resolution"]
    assert json.loads(out.getvalue().splitlines()[0])["Variant"] == variant.name


def test_a_failed_call_is_counted_for_its_variant_and_reaches_the_error_rate(bedrock_emulator):
    experiment = Experiment.from_config(DOCUMENT)
    client = bedrock_emulator.client(retries={"total_max_attempts": 1})
    out = io.StringIO()
    user = next(f"user-{i}" for i in range(100) if assign(experiment, f"user-{i}").name == "slower")
    bedrock_emulator.fail_next("ModelTimeoutException", operation="Converse")
    with contextlib.redirect_stdout(out), pytest.raises(Exception, match="ModelTimeoutException"):
        call_variant(client, experiment, user, variables={"question": "q"})
    with contextlib.redirect_stdout(out):
        call_variant(client, experiment, user, variables={"question": "q"})
    data = read_log(out.getvalue().splitlines())
    assert (data["slower"].errors, len(data["slower"].latencies_ms), data["slower"].users) == (1, 1, 1)
    error_line = json.loads(out.getvalue().splitlines()[0])
    assert error_line["ErrorCode"] == "ModelTimeoutException" and error_line["Variant"] == "slower"


# ---- found by a new-user sweep ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda: read_log(None), InvalidPropsError, "lines=None is NoneType; pass a path"),
        (lambda: read_log(5), InvalidPropsError, "lines=5 is int"),
        (lambda: read_log([], latency_field=""), InvalidPropsError, "latency_field='' is empty"),
        (lambda: read_log([], experiment=5), InvalidPropsError, "experiment=5 is an int"),
        (lambda: read_log(['{"Experiment": "e", "Variant": "a", "LatencyMs": "slow"}']), ValueError,
         "line 1: LatencyMs='slow' is not a latency in ms"),
        (lambda: read_log(['{}', '{"Experiment": "e", "Variant": "a", "LatencyMs": NaN}']), ValueError,
         "line 2: LatencyMs=nan is not a latency"),
        (lambda: read_log(['{"Experiment": "e", "Variant": "a", "LatencyMs": -3}']), ValueError, "LatencyMs=-3"),
        (lambda: read_log(['{"Experiment": "e", "Variant": "a", "CallErrors": "x"}']), ValueError,
         "line 1: CallErrors='x' is not a count"),
        (lambda: read_log(['{"Experiment": "e", "Variant": "a", "LatencyMs": 5}'], experiment="support"), ValueError,
         r"no records of experiment='support', only of \['e'\]"),
        (lambda: sample_ratio_check(None, {"a": 50, "b": 50}), InvalidPropsError, "observed is required"),
        (lambda: sample_ratio_check({"a": 50, "b": 50}, {"a": 50, "b": 40}), InvalidPropsError, "split shares sum to 90"),
        (lambda: sample_ratio_check({"a": -5, "b": 50}, {"a": 50, "b": 50}), InvalidPropsError, r"observed\['a'\]=-5"),
        (lambda: sample_ratio_check({"a": 5.5, "b": 50}, {"a": 50, "b": 50}), InvalidPropsError, "not a whole number"),
        (lambda: sample_ratio_check({"a": 5, "b": 5}, {"a": 50, "b": 50}, level=2), InvalidPropsError, "level=2 exceeds"),
        (lambda: wilson(5, 3), InvalidPropsError, "successes=5 is more than trials=3"),
        (lambda: wilson(-1, 10), InvalidPropsError, "successes=-1 is below the minimum of 0"),
        (lambda: wilson(1.5, 10), InvalidPropsError, "successes=1.5 is not a whole number"),
        (lambda: wilson(5, 10, level=0), InvalidPropsError, "level=0 must be greater than 0"),
        (lambda: wilson(5, 10, level=1.5), InvalidPropsError, "level=1.5 exceeds the maximum"),
        (lambda: chi_square_sf(math.nan, 1), InvalidPropsError, "x=nan is not a finite number"),
        (lambda: chi_square_sf(3.0, 0), InvalidPropsError, "df=0 is below the minimum of 1"),
    ],
)
def test_bad_reader_and_statistics_input_is_refused_with_the_line_or_the_rule(call, kind, message):
    with pytest.raises(kind, match=message):
        call()


def test_read_log_takes_the_logs_text_and_parsed_records_too():
    text = '{"Experiment": "e", "Variant": "a", "Unit": "u1", "LatencyMs": 5}\n{"Experiment": "e", "Variant": "b", "Unit": "u2", "LatencyMs": 7}'
    assert sorted(read_log(text)) == ["a", "b"]  # a string with lines is the log, not a file name
    records = [{"Experiment": "e", "Variant": "a", "Unit": "u1", "LatencyMs": 5}]
    assert read_log(records)["a"].latencies_ms == [5.0]


def test_rate_differences_use_newcombes_interval_which_keeps_a_width_at_zero():
    """Newcombe (1998), method 10, the worked example: 56/70 against 48/80, difference 0.2, 95% CI
    0.0524 to 0.3339. And at 0 errors in both arms the old Wald interval was the point [0, 0]."""
    from genai_pacer.experiments.verdict import _two_proportions

    diff, low, high, _ = _two_proportions(wilson(48, 80), wilson(56, 70), 0.05)
    assert (diff, low, high) == pytest.approx((0.2, 0.0524, 0.3339), abs=5e-5)
    diff, low, high, p = _two_proportions(wilson(0, 1800), wilson(0, 200), 0.05)
    assert diff == 0 and low < 0 < high and high == pytest.approx(wilson(0, 200).high, rel=1e-9) and p == 1


def test_chart_checks_its_path_before_drawing(tmp_path):
    result = verdict({"a": samples("a", 50, 7, 1), "b": samples("b", 50, 7, 2)}, split={"a": 50, "b": 50}, control="a")
    with pytest.raises(InvalidPropsError, match="does not end in .png"):
        result.chart(tmp_path / "verdict.txt")
    with pytest.raises(InvalidPropsError, match="the folder .* does not exist; create it first"):
        result.chart(tmp_path / "missing" / "verdict.png")
    with pytest.raises(InvalidPropsError, match="path is required"):
        result.chart(None)


def test_the_verdict_reads_the_runtimes_names_not_copies_of_them():
    """OUTCOMES and the record field names were literal copies of pacer_runtime.metrics: a renamed metric
    or a new outcome would have been silently skipped by read_log."""
    import inspect

    from genai_pacer.experiments import verdict as experiment_verdict
    from pacer_runtime import metrics

    assert tuple(metrics.OUTCOMES) == experiment_verdict.OUTCOMES
    assert inspect.signature(experiment_verdict.read_log).parameters["latency_field"].default == metrics.LATENCY_MS
    source = inspect.getsource(experiment_verdict)
    copies = [f'"{name}"' for name in (metrics.EXPERIMENT_DIMENSION, metrics.VARIANT_DIMENSION, metrics.CALL_ERRORS,
                                       metrics.LATENCY_MS, *metrics.OUTCOMES) if f'"{name}"' in source]
    assert copies == []
    record = {metrics.EXPERIMENT_DIMENSION: "e", metrics.VARIANT_DIMENSION: "a", "Unit": "u1", metrics.CALL_ERRORS: 2}
    data = experiment_verdict.read_log([record, {**record, metrics.CALL_ERRORS: 0, metrics.LATENCY_MS: 120.0}])
    assert (data["a"].errors, data["a"].latencies_ms) == (2, [120.0])
