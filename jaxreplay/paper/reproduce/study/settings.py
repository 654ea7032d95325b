"""What a study of one game runs: the :class:`StudyDesign` (run length, size grid, seeds, variants)
and the sweep point of each setting."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from jaxreplay import _validation

if TYPE_CHECKING:  # the experiment is imported where it runs (the study's modules import only NumPy)
    from jaxreplay.experiments.dqn import Setup

ENVS = ("CartPole-v1", "MountainCar-v0", "Acrobot-v1")
DEFAULT_SEEDS = {"quick": 3, "full": 100}
# The hyperparameters a setting varies (a sweep point); every other one is the design's ``common``.
POINT_KEYS = (
    "memory_size",
    "adaptive_rule",
    "adaptive_num_old",
    "adaptive_interval",
    "adaptive_td_target",
    "adaptive_paired",
    "adaptive_equal_counts",
    "adaptive_relative_tolerance",
)
SENSITIVITY = (
    "target TD errors",
    "independent draws",
    "literal counts",
    "k = 100",
    "k = 500",
    "n_old halved",
    "n_old doubled",
    "relative ε = 5%",
)
QUICK_SENSITIVITY = ("target TD errors", "independent draws", "k = 100")


@dataclasses.dataclass(frozen=True)
class StudyDesign:
    """What a study of one game runs (from :func:`design`).

    Attributes:
        env_id: the game.
        quick: the CPU quick mode (shorter runs, fewer sizes and variants).
        seeds: seeds per setting.
        setup: the one static :class:`~jaxreplay.experiments.dqn.Setup` (aER compiled in).
        common: hyperparameters every run shares.
        sizes: the static memory sizes of the response curve (log grid).
        sensitivity: names of the sensitivity variants run.
        other_reading: the optimizer reading also run (CartPole), or ``None``.
        reading: the main optimizer reading.
        sensitivity_seeds: seeds per sensitivity variant (at most 40: each
            variant is compared with default aER on the same seeds).
    """

    env_id: str
    quick: bool
    seeds: int
    setup: Setup
    common: dict
    sizes: tuple
    sensitivity: tuple
    other_reading: str | None
    reading: str
    sensitivity_seeds: int


def _nice(x: float) -> int:
    """``x`` rounded to two significant digits."""
    digits = max(int(math.floor(math.log10(x))) - 1, 0)
    return int(round(x / 10**digits) * 10**digits)


def design(
    env_id: str,
    *,
    quick: bool = False,
    seeds: int | None = None,
    steps: int | None = None,
    optimizer_reading: str = "adam",
) -> StudyDesign:
    """The study of ``env_id``: run length and settings from :func:`~jaxreplay.paper.reproduce.settings.paper_setting`.

    Args:
        env_id: one of :data:`ENVS`.
        quick: shorter runs (the paper's ``quick`` scaling), 5 sizes, 3 sensitivity variants.
        seeds: seeds per setting (default 3 quick, 100 otherwise).
        steps: cut every run to this many steps (tests); the size grid follows.
        optimizer_reading: the main reading (``"adam"`` or ``"sgd"``).

    Raises:
        ValueError: ``env_id`` not one of :data:`ENVS`, or ``seeds`` below 1.
    """
    from jaxreplay.experiments import dqn
    from jaxreplay.paper.reproduce import settings as paper_settings

    _validation.check_choice("env", env_id, ENVS)
    seeds = _validation.check_static_int(
        "seeds", DEFAULT_SEEDS["quick" if quick else "full"] if seeds is None else seeds, low=1
    )
    setup, hp = paper_settings.paper_setting(
        env_id, 100, adaptive=True, quick=quick, optimizer_reading=optimizer_reading
    )
    if steps is not None:
        setup = dqn.with_total_steps(setup, steps)
    total = setup.total_steps
    setup = dataclasses.replace(setup, max_capacity=total)
    count = 5 if quick else 8
    low = min(100, max(total // 20, 20))
    sizes = tuple(sorted({min(_nice(x), total) for x in np.geomspace(low, total, count)}))
    common = {k: v for k, v in hp._asdict().items() if k not in POINT_KEYS}
    common["learning_starts"] = min(common["learning_starts"], total // 4)
    other = None
    if env_id == "CartPole-v1":
        other = "sgd" if optimizer_reading == "adam" else "adam"
    # An interval longer than a quarter of the run would check only a few times: left out.
    sensitivity = tuple(
        v
        for v in (QUICK_SENSITIVITY if quick else SENSITIVITY)
        if not (v.startswith("k = ") and 4 * int(v[4:]) > total)
    )
    return StudyDesign(
        env_id=env_id,
        quick=quick,
        seeds=seeds,
        setup=setup,
        common=common,
        sizes=sizes,
        sensitivity=sensitivity,
        other_reading=other,
        sensitivity_seeds=min(seeds, 40),
        reading=optimizer_reading,
    )


def point(size, rule, *, num_old=None, interval=20, td_target=0, paired=1, equal_counts=1, relative=0.0) -> dict:
    """The sweep point (values of :data:`POINT_KEYS`) of memory ``size`` under ``rule``
    (:data:`~jaxreplay.experiments.dqn.ADAPTIVE_RULES`); the keywords are aER's settings (default
    aER: ``n_old = size / 2``, a check every 20 steps, online TD errors, paired draws, equal counts, ε = 0)."""
    return {
        "memory_size": int(size),
        "adaptive_rule": int(rule),
        "adaptive_num_old": int(max(1, size // 2) if num_old is None else num_old),
        "adaptive_interval": int(interval),
        "adaptive_td_target": int(td_target),
        "adaptive_paired": int(paired),
        "adaptive_equal_counts": int(equal_counts),
        "adaptive_relative_tolerance": float(relative),
    }


def variant(name: str, start: int) -> dict:
    """The sweep point of the sensitivity variant ``name`` (one of :data:`SENSITIVITY`): aER from
    ``start`` with that one change."""
    from jaxreplay.experiments.dqn import RULE_AER

    variants: dict[str, dict[str, float]] = {
        "target TD errors": dict(td_target=1),
        "independent draws": dict(paired=0),
        "literal counts": dict(equal_counts=0),
        "k = 100": dict(interval=100),
        "k = 500": dict(interval=500),
        "n_old halved": dict(num_old=max(1, start // 4)),
        "n_old doubled": dict(num_old=start),
        "relative ε = 5%": dict(relative=0.05),
    }
    return point(start, RULE_AER, **variants[name])
