"""genai-pacer's runtime (`pacer_runtime`) as a Lambda layer, for handlers you write yourself.

The library's own functions ship `pacer_runtime` beside their handler in one asset. Your handler
(the one that evaluates a `PromptExperiment`, builds retrieval requests or paces calls with
`QuotaPacer`) lives in your own asset, so it gets the runtime from this layer instead of a copy of
a private folder of the wheel: `import pacer_runtime` works in the function, and the layer changes
only when genai-pacer does. It needs nothing beyond the boto3 the Lambda Python runtime carries.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_

from constructs import Construct

from ._internal.assets import LAMBDA_DIR
from ._internal.checks import Checks, token_kind
from ._internal.docs import constructor_doc

#: The Python runtimes pacer_runtime is tested on (it uses 3.11 syntax and the standard library).
COMPATIBLE_RUNTIMES = (lambda_.Runtime.PYTHON_3_12, lambda_.Runtime.PYTHON_3_13, lambda_.Runtime.PYTHON_3_14)


def _staged_runtime() -> Path:
    """A folder laid out as Lambda expects a Python layer (python/pacer_runtime), named by the content's
    hash so every synth of the same genai-pacer reuses it and the asset hash never moves."""
    source = LAMBDA_DIR / "pacer_runtime"
    if not source.is_dir():
        raise FileNotFoundError(f"genai-pacer's runtime is missing from {source}; reinstall genai-pacer")
    files = sorted(p for p in source.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    staged = Path(tempfile.gettempdir()) / f"genai-pacer-runtime-layer-{digest.hexdigest()[:16]}"
    if not (staged / "python" / "pacer_runtime").is_dir():
        building = Path(tempfile.mkdtemp(prefix="genai-pacer-runtime-layer-"))
        for path in files:
            target = building / "python" / "pacer_runtime" / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        try:
            building.rename(staged)
        except OSError:  # another synth staged the same content first
            shutil.rmtree(building, ignore_errors=True)
    return staged


@constructor_doc
class RuntimeLayer(lambda_.LayerVersion):
    """`pacer_runtime` as a Lambda layer: `fn.add_layers(RuntimeLayer(self, "PacerRuntime"))`.

    compatible_architectures: default both (the runtime is pure Python).
    removal_policy: default aws-cdk-lib's (DESTROY: a replaced version is deleted; functions already
        using it keep their copy); RETAIN keeps every version for functions deployed elsewhere.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        compatible_architectures: Sequence[lambda_.Architecture] | None = None,
        removal_policy: cdk.RemovalPolicy | None = None,
    ) -> None:
        with Checks("RuntimeLayer", scope=scope, child=id) as check:
            if token_kind(compatible_architectures) is not None:
                check.fail(
                    f"compatible_architectures is a deploy-time {token_kind(compatible_architectures)}, but aws-cdk-lib "
                    "takes lambda_.Architecture objects at synth; pass [lambda_.Architecture.ARM_64] or leave it out "
                    "for both", id="compatible_architectures.deploy-time"
                )
            elif compatible_architectures is not None and check.each(
                "compatible_architectures", compatible_architectures,
                lambda n, v: check.instance(n, v, lambda_.Architecture, "lambda_.Architecture.X86_64 or ARM_64"),
            ):
                check.rule(len(compatible_architectures) > 0,
                           "compatible_architectures=[] names no architecture; leave it out for both", id="compatible_architectures.empty")
            check.instance("removal_policy", removal_policy, cdk.RemovalPolicy, "cdk.RemovalPolicy.RETAIN or DESTROY",
                           optional=True)
        super().__init__(
            scope,
            id,
            code=lambda_.Code.from_asset(str(_staged_runtime())),
            compatible_runtimes=list(COMPATIBLE_RUNTIMES),
            compatible_architectures=list(compatible_architectures or (lambda_.Architecture.X86_64, lambda_.Architecture.ARM_64)),
            description="genai-pacer runtime (pacer_runtime): import pacer_runtime in your handler",
            removal_policy=removal_policy,
        )
