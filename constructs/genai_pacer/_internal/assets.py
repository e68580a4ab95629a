"""Where the Lambda handler code is: inside the wheel (genai_pacer/_lambda) or, in a checkout, lambda/."""

from __future__ import annotations

from pathlib import Path

_PACKAGED = Path(__file__).resolve().parents[1] / "_lambda"
_CHECKOUT = Path(__file__).resolve().parents[3] / "lambda"
LAMBDA_DIR = _PACKAGED if _PACKAGED.is_dir() else _CHECKOUT

# Byte-identical assets on every machine: no bytecode caches, no docs.
_EXCLUDE = ["**/__pycache__", "**/*.pyc", "README.md"]


def handler_code():
    """All handlers as one asset, so each function ships the shared pacer_runtime package."""
    from aws_cdk import aws_lambda as lambda_  # here, so importing LAMBDA_DIR does not start jsii

    if not (LAMBDA_DIR / "pacer_runtime").is_dir():
        raise FileNotFoundError(
            f"genai-pacer handler code is missing from {LAMBDA_DIR}; reinstall genai-pacer"
        )
    return lambda_.Code.from_asset(str(LAMBDA_DIR), exclude=_EXCLUDE)


def handler_fingerprint() -> str:
    """The hash aws-cdk-lib gives handler_code()'s asset (its S3Key is <hash>.zip), from the same
    directory and exclusions: what tells the offline runner a function runs genai-pacer's handlers."""
    import aws_cdk as cdk

    return cdk.FileSystem.fingerprint(str(LAMBDA_DIR), exclude=_EXCLUDE)
