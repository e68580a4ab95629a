"""The normalization-processor arithmetic, the weight grid, the ef_search loop and filtering, offline.

The worked examples follow the formulas in the OpenSearch documentation's normalization-processor
page (min_max: (s - min) / (max - min); l2: s / sqrt(sum s^2); z_score: (s - mean) / std, only with
arithmetic_mean; weights in sub-query order summing to 1.0) and the neural-search plugin's edge
rules (an exact 0 becomes 0.001; a lone hit 1.0; a missing hit scores 0), computed by hand below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from genai_pacer import InvalidPropsError
from genai_pacer.retrieval import tuning as t

LEXICAL = {"a": 4.0, "b": 2.0, "c": 1.0}
VECTOR = {"a": 0.8, "d": 0.6, "b": 0.5}


def test_min_max_worked_example():
    assert t.normalize(LEXICAL, "min_max") == pytest.approx({"a": 1.0, "b": 1 / 3, "c": 0.001})
    assert t.normalize(VECTOR, "min_max") == pytest.approx({"a": 1.0, "d": 1 / 3, "b": 0.001})
    assert t.normalize({"only": 7.5}, "min_max") == {"only": 1.0}
    assert t.normalize({}, "min_max") == {}


def test_l2_worked_example():
    norm = math.sqrt(16 + 4 + 1)
    assert t.normalize(LEXICAL, "l2") == pytest.approx({"a": 4 / norm, "b": 2 / norm, "c": 1 / norm})
    assert t.normalize({"x": 0.0}, "l2") == {"x": 0.0}
    # scale-invariant: a constant boost on a sub-query changes nothing after normalization
    assert t.normalize({k: v * 10 for k, v in LEXICAL.items()}, "l2") == pytest.approx(t.normalize(LEXICAL, "l2"))
    assert t.normalize({k: v * 10 for k, v in LEXICAL.items()}, "min_max") == pytest.approx(t.normalize(LEXICAL, "min_max"))


def test_z_score_worked_example():
    mean, std = 7 / 3, math.sqrt(((4 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (1 - 7 / 3) ** 2) / 2)
    assert t.normalize(LEXICAL, "z_score") == pytest.approx({"a": (4 - mean) / std, "b": 0.001, "c": 0.001})
    assert t.normalize({"x": 3.0, "y": 3.0}, "z_score") == {"x": 3.0, "y": 3.0}  # equal to the mean: the max


def test_combinations_worked_example_with_weights_in_sub_query_order():
    third = 1 / 3
    arithmetic = dict(t.combine_scores([LEXICAL, VECTOR], weights=[0.4, 0.6]))
    assert arithmetic == pytest.approx({"a": 1.0, "b": 0.4 * third + 0.6 * 0.001, "d": 0.6 * third})
    # c, which only the lexical side returned: its missing vector score counts as 0 with its weight
    assert t._combine([0.001, 0.0], [0.4, 0.6], "arithmetic_mean") == pytest.approx(0.4 * 0.001)
    assert t._combine([0.001, 0.0], [0.4, 0.6], "geometric_mean") == pytest.approx(0.001)  # skipped there
    assert t._combine([0.001, 0.0], [0.4, 0.6], "harmonic_mean") == pytest.approx(0.001)
    geometric = dict(t.combine_scores([LEXICAL, VECTOR], combination="geometric_mean", weights=[0.4, 0.6]))
    assert geometric == pytest.approx({"a": 1.0, "b": math.exp(0.4 * math.log(third) + 0.6 * math.log(0.001)), "d": third})
    harmonic = dict(t.combine_scores([LEXICAL, VECTOR], combination="harmonic_mean", weights=[0.4, 0.6]))
    assert harmonic == pytest.approx({"a": 1.0, "b": 1 / (0.4 / third + 0.6 / 0.001), "d": third})
    # listing the sub-queries the other way round flips which side each weight applies to
    flipped = dict(t.combine_scores([VECTOR, LEXICAL], weights=[0.6, 0.4]))
    assert flipped == pytest.approx(arithmetic)
    assert dict(t.combine_scores([LEXICAL, VECTOR])) == pytest.approx(dict(t.combine_scores([LEXICAL, VECTOR], weights=[0.5, 0.5])))
    ranking = [doc for doc, _ in t.combine_scores([LEXICAL, VECTOR], weights=[0.4, 0.6])]
    assert ranking == ["a", "d", "b"]  # as many as the longest sub-query returned (3), so c drops out
    assert len(t.combine_scores([{"x": 1.0}, {"y": 1.0, "z": 0.5}])) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"normalization": "z_score", "combination": "geometric_mean"}, "only with 'arithmetic_mean'"),
        ({"normalization": "minmax"}, "must be one of"),
        ({"combination": "rrf"}, "must be one of"),
        ({"weights": [0.5]}, "one per sub-query"),
        ({"weights": [0.5, 0.6]}, "sum to 1.1"),
    ],
)
def test_invalid_combinations_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        t.combine_scores([LEXICAL, VECTOR], **kwargs)


def test_z_score_is_refused_on_serverless():
    assert t.check_technique("min_max", "harmonic_mean", serverless=True) == []
    assert any("Serverless" in p for p in t.check_technique("z_score", "arithmetic_mean", serverless=True))


def test_metrics():
    assert t.ndcg_at_k(["a", "b"], {"a"}, 2) == 1.0
    assert t.ndcg_at_k(["b", "a"], {"a"}, 2) == pytest.approx(1 / math.log2(3))
    assert t.ndcg_at_k(["x"], {"a": 2.0}, 1) == 0.0
    assert t.recall_at_k(["a", "x", "b"], {"a", "b"}, 2) == 0.5
    assert t.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0


def test_percentiles_mean_what_the_load_replay_benchmark_means():
    """One definition of p50/p99 across the library's reports: linear interpolation between closest
    ranks (the benchmark's), not nearest-rank, which gave 2 and 99 below."""
    from genai_pacer import experiment_verdict, stats
    from genai_pacer.testing import bench

    assert t.percentile is bench.percentile is stats.percentile
    assert experiment_verdict._percentile([1.0, 2.0, 3.0, 4.0], 50) == stats.percentile([4.0, 3.0, 2.0, 1.0], 50)
    assert t.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert t.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    for values, q, message in (([1.0], 150, "q=150 must be within 0..100"), ([1.0], math.nan, "q=nan must be within"),
                               ([], 50, "percentile of no values")):
        with pytest.raises(ValueError, match=message):
            t.percentile(values, q)


def relevance_cases(seed: int = 0, queries: int = 40) -> list[t.RelevanceCase]:
    """A test set where the vector side finds the relevant documents more often than BM25 does."""
    rng = np.random.default_rng(seed)
    cases = []
    for q in range(queries):
        docs = [f"q{q}d{i}" for i in range(30)]
        relevant = set(docs[:3])
        lexical = {d: float(rng.uniform(2, 12) + (3 if d in relevant and rng.random() < 0.3 else 0)) for d in docs[:20]}
        vector = {d: float(rng.uniform(0.5, 0.8) + (0.15 if d in relevant and rng.random() < 0.8 else 0)) for d in docs[5:] + docs[:3]}
        cases.append(t.RelevanceCase((lexical, vector), dict.fromkeys(relevant, 1.0)))
    return cases


def test_grid_search_finds_the_weights_the_test_set_rewards_and_reports_a_table():
    search = t.grid_search_weights(relevance_cases(), k=5, step=0.1)
    best = search.best
    assert best.weights[1] > 0.5  # the vector side carries the relevant documents here
    assert all(best.ndcg >= r.ndcg for r in search.results)
    equal = next(r for r in search.results if r.weights == (0.5, 0.5) and r.normalization == best.normalization and r.combination == best.combination)
    assert best.ndcg > equal.ndcg
    assert len(search.results) == 2 * 3 * 11  # min_max and l2, three combinations, 11 splits
    table = search.table(limit=3)
    assert table.splitlines()[0].split()[:3] == ["normalization", "combination", "weights"] and len(table.splitlines()) == 4
    assert search.pipeline_setting()["weights"] == list(best.weights)
    with_z = t.grid_search_weights(relevance_cases(queries=5), k=5, normalizations=("z_score",))
    assert {r.combination for r in with_z.results} == {"arithmetic_mean"}  # invalid pairs are not tried


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"k": 0}, "k=0"), ({"step": 0}, "step=0"), ({"step": math.nan}, "finite"), ({"normalizations": ("zscore",)}, "must be one of")],
)
def test_grid_search_bad_arguments(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        t.grid_search_weights(relevance_cases(queries=1), **kwargs)
    with pytest.raises(InvalidPropsError, match="cases is empty"):
        t.grid_search_weights([])


class CurveEngine:
    """recall rises with ef_search: the neighbours found are truth[:min(k, ef // 8)]."""

    def __init__(self, truth):
        self.truth, self.calls = truth, []

    def search(self, vector, k, ef_search, allowed=None):
        self.calls.append(ef_search)
        index = int(vector[0])
        return list(self.truth[index][: min(k, ef_search // 8)]) + [-1] * (k - min(k, ef_search // 8))


def test_ef_search_steps_down_while_recall_holds_and_stops_at_the_first_step_below_target():
    truth = [list(range(i * 10, i * 10 + 10)) for i in range(4)]
    ticks = iter(range(10_000))
    tuning = t.tune_ef_search(CurveEngine(truth), [[i] for i in range(4)], truth, k=10, target_recall=0.9, start=512,
                              clock=lambda: next(ticks) / 1000)
    assert [s.ef_search for s in tuning.steps] == [512, 256, 128, 64]
    assert [s.recall for s in tuning.steps] == [1.0, 1.0, 1.0, 0.8]
    assert tuning.chosen == 128
    assert all(s.p50_ms == pytest.approx(1.0) and s.p99_ms == pytest.approx(1.0) for s in tuning.steps)  # the injected clock ticks 1 ms per search
    assert "<- chosen" in tuning.table().splitlines()[3] and "below target" in tuning.table().splitlines()[4]
    never = t.tune_ef_search(CurveEngine(truth), [[0]], truth[:1], k=10, target_recall=0.99, start=16)
    assert never.chosen is None and len(never.steps) == 1
    floor = t.tune_ef_search(CurveEngine(truth), [[0]], truth[:1], k=10, target_recall=0.1, start=80)
    assert [s.ef_search for s in floor.steps] == [80, 40, 20, 10] and floor.chosen == 10  # never below k


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"start": 5}, "below k"), ({"factor": 1.0}, "factor"), ({"target_recall": 0}, "greater than 0"), ({"k": 0}, "k=0")],
)
def test_ef_search_bad_arguments(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        t.tune_ef_search(CurveEngine([[1]]), [[0]], [[1]], **kwargs)


@pytest.fixture(scope="module")
def engine():
    rng = np.random.default_rng(7)
    return t.FaissHnswEngine(rng.standard_normal((3000, 32)).astype("float32"), m=8, ef_construction=64)


def test_offline_ef_search_tuning_on_faiss_hnsw(engine):
    rng = np.random.default_rng(8)
    queries = rng.standard_normal((40, 32)).astype("float32")
    truth = engine.exact(queries, 10)
    tuning = t.tune_ef_search(engine, queries, truth, k=10, target_recall=0.9, start=256)
    assert tuning.steps[0].recall >= 0.9 and tuning.chosen is not None
    assert tuning.steps[-1].recall < 0.9 or tuning.steps[-1].ef_search == 10
    assert tuning.steps[0].recall >= tuning.steps[-1].recall
    assert all(s.p99_ms >= s.p50_ms >= 0 for s in tuning.steps)


def test_post_filtering_returns_fewer_than_k_and_efficient_filtering_returns_k(engine):
    rng = np.random.default_rng(9)
    queries = rng.standard_normal((30, 32)).astype("float32")
    allowed = np.arange(0, 3000, 100)  # 1% of the documents
    demo = t.filtering_demo(engine, queries, allowed, k=10, ef_search=100)
    assert demo.matching_fraction == pytest.approx(0.01)
    assert demo.efficient_mean_results == 10 and demo.post_filter_mean_results < 10
    assert demo.queries_short_post_filter == 30
    assert demo.efficient_recall > demo.post_filter_recall
    assert "post-filter" in demo.table()


class FakeTransport:
    def __init__(self):
        self.requests = []

    def __call__(self, method, path, body):
        self.requests.append((method, path, body))
        return {"hits": {"hits": [{"_id": "3", "_source": {"doc": 3}}, {"_id": "1", "_source": {"doc": 1}}]}}


def test_live_engine_sends_a_knn_query_with_per_query_ef_search_and_the_filter_inside():
    send = FakeTransport()
    live = t.OpenSearchKnnEngine(send, "docs", "embedding", id_field="doc")
    assert live.search([0.1, 0.2], 2, 64, allowed=[1, 3]) == [3, 1]
    method, path, body = send.requests[0]
    assert (method, path) == ("POST", "/docs/_search")
    assert body["query"]["knn"]["embedding"] == {"vector": [0.1, 0.2], "k": 2, "method_parameters": {"ef_search": 64},
                                                 "filter": {"ids": {"values": ["1", "3"]}}}
    assert t.OpenSearchKnnEngine(send, "docs", "embedding").search([0.1], 2, 64) == [3, 1]


@pytest.mark.parametrize(
    ("sub_queries", "kwargs", "message"),
    [
        ("lexical", {}, "sub_queries='lexical' is a str"),
        (None, {}, "sub_queries=None is a NoneType"),
        ([], {}, "sub_queries has 0 entries"),
        ([LEXICAL] * 6, {}, "1..5 sub-queries"),
        ([["a", "b"], VECTOR], {}, r"sub_queries\[0\]=\['a', 'b'\] is a list; pass a mapping"),
        ([{"a": math.nan, "b": 1.0}, VECTOR], {}, r"sub_queries\[0\]\['a'\]=nan is not a finite number"),
        ([{"a": "4", "b": 1.0}, VECTOR], {}, r"sub_queries\[0\]\['a'\]='4' is not a finite number"),
        ([LEXICAL, VECTOR], {"weights": [0.5, math.nan]}, r"weights\[1\]=nan: each weight must be a number from 0 to 1"),
        ([LEXICAL, VECTOR], {"weights": [1.5, -0.5]}, r"weights\[0\]=1.5, weights\[1\]=-0.5"),
        ([LEXICAL, VECTOR], {"weights": ["0.5", "0.5"]}, r"weights\[0\]='0.5'"),
        ([LEXICAL, VECTOR], {"weights": 0.5}, "weights=0.5 is a float"),
    ],
)
def test_combine_scores_refuses_what_it_cannot_reproduce(sub_queries, kwargs, message):
    with pytest.raises(ValueError, match=message):
        t.combine_scores(sub_queries, **kwargs)


def test_weights_within_the_plugins_tolerance_are_accepted():
    assert t.weights_sum_to_one([0.33, 0.33, 0.33]) and t.weights_sum_to_one([0.3, 0.71])
    assert not t.weights_sum_to_one([0.3, 0.72])
    assert len(t.combine_scores([LEXICAL, VECTOR, {"a": 1.0}], weights=[0.33, 0.33, 0.33])) == 3
    with pytest.raises(ValueError, match="not a finite number"):
        t.normalize({"a": math.inf})
    with pytest.raises(ValueError, match="is a NoneType"):
        t.normalize(None)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: t.RelevanceCase((LEXICAL,), {"a": 1.0}), "pass two mappings"),
        (lambda: t.RelevanceCase((LEXICAL, {"a": "x"}), {"a": 1.0}), r"sub_queries\[1\]\['a'\]='x'"),
        (lambda: t.RelevanceCase((LEXICAL, VECTOR), {}), "a query without judgments"),
        (lambda: t.RelevanceCase((LEXICAL, VECTOR), "a"), "a query without judgments"),
    ],
)
def test_bad_relevance_cases(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_an_unknown_technique_is_refused_with_the_bad_scores_in_one_error():
    """It raised at the technique only after the scores passed, and a bare ValueError without an id."""
    with pytest.raises(InvalidPropsError) as refused:
        t.normalize({"a": math.inf}, "minmax")
    assert refused.value.ids == ["normalize.hits.not-finite-score", "normalize.technique.choice"]
    assert "technique='minmax' must be one of 'min_max', 'l2', 'z_score'" in str(refused.value)


def test_a_bad_relevance_case_lists_every_problem_with_its_id():
    """It stopped at the first bad score: a case exported with two bad scores and no judgments took three rounds."""
    with pytest.raises(InvalidPropsError) as refused:
        t.RelevanceCase((LEXICAL, {"a": "x", "b": math.nan}), {})
    assert refused.value.ids == ["RelevanceCase.hits.not-finite-score"] * 2 + ["RelevanceCase.relevant.empty-or-type"]
    assert refused.value.problems[0].startswith("sub_queries[1]['a']='x' is not a finite number")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": 0.3}, "does not divide 1.0 evenly"),
        ({"step": 0.07}, "does not divide 1.0 evenly"),
        ({"normalizations": ()}, "normalizations=\\(\\) must be a non-empty list"),
        ({"combinations": None}, "combinations=None must be a non-empty list"),
        ({"normalizations": ("z_score",), "combinations": ("geometric_mean",)}, "no valid technique pair"),
        ({"cases": "abc"}, "cases is empty or not a list"),
        ({"cases": [{"sub_queries": [LEXICAL, VECTOR]}]}, r"cases\[0\] is a dict; pass RelevanceCase"),
    ],
)
def test_grid_search_refuses_arguments_that_would_give_an_empty_or_misleading_grid(kwargs, message):
    args = {"cases": relevance_cases(queries=1), **kwargs}
    with pytest.raises(InvalidPropsError, match=message):
        t.grid_search_weights(args.pop("cases"), **args)
    assert t.grid_search_weights(relevance_cases(queries=1), step=0.25).results[0].weights[0] in (0.0, 0.25, 0.5, 0.75, 1.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: t.ndcg_at_k(["a"], {"a"}, 0), "k=0 is below the minimum of 1"),
        (lambda: t.ndcg_at_k(["a"], {"a"}, None), "k is required"),
        (lambda: t.recall_at_k(["a"], {"a"}, 2.5), "k=2.5 is not a whole number"),
        (lambda: t.recall_at_k("abc", {"a"}, 3), "ranking='abc' is a str"),
    ],
)
def test_metric_arguments_are_checked(call, message):
    with pytest.raises(InvalidPropsError, match=message):
        call()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((None, [[0]], [list(range(10))]), {}, "engine=None is a NoneType; pass an object with search"),
        (("curve", "abc", [list(range(10))]), {}, "queries and truth must be non-empty lists"),
        (("curve", [[0]], [[1]]), {}, r"truth rows \[0\] hold fewer than k=10 neighbours"),
        (("curve", [[0]], [list(range(10))]), {"clock": None}, "clock=None is not callable"),
        (("curve", [[0]], [list(range(10))]), {"k": "10"}, "k='10' is a str"),
    ],
)
def test_ef_search_tuning_refuses_inputs_that_would_crash_or_mislead(args, kwargs, message):
    engine = CurveEngine([list(range(10))]) if args[0] == "curve" else args[0]
    with pytest.raises(InvalidPropsError, match=message) as raised:
        t.tune_ef_search(engine, *args[1:], **kwargs)
    assert not any("start=512 is below k" in p for p in raised.value.problems)  # no follow-on noise from a bad k


@pytest.mark.parametrize(("props", "id"), [
    ({"metric": "cosine"}, "FaissHnswEngine.metric.choice"),
    ({"m": 1}, "FaissHnswEngine.m.minimum"),
    ({"ef_construction": 0}, "FaissHnswEngine.ef_construction.minimum"),
])
def test_an_offline_engine_validates_its_props_once_when_built(props, id):
    """Issue 36: a value object validates in __post_init__ through Checks. metric="cosine" was silently an
    L2 index (every recall measured against the wrong distance), m=1 a crash inside faiss."""
    vectors = np.random.default_rng(1).standard_normal((50, 8)).astype("float32")
    with pytest.raises(InvalidPropsError) as caught:
        t.FaissHnswEngine(vectors, **props)
    assert caught.value.ids == [id]


def test_an_offline_engine_refuses_vectors_that_are_not_rows_of_numbers():
    with pytest.raises(InvalidPropsError) as caught:
        t.FaissHnswEngine([1.0, 2.0, 3.0])
    assert caught.value.ids == ["FaissHnswEngine.vectors.not-a-matrix"]
    assert "pass a 2-D array, one row per vector" in str(caught.value)
