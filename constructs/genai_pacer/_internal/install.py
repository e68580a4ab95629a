"""The install hints every message gives, worded as the README's "Use it in your app" says them.

genai-pacer is not on a package registry, so a hint installs the dependency itself (boto3), never
genai-pacer with an extra by name, which would fail. tests/test_docs.py checks that every hint in
the code is a command the README shows.
"""

from __future__ import annotations

__all__ = ["BOTO3_HINT", "MATPLOTLIB_HINT", "MOTO_HINT", "missing"]

_README = "or install genai-pacer with its [bench] extra, see the README's \"Use it in your app\""
BOTO3_HINT = f"pip install boto3 ({_README})"
MATPLOTLIB_HINT = f"pip install matplotlib ({_README})"
MOTO_HINT = 'pip install "moto[stepfunctions]" boto3'


def missing(what: str, module: str, error: ModuleNotFoundError, hint: str = BOTO3_HINT) -> ModuleNotFoundError:
    """A ModuleNotFoundError that says what needed `module` and how to install it."""
    return ModuleNotFoundError(f"{what} needs {module}, which is not installed: {hint}", name=error.name or module)
