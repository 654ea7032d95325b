"""What a replay study of one game runs: the :class:`ReplayDesign` (run length, seeds, the grid of
capacity × replay ratio × n-step, the two compiled programs) and the sweep point of each setting."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the experiment is imported where it runs (the study's modules import only NumPy)
    from jaxreplay.experiments.dqn import Setup

RATIOS = (0.25, 1.0, 4.0)
"""Replay ratios of the grid: gradient updates per environment step (Fedus et al. 2020's definition).
A factor of 4 apart, as the capacities, so that cells of equal oldest-policy age exist."""
N_STEPS = (1, 3)
"""Horizons n of the TD targets in the grid."""
CAPACITY_FACTOR = 4
"""Consecutive capacities of the grid differ by this factor (the ratios' factor: equal-age cells)."""
CAPACITIES = 4
"""Capacities per grid: the run length / 128, / 32, / 8 and / 2 (to two significant digits)."""
UNIT = 4
"""Environment steps per update unit (``Setup.train_frequency``): a ratio of 0.25 is one update every
4 steps, 4 is 16 updates every 4 steps (Dopamine's DQN, Fedus et al.'s baseline, updates every 4 steps)."""
QUICK_SEGMENTS = 10
"""Record points (greedy evaluations) per run in the quick mode (the presets' 20 or 50 would evaluate
for longer than a short run trains)."""
POINT_KEYS = (
    "memory_size",
    "replay_ratio",
    "n_step",
    "adaptive_rule",
    "adaptive_num_old",
    "adaptive_relative_tolerance",
)
"""The hyperparameters a setting varies (its sweep point, :func:`point`); every other one is the design's ``common``."""


class Game(NamedTuple):
    """How one game's replay study is built from a preset of :mod:`jaxreplay.paper.reproduce.settings`.

    Attributes:
        preset: ``"tuned"`` (:func:`~jaxreplay.paper.reproduce.settings.paper_setting` with ``tuned``),
            ``"paper"`` (its paper setting) or ``"minatar"``
            (:func:`~jaxreplay.paper.reproduce.settings.minatar_setting`).
        full_steps: environment steps per run at full scale.
        full_seeds: seeds per setting at full scale.
        quick_steps: environment steps per run in the CPU quick mode.
        reduced: how ``full_steps`` is below the preset's length ("" if it is not); a study's seeds below
            :data:`FULL_SEEDS` are said by :func:`design` (``ReplayDesign.reduced``).
    """

    preset: str
    full_steps: int
    full_seeds: int
    quick_steps: int
    reduced: str


GAMES = {
    "CartPole-v1": Game("tuned", 200_000, 100, 4_000, ""),
    "Acrobot-v1": Game("paper", 200_000, 100, 20_000, ""),
    "MountainCar-v0": Game("paper", 300_000, 100, 20_000, ""),
    # 24 cells × 100 seeds of the preset's 5 million steps would be 12 billion environment steps (a third of
    # them at 4 updates per step): the MinAtar games run 1 million steps, 20 seeds per cell.
    "Breakout-MinAtar": Game("minatar", 1_000_000, 20, 20_000, "1,000,000 steps (the preset's: 5,000,000)"),
    "SpaceInvaders-MinAtar": Game("minatar", 1_000_000, 20, 20_000, "1,000,000 steps (the preset's: 5,000,000)"),
}
"""The games of the study and how each is built (a :class:`Game` each)."""

FULL_SEEDS = 100
"""Seeds per setting of a full-scale study, where it fits (MinAtar's default is :attr:`Game.full_seeds`)."""


@dataclasses.dataclass(frozen=True)
class ReplayDesign:
    """What a replay study of one game runs (from :func:`design`).

    Attributes:
        env_id: the game (one of :data:`GAMES`).
        quick: the CPU quick mode (short runs, 3 seeds).
        seeds: seeds per setting.
        unit_setup: the grid's compiled program with one update slot per :data:`UNIT` steps
            (``max_n_step = 3``, the target period counted in gradient updates; no aER);
            :meth:`grid_setup` gives each ratio its own.
        adaptive_setup: the program of the adaptive stage (aER compiled in, ratio up to 1, capacity up to
            the run length).
        common: hyperparameters every run shares (the preset's, scaled to the run length).
        capacities: the grid's memory sizes (a factor :data:`CAPACITY_FACTOR` apart).
        ratios: the grid's replay ratios (:data:`RATIOS`).
        n_steps: the grid's horizons (:data:`N_STEPS`).
        reduced: why the run length or seeds are below the preset's ("" if not; always "" in quick mode).
    """

    env_id: str
    quick: bool
    seeds: int
    unit_setup: Setup
    adaptive_setup: Setup
    common: dict
    capacities: tuple
    ratios: tuple
    n_steps: tuple
    reduced: str

    @property
    def total_steps(self) -> int:
        """Environment steps per run."""
        return int(self.unit_setup.total_steps)

    def grid_setup(self, ratio: float) -> Setup:
        """The compiled program of the grid's cells at ``ratio``: ``UNIT × ratio`` update slots per unit."""
        return dataclasses.replace(self.unit_setup, max_updates_per_unit=max(1, int(round(UNIT * ratio))))

    def cells(self) -> list[tuple[int, float, int]]:
        """The grid's cells ``(memory_size, replay_ratio, n_step)``, n slowest, capacity fastest."""
        return [(c, r, n) for n in self.n_steps for r in self.ratios for c in self.capacities]


def age(memory_size: float, ratio: float) -> float:
    """The oldest-policy age of a full memory of ``memory_size`` at ``ratio``: the gradient updates made
    since its oldest transition was collected (capacity × replay ratio, Fedus et al. 2020)."""
    return float(memory_size) * float(ratio)


def capacities(total: int) -> tuple[int, ...]:
    """:data:`CAPACITIES` memory sizes a factor :data:`CAPACITY_FACTOR` apart, the largest about half of ``total``.

    The smallest is rounded to two significant digits (one below 10) and is at least the largest n of
    :data:`N_STEPS` (a fixed memory's size bounds n: no window holds more), so in runs of a few hundred steps
    the largest is almost the whole run (200 steps: 3, 12, 48, 192), and below 192 steps more than the
    whole run (smoke runs only: such a memory never forgets)."""
    low = total / (2 * CAPACITY_FACTOR ** (CAPACITIES - 1))
    digits = max(int(math.floor(math.log10(max(low, 1.0)))) - 1, 0)
    base = max(max(N_STEPS), int(round(low / 10**digits) * 10**digits))
    return tuple(base * CAPACITY_FACTOR**i for i in range(CAPACITIES))


def _preset(env_id: str, game: Game, total: int) -> tuple[Setup, dict]:
    """The preset's setup and hyperparameters of ``env_id`` (as a dict)."""
    from jaxreplay.paper.reproduce import settings as presets

    if game.preset == "minatar":
        setup, hp = presets.minatar_setting(env_id, total_steps=game.full_steps)
    else:
        setup, hp = presets.paper_setting(env_id, 100, adaptive=False, tuned=game.preset == "tuned")
    return setup, hp._asdict()


def design(env_id: str, *, quick: bool = False, seeds: int | None = None, steps: int | None = None) -> ReplayDesign:
    """The replay study of ``env_id``: the preset of :data:`GAMES` on the grid :data:`RATIOS` × :data:`N_STEPS`
    × :func:`capacities`.

    The preset's numbers are kept except: a gradient update every :data:`UNIT` steps at ratio 0.25 (and 4
    or 16 per unit at ratios 1 and 4); the target network copied every ``target_period × replay_ratio``
    of the preset *gradient updates* whatever the ratio (Fedus et al. 2020 scale the period with the
    ratio); ``learning_starts`` and the ε ramp (its start and length) scaled with the run length.

    Args:
        env_id: one of :data:`GAMES`.
        quick: the CPU quick mode: :attr:`Game.quick_steps` steps per run.
        seeds: seeds per setting (default 3 quick, :attr:`Game.full_seeds` otherwise).
        steps: cut every run to this many steps (a multiple of 20; tests and smoke runs).

    Raises:
        ValueError: ``env_id`` not one of :data:`GAMES`, ``seeds`` below 1, or ``steps`` not a positive
            multiple of 20.
    """
    from jaxreplay import _validation  # (here: the CLI's parser reads GAMES and must not import JAX)
    from jaxreplay.experiments import dqn

    _validation.check_choice("env", env_id, tuple(GAMES))
    game = GAMES[env_id]
    seeds = _validation.check_static_int("seeds", (3 if quick else game.full_seeds) if seeds is None else seeds, low=1)
    total = game.quick_steps if quick else game.full_steps
    if steps is not None:
        total = _validation.check_static_int("steps", steps, low=20)
        if total % 20:
            raise ValueError(f"steps must be a multiple of 20 (whole aER checks), got {total}.")
    preset, hp = _preset(env_id, game, total)
    scale = total / preset.total_steps
    grid = capacities(total)
    common = {k: v for k, v in hp.items() if k not in POINT_KEYS}
    common["learning_starts"] = max(1, int(round(hp["learning_starts"] * scale)))
    common["epsilon_decay_steps"] = max(1, int(round(hp["epsilon_decay_steps"] * scale)))
    if hp["epsilon_ramp_start"]:  # (MinAtar's: at the replay start; elsewhere 0, and then left out)
        common["epsilon_ramp_start"] = max(1, int(round(hp["epsilon_ramp_start"] * scale)))
    common["target_period"] = max(1, int(round(hp["target_period"] * hp["replay_ratio"])))  # in updates
    base = dataclasses.replace(
        preset, train_frequency=UNIT, max_n_step=max(N_STEPS), target_period_in_updates=True, adaptive=False
    )
    unit_setup = dataclasses.replace(base, max_capacity=max(grid), max_updates_per_unit=1)
    # (A run shorter than the largest grid capacity, a --steps smoke run below 64, still starts aER there.)
    adaptive_setup = dataclasses.replace(
        base, max_capacity=max(total, max(grid)), max_updates_per_unit=UNIT, adaptive=True, adaptive_check_every=20
    )
    segments = min(QUICK_SEGMENTS if quick else dqn.num_segments(preset), dqn.num_segments(preset))

    def cut(setup: Setup) -> Setup:  # ``total`` steps in at most ``segments`` segments (whole cycles each)
        return dqn.with_total_steps(dataclasses.replace(setup, total_steps=setup.steps_per_segment * segments), total)

    return ReplayDesign(
        env_id=env_id,
        quick=quick,
        seeds=seeds,
        unit_setup=cut(unit_setup),
        adaptive_setup=cut(adaptive_setup),
        common=common,
        capacities=grid,
        ratios=RATIOS,
        n_steps=N_STEPS,
        reduced="" if quick or steps is not None else _reduced(game, seeds),
    )


def _reduced(game: Game, seeds: int) -> str:
    """How a full-scale study of ``game`` at ``seeds`` seeds is below its preset's length or :data:`FULL_SEEDS`
    seeds, in words ("" if it is not)."""
    less = [game.reduced] if game.reduced else []
    if seeds < FULL_SEEDS:
        less.append(f"{seeds} seeds (the full study's: {FULL_SEEDS})")
    return ", ".join(less)


def point(memory_size, ratio, n_step, rule, *, num_old=None, relative=0.0) -> dict:
    """The sweep point (values of :data:`POINT_KEYS`) of memory ``memory_size`` at ``ratio`` with ``n_step``
    targets under ``rule`` (:data:`~jaxreplay.experiments.dqn.ADAPTIVE_RULES`; a program without aER ignores
    it); ``num_old`` (default half the memory) and ``relative`` are aER's n_old and relative tolerance."""
    return {
        "memory_size": int(memory_size),
        "replay_ratio": float(ratio),
        "n_step": int(n_step),
        "adaptive_rule": int(rule),
        "adaptive_num_old": int(max(1, memory_size // 2) if num_old is None else num_old),
        "adaptive_relative_tolerance": float(relative),
    }
