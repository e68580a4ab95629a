"""The handlers' metric names, read by the constructs without boto3 or a second copy.

`lambda/pacer_runtime/metrics.py` is the one place the namespace, metric and dimension names are
written. Importing it as `pacer_runtime.metrics` would run `pacer_runtime/__init__.py`, which
imports boto3 (not a dependency of the constructs). This loads the one file by its path, under a
private module name, once per process. The file uses the standard library only.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from types import ModuleType

from .assets import LAMBDA_DIR

__all__ = ["MODULE_NAME", "metrics_constants"]

MODULE_NAME = "genai_pacer._pacer_metrics"


@cache
def metrics_constants() -> ModuleType:
    """lambda/pacer_runtime/metrics.py as a module (NAMESPACE, metric names, dimension names)."""
    path = LAMBDA_DIR / "pacer_runtime" / "metrics.py"
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ModuleNotFoundError(f"genai-pacer's metric names are missing from {path}; reinstall genai-pacer")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE_NAME]
        raise
    return module
