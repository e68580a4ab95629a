"""The package's layout as users import it (issue 36): while modules move into one folder per
capability, every old module path keeps working as an alias of the new module (for one minor
release, genai_pacer._internal.moved.REMOVED_IN), and every exported name imports both ways."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import genai_pacer
import pytest
from genai_pacer._internal.moved import MOVED, SPLIT
from helpers import warning_ids

PACKAGE = Path(genai_pacer.__file__).parent


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_path_is_the_moved_module_itself(old, new):
    moved = importlib.import_module(new)
    assert importlib.import_module(old) is moved
    parent, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is moved  # `from genai_pacer import _checks`


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_alias_module_is_only_the_alias(old):
    """The old file holds no code of its own: a docstring naming the new path, and the alias call."""
    path = PACKAGE.joinpath(*old.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text())
    docstring = ast.get_docstring(tree) or ""
    assert MOVED[old] in docstring and "removed in" in docstring, docstring
    assert [type(node).__name__ for node in tree.body] == ["Expr", "ImportFrom", "Expr"]


@pytest.mark.parametrize("name", sorted(genai_pacer.__all__))
def test_every_exported_name_imports_from_the_package_and_from_its_module(name):
    exported = getattr(genai_pacer, name)
    module = importlib.import_module(genai_pacer._EXPORTS[name], "genai_pacer")
    assert (module if name in genai_pacer._MODULES else getattr(module, name)) is exported
    if name in genai_pacer._MODULES:
        assert importlib.import_module(f"genai_pacer.{name}") is exported  # `import genai_pacer.planning` too


def test_a_user_can_catch_a_refusal_from_the_package():
    import aws_cdk as cdk
    from genai_pacer import BoundedMap, InvalidPropsError

    with pytest.raises(InvalidPropsError) as refused:
        BoundedMap(cdk.Stack(cdk.App(), "S"), "Map", max_concurrency=0)
    assert any(problem.startswith("max_concurrency=0") for problem in refused.value.problems)


def test_no_production_module_imports_the_test_bed():
    """Production code never imports genai_pacer.testing (retrieval tuning once took the benchmark's
    percentile from it; shared statistics live in genai_pacer.stats)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "testing" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            relative_testing = node.level and (module.split(".")[0] == "testing"
                                               or (not module and any(a.name == "testing" for a in node.names)))
            if relative_testing or module.startswith("genai_pacer.testing"):
                offenders.append(f"{path.relative_to(PACKAGE)}: from {'.' * node.level}{module}")
    assert offenders == []


@pytest.mark.parametrize(("old", "name"), sorted((old, name) for old, names in SPLIT.items() for name in names))
def test_a_name_that_left_a_split_module_still_imports_from_the_old_path(old, name):
    """genai_pacer._secure was split (issue 36): its key and log-group helpers are
    genai_pacer._internal.secure (the alias's target), its state-machine half is
    genai_pacer.step_functions.state_machine; the old path serves both until the aliases go."""
    moved = importlib.import_module(SPLIT[old][name])
    assert getattr(importlib.import_module(old), name) is getattr(moved, name)
    namespace: dict[str, object] = {}
    exec(f"from {old} import {name}", namespace)
    assert namespace[name] is getattr(moved, name)
    with pytest.raises(ImportError, match="NoSuchName"):
        exec(f"from {old} import NoSuchName", {})


def test_shared_code_never_imports_a_capability():
    """_internal is what the capabilities share: it imports none of them (a split module's names are
    forwarded by the alias mechanism, by name, not by an import in the shared module)."""
    capabilities = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()} - {"_internal"}
    offenders = []
    for path in sorted((PACKAGE / "_internal").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                top = (node.module or "").split(".")[0] or next(iter(a.name for a in node.names))
                if top in capabilities:
                    offenders.append(f"_internal/{path.name}: from {'.' * node.level}{node.module or ''}")
    assert offenders == []


def test_every_name_of_the_former_precompute_module_still_imports_from_it():
    """genai_pacer.precompute was ScheduledPrecompute's module; it is now the capability's package, and the
    module is genai_pacer.precompute.scheduled. Every name the module had, private ones included, still
    resolves from the old path to the same object until the aliases go."""
    import genai_pacer.precompute as package
    from genai_pacer.precompute import scheduled

    names = [name for name in vars(scheduled) if not name.startswith("__")]
    assert {"RUN_LOCK_PREFIX", "ScheduledPrecompute", "answer_schema", "_AnswerSchema"} <= set(names)
    assert [name for name in names if getattr(package, name) is not getattr(scheduled, name)] == []
    namespace: dict[str, object] = {}
    exec("from genai_pacer.precompute import RUN_LOCK_PREFIX, ScheduledPrecompute, answer_schema", namespace)
    assert namespace["answer_schema"] is scheduled.answer_schema
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        package.NoSuchName  # noqa: B018


def test_library_code_has_no_assert():
    """One way to validate (issue 36): user input is refused through Checks, and an invariant the checks
    already guarantee is a cast that says why it holds. An assert is neither: `python -O` strips it, and a
    failing one names no prop."""
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "testing" not in path.relative_to(PACKAGE).parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assert)
    ]
    assert found == []


def test_a_package_lists_its_exports_before_they_load():
    """dir() (an editor's or a REPL's completion) shows every exported name of a lazy package before
    first use, not only what has loaded; one fresh interpreter, so nothing is loaded yet."""
    import subprocess
    import sys

    packages = ["genai_pacer"] + [f"genai_pacer.{name}" for name in ("endpoints", "observe", "precompute", "queue", "quota", "step_functions")]
    script = (
        "import importlib, sys\n"
        f"for name in {packages!r}:\n"
        "    package = importlib.import_module(name)\n"
        "    print(name, sorted(set(package.__all__) - set(dir(package))))\n"
        "print(sorted(m for m in sys.modules if m.startswith('aws_cdk')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.splitlines() == [f"{name} []" for name in packages] + ["[]"]  # and nothing loaded the CDK


def test_the_librarys_own_metrics_are_built_by_one_factory():
    """One factory per dimension set (_internal/metrics.py), fed by the names the handlers write with: a
    metric built by hand elsewhere in the GenaiPacer namespace could read a dimension set nobody writes."""
    built = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "_internal/metrics.py" or relative.startswith("testing/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("cloudwatch.Metric"):
                namespace = next((ast.unparse(k.value) for k in node.keywords if k.arg == "namespace"), "")
                if namespace.endswith(".NAMESPACE") or "GenaiPacer" in namespace:
                    built.add(relative)
    assert built == set()


TESTS = Path(__file__).parent
DOCS = TESTS.parent / "docs"


def test_the_tests_mirror_the_layout():
    """tests/<capability>/ holds the tests of one capability, named as its package folder (or flat module)
    and its page docs/<capability>.md are; what cuts across capabilities stays flat in tests/. Test files
    keep distinct names: pytest imports each by its file name, its folder put on sys.path."""
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    capabilities = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("_")}
    assert capabilities <= set(folders), sorted(capabilities - set(folders))
    for folder in folders:
        assert (DOCS / f"{folder}.md").is_file(), f"tests/{folder}/ has no page docs/{folder}.md"
        assert folder in capabilities or (PACKAGE / f"{folder}.py").is_file(), f"tests/{folder}/ names no module"
        flat = sorted(p.name for p in TESTS.glob(f"test_{folder}*.py"))
        assert not flat, f"{flat} belong in tests/{folder}/"
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


# One way to validate (issue 36): every custom rule names a stable id and every warning goes through
# _internal.checks.warn.


def _calls(attrs: set[str]):
    """(module, call) for each call of `<something>.<attr>(...)` in the package, aliases excluded."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in attrs:
                yield relative, node


def _rule_calls():
    """Each check.rule(...)/check.fail(...) (a Checks is always `check` in the package) with its id's source."""
    for relative, call in _calls({"rule", "fail"}):
        if ast.unparse(call.func.value) == "check":
            found = next((k.value for k in call.keywords if k.arg == "id"), None)
            yield relative, call, None if found is None else ast.unparse(found)


def _without_ids() -> set[str]:
    return {relative for relative, _, id in _rule_calls() if id is None}


def _warning_by_hand() -> set[str]:
    return {relative for relative, _ in _calls({"add_warning", "add_warning_v2"}) if relative != "_internal/checks.py"}


def test_every_custom_rule_names_its_id():
    """A problem's id is how a user searches for it and how a test matches it whatever its wording."""
    assert sorted(_without_ids()) == []


def test_no_two_rules_share_an_id():
    """One id, one rule: the same id at two call sites must be the same message (a helper called twice
    is one site). Ids are unique in the whole package, so searching one finds its rule."""
    seen: dict[str, tuple[str, str]] = {}
    clashes = []
    for relative, call, id in _rule_calls():
        if id is None:
            continue
        message = ast.unparse(call.args[-1])
        where = f"{relative}:{call.lineno}"
        if id in seen and seen[id][1] != message:
            clashes.append(f"{id}: {seen[id][0]} and {where}")
        seen.setdefault(id, (where, message))
    assert clashes == []


def test_every_warning_goes_through_one_helper():
    """Every warning is `genai-pacer:<id>` from _internal.checks.warn, never an annotation built by hand."""
    assert sorted(_warning_by_hand()) == []


def test_no_two_warnings_share_an_id():
    seen: dict[str, tuple[str, str]] = {}
    clashes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "warn":
                id, message = (ast.unparse(a) for a in node.args[1:3])
                where = f"{relative}:{node.lineno}"
                if id in seen and seen[id][1] != message:
                    clashes.append(f"{id}: {seen[id][0]} and {where}")
                seen.setdefault(id, (where, message))
    assert clashes == []


#: A warning id: lowercase words joined by hyphens (`quota-unused`), as cdk-nag's and aws-cdk's own are.
KEBAB_CASE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


def test_every_warning_id_is_kebab_case():
    """One spelling for every id a user acknowledges: the experiments' camelCase ids
    (`experimentGuardSlowerThanBake`) and the clamp's prop name (`max_concurrency-clamped`) read as
    another library's, and a user guessing the spelling of one from another got it wrong."""
    ids = warning_ids()
    assert len(ids) >= 40
    assert sorted(f"{id} ({where})" for id, where in ids.items() if not KEBAB_CASE.fullmatch(id)) == []


def test_every_warning_id_is_read_from_the_source():
    """Every warn() names its id as a string or a module constant (the clamp's is built from the prop), so
    the id tests above see every id the package can emit."""
    dynamic = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text())
        constants = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets
                     if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "warn":
                id = node.args[1]
                if not (isinstance(id, ast.Constant) or (isinstance(id, ast.Name) and id.id in constants)):
                    dynamic.append((relative, ast.unparse(id)))
    assert dynamic == [("_internal/checks.py", "f\"{_prop(name).replace('_', '-')}-clamped\"")]  # fit_concurrency
