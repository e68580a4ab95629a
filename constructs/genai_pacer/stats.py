"""The statistics every genai-pacer report shares, standard library only.

One definition of a percentile for the load-replay benchmark, the A/B verdict and retrieval tuning,
so "p99" means the same in every table: linear interpolation between closest ranks (numpy's default
method, "linear"), not nearest rank. Production modules import it from here, never from the test bed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile", "percentile_of_sorted"]


def percentile_of_sorted(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values already in ascending order (a bootstrap calls this
    thousands of times on one sorted sample, so it does not sort again)."""
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:  # NaN fails both comparisons
        raise ValueError(f"q={q!r} must be within 0..100")
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of `values` in any order."""
    return percentile_of_sorted(sorted(values), q)
