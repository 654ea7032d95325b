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

import sys
import types
import warnings
from collections.abc import Mapping

REMOVED_AFTER = "0.1"
"""The release after which the old spellings are removed."""


def warn(message: str) -> None:
    """A ``DeprecationWarning`` of ``message`` attributed to the first caller outside jaxreplay.

    Python shows a ``DeprecationWarning`` by default only where it is attributed to ``__main__``; a fixed
    ``stacklevel`` attributed one raised a few calls deep (an old parameter name passed to ``envs.make``, or
    to ``dqn.Setup`` through its generated ``__init__``) to jaxreplay's own code, so a user's script never
    saw it. The frames of jaxreplay's modules (by their module name, which a dataclass's generated
    ``__init__`` shares) are skipped instead.
    """
    frame: types.FrameType | None = sys._getframe(1)
    level = 2  # (warn's caller, as warnings.warn counts from here)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "jaxreplay":
        frame, level = frame.f_back, level + 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


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
    warn(f"{module}.{name} is deprecated (removed after {REMOVED_AFTER}): use {new_module or module}.{new}.")
    return namespace[new]
