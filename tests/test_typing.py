"""The type information editors and type checkers read matches what the lazy imports load at run time."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import genai_pacer

PACKAGE = Path(genai_pacer.__file__).parent


def _is_submodule(module: str, name: str) -> bool:
    """Whether genai_pacer<module>.<name> is a module (of a package), not a name defined in a module."""
    package = importlib.util.find_spec(f"genai_pacer{module}")
    return bool(package and package.submodule_search_locations) and importlib.util.find_spec(f"genai_pacer{module}.{name}") is not None


def _type_checking_imports(source: str) -> dict[str, str]:
    """name -> relative module of every `from .x import Name as Name` under `if TYPE_CHECKING:`."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                for alias in statement.names:
                    module = "." * statement.level + (statement.module or "")
                    if alias.asname != alias.name:  # only a module kept at its old name: `from .retrieval import tuning as retrieval_tuning`
                        assert alias.asname and _is_submodule(module, alias.name), f"{ast.unparse(statement)}: re-export as itself (X as X)"
                        found[alias.asname] = f"{module}.{alias.name}"
                        continue
                    submodule = module != "." and _is_submodule(module, alias.name)
                    found[alias.name] = f".{alias.name}" if module == "." else (f"{module}.{alias.name}" if submodule else module)
    return found


def test_every_lazy_export_has_a_type_checking_import_of_the_same_object():
    typed = _type_checking_imports((PACKAGE / "__init__.py").read_text())
    assert typed == genai_pacer._EXPORTS
    assert sorted(genai_pacer.__all__) == sorted(set(typed) - {"runtime"})  # runtime needs boto3: not in import *


def test_runtime_exports_exactly_pacer_runtimes_names_and_objects():
    import pacer_runtime
    from genai_pacer import runtime

    assert runtime.__all__ == pacer_runtime.__all__
    for name in pacer_runtime.__all__:
        assert getattr(runtime, name) is getattr(pacer_runtime, name), name


def test_the_wheel_stub_re_exports_pacer_runtime_from_where_the_wheel_puts_it():
    import tomllib

    stub = ast.parse((PACKAGE / "_wheel" / "runtime.pyi").read_text())
    imports = [(node.level, node.module, [a.name for a in node.names]) for node in stub.body]
    assert imports == [(1, "_lambda.pacer_runtime", ["*"]), (1, "_lambda.pacer_runtime", ["__all__"])]
    wheel = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"]["constructs/genai_pacer/_wheel/runtime.pyi"] == "genai_pacer/runtime.pyi"
    assert wheel["force-include"]["lambda"] == "genai_pacer/_lambda"
    assert (PACKAGE / "py.typed").is_file()  # PEP 561: type checkers read an installed genai-pacer's types


def test_runtime_without_boto3_says_how_to_install_it(monkeypatch):
    import sys

    for name in [n for n in sys.modules if n == "genai_pacer.runtime" or n.split(".")[0] in ("pacer_runtime", "boto3")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` now raises ModuleNotFoundError
    try:
        importlib.import_module("genai_pacer.runtime")
    except ModuleNotFoundError as error:
        assert error.name == "boto3"
        assert "pip install boto3" in str(error) and "[bench] extra" in str(error)
    else:
        raise AssertionError("genai_pacer.runtime imported without boto3")
    assert "pacer_runtime" not in sys.modules  # no half-initialized module left for the next import


def test_star_import_needs_neither_boto3_nor_botocore():
    """The README: the constructs need only aws-cdk-lib and constructs (the consumer test proves it in a
    fresh venv; this is the fast check, with boto3 and botocore made unimportable)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("boto3", "botocore"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Block())
        from genai_pacer import *
        import genai_pacer
        for name in genai_pacer.__all__:
            getattr(genai_pacer, name)
        try:
            genai_pacer.runtime
        except ModuleNotFoundError as error:
            print(error)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pip install boto3" in done.stdout, done.stdout


def _aws_cdk_modules_imported(paths: list[Path]) -> set[str]:
    """Every aws_cdk module the Python files under paths import (`from aws_cdk import aws_x` names one)."""
    found: set[str] = set()
    for path in (file for root in paths for file in root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + ([f"aws_cdk.{alias.name}" for alias in node.names] if node.module == "aws_cdk" else [])
            found |= {name for name in names if name == "aws_cdk" or name.startswith("aws_cdk.")}
    return {name for name in found if importlib.util.find_spec(name) is not None}  # `from aws_cdk import Stack` is no module


def test_mypy_follows_exactly_the_aws_cdk_modules_the_checked_code_imports():
    """mypy skips the aws_cdk modules not listed (pyproject.toml): a module imported but not listed
    would be Any and its misuse unchecked; one listed but not imported costs time for nothing."""
    import tomllib

    root = PACKAGE.parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]
    followed = {module for override in config["overrides"] if override.get("follow_imports") == "normal"
                for module in override["module"]}
    skipped = [override["module"] for override in config["overrides"] if override.get("follow_imports") == "skip"]
    assert skipped == [["aws_cdk.*"]]
    imported = _aws_cdk_modules_imported([root / files for files in config["files"]])
    assert sorted(imported - followed) == [], "add to the followed list in pyproject.toml"
    assert sorted(followed - imported) == [], "no checked file imports these: remove them from pyproject.toml"
