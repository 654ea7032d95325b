"""Deprecated (removed after 0.1): this module is :mod:`jaxreplay.paper.reproduce.linesearch.settings`.

Its ``Plan`` is :class:`~jaxreplay.paper.reproduce.linesearch.settings.Design` and its
``make_plan`` :func:`~jaxreplay.paper.reproduce.linesearch.settings.design` ("plan" is the
sweep engine's word for how a sweep is chunked, :mod:`jaxreplay.engine.plan`); the old
names warn. The constants are the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxreplay import _deprecated
from jaxreplay.paper.reproduce.linesearch.settings import *  # noqa: F403  (the constants, unchanged)
from jaxreplay.paper.reproduce.linesearch.settings import Design, design  # noqa: F401  (the renamed names' targets)

_RENAMED = {"Plan": "Design", "make_plan": "design"}
if TYPE_CHECKING:  # the old spellings as type checkers see them; at run time __getattr__ answers, with a warning
    Plan = Design
    make_plan = design


def __getattr__(name: str) -> object:
    # Old spellings, with a DeprecationWarning (docs/design.md, "Renamed").
    return _deprecated.renamed(__name__, name, _RENAMED, globals(), "jaxreplay.paper.reproduce.linesearch.settings")
