"""The shared runtime module the Lambda handlers use (`lambda/pacer_runtime`), importable from the
library as `genai_pacer.runtime`: one source, deployed in every handler asset and usable in your
own services (needs boto3).

When `pacer_runtime` is already importable (inside a Lambda function, or a test that put lambda/ on
sys.path) that module is reused, so there is never a second copy with its own state.
"""

import importlib.util
import sys

from ._assets import LAMBDA_DIR


def _load():
    if "pacer_runtime" in sys.modules:
        return sys.modules["pacer_runtime"]
    if importlib.util.find_spec("pacer_runtime") is not None:
        return importlib.import_module("pacer_runtime")
    package = LAMBDA_DIR / "pacer_runtime"
    spec = importlib.util.spec_from_file_location(
        "pacer_runtime", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["pacer_runtime"] = module
    spec.loader.exec_module(module)
    return module


try:
    _runtime = _load()
except ModuleNotFoundError as missing:
    if missing.name not in ("boto3", "botocore"):
        raise
    raise ModuleNotFoundError(
        "genai_pacer.runtime calls Bedrock with boto3, which is not installed: pip install 'genai-pacer[bench]'",
        name=missing.name,
    ) from missing
globals().update({name: getattr(_runtime, name) for name in _runtime.__all__})
__all__ = list(_runtime.__all__)
