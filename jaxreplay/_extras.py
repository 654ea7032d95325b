"""Optional dependencies: which extra installs what, and one clear error when one is missing.

The replay core (:mod:`jaxreplay.buffer`, :mod:`~jaxreplay.samplers`,
:mod:`~jaxreplay.prioritized`, :mod:`~jaxreplay.adaptive`) needs only JAX and
NumPy. Every other layer declares at import what it needs with
:func:`require`, so a missing package is reported as the extra to install
(``pip install 'jaxreplay[rl]'``) rather than as a bare ``No module named``.
"""

from __future__ import annotations

import importlib.util
import sys

EXTRAS = {
    "rl": ("flax", "optax", "gymnax"),
    "sweep": ("xarray", "tqdm", "scipy"),
    "paper": ("diffrax", "equinox", "matplotlib"),
}
"""What each extra brings (``paper`` also brings ``rl`` and ``sweep``; ``all`` is everything)."""


def _available(name: str) -> bool:
    if name in sys.modules:  # None there means "known missing" (or blocked)
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


def require(module: str, extra: str, *packages: str) -> None:
    """Raise ``ModuleNotFoundError`` naming the extra if any of ``packages`` is not installed.

    Args:
        module: the module that needs them (for the message).
        extra: the extra of ``pyproject.toml`` that installs them.
        packages: top-level package names (default: all of ``EXTRAS[extra]``).
    """
    for name in packages or EXTRAS[extra]:
        if not _available(name):
            raise ModuleNotFoundError(
                f"{module} needs {name}, which jaxreplay's '{extra}' extra installs: "
                f"pip install 'jaxreplay[{extra}]' (or 'jaxreplay[all]').",
                name=name,
            )
