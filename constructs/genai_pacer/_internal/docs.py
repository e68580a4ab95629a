"""What help() shows for a construct's constructor.

Python's help() and pydoc show an inherited docstring where a method has none of its own, so every
construct's __init__ read aws-cdk's "Creates a new construct node" instead of its own props. The
props are described once, in each class docstring; the constructor points there.
"""

from __future__ import annotations

from typing import TypeVar

_C = TypeVar("_C", bound=type)


def constructor_doc(cls: _C) -> _C:
    """Class decorator: give cls's own __init__ a docstring pointing to the props in the class docstring."""
    name = cls.__name__
    vars(cls)["__init__"].__doc__ = (
        f"Add the {name} to scope under id. Its props are the keyword arguments, each described in "
        f"the {name} class docstring (help({name}))."
    )
    return cls
