"""The packages' lazy exports: a name loads its module on first use (PEP 562).

So `from genai_pacer.quota import planning` and the test bed start no CDK (jsii) runtime, and each
package states only what it exports, where from. Type checkers read each package's TYPE_CHECKING
imports instead (tests/test_typing.py keeps the root's equal to its exports).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    names: Mapping[str, str],
    modules: Mapping[str, str] | Iterable[str] = (),
    *,
    rest: str | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of `package`, which must be importing.

    names: exported name -> module (relative to package) it is an attribute of.
    modules: exported name -> module that is the value itself; a bare name is the submodule `.name`.
    rest: the module any other name is looked up in (a package that replaced a module of that name).
    A value is kept in the package's namespace once loaded, so each name loads once.
    """
    namespace = vars(sys.modules[package])
    as_modules = dict(modules) if isinstance(modules, Mapping) else {name: f".{name}" for name in modules}

    def __getattr__(name: str) -> Any:
        source = names.get(name, rest)
        if name in as_modules:
            value = import_module(as_modules[name], package)
        elif source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            try:
                value = getattr(import_module(source, package), name)
            except AttributeError:
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names, *as_modules})

    return __getattr__, __dir__
