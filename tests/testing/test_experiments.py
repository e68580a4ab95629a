"""The experiments' repeated-trial arithmetic on synthetic numbers, and the like-for-like rule of the
quota experiment on what each strategy actually sends (no experiment is run: the runners are fakes)."""

from __future__ import annotations

import math
import statistics

import pytest
from genai_pacer import InvalidPropsError
from genai_pacer.testing import experiments
from genai_pacer.testing.bench import Prompt
from genai_pacer.testing.emulator import ModelSpec
from genai_pacer.testing.experiments import (
    NAIVE_MAX_TOKENS,
    compare,
    quota_experiment,
    quota_plan,
    quota_strategies,
    spread,
    strategy_requests,
    summary_markdown,
    t_quantile,
)

SPEC = ModelSpec("us.anthropic.claude-3-5-haiku-20241022-v1:0", tpm_quota=60_000, burndown=5, ttft_seconds=0.5,
                 prefill_tokens_per_second=1_000, output_tokens_per_second=50, max_output_tokens=8_192)
PROMPTS = [Prompt("x" * 4_000, 100), Prompt("y" * 4_000, 300), Prompt("z" * 2_000, 150)]


# ---- spread and comparisons ----------------------------------------------------------------------

def test_spread_gives_mean_range_and_a_t_interval():
    s = spread([1, 2, 3, 4, 5])
    half = 2.776 * statistics.stdev([1, 2, 3, 4, 5]) / math.sqrt(5)  # t(0.975, df 4) = 2.776
    assert (s["n"], s["mean"], s["min"], s["max"]) == (5, 3.0, 1.0, 5.0)
    assert s["ci95"] == [pytest.approx(3 - half, abs=1e-4), pytest.approx(3 + half, abs=1e-4)]
    assert s["values"] == [1, 2, 3, 4, 5]


def test_spread_leaves_out_missing_trials_and_needs_two_for_an_interval():
    s = spread([None, 4.0, None, 6.0])  # a p99 with no successful request in trials 1 and 3
    assert (s["n"], s["mean"], s["min"], s["max"]) == (2, 5.0, 4.0, 6.0)
    assert s["ci95"] == [pytest.approx(5 - 12.706 * math.sqrt(2) / math.sqrt(2)), pytest.approx(5 + 12.706)]
    assert spread([7.0])["ci95"] is None and spread([7.0])["mean"] == 7.0
    assert spread([None, None]) == {"n": 0, "mean": None, "min": None, "max": None, "ci95": None, "values": [None, None]}
    assert spread([2.0, 2.0, 2.0])["ci95"] == [2.0, 2.0]  # no variation, no width


def test_t_quantile_is_conservative_between_listed_degrees_of_freedom():
    assert t_quantile(4) == 2.776 and t_quantile(1) == 12.706
    assert t_quantile(22) == t_quantile(20) == 2.086  # the next smaller listed df: a wider interval
    assert t_quantile(500) == 1.96
    with pytest.raises(ValueError, match="df=0 must be >= 1"):
        t_quantile(0)


@pytest.mark.parametrize(("a", "b", "differs", "overlap"), [
    # separate ranges, every trial moves the same way: a difference
    ([80, 82, 81, 83, 80], [90, 91, 89, 92, 90], True, False),
    # the same constant in every trial (connections opened: 310 vs 40): a difference with no spread
    ([310] * 5, [40] * 5, True, False),
    # the paired interval excludes 0 (b is always 1 above a) but the ranges overlap: within the spread
    ([80, 85, 90, 95, 100], [81, 86, 91, 96, 101], False, True),
    # ranges that touch count as overlapping
    ([1, 2, 3, 4, 5], [5, 6, 7, 8, 9], False, True),
    # noise around the same level: within the spread
    ([696, 612, 650, 700, 640], [770, 582, 640, 690, 655], False, True),
    # identical: no difference
    ([3, 3, 3], [3, 3, 3], False, True),
])
def test_compare_states_a_difference_only_where_it_exceeds_the_spread(a, b, differs, overlap):
    row = compare(a, b)
    assert row["differs"] is differs and row["ranges_overlap"] is overlap
    assert row["n"] == len(a)
    assert row["mean_difference"] == pytest.approx(statistics.fmean(b) - statistics.fmean(a), abs=1e-4)


def test_compare_pairs_by_trial_and_skips_trials_missing_either_value():
    row = compare([10, None, 12, 11], [20, 25, None, 21])
    assert row["n"] == 2 and row["mean_difference"] == 10.0  # trials 1 and 4 only
    assert row["ci95"] == [10.0, 10.0] and row["differs"] is True
    assert compare([1.0], [2.0]) == {"n": 1, "mean_difference": 1.0, "ci95": None, "ranges_overlap": None,
                                     "differs": False}  # one trial says nothing about the spread
    with pytest.raises(ValueError, match="3 trials against 2; pair the same trials"):
        compare([1, 2, 3], [1, 2])


# ---- the quota experiment's rows: like with like ------------------------------------------------

def test_every_strategy_gets_the_shared_max_tokens_except_the_sizing_row():
    sized, shared = quota_plan(PROMPTS, SPEC), quota_plan(PROMPTS, SPEC, max_tokens=NAIVE_MAX_TOKENS)
    strategies = quota_strategies(sized, shared)
    assert [s.name for s in strategies] == ["unbounded", "adaptive", "genai-pacer", "genai-pacer-sized"]
    sizing = [s for s in strategies if s.sizing_of]
    assert [(s.name, s.sizing_of) for s in sizing] == [("genai-pacer-sized", "genai-pacer")]
    for strategy in strategies:
        sent = {r["inferenceConfig"]["maxTokens"] for r in strategy_requests(strategy, PROMPTS, SPEC.model_id)}
        assert sent == {sized["max_tokens"] if strategy.sizing_of else NAIVE_MAX_TOKENS}, strategy.name
    # The sizing row differs from the row it repeats only in max_tokens and the cap planned for it.
    pacer, resized = strategies[2], strategies[3]
    assert sized["max_tokens"] < NAIVE_MAX_TOKENS
    assert (pacer.max_in_flight, resized.max_in_flight) == (shared["max_concurrency"], sized["max_concurrency"])
    assert pacer.client_config["retries"] == resized.client_config["retries"] == {"total_max_attempts": 1}
    assert strategies[0].max_in_flight is None and strategies[1].max_in_flight is None


def test_quota_plan_for_a_given_max_tokens_plans_its_larger_reservation():
    sized, naive = quota_plan(PROMPTS, SPEC), quota_plan(PROMPTS, SPEC, max_tokens=4_096)
    assert naive["max_tokens"] == 4_096 and naive["p99_output_tokens"] == sized["p99_output_tokens"]
    assert naive["reserved_per_request"] == sized["reserved_per_request"] - sized["max_tokens"] + 4_096
    assert naive["sustainable_requests_per_minute"] < sized["sustainable_requests_per_minute"]


class _Totals:
    """What the emulator's totals would say for a run that sent nothing (the runners are fakes)."""

    requests, throttled, settled, in_flight = 0, 0, 0.0, 0


@pytest.fixture
def fake_runs(monkeypatch):
    """Replace the runners: record what each strategy would send, answer each request at once
    (the strategy's index + 1 seconds from arrival, unbounded's first request failing)."""
    sent: list[dict] = []

    def run(strategy, client, requests, arrivals, time_scale):
        index = [s.name for s in quota_strategies({"max_tokens": 1, "max_concurrency": 1},
                                                  {"max_tokens": 1, "max_concurrency": 1})].index(strategy.name)
        sent.append({"strategy": strategy.name, "max_tokens": [r["inferenceConfig"]["maxTokens"] for r in requests],
                     "prompts": [r["messages"][0]["content"][0]["text"] for r in requests], "arrivals": list(arrivals)})
        results = [{"error": "ThrottlingException" if strategy.name == "unbounded" and i == 0 else None,
                    "seconds": (index + 1) / time_scale, "call_seconds": 0.5 / time_scale} for i in range(len(requests))]
        return results, 0.25

    monkeypatch.setattr(experiments, "_run_strategy", run)
    monkeypatch.setattr(experiments.BedrockEmulator, "totals", property(lambda self: _Totals()))
    return sent


def test_each_trial_sends_every_strategy_the_same_arrivals_and_prompts_at_the_shared_max_tokens(fake_runs):
    result = quota_experiment(PROMPTS, spec=SPEC, trials=3, seed=7, arrival_minutes=0.5, time_scale=4,
                              e2e_target_seconds=2.5, log=lambda line: None)
    assert len(fake_runs) == 3 * 4
    sized = result["plan"]["max_tokens"]
    for trial in range(3):
        runs = fake_runs[4 * trial: 4 * trial + 4]
        assert len({tuple(r["arrivals"]) for r in runs}) == 1 and len({tuple(r["prompts"]) for r in runs}) == 1
        for run in runs:
            assert set(run["max_tokens"]) == {sized if run["strategy"] == "genai-pacer-sized" else NAIVE_MAX_TOKENS}
    assert len({tuple(fake_runs[4 * t]["arrivals"]) for t in range(3)}) == 3  # each seed its own arrivals
    settings = result["settings"]
    assert settings["seeds"] == [7, 8, 9] and settings["time_scale"] == 4 and settings["arrival_minutes"] == 0.5
    assert settings["shared_max_tokens"] == NAIVE_MAX_TOKENS and settings["e2e_target_s"] == 2.5
    # goodput: answered (not failed) within 2.5 s of arrival; the fakes answer strategy i after i+1 s.
    count = result["requests_per_trial"]
    goodput = {row["strategy"]: row["metrics"]["goodput"]["mean"] for row in result["strategies"]}
    assert goodput == {"unbounded": count - 1, "adaptive": count, "genai-pacer": 0, "genai-pacer-sized": 0}
    failed = {row["strategy"]: row["metrics"]["failed_requests"]["values"] for row in result["strategies"]}
    assert failed["unbounded"] == [1, 1, 1] and failed["adaptive"] == [0, 0, 0]
    p99 = next(row for row in result["strategies"] if row["strategy"] == "genai-pacer")["metrics"]["e2e_p99_s"]
    assert p99["mean"] == 3.0 and p99["ci95"] == [3.0, 3.0]
    # Goodput of genai-pacer against unbounded: count - 1 fewer in every trial, with no spread.
    row = next(c for c in result["comparisons"]
               if (c["a"], c["b"], c["metric"]) == ("unbounded", "genai-pacer", "goodput_pct"))
    assert row["differs"] is True and row["mean_difference"] == pytest.approx(-100 * (count - 1) / count, abs=0.01)
    sizing = [c for c in result["comparisons"] if c["b"] == "genai-pacer-sized"]
    assert sizing and all(c["a"] == "genai-pacer" and "max_tokens" in c["isolates"] for c in sizing)


def test_the_summary_tables_show_the_spread_and_say_which_differences_hold(fake_runs):
    quota = quota_experiment(PROMPTS, spec=SPEC, trials=2, arrival_minutes=0.2, log=lambda line: None)
    lines = summary_markdown(quota=quota).splitlines()
    strategy_rows = [line for line in lines if line.startswith(("| unbounded:", "| adaptive:", "| genai-pacer:",
                                                                 "| genai-pacer-sized:"))]
    comparison_rows = [line for line in lines if line.startswith("| ") and " vs " in line.split("|")[1]]
    assert len(strategy_rows) == 4 and len(comparison_rows) == 4
    assert f"| {NAIVE_MAX_TOKENS:,} |" in strategy_rows[0] and f"| {quota['plan']['max_tokens']:,} |" in strategy_rows[3]
    assert "| 2.0 s (2.0–2.0) |" in strategy_rows[1]  # adaptive's p50 from arrival: mean (min–max)
    # p99 from arrival: genai-pacer answers 2 s after unbounded in every trial (a difference); the
    # settled share is 0 for both (none).
    pacer_vs_unbounded = next(line for line in comparison_rows if line.startswith("| genai-pacer vs unbounded"))
    assert pacer_vs_unbounded.endswith("| +2.0 s (95% CI +2.0 to +2.0): **differs** |")
    assert "| +0.0 pts (95% CI +0.0 to +0.0): the same in every trial |" in pacer_vs_unbounded
    assert quota["settings"]["difference_rule"] in "\n".join(lines)


@pytest.mark.parametrize(("kwargs", "problems"), [
    ({"trials": 1}, ["trials=1 is below the minimum of 2"]),
    ({"trials": True, "e2e_target_seconds": 0}, ["trials=True is", "e2e_target_seconds=0 must be greater than 0"]),
    ({"shared_max_tokens": 10_000, "load_factor": math.nan},
     ["shared_max_tokens=10000 exceeds the maximum of 8,192", "load_factor=nan is not a finite number"]),
    ({"strategies_at_once": "yes"}, ["strategies_at_once='yes' is"]),
])
def test_quota_experiment_refuses_bad_settings_before_running(kwargs, problems, fake_runs):
    with pytest.raises(InvalidPropsError) as caught:
        quota_experiment(PROMPTS, spec=SPEC, log=lambda line: None, **kwargs)
    for problem in problems:
        assert problem in str(caught.value)
    assert fake_runs == []  # nothing was sent


# ---- pool and side by side: aggregation over trials ---------------------------------------------

def test_pool_experiment_alternates_the_order_and_compares_each_pool_with_the_first(monkeypatch):
    order = []

    def run(pool, *, threads, rounds, connection_setup_seconds, seed):
        order.append(pool)
        return {"requests": threads * rounds, "connections_opened": 310 if pool == 10 else 40,
                "pool_full_warnings": 300 if pool == 10 else 0, "latency_p50_ms": 500.0 + seed,
                "latency_p90_ms": 550.0, "latency_p99_ms": 600.0 + (seed % 2) * 100}

    monkeypatch.setattr(experiments, "_pool_run", run)
    result = experiments.pool_experiment(trials=4, seed=3, log=lambda line: None)
    assert order == [10, 40, 40, 10, 10, 40, 40, 10]
    assert result["settings"]["seeds"] == [3, 4, 5, 6]
    by_metric = {c["metric"]: c for c in result["comparisons"]}
    assert by_metric["connections_opened"]["differs"] is True
    assert by_metric["connections_opened"]["mean_difference"] == -270
    assert by_metric["latency_p99_ms"]["differs"] is False  # same figures for both pools
    assert result["pools"][0]["metrics"]["latency_p50_ms"]["mean"] == 504.5
    table = summary_markdown(pool=result)
    assert "| 10 | 310 (310–310) | 300 (300–300) | 504 ms (503–506) |" in table  # mean (min–max) per trial
    assert ("| pool 40 vs pool 10 | -270 (95% CI -270 to -270): **differs** | "
            "+0 ms (95% CI +0 to +0): the same in every trial |") in table
    with pytest.raises(InvalidPropsError, match=r"pools=\[10\] needs at least two sizes"):
        experiments.pool_experiment(pools=[10], log=lambda line: None)


def test_side_by_side_experiment_reports_the_spread_of_each_way(monkeypatch):
    def trial(*, calls, call_seconds, jitter, time_scale, seed):
        sequential, parallel = 20.0 + seed, 5.0 + seed / 10
        return {"sequential_s": sequential, "side_by_side_s": parallel, "speedup": round(sequential / parallel, 3),
                "all_ok": True}

    monkeypatch.setattr(experiments, "_side_by_side_trial", trial)
    result = experiments.side_by_side_experiment(trials=5, log=lambda line: None)
    assert result["sequential_s"]["mean"] == 22.0 and result["sequential_s"]["min"] == 20.0
    assert result["side_by_side_s"]["max"] == 5.4 and result["all_ok"] is True
    assert result["comparisons"][0]["differs"] is True and result["comparisons"][0]["mean_difference"] == -16.8
    assert "took 22.00 s (20.00–24.00) in sequence" in summary_markdown(side_by_side=result)
