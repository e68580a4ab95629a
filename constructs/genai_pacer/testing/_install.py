"""The one install hint for everything in genai_pacer.testing that needs more than the standard library.

The emulator itself runs on the standard library; boto3 clients, the benchmark and its chart need the
`bench` extra. Keep the wording here so every message says the same thing as the README.
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'genai-pacer[bench]'"


def missing(what: str, module: str, error: ModuleNotFoundError) -> ModuleNotFoundError:
    """A ModuleNotFoundError that says what needed `module` and how to install it."""
    return ModuleNotFoundError(f"{what} needs {module}, which is not installed: {INSTALL_HINT}", name=error.name or module)
