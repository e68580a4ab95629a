"""Tune hybrid weights and ef_search by measurement, not by eye (pure Python; faiss only offline).

Weights
    Export once, from your index, each test query's per-sub-query hits (lexical and vector, with
    raw scores) and the documents a person judged relevant. `combine_scores` then reproduces the
    OpenSearch normalization-processor locally, and `grid_search_weights` tries every technique and
    weight split for the best nDCG@k (recall@k breaks ties) and prints a table. No cluster calls.

    The arithmetic follows the neural-search plugin: each sub-query is normalized over the hits it
    returned; min_max maps a hit to (s - min) / (max - min), raising an exact 0 to 0.001 so the
    lowest hit is not dropped, and a lone hit (max == min) to 1.0; l2 divides by the root of the
    sum of squares (a zero norm gives 0); z_score is (s - mean) / sample standard deviation, a result
    <= 0 becoming 0.001 (and a hit equal to the mean taking the maximum raw score, std 0 the
    minimum, as the plugin does; the OpenSearch blog writes the population sigma, the plugin computes
    commons-math's bias-corrected one, which is reproduced here). A document a sub-query did not return scores 0 there: the
    arithmetic mean counts it with its weight, the geometric and harmonic means skip it.
    Combination: arithmetic sum(w*s)/sum(w); geometric exp(sum(w*ln s)/sum(w)); harmonic
    sum(w)/sum(w/s). Weights follow the sub-query order (lexical first, vector second; see
    pacer_runtime.retrieval.HYBRID_SUBQUERY_ORDER).

ef_search
    `tune_ef_search` steps ef_search down against a fixed query set with known neighbours while
    recall stays at or above the target, measuring recall and p50/p99 latency at each step, and
    stops at the first step below target. Any engine with `search(vector, k, ef_search, allowed)`
    works: `OpenSearchKnnEngine` for a live index (per-query method_parameters.ef_search,
    OpenSearch 2.16+), `FaissHnswEngine` offline (faiss-cpu HNSW, the same algorithm as the faiss
    engine in OpenSearch). `filtering_demo` shows post-filtering vs efficient filtering there.
    Use the value found per query (pacer_runtime.retrieval.knn_query(..., ef_search=N)): that dial
    works on every engine and target and changes without a reindex. As an index default
    (VectorIndexSettings(ef_search=N)) it goes where each engine reads it: faiss only at index
    creation on a domain, the index setting for lucene (OpenSearch 3.5+) and nmslib.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._internal.checks import Checks, _show, kind_of
from ..stats import percentile  # the benchmark's and the verdict's too: "p99" means one thing everywhere

__all__ = [
    "COMBINATIONS",
    "NORMALIZATIONS",
    "EfSearchStep",
    "EfSearchTuning",
    "FaissHnswEngine",
    "FilteringDemo",
    "OpenSearchKnnEngine",
    "RelevanceCase",
    "VectorEngine",
    "WeightResult",
    "WeightSearch",
    "check_technique",
    "combine_scores",
    "filtering_demo",
    "grid_search_weights",
    "ndcg_at_k",
    "normalize",
    "percentile",
    "recall_at_k",
    "tune_ef_search",
    "weights_sum_to_one",
]

NORMALIZATIONS = ("min_max", "l2", "z_score")
COMBINATIONS = ("arithmetic_mean", "geometric_mean", "harmonic_mean")
#: What the neural-search plugin substitutes for a normalized score of exactly 0 (min_max, z_score).
MIN_SCORE = 0.001
#: How far a weights list may sum from 1.0: the neural-search plugin's own tolerance
#: (ScoreCombinationUtil.DELTA_FOR_WEIGHTS_ASSERTION), so (0.33, 0.33, 0.33) passes here as it does there.
WEIGHT_SUM_TOLERANCE = 0.01
#: A hybrid query holds at most 5 sub-queries.
MAX_SUBQUERIES = 5


def weights_sum_to_one(weights: Sequence[float]) -> bool:
    """Whether OpenSearch accepts the weights' sum: within WEIGHT_SUM_TOLERANCE of 1.0 (the plugin
    sums float32s, so 0.99 passes there; 1e-9 absorbs the double rounding of 1 - 0.99 here)."""
    return abs(math.fsum(weights) - 1.0) <= WEIGHT_SUM_TOLERANCE + 1e-9


def check_technique(normalization: str, combination: str, *, serverless: bool = False) -> list[str]:
    """Problems with a normalization/combination pair (empty when valid), each with its fix."""
    problems = []
    if normalization not in NORMALIZATIONS:
        problems.append(f"normalization={normalization!r} must be one of {', '.join(NORMALIZATIONS)}")
    if combination not in COMBINATIONS:
        problems.append(f"combination={combination!r} must be one of {', '.join(COMBINATIONS)}")
    if normalization == "z_score" and combination != "arithmetic_mean":
        problems.append(
            f"normalization='z_score' combines only with 'arithmetic_mean', not {combination!r}: OpenSearch "
            "rejects the pipeline; use arithmetic_mean, or min_max/l2 with any combination"
        )
    if serverless and normalization == "z_score":
        problems.append(
            "normalization='z_score' is not supported on OpenSearch Serverless (min_max and l2 only); use min_max"
        )
    return problems


def normalize(scores: Mapping[Any, float], technique: str = "min_max") -> dict[Any, float]:
    """One sub-query's hits (doc -> raw score) normalized as the normalization-processor does."""
    with Checks("normalize") as check:
        _check_hits(check, "scores", scores)
        check.one_of("technique", technique, NORMALIZATIONS)
    if not scores:
        return {}
    values = list(scores.values())
    if technique == "min_max":
        low, high = min(values), max(values)
        out = {}
        for doc, s in scores.items():
            if high == low and s == high:
                out[doc] = 1.0
                continue
            n = (s - low) / (high - low)
            out[doc] = MIN_SCORE if n == 0.0 else n
        return out
    if technique == "l2":
        norm = math.sqrt(sum(s * s for s in values))
        return {doc: (0.0 if norm == 0 else s / norm) for doc, s in scores.items()}
    # z_score, the one technique left: the check above refused any other
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0  # commons-math: bias-corrected
    high, low = max(values), min(values)
    out = {}
    for doc, s in scores.items():
        if s == mean:
            out[doc] = high
        elif std == 0:
            out[doc] = low
        else:
            z = (s - mean) / std
            out[doc] = MIN_SCORE if z <= 0 else z
    return out


def _check_hits(check: Checks, name: str, hits: Any) -> bool:
    """A sub-query's hits: a mapping of doc -> finite raw score (what the index returned)."""
    if not isinstance(hits, Mapping):
        return check.fail(
            f"{name}={_show(hits)} is {kind_of(hits)}; pass a mapping of doc id -> raw score, e.g. {{'doc-1': 12.3}}",
            id="hits.type",
        )
    ok = True
    for doc, score in hits.items():
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            ok = check.fail(
                f"{name}[{doc!r}]={_show(score)} is not a finite number; export the raw score OpenSearch returned for each hit",
                id="hits.not-finite-score",
            )
    return ok


def _combine(values: Sequence[float], weights: Sequence[float], technique: str) -> float:
    if technique == "arithmetic_mean":
        pairs = [(w, s) for w, s in zip(weights, values, strict=True) if s >= 0]
        total = sum(w for w, _ in pairs)
        return sum(w * s for w, s in pairs) / total if total else 0.0
    pairs = [(w, s) for w, s in zip(weights, values, strict=True) if s > 0]
    total = sum(w for w, _ in pairs)
    if not pairs or total == 0:
        return 0.0
    if technique == "geometric_mean":
        return math.exp(sum(w * math.log(s) for w, s in pairs) / total)
    if technique == "harmonic_mean":
        return total / sum(w / s for w, s in pairs)
    # unreachable from user input: combine_scores refuses an unknown technique through Checks first
    raise ValueError(f"combination technique {technique!r} must be one of {', '.join(COMBINATIONS)}")


def combine_scores(
    sub_queries: Sequence[Mapping[Any, float]],
    *,
    normalization: str = "min_max",
    combination: str = "arithmetic_mean",
    weights: Sequence[float] | None = None,
) -> list[tuple[Any, float]]:
    """The hybrid ranking OpenSearch would return: (doc, combined score), best first, as many
    documents as the longest sub-query returned.

    sub_queries: one mapping per sub-query, in the hybrid query's order, of the hits it returned.
    weights: one per sub-query summing to 1.0. Default: equal weights.
    """
    with Checks("combine_scores") as check:
        if isinstance(sub_queries, str | Mapping) or not isinstance(sub_queries, Sequence):
            check.fail(
                f"sub_queries={_show(sub_queries)} is {kind_of(sub_queries)}; pass a list with one mapping of doc -> "
                "score per sub-query, lexical first, vector second", id="sub_queries.type"
            )
            check.raise_if_any()
        n = len(sub_queries)
        check.rule(1 <= n <= MAX_SUBQUERIES, f"sub_queries has {n} entries; a hybrid query has 1..{MAX_SUBQUERIES} sub-queries", id="sub_queries.count")
        check.raise_if_any()
        for i, hits in enumerate(sub_queries):
            _check_hits(check, f"sub_queries[{i}]", hits)
        for problem in check_technique(normalization, combination):
            check.fail(problem, id="normalization.unsupported-technique")
        if weights is None:
            weights = [1.0 / n] * n
        elif isinstance(weights, str | Mapping) or not isinstance(weights, Sequence):
            check.fail(f"weights={_show(weights)} is {kind_of(weights)}; pass one weight per sub-query, e.g. [0.3, 0.7]", id="weights.not-sequence")
        else:
            weights = list(weights)
            bad = [
                f"weights[{i}]={_show(w)}" for i, w in enumerate(weights)
                if isinstance(w, bool) or not isinstance(w, int | float) or not (math.isfinite(w) and 0 <= w <= 1)
            ]
            if bad:
                check.fail(f"{', '.join(bad)}: each weight must be a number from 0 to 1", id="weights.out-of-range")
            elif len(weights) != n:
                check.fail(f"weights has {len(weights)} values for {n} sub-queries; give one per sub-query, in order", id="weights.per-sub-query")
            elif not weights_sum_to_one(weights):
                check.fail(f"weights {weights} sum to {math.fsum(weights):g}, not 1.0; scale them to sum to 1.0", id="weights.not-summing-to-one")
    normalized = [normalize(hits, normalization) for hits in sub_queries]
    docs = list(dict.fromkeys(doc for hits in sub_queries for doc in hits))
    combined = [(doc, _combine([hits.get(doc, 0.0) for hits in normalized], weights, combination)) for doc in docs]
    # The plugin keeps as many documents as the longest sub-query returned (ScoreCombiner.getMaxHits).
    return sorted(combined, key=lambda pair: -pair[1])[: max((len(hits) for hits in sub_queries), default=0)]


# ---------------------------------------------------------------------------------------------
# Relevance metrics and the weight grid


def ndcg_at_k(ranking: Sequence[Any], relevant: Mapping[Any, float] | Iterable[Any], k: int) -> float:
    """nDCG@k with graded relevance (doc -> gain) or a set of relevant docs (gain 1)."""
    _check_metric_args("ndcg_at_k", ranking, k)
    gains = dict(relevant) if isinstance(relevant, Mapping) else dict.fromkeys(relevant, 1.0)
    dcg = sum(gains.get(doc, 0.0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranking: Sequence[Any], relevant: Iterable[Any], k: int) -> float:
    """The share of the relevant documents found in the top k (0.0 when none are judged relevant)."""
    _check_metric_args("recall_at_k", ranking, k)
    wanted = set(relevant)
    return len(wanted.intersection(ranking[:k])) / len(wanted) if wanted else 0.0


def _rows(value: Any) -> bool:
    """A list-like of rows (a list, a tuple or a numpy array), not a string or a mapping."""
    return not isinstance(value, str | bytes | Mapping) and hasattr(value, "__len__") and hasattr(value, "__getitem__")


def _check_metric_args(owner: str, ranking: Any, k: Any) -> None:
    with Checks(owner) as check:
        check.integer("k", k, minimum=1, maximum=10_000, fix="the cut-off the prompt uses, e.g. 10")
        check.rule(
            isinstance(ranking, Sequence) and not isinstance(ranking, str),
            f"ranking={_show(ranking)} is {kind_of(ranking)}; pass the ranked doc ids, best first",
            id="ranking.type",
        )


@dataclass(frozen=True)
class RelevanceCase:
    """One test query: its sub-queries' raw hits (lexical first, vector second) and its judgments."""

    sub_queries: tuple[Mapping[Any, float], ...]
    relevant: Mapping[Any, float]

    def __post_init__(self) -> None:
        with Checks("RelevanceCase") as check:
            pair = not isinstance(self.sub_queries, str | Mapping) and isinstance(self.sub_queries, Sequence)
            if check.rule(
                pair and len(self.sub_queries) == 2,
                f"sub_queries={_show(self.sub_queries)}: pass two mappings of doc -> raw score, the lexical hits first "
                "and the vector hits second (the order hybrid_query uses)",
                id="sub_queries.not-a-pair",
            ):
                for i, hits in enumerate(self.sub_queries):
                    _check_hits(check, f"sub_queries[{i}]", hits)
            relevant = self.relevant
            check.rule(
                isinstance(relevant, Mapping | set | frozenset | list | tuple) and not isinstance(relevant, str) and bool(relevant),
                f"relevant={_show(relevant)}: pass the documents judged relevant (doc -> gain, or a set of ids); a query "
                "without judgments scores 0 for every setting and only drags the means down",
                id="relevant.empty-or-type",
            )
        object.__setattr__(self, "sub_queries", tuple(self.sub_queries))


@dataclass(frozen=True)
class WeightResult:
    normalization: str
    combination: str
    weights: tuple[float, ...]
    ndcg: float
    recall: float


@dataclass(frozen=True)
class WeightSearch:
    """Every setting tried, best first, and the best one."""

    results: tuple[WeightResult, ...]
    k: int

    @property
    def best(self) -> WeightResult:
        return self.results[0]

    def table(self, limit: int = 10) -> str:
        lines = [f"{'normalization':<13} {'combination':<15} {'weights':<12} {'nDCG@' + str(self.k):>8} {'recall@' + str(self.k):>9}"]
        for r in self.results[:limit]:
            weights = "[" + ", ".join(f"{w:.2f}" for w in r.weights) + "]"
            lines.append(f"{r.normalization:<13} {r.combination:<15} {weights:<12} {r.ndcg:>8.4f} {r.recall:>9.4f}")
        return "\n".join(lines)

    def pipeline_setting(self) -> dict[str, Any]:
        """The best setting as HybridSearchPipeline keyword arguments."""
        return {"normalization": self.best.normalization, "combination": self.best.combination, "weights": list(self.best.weights)}


def grid_search_weights(
    cases: Sequence[RelevanceCase],
    *,
    k: int = 10,
    step: float = 0.1,
    normalizations: Sequence[str] = ("min_max", "l2"),
    combinations: Sequence[str] = COMBINATIONS,
) -> WeightSearch:
    """Try each valid technique pair and each two-sub-query weight split in `step` increments;
    rank by mean nDCG@k, then mean recall@k, then by closeness to equal weights (a tie prefers
    the less extreme setting)."""
    with Checks("grid_search_weights") as check:
        check.integer("k", k, minimum=1, maximum=10_000)
        if check.number("step", step, above=0, maximum=0.5, fix="e.g. 0.1 tries 0.0, 0.1 ... 1.0"):
            check.rule(
                abs(1 / step - round(1 / step)) < 1e-9,
                f"step={step!r} does not divide 1.0 evenly, so the grid would not reach the weights it names; "
                "use 0.5, 0.25, 0.2, 0.1, 0.05 or 0.01",
                id="step.not-dividing-one",
            )
        if isinstance(cases, str) or not isinstance(cases, Sequence) or not cases:
            check.fail(f"cases is empty or not a list (got {_show(cases)}); export at least one query with judged documents", id="cases.empty")
        else:
            for i, case in enumerate(cases):
                check.rule(isinstance(case, RelevanceCase), f"cases[{i}] is {kind_of(case)}; pass RelevanceCase(sub_queries, relevant)", id="cases.type")
        lists_ok = True
        for name, values, choices in (("normalizations", normalizations, NORMALIZATIONS), ("combinations", combinations, COMBINATIONS)):
            if isinstance(values, str) or not isinstance(values, Sequence) or not values:
                lists_ok = check.fail(f"{name}={_show(values)} must be a non-empty list drawn from {', '.join(choices)}", id=f"{name}.empty-or-unknown")
                continue
            for i, value in enumerate(values):
                lists_ok = check.one_of(f"{name}[{i}]", value, choices) and lists_ok
        if lists_ok:
            check.rule(
                any(not check_technique(n, c) for n in normalizations for c in combinations),
                f"no valid technique pair in normalizations={list(normalizations)} x combinations={list(combinations)} "
                "(z_score combines only with arithmetic_mean); add arithmetic_mean or min_max",
                id="normalizations.no-valid-pair",
            )
    steps = round(1 / step)
    splits = [(round(i / steps, 10), round(1 - i / steps, 10)) for i in range(steps + 1)]
    results = []
    for normalization in normalizations:
        for combination in combinations:
            if check_technique(normalization, combination):
                continue
            for weights in splits:
                ndcgs, recalls = [], []
                for case in cases:
                    ranking = [doc for doc, _ in combine_scores(case.sub_queries, normalization=normalization, combination=combination, weights=weights)]
                    ndcgs.append(ndcg_at_k(ranking, case.relevant, k))
                    recalls.append(recall_at_k(ranking, case.relevant, k))
                results.append(WeightResult(normalization, combination, weights, statistics.fmean(ndcgs), statistics.fmean(recalls)))
    results.sort(key=lambda r: (-round(r.ndcg, 12), -round(r.recall, 12), abs(r.weights[0] - 0.5)))
    return WeightSearch(tuple(results), k)


# ---------------------------------------------------------------------------------------------
# ef_search


class VectorEngine(Protocol):
    def search(self, vector: Sequence[float], k: int, ef_search: int, allowed: Any = None) -> list[int]:
        """The ids of the k nearest neighbours found with this ef_search (within `allowed` if given)."""
        ...


@dataclass(frozen=True)
class EfSearchStep:
    ef_search: int
    recall: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class EfSearchTuning:
    """Each step measured, the target, and the lowest ef_search that kept recall at the target
    (None when even the first step missed it: raise ef_search or the build-time settings)."""

    steps: tuple[EfSearchStep, ...]
    target_recall: float
    k: int
    chosen: int | None

    def table(self) -> str:
        lines = [f"{'ef_search':>9} {'recall@' + str(self.k):>9} {'p50 ms':>8} {'p99 ms':>8}"]
        for s in self.steps:
            mark = "  <- chosen" if s.ef_search == self.chosen else ("  below target" if s.recall < self.target_recall else "")
            lines.append(f"{s.ef_search:>9} {s.recall:>9.4f} {s.p50_ms:>8.3f} {s.p99_ms:>8.3f}{mark}")
        return "\n".join(lines)


def tune_ef_search(
    engine: VectorEngine,
    queries: Sequence[Sequence[float]],
    truth: Sequence[Sequence[int]],
    *,
    k: int = 10,
    target_recall: float = 0.95,
    start: int = 512,
    factor: float = 0.5,
    clock: Callable[[], float] = time.perf_counter,
) -> EfSearchTuning:
    """Step ef_search down from `start` (multiplying by `factor`, never below k) while recall@k
    stays >= target_recall; stop at the first step below target. truth[i]: the exact k nearest
    neighbours of queries[i] (brute force, computed once)."""
    with Checks("tune_ef_search") as check:
        k_ok = check.integer("k", k, minimum=1, maximum=10_000)
        check.number("target_recall", target_recall, above=0, maximum=1, fix="e.g. 0.95")
        if check.integer("start", start, minimum=1, maximum=100_000) and k_ok:
            check.rule(start >= k, f"start={start} is below k={k}: ef_search below k cannot return k neighbours; start at k or more", id="start.below-k")
        check.number("factor", factor, above=0, maximum=0.99, fix="e.g. 0.5 halves ef_search each step")
        check.rule(callable(getattr(engine, "search", None)),
                   f"engine={_show(engine)} is {kind_of(engine)}; pass an object with search(vector, k, ef_search), "
                   "e.g. FaissHnswEngine(vectors) or OpenSearchKnnEngine(send, index, vector_field)", id="engine.type")
        check.rule(callable(clock), f"clock={_show(clock)} is not callable; leave it at time.perf_counter", id="clock.not-callable")
        lists = all(_rows(v) for v in (queries, truth))
        if check.rule(lists and len(queries) == len(truth) and len(queries) > 0,
                      "queries and truth must be non-empty lists of the same length: one query vector and its exact "
                      "nearest neighbours per row", id="queries.not-matching-truth") and k_ok:
            short = [i for i, row in enumerate(truth) if not _rows(row) or len(row) < k]
            check.rule(
                not short,
                f"truth rows {short[:5]} hold fewer than k={k} neighbours, so recall@{k} could never reach 1.0; "
                "give each query its exact k nearest neighbours (FaissHnswEngine.exact computes them)",
                id="truth.too-few-neighbours",
            )
    steps: list[EfSearchStep] = []
    chosen = None
    ef = start
    while True:
        found, latencies = 0, []
        for vector, neighbours in zip(queries, truth, strict=True):
            began = clock()
            ids = engine.search(vector, k, ef)
            latencies.append((clock() - began) * 1000)
            found += len(set(ids[:k]).intersection(list(neighbours)[:k]))
        recall = found / (k * len(queries))
        steps.append(EfSearchStep(ef, recall, percentile(latencies, 50), percentile(latencies, 99)))
        if recall < target_recall:
            break
        chosen = ef
        following = max(k, int(ef * factor))
        if following == ef:
            break
        ef = following
    return EfSearchTuning(tuple(steps), target_recall, k, chosen)


#: FaissHnswEngine's metrics: faiss's METRIC_L2 and METRIC_INNER_PRODUCT.
METRICS = ("l2", "innerproduct")


@dataclass
class FaissHnswEngine:
    """An offline HNSW index (faiss-cpu), so the tuning loop and filtering can be measured without a
    cluster. metric "l2" or "innerproduct". Searches run on one thread (comparable latencies)."""

    vectors: Any
    m: int = 16
    ef_construction: int = 100
    metric: str = "l2"
    _index: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import numpy as np

        # validated once, here: "cosine" was silently an L2 index, a bad m a crash inside faiss
        with Checks("FaissHnswEngine") as check:
            check.integer("m", self.m, minimum=2, maximum=100,
                          fix="HNSW links per node, the range VectorIndexSettings allows; 16 is OpenSearch's default")
            check.integer("ef_construction", self.ef_construction, minimum=2, maximum=4096,
                          fix="the range VectorIndexSettings allows; 100 is OpenSearch's default")
            check.one_of("metric", self.metric, METRICS)
            data: Any = None
            with contextlib.suppress(TypeError, ValueError):  # not numbers: refused just below
                data = np.ascontiguousarray(np.asarray(self.vectors, dtype="float32"))
            check.rule(data is not None and data.ndim == 2 and min(data.shape) >= 1,
                       f"vectors is {kind_of(self.vectors)}, not rows of numbers; pass a 2-D array, one row per vector "
                       "(numpy.ndarray of shape (count, dimension))", id="vectors.not-a-matrix")
        import faiss

        faiss.omp_set_num_threads(1)
        self.vectors = data
        kind = faiss.METRIC_INNER_PRODUCT if self.metric == "innerproduct" else faiss.METRIC_L2
        self._index = faiss.IndexHNSWFlat(data.shape[1], self.m, kind)
        self._index.hnsw.efConstruction = self.ef_construction
        self._index.add(data)

    def search(self, vector: Sequence[float], k: int, ef_search: int, allowed: Any = None) -> list[int]:
        """Efficient filtering when `allowed` (ids) is given, as OpenSearch does with a filter inside
        the knn clause of a faiss index: the filter is applied during the graph search (an
        IDSelector), and when that finds fewer than k while at least k documents match (a very
        restrictive filter strands the graph walk), an exact search over the matching documents
        returns them instead."""
        found = self.approximate(vector, k, ef_search, allowed)
        if allowed is not None and len(found) < k:
            matching = list(allowed)
            if len(matching) > len(found):
                return self.exact([vector], k, matching)[0]
        return found

    def approximate(self, vector: Sequence[float], k: int, ef_search: int, allowed: Any = None) -> list[int]:
        """The HNSW graph search alone (with the filter applied during it when `allowed` is given)."""
        import faiss
        import numpy as np

        query = np.asarray([vector], dtype="float32")
        selector = None if allowed is None else faiss.IDSelectorBatch(np.asarray(allowed, dtype="int64"))
        hnsw_params = faiss.SearchParametersHNSW  # type: ignore[attr-defined]  # faiss's SWIG stubs omit it
        params = hnsw_params(efSearch=ef_search, sel=selector) if selector is not None else hnsw_params(efSearch=ef_search)
        _, ids = self._index.search(query, k, params=params)
        return [int(i) for i in ids[0] if i >= 0]

    def post_filtered_search(self, vector: Sequence[float], k: int, ef_search: int, allowed: Any) -> list[int]:
        """Post-filtering: the global top k first, then the filter (a bool query around knn)."""
        keep = set(int(i) for i in allowed)
        return [i for i in self.approximate(vector, k, ef_search) if i in keep]

    def exact(self, queries: Any, k: int, allowed: Any = None) -> list[list[int]]:
        """Brute-force nearest neighbours: the ground truth recall is measured against."""
        import numpy as np

        data = self.vectors
        ids = np.arange(len(data)) if allowed is None else np.asarray(sorted(set(int(i) for i in allowed)))
        subset = data[ids]
        out = []
        for q in np.asarray(queries, dtype="float32"):
            if self.metric == "innerproduct":
                order = np.argsort(-(subset @ q), kind="stable")
            else:
                order = np.argsort(((subset - q) ** 2).sum(axis=1), kind="stable")
            out.append([int(ids[j]) for j in order[:k]])
        return out


@dataclass
class OpenSearchKnnEngine:
    """A live index behind the same interface: one knn query per search, ef_search per query
    (method_parameters, OpenSearch 2.16+), ids read from `id_field` in _source (or _id).

    send: function(method, path, body) -> parsed JSON response, e.g. a SigV4-signed HTTP call.
    """

    send: Callable[[str, str, Mapping[str, Any]], Mapping[str, Any]]
    index: str
    vector_field: str
    id_field: str | None = None

    def search(self, vector: Sequence[float], k: int, ef_search: int, allowed: Any = None) -> list[int]:
        clause: dict[str, Any] = {"vector": list(map(float, vector)), "k": k, "method_parameters": {"ef_search": ef_search}}
        if allowed is not None:
            clause["filter"] = {"ids": {"values": [str(i) for i in allowed]}}
        body = {"size": k, "query": {"knn": {self.vector_field: clause}}, "_source": [self.id_field] if self.id_field else False}
        response = self.send("POST", f"/{self.index}/_search", body)
        hits = response.get("hits", {}).get("hits", [])
        return [int(h["_source"][self.id_field]) if self.id_field else int(h["_id"]) for h in hits]


@dataclass(frozen=True)
class FilteringDemo:
    """Mean results returned per query, and recall against the exact filtered neighbours."""

    k: int
    matching_fraction: float
    post_filter_mean_results: float
    efficient_mean_results: float
    post_filter_recall: float
    efficient_recall: float
    queries_short_post_filter: int
    queries: int
    graph_only_mean_results: float


    def table(self) -> str:
        return "\n".join([
            f"filter matches {self.matching_fraction:.1%} of documents, k={self.k}, {self.queries} queries",
            f"{'method':<22} {'mean results':>12} {'recall@k':>9}",
            f"{'post-filter (bool)':<22} {self.post_filter_mean_results:>12.2f} {self.post_filter_recall:>9.4f}",
            f"{'efficient (in knn)':<22} {self.efficient_mean_results:>12.2f} {self.efficient_recall:>9.4f}",
            f"(the filtered graph walk alone returned {self.graph_only_mean_results:.2f} on average; the exact "
            "fallback over matching documents made up the rest)",
        ])


def filtering_demo(engine: FaissHnswEngine, queries: Any, allowed: Any, *, k: int = 10, ef_search: int = 100) -> FilteringDemo:
    """Post-filtering vs efficient filtering on one engine, one query set and one filter."""
    allowed = list(allowed)
    truth = engine.exact(queries, k, allowed)
    post_counts, efficient_counts, graph_counts, post_found, efficient_found, short = [], [], [], 0, 0, 0
    for vector, neighbours in zip(queries, truth, strict=True):
        graph_counts.append(len(engine.approximate(vector, k, ef_search, allowed)))
        post = engine.post_filtered_search(vector, k, ef_search, allowed)
        efficient = engine.search(vector, k, ef_search, allowed)
        post_counts.append(len(post))
        efficient_counts.append(len(efficient))
        short += len(post) < k
        post_found += len(set(post).intersection(neighbours))
        efficient_found += len(set(efficient).intersection(neighbours))
    total = k * len(truth)
    return FilteringDemo(
        k,
        len(allowed) / len(engine.vectors),
        statistics.fmean(post_counts),
        statistics.fmean(efficient_counts),
        post_found / total,
        efficient_found / total,
        short,
        len(truth),
        statistics.fmean(graph_counts),
    )
