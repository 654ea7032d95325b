"""Environments. LineSearch is ours; any gymnax id is made with :func:`make`; :class:`StickyActions`
wraps any of them with sticky actions (:mod:`jaxreplay.envs.sticky`)."""

from __future__ import annotations

from jaxreplay import _extras  # noqa: E402

_extras.require("jaxreplay.envs", "rl", "flax", "gymnax")

import struct
import zlib

from gymnax.environments import environment

from jaxreplay._typing import ArrayLike
from jaxreplay._validation import FieldError
from jaxreplay.envs.linesearch import LineSearch, LineSearchParams, LineSearchState, make_params
from jaxreplay.envs.sticky import StickyActions

__all__ = ["LineSearch", "LineSearchParams", "LineSearchState", "StickyActions", "make", "make_params"]


def make(env_id: str, **env_kwargs: ArrayLike) -> tuple[environment.Environment, environment.EnvParams]:
    """``(env, default_params)`` for ``"LineSearch"``, a probe (``"Probe-..."``) or any registered gymnax id.

    For ``"LineSearch"`` and the probes (:mod:`jaxreplay.envs.probes`)
    ``env_kwargs`` override the parameters; for gymnax ids they go to the
    environment's constructor.

    Raises:
        ValueError: ``env_id`` is not a string or is unknown (the message lists the known ids), or gymnax could
            not build it because it could not download the data it needs (bsuite's MNIST bandit, offline).
    """
    if not isinstance(env_id, str):
        raise FieldError("env_id", f"must be an environment id such as 'CartPole-v1', got {env_id!r}.")
    if env_id == "LineSearch":
        return LineSearch(), make_params(**env_kwargs)
    if env_id.startswith("Probe-"):
        from jaxreplay.envs import probes

        return probes.make(env_id, **env_kwargs)
    import gymnax

    if env_id not in gymnax.registered_envs:
        from jaxreplay.envs.probes import PROBE_IDS

        known = ", ".join(["LineSearch", *PROBE_IDS, *gymnax.registered_envs])
        raise FieldError("env_id", f"not a known environment; choose one of: {known}.", about=env_id)
    try:
        return gymnax.make(env_id, **env_kwargs)
    # gymnax downloads some environments' data when it builds them: URLError offline, and a download cut off
    # leaves a truncated gzip (EOFError, zlib.error, struct.error) that it never downloads again.
    except (OSError, EOFError, zlib.error, struct.error) as e:
        cache = _GYMNAX_DATA.get(env_id)
        where = f" (gymnax keeps it in {cache}: delete that folder if a download was cut off)" if cache else ""
        raise FieldError(
            "env_id",
            f"gymnax could not build it: {type(e).__name__}: {e}. It downloads and reads this environment's data "
            f"when it builds it{where}: run once with a network connection, or choose another env_id.",
            about=env_id,
        ) from None


_GYMNAX_DATA = {"MNISTBandit-bsuite": "/tmp/mnist"}  # gymnax.utils.load_mnist's default directory
