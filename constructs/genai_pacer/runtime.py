"""The shared runtime module the Lambda handlers use (`lambda/pacer_runtime`), importable from the
library as `genai_pacer.runtime`: one source, deployed in every handler asset and usable in your
own services (needs boto3).

When `pacer_runtime` is already importable (inside a Lambda function, or a test that put lambda/ on
sys.path) that module is reused, so there is never a second copy with its own state.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from ._internal.assets import LAMBDA_DIR
from ._internal.install import BOTO3_HINT as _BOTO3_HINT

if TYPE_CHECKING:
    # What type checkers and editors see: pacer_runtime's own names and signatures. In a checkout
    # pacer_runtime is lambda/pacer_runtime (mypy_path); the wheel ships runtime.pyi, which imports
    # the same names from genai_pacer/_lambda/pacer_runtime.
    from pacer_runtime import *  # noqa: F403
    from pacer_runtime import __all__ as __all__


def _load() -> ModuleType:
    if "pacer_runtime" in sys.modules:
        return sys.modules["pacer_runtime"]
    if importlib.util.find_spec("pacer_runtime") is not None:
        return importlib.import_module("pacer_runtime")
    package = LAMBDA_DIR / "pacer_runtime"
    spec = importlib.util.spec_from_file_location(
        "pacer_runtime", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"genai-pacer's runtime module is missing from {package}; reinstall genai-pacer")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pacer_runtime"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["pacer_runtime"]  # a failed import leaves no half-initialized module behind
        raise
    return module


if not TYPE_CHECKING:
    try:
        _runtime = _load()
    except ModuleNotFoundError as missing:
        if missing.name not in ("boto3", "botocore"):
            raise
        raise ModuleNotFoundError(
            f"genai_pacer.runtime calls Bedrock with boto3, which is not installed: {_BOTO3_HINT}",
            name=missing.name,
        ) from missing
    globals().update({name: getattr(_runtime, name) for name in _runtime.__all__})
    __all__ = list(_runtime.__all__)
