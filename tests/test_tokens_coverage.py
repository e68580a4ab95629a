"""Every prop of every exported class is in a token table (issue 35.10).

The token tables (each module's TABLE: name -> (class or method, its props, ...)) give every prop an
unresolved token of each kind a user passes from a CfnParameter and require it to reach the template as a
Ref or to be refused by name. This test walks `genai_pacer.__all__`, finds every class whose constructor
(or dataclass fields) takes props, and fails when a class or one of its props is in no table, and when a
table lists a prop its class no longer takes: a prop added later must be added to a table.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import types
from pathlib import Path
from typing import Any

import genai_pacer
import pytest

#: The test modules whose TABLE maps a name to (the class or method, its props, ...), by path under tests/.
TABLE_MODULES = (
    "step_functions/test_tokens_step_functions",
    "precompute/test_tokens_precompute",
    "observe/test_tokens_observe",
    "endpoints/test_tokens_scaling",
    "precompute/test_tokens_store_router",
    "quota/test_tokens_quota",
    "test_tokens_value_objects",
    "retrieval/test_retrieval",
    "benchmark/test_tokens_benchmark",
)
TESTS = Path(__file__).parent


def table_module(path: str) -> types.ModuleType:
    """A test module by its path under tests/, imported as pytest imports it (by its file name, its folder
    on sys.path), whichever worker and order: tests in a capability's folder are not on sys.path otherwise."""
    folder, _, name = path.rpartition("/")
    if folder and str(TESTS / folder) not in sys.path:
        sys.path.insert(0, str(TESTS / folder))
    return importlib.import_module(name)
#: Exported classes that take no props from a user, and why.
NOT_PROPS = {
    "Share": "what ModelQuota.shares returns, never built by a user; share(...)'s arguments are in a table",
    "InvalidPropsError": "the error every refusal raises, exported so a user can catch it; never given props",
}
#: Exported modules, which hold no construct, and why their classes have no token table.
MODULES = {
    "planning": "pure-Python planners: every number is refused as a token by the planner's own check "
                "(planning._number); their classes are results, and TokenProfile is built by ModelQuota.profile, "
                "whose arguments are in a table",
    "capacity": "the endpoint planners: each input is refused as a token (test_tokens_scaling's HELPERS)",
    "retrieval_tuning": "offline tuning on your own vectors and queries: nothing it takes reaches a template",
    "experiment_verdict": "offline analysis of an experiment's logs: nothing it takes reaches a template",
}


def tables() -> dict[str, tuple[Any, tuple[str, ...]]]:
    """Every table entry of every module, as "module:name" -> (target, props)."""
    found = {}
    for module_name in TABLE_MODULES:
        for name, (target, props, *_rest) in table_module(module_name).TABLE.items():
            found[f"{module_name}:{name}"] = (target, tuple(props))
    return found


def props_of(target: Any) -> list[str]:
    """The props a class's constructor (or its dataclass fields), or a method, takes."""
    if dataclasses.is_dataclass(target):
        return [f.name for f in dataclasses.fields(target) if f.init]
    function = target.__init__ if inspect.isclass(target) else target
    return [name for name, parameter in inspect.signature(function).parameters.items()
            if name not in ("self", "scope", "id")
            and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]


def exported() -> dict[str, Any]:
    return {name: getattr(genai_pacer, name) for name in genai_pacer.__all__}


@pytest.mark.parametrize("entry", sorted(tables()))
def test_each_table_lists_every_prop_of_its_class_once(entry):
    target, props = tables()[entry]
    assert len(props) == len(set(props)), f"{entry} lists a prop twice"
    taken = props_of(target)
    assert sorted(props) == sorted(taken), (
        f"{entry}: missing from the table {sorted(set(taken) - set(props))}, "
        f"no longer taken {sorted(set(props) - set(taken))}")


def test_every_exported_class_with_props_has_a_table():
    covered = {target for target, _ in tables().values()}
    missing = [name for name, value in exported().items()
               if inspect.isclass(value) and props_of(value) and name not in NOT_PROPS and value not in covered]
    assert not missing, f"exported classes with props that no token table covers: {missing}"


def test_what_is_left_out_is_still_exported_and_of_its_kind():
    """An exception that no longer applies is dropped; a new exported module is classified on purpose."""
    names = exported()
    for name in NOT_PROPS:
        assert inspect.isclass(names.get(name)), name
    modules = {name for name, value in names.items() if isinstance(value, types.ModuleType)}
    assert modules == set(MODULES), f"classify each exported module: {sorted(modules ^ set(MODULES))}"
    assert all(not isinstance(value, types.ModuleType) for value in (names[n] for n in NOT_PROPS))


def test_the_walk_finds_the_constructs_it_must():
    """The walk sees through jsii's metaclass (inspect.signature of a construct class is (*args, **kwargs))."""
    assert props_of(genai_pacer.AnswerRouter)[:2] == ["answer_store", "model"]
    assert props_of(genai_pacer.BedrockRetry)[0] == "errors"
    assert len([n for n, v in exported().items() if inspect.isclass(v) and props_of(v)]) >= 30
