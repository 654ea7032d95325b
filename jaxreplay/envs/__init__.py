"""Environments. LineSearch is ours; any gymnax id is made with :func:`make`."""

from __future__ import annotations

from jaxreplay.envs.linesearch import LineSearch, LineSearchParams, LineSearchState, make_params

__all__ = ["LineSearch", "LineSearchParams", "LineSearchState", "make", "make_params"]


def make(env_id: str, **env_kwargs):
    """``(env, default_params)`` for ``"LineSearch"`` or any registered gymnax id.

    Raises:
        ValueError: ``env_id`` is unknown; the message lists the known ids.
    """
    if env_id == "LineSearch":
        return LineSearch(), make_params(**env_kwargs)
    import gymnax

    if env_id not in gymnax.registered_envs:
        known = ", ".join(["LineSearch", *gymnax.registered_envs])
        raise ValueError(f"env_id {env_id!r} is not a known environment; choose one of: {known}.")
    return gymnax.make(env_id, **env_kwargs)
