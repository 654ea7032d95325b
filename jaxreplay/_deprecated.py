"""Renamed public names, kept for one release behind a ``DeprecationWarning`` that names the new one.

A module that renamed ``old`` to ``new`` keeps ``new`` as its only definition and
answers the old spelling from its module ``__getattr__`` (PEP 562), so the alias is
the same object, costs nothing until used, and never shows in ``dir()`` or the API
reference::

    _RENAMED = {"old": "new"}

    def __getattr__(name: str) -> object:
        return _deprecated.renamed(__name__, name, _RENAMED, globals())

The table of every rename is in ``docs/design.md`` ("Renamed").
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

REMOVED_AFTER = "0.1"
"""The release after which the old spellings are removed."""


def renamed(
    module: str, name: str, renames: Mapping[str, str], namespace: Mapping[str, object], new_module: str | None = None
) -> object:
    """The object ``namespace[renames[name]]``, with a ``DeprecationWarning`` naming the new spelling.

    Args:
        module: the module's ``__name__`` (for the messages).
        name: the attribute asked for.
        renames: old name → new name, both attributes of ``module``.
        namespace: the module's ``globals()``.
        new_module: where the new name is defined, if not in ``module`` (a module kept only to
            forward its old names).

    Raises:
        AttributeError: ``name`` is neither defined nor an old spelling (the usual message).
    """
    if name not in renames:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = renames[name]
    warnings.warn(
        f"{module}.{name} is deprecated (removed after {REMOVED_AFTER}): use {new_module or module}.{new}.",
        DeprecationWarning,
        stacklevel=3,  # the caller of the module's __getattr__
    )
    return namespace[new]
