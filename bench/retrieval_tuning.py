"""Retrieval tuning by measurement, offline: ef_search stepped down on a real HNSW (faiss-cpu), post-
filtering vs efficient filtering with a 1% filter, and the hybrid weight grid, over several seeds.

What runs (per seed):
- ef_search: a generated corpus (a mixture of Gaussian clusters, so neighbours are structured as
  embeddings are, not uniform noise) indexed with faiss HNSW (m=16, ef_construction=100, the
  OpenSearch defaults), a fixed query set with brute-force ground truth, and
  genai_pacer.retrieval.tuning.tune_ef_search from 512 halving while recall@10 >= 0.95. Latency is
  one query at a time on one thread, on this shared 2-core machine: compare steps within a run,
  not with a cluster's figures.
- filtering: the same index, a filter matching 1% of the documents, k=10: post-filtering (global
  top k, then the filter, as a bool query around knn does) against efficient filtering (the filter
  inside the search, as a filter inside the knn clause does).
- weights: a generated relevance test set (lexical BM25-like scores, heavy-tailed; vector scores in
  a narrow band; relevance decided by a hidden mix of both) and grid_search_weights over min_max/l2
  x three combinations x weights in 0.1 steps, against equal weights. The generator decides which
  weights win here: this shows the loop works, not which weights your data needs.

Reported: per ef_search step, recall@10 and p50/p99 latency as median (min..max) over seeds, the
ef_search each seed chose; the filtering comparison; the best weight setting per seed and its
nDCG@10 against equal weights.

    .venv/bin/python bench/retrieval_tuning.py --trials 5 --out bench/results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "constructs"), str(ROOT / "lambda")]

from genai_pacer.retrieval import tuning as t  # noqa: E402


def corpus(rng: np.random.Generator, documents: int, dim: int, clusters: int = 50) -> np.ndarray:
    centres = rng.standard_normal((clusters, dim)).astype("float32") * 1.0
    labels = rng.integers(0, clusters, documents)
    return (centres[labels] + rng.standard_normal((documents, dim)).astype("float32")).astype("float32")


def relevance_set(rng: np.random.Generator, queries: int = 60, pool: int = 40) -> list[t.RelevanceCase]:
    cases = []
    for q in range(queries):
        docs = [f"q{q}d{i}" for i in range(pool)]
        semantic = rng.uniform(0, 1, pool)
        keyword = rng.pareto(2.0, pool)
        truth = 0.65 * semantic + 0.35 * (keyword / (keyword.max() or 1)) + rng.normal(0, 0.05, pool)
        relevant = {docs[i]: 1.0 for i in np.argsort(-truth)[:4]}
        lexical = {docs[i]: float(2 + 8 * keyword[i] + rng.normal(0, 0.5)) for i in range(pool) if keyword[i] > 0.1}
        vector = {docs[i]: float(0.55 + 0.3 * semantic[i] + rng.normal(0, 0.03)) for i in np.argsort(-semantic)[:25]}
        cases.append(t.RelevanceCase((lexical, vector), relevant))
    return cases


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def show(s: dict[str, float], fmt: str = ".3f") -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}..{s['max']:{fmt}})"


def run(trials: int, documents: int, dim: int, queries: int) -> dict:
    per_seed: list[dict[str, Any]] = []
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        vectors = corpus(rng, documents, dim)
        started = time.perf_counter()
        engine = t.FaissHnswEngine(vectors, m=16, ef_construction=100)
        build_s = time.perf_counter() - started
        query_set = vectors[rng.choice(documents, queries, replace=False)] + rng.normal(0, 1.0, (queries, dim)).astype("float32")
        truth = engine.exact(query_set, 10)
        tuning = t.tune_ef_search(engine, query_set, truth, k=10, target_recall=0.95, start=512)
        allowed = rng.choice(documents, documents // 100, replace=False)
        demo = t.filtering_demo(engine, query_set[:100], allowed, k=10, ef_search=100)
        cases = relevance_set(rng)
        search = t.grid_search_weights(cases, k=10, step=0.1)
        equal = next(r for r in search.results if r.weights == (0.5, 0.5) and r.normalization == "min_max" and r.combination == "arithmetic_mean")
        per_seed.append({
            "seed": seed,
            "build_seconds": build_s,
            "ef_search": [vars(s) for s in tuning.steps],
            "chosen_ef_search": tuning.chosen,
            "filtering": vars(demo),
            "best_weights": vars(search.best),
            "equal_weights_min_max_arithmetic": vars(equal),
            "weight_table": search.table(limit=5),
        })
    steps = sorted({s["ef_search"] for seed in per_seed for s in seed["ef_search"]}, reverse=True)
    ef_summary = []
    for ef in steps:
        rows = [s for seed in per_seed for s in seed["ef_search"] if s["ef_search"] == ef]
        ef_summary.append({
            "ef_search": ef,
            "seeds": len(rows),
            "recall": spread([r["recall"] for r in rows]),
            "p50_ms": spread([r["p50_ms"] for r in rows]),
            "p99_ms": spread([r["p99_ms"] for r in rows]),
        })
    filtering = {key: spread([seed["filtering"][key] for seed in per_seed])
                 for key in ("post_filter_mean_results", "efficient_mean_results", "post_filter_recall", "efficient_recall",
                             "graph_only_mean_results")}
    weights = {
        "best_ndcg": spread([seed["best_weights"]["ndcg"] for seed in per_seed]),
        "equal_ndcg": spread([seed["equal_weights_min_max_arithmetic"]["ndcg"] for seed in per_seed]),
        "best_settings": [
            f"{seed['best_weights']['normalization']} {seed['best_weights']['combination']} {list(seed['best_weights']['weights'])}"
            for seed in per_seed
        ],
    }
    return {
        "config": {"trials": trials, "documents": documents, "dim": dim, "queries": queries, "k": 10, "target_recall": 0.95,
                   "hnsw": {"m": 16, "ef_construction": 100}, "filter_fraction": 0.01},
        "ef_search": ef_summary,
        "chosen_ef_search": [seed["chosen_ef_search"] for seed in per_seed],
        "filtering": filtering,
        "weights": weights,
        "per_seed": per_seed,
    }


def report(result: dict) -> str:
    c = result["config"]
    lines = [
        f"ef_search tuning: {c['documents']:,} vectors x {c['dim']} dims, faiss HNSW m=16 ef_construction=100, "
        f"{c['queries']} queries, k=10, target recall 0.95, {c['trials']} seeds; median (min..max)",
        "",
        "| ef_search | seeds | recall@10 | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for row in result["ef_search"]:
        lines.append(f"| {row['ef_search']} | {row['seeds']} | {show(row['recall'])} | {show(row['p50_ms'])} | {show(row['p99_ms'])} |")
    lines += [
        "",
        f"chosen ef_search per seed (lowest with recall >= 0.95): {result['chosen_ef_search']}",
        "",
        f"filtering: a filter matching 1% of documents, k=10, ef_search=100, 100 queries, {c['trials']} seeds",
        "",
        "| method | results per query | recall@10 |",
        "|---|---|---|",
        f"| post-filter (bool around knn) | {show(result['filtering']['post_filter_mean_results'], '.2f')} | "
        f"{show(result['filtering']['post_filter_recall'])} |",
        f"| efficient (filter inside knn) | {show(result['filtering']['efficient_mean_results'], '.2f')} | "
        f"{show(result['filtering']['efficient_recall'])} |",
        "",
        f"(the filtered graph walk alone returned {show(result['filtering']['graph_only_mean_results'], '.2f')} per query; "
        "the exact fallback over the matching documents made up the rest)",
        "",
        "weights: generated relevance set (60 queries, 4 relevant each), grid over min_max/l2 x 3 combinations x 0.1 steps",
        f"best nDCG@10 {show(result['weights']['best_ndcg'])} vs equal weights (min_max, arithmetic) "
        f"{show(result['weights']['equal_ndcg'])}",
        "best setting per seed: " + "; ".join(result["weights"]["best_settings"]),
        "",
        "seed 0's top five settings:",
        result["per_seed"][0]["weight_table"],
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    result = run(args.trials, args.documents, args.dim, args.queries)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "retrieval_tuning.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result)
    (args.out / "retrieval_tuning.txt").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
