"""Benchmarking where production runs: `LoadReplay` (`load_replay`), a deployable load replay of
recorded prompts from the target Region, on Step Functions and Lambda, reporting what the local
`genai-pacer bench` reports, computed by the same code (lambda/pacer_runtime/replay.py). Its
function is lambda/load_replay. Documentation: docs/benchmark.md.

A capability of its own, not part of `genai_pacer.testing` (the offline test bed, which production
code never imports): a LoadReplay is deployed into an account and calls real Bedrock. Rendering a
deployed run's report on your machine (`genai-pacer bench report s3://...`) is the test bed's, beside
the local bench whose report it reproduces. The constructs load on first use.
"""

from typing import TYPE_CHECKING

from .._internal.lazy import lazy_exports

if TYPE_CHECKING:
    from .load_replay import LoadReplay as LoadReplay

_LAZY = {"LoadReplay": ".load_replay"}
_SUBMODULES = ("load_replay",)
__all__ = sorted(_LAZY)


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)
