"""Runtime files the library uses without boto3 or a second copy: the handlers' metric names
(`lambda/pacer_runtime/metrics.py`), the shared quota ledger's names (`ledger_layout.py`), the
benchmark's prompts parser (`prompts.py`) and its measurement, summary and percentiles (`replay.py`).

Each is the one place its content is written. Importing it as `pacer_runtime.<name>` would run
`pacer_runtime/__init__.py`, which imports boto3 (not a dependency of the constructs, nor of the
bench's import). This loads the one file by its path, under a private module name, once per
process. These files use the standard library only at import.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from types import ModuleType

from .assets import LAMBDA_DIR

__all__ = [
    "LEDGER_LAYOUT_MODULE_NAME",
    "MODULE_NAME",
    "PROMPTS_MODULE_NAME",
    "REPLAY_MODULE_NAME",
    "ledger_layout",
    "metrics_constants",
    "prompts_module",
    "replay_module",
]

MODULE_NAME = "genai_pacer._pacer_metrics"
PROMPTS_MODULE_NAME = "genai_pacer._pacer_prompts"
REPLAY_MODULE_NAME = "genai_pacer._pacer_replay"
LEDGER_LAYOUT_MODULE_NAME = "genai_pacer._pacer_ledger_layout"


@cache
def metrics_constants() -> ModuleType:
    """lambda/pacer_runtime/metrics.py as a module (NAMESPACE, metric names, dimension names)."""
    return _load("metrics.py", MODULE_NAME, "metric names")


@cache
def ledger_layout() -> ModuleType:
    """lambda/pacer_runtime/ledger_layout.py as a module (ENVIRONMENT, the item's key and attribute
    names): what QuotaLedger and the Step Functions ledger steps write and SharedLedger reads."""
    return _load("ledger_layout.py", LEDGER_LAYOUT_MODULE_NAME, "shared quota ledger's names")


@cache
def prompts_module() -> ModuleType:
    """lambda/pacer_runtime/prompts.py as a module (Prompt, parse_prompts, PromptError): the parser
    the deployed replay's handler uses as pacer_runtime.prompts."""
    return _load("prompts.py", PROMPTS_MODULE_NAME, "benchmark prompts parser")


@cache
def replay_module() -> ModuleType:
    """lambda/pacer_runtime/replay.py as a module (Sample, measure, summarize, percentiles): what
    the deployed replay's handler uses as pacer_runtime.replay, so the two benches agree."""
    return _load("replay.py", REPLAY_MODULE_NAME, "load replay's measurement")


def _load(filename: str, module_name: str, what: str) -> ModuleType:
    path = LAMBDA_DIR / "pacer_runtime" / filename
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ModuleNotFoundError(f"genai-pacer's {what} {'are' if what.endswith('s') else 'is'} missing from {path}; "
                                  "reinstall genai-pacer")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
