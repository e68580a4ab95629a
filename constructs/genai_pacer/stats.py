"""The statistics every genai-pacer report shares, standard library only.

One definition of a percentile for the load-replay benchmark, the A/B verdict and retrieval tuning,
so "p99" means the same in every table: linear interpolation between closest ranks (numpy's default
method, "linear"), not nearest rank. Production modules import it from here, never from the test bed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._internal.runtime_constants import replay_module

__all__ = ["percentile", "percentile_of_sorted"]

if TYPE_CHECKING:
    from pacer_runtime.replay import percentile, percentile_of_sorted
else:
    # Written once, in lambda/pacer_runtime/replay.py, which a deployed load replay ships: its
    # report's percentiles are the local bench's (loaded by path, standard library only).
    percentile, percentile_of_sorted = replay_module().percentile, replay_module().percentile_of_sorted
