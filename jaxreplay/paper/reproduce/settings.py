"""The paper's DQN settings (Liu & Zou 2018, "Performance on OpenAI Games with DQN") as experiment configurations.

The paper's configurations belong to the paper layer, not to the DQN
experiment, which knows nothing of the paper: :func:`paper_setting` builds a
:class:`jaxreplay.experiments.dqn.Setup` and its
:class:`~jaxreplay.experiments.dqn.Hyperparameters` for one game and memory
size; :data:`ENVS` names the paper's games, :data:`PAPER_TOTAL_STEPS` and
:data:`PAPER_MEMORY_SIZES` hold the run lengths and the memory sizes of the
paper's figures. Beside them, :func:`minatar_setting` is MinAtar's own DQN
baseline (Young & Tian 2019) on the five gymnax MinAtar games, the paper's
experiment carried to a harder testbed. Importing this module imports no
experiment (the experiment is imported when a configuration is built), so the
command line can list the games cheaply. Used by
:mod:`jaxreplay.paper.reproduce.dqn`, :mod:`jaxreplay.paper.reproduce.study` and
``jaxreplay dqn``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from jaxreplay.experiments.dqn import Hyperparameters, Setup

__all__ = [
    "ENVS",
    "PAPER_TOTAL_STEPS",
    "PAPER_MEMORY_SIZES",
    "OPTIMIZER_READINGS",
    "MINATAR_GAMES",
    "paper_setting",
    "minatar_setting",
]

ENVS = ("CartPole-v1", "MountainCar-v0", "Acrobot-v1")
"""The paper's DQN games (gymnax ids), in the paper's order; every table here is keyed by them."""

PAPER_TOTAL_STEPS = {"CartPole-v1": 40_000, "MountainCar-v0": 300_000, "Acrobot-v1": 200_000}
"""Environment steps per run. The paper gives none: CartPole's 40,000 is implied by
"fixed as 40000, i.e., no experience is discarded"; MountainCar's and Acrobot's
are our choice, twice the largest memory compared (150,000 and 100,000), so that
every memory size of the figures forgets something."""

PAPER_MEMORY_SIZES = {
    "CartPole-v1": (100, 40_000),
    "MountainCar-v0": (20_000, 50_000, 150_000),
    "Acrobot-v1": (25_000, 100_000),
}
"""Fixed memory sizes of the paper's figures (aER starts from the first of CartPole and
from 20,000 / 150,000 and 25,000 / 100,000 for the others)."""


OPTIMIZER_READINGS = ("adam", "sgd")
"""How the paper's step size α is read: ``"adam"`` (Adam with learning rate α on
the minibatch-mean loss, the usual DQN practice) or ``"sgd"`` (Algorithm 1: plain
gradient steps of α per transition, the minibatch's updates summed)."""


class _Game(NamedTuple):
    """One game's numbers of :func:`paper_setting`, each from the paper unless marked ours."""

    step_size: float  # α
    discount: float  # γ
    hidden_sizes: tuple[int, ...]  # the paper's number of hidden layers; ours: 64 units each
    subsample_size: int  # old transitions aER samples to estimate its comparison
    quick_scale: float  # ours: ``quick`` shrinks the run by this factor


_GAMES = {
    # env_id: _Game(step_size, discount, hidden_sizes, subsample_size, quick_scale)
    "CartPole-v1": _Game(2e-5, 0.9, (64,), 50, 0.5),
    "MountainCar-v0": _Game(6e-4, 0.99, (64, 64), 1000, 0.25),
    "Acrobot-v1": _Game(1e-3, 0.99, (64, 64), 1000, 0.25),
}


def _dqn():
    # The experiment, imported when a configuration is built: ENVS and the tables import nothing heavy.
    from jaxreplay.experiments import dqn

    return dqn


def paper_setting(
    env_id: str,
    memory_size: int,
    adaptive: bool,
    *,
    tuned: bool = False,
    quick: bool = False,
    optimizer_reading: str = "adam",
    max_capacity: int | None = None,
) -> tuple[Setup, Hyperparameters]:
    """The paper's DQN configuration for one game and memory size, as ``(Setup, Hyperparameters)``.

    From the paper: minibatch 50; aER interval k = 20, n_old = half the initial
    memory, estimated from 50 (CartPole) or 1000 (MountainCar, Acrobot)
    sampled old transitions; γ = 0.9 / 0.99 / 0.99; step size 2e-5 / 6e-4 /
    1e-3; one hidden layer for CartPole, two for the others. Not in the paper,
    chosen here: 64 units per hidden layer, Adam, MSE loss, a hard target copy
    every 500 steps, ε from 1 to 0.05 over the first 10% of the steps,
    training every step from step 1,000 for every memory size (one value for
    every run of a comparison, so small memories do not start learning
    earlier), greedy evaluation of 10 episodes at each of 50 segment ends,
    and the run lengths of :data:`PAPER_TOTAL_STEPS`. aER's ceiling
    (``max_capacity``) is the run length: it can grow past every static size
    compared, so starting from the largest one does not cap it.

    Args:
        env_id: ``"CartPole-v1"``, ``"MountainCar-v0"`` or ``"Acrobot-v1"``.
        memory_size: the fixed memory size, or aER's initial size.
        adaptive: aER on top of uniform replay (n_old = memory_size // 2).
        tuned: CartPole only: a configuration that learns CartPole-v1 (CleanRL's
            ``dqn.py`` defaults, Huang et al. 2022: MLP (120, 84), Adam 2.5e-4,
            γ = 0.99, MSE, batch 128, a gradient step every 10 environment
            steps from step 10,000, hard target copy every 500 steps, ε from 1
            to 0.05 over the first half of the run; CleanRL's memory is 10,000),
            run for 200,000 steps in 20 segments instead of CleanRL's 500,000.
            On this project's 2-core CPU, 4 seeds reach a seed-mean greedy
            return >= 400 at about 110,000 steps, in about 40 s in all.
            ``memory_size`` (<= 50,000) and ``adaptive`` apply.
        quick: the same experiment shrunk in time (CartPole by 1/2, the
            others by 1/4): ``total_steps``, ``memory_size``,
            ``max_capacity``, n_old, the ε ramp and ``learning_starts`` scaled
            together, so memory sizes relative to the run are kept; k, the
            batch and the network are unchanged; 25 segments. Measured on a
            2-core CPU, 4 seeds of one configuration: CartPole (20,000 steps)
            ~15 s, MountainCar (75,000) ~55 s, Acrobot (50,000) ~30 s,
            compilation included. Not with ``tuned``.
        optimizer_reading: ``"adam"`` (default; the step size is Adam's
            learning rate on the minibatch-mean loss) or ``"sgd"`` (the
            paper's Algorithm 1: SGD with step α per transition, the
            minibatch's updates summed). See :data:`OPTIMIZER_READINGS`.
        max_capacity: slots to allocate (default: the largest paper size, and
            the run length with ``adaptive`` or for CartPole); memory sizes
            and aER's growth stay below it.

    Returns:
        ``(setup, hparams)``; ``hparams`` holds Python scalars.

    Raises:
        ValueError: unknown ``env_id``, ``tuned`` for another game or with
            ``quick``, or a ``memory_size`` outside ``[1, max_capacity]``.
    """
    from jaxreplay import _validation  # (here: the CLI's parser reads this module and must not import JAX)

    _validation.check_choice("env_id", env_id, ENVS)
    _validation.check_static_int("memory_size", memory_size, low=1)
    _validation.check_choice("optimizer_reading", optimizer_reading, OPTIMIZER_READINGS)
    if max_capacity is not None:
        _validation.check_static_int("max_capacity", max_capacity, low=1)
    if not tuned:
        return _paper_setting(env_id, memory_size, adaptive, quick, optimizer_reading, max_capacity)
    if env_id != "CartPole-v1":
        raise ValueError(f"tuned is only available for CartPole-v1, got env_id={env_id!r}.")
    if quick:
        raise ValueError("tuned and quick cannot be combined (the tuned run is already short).")
    if optimizer_reading != "adam":
        raise ValueError("tuned uses Adam on the mean loss: optimizer_reading must be 'adam' with tuned.")
    _validation.check_int("memory_size", memory_size, high=50_000)
    return _tuned_cartpole(memory_size, adaptive)


def _paper_setting(
    env_id: str, memory_size: int, adaptive: bool, quick: bool, optimizer_reading: str, max_capacity: int | None
) -> tuple[Setup, Hyperparameters]:
    """:func:`paper_setting` without ``tuned``, its arguments checked: the game's row of ``_GAMES`` and
    the numbers every game shares."""
    game = _GAMES[env_id]
    scale = game.quick_scale if quick else 1.0

    def scaled(n: int) -> int:
        return max(1, int(round(n * scale)))

    total = PAPER_TOTAL_STEPS[env_id]
    if max_capacity is None:
        max_capacity = scaled(max(*PAPER_MEMORY_SIZES[env_id], total if (adaptive or env_id == "CartPole-v1") else 0))
    memory = scaled(memory_size)
    if memory > max_capacity:
        raise ValueError(f"memory_size must be <= {round(max_capacity / scale)} for {env_id}, got {memory_size}.")
    segments = 25 if quick else 50  # ours: greedy evaluations along the run
    steps_per_segment = scaled(total) // segments
    steps_per_segment -= steps_per_segment % 20  # a whole number of aER cycles
    setup = _dqn().Setup(
        env_id=env_id,
        total_steps=steps_per_segment * segments,
        steps_per_segment=steps_per_segment,
        hidden_sizes=game.hidden_sizes,
        max_capacity=max_capacity,
        batch_size=50,  # paper
        sampler="uniform",  # paper: aER on top of uniform replay
        adaptive=adaptive,
        adaptive_check_every=20,  # paper: k
        subsample_size=game.subsample_size,
        loss="mse",  # ours: MSE, plain DQN targets, a hard target copy
        double=False,
        target_update="hard",
        optimizer=optimizer_reading,  # how α is read (OPTIMIZER_READINGS)
        batch_reduction="mean" if optimizer_reading == "adam" else "sum",
        train_frequency=1,  # ours: a gradient step every environment step
        eval_episodes=10,  # ours
    )
    hparams = _dqn().Hyperparameters(
        memory_size=memory,
        step_size=game.step_size,
        discount=game.discount,
        epsilon_start=1.0,  # ours: ε from 1 to 0.05 over the first 10% of the run
        epsilon_end=0.05,
        epsilon_decay_steps=scaled(total // 10),
        learning_starts=scaled(1_000),  # ours: one value for every memory size of a comparison
        target_period=500,  # ours
        adaptive_interval=20,  # paper: k
        adaptive_num_old=max(1, memory // 2),  # paper: half the initial memory
    )
    return setup, hparams


def _tuned_cartpole(memory_size: int, adaptive: bool) -> tuple[Setup, Hyperparameters]:
    """:func:`paper_setting` with ``tuned``, its arguments checked: CleanRL's ``dqn.py`` defaults
    (Huang et al. 2022) unless marked, run for 200,000 steps instead of 500,000."""
    setup = _dqn().Setup(
        env_id="CartPole-v1",
        total_steps=200_000,  # ours (CleanRL: 500,000)
        steps_per_segment=10_000,  # ours: 20 greedy evaluations
        hidden_sizes=(120, 84),
        max_capacity=50_000,  # ours: memory sizes up to 50,000 (CleanRL's: 10,000)
        batch_size=128,
        sampler="uniform",
        adaptive=adaptive,
        adaptive_check_every=20,  # the paper's aER for CartPole: k = 20, 50 sampled old transitions
        subsample_size=50,
        loss="mse",
        double=False,
        target_update="hard",
        optimizer="adam",
        train_frequency=10,
        eval_episodes=10,  # ours
    )
    hparams = _dqn().Hyperparameters(
        memory_size=memory_size,
        step_size=2.5e-4,
        discount=0.99,
        epsilon_start=1.0,
        epsilon_end=0.05,
        epsilon_decay_steps=100_000,  # the first half of the run
        learning_starts=10_000,
        target_period=500,
        adaptive_interval=20,  # the paper's k and n_old
        adaptive_num_old=max(1, memory_size // 2),
        replay_ratio=0.1,  # one gradient step every train_frequency = 10 steps
    )
    return setup, hparams


MINATAR_GAMES = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar")
"""The MinAtar games gymnax provides (MinAtar's five; :func:`minatar_setting`)."""

MINATAR_TOTAL_STEPS = 5_000_000
"""Young & Tian's run length: 5 million frames (one frame per environment step in MinAtar)."""


def minatar_setting(
    env_id: str,
    memory_size: int | None = None,
    *,
    total_steps: int = MINATAR_TOTAL_STEPS,
    segments: int = 50,
    adaptive: bool = False,
) -> tuple[Setup, Hyperparameters]:
    """MinAtar's DQN baseline (Young & Tian 2019) on one MinAtar game, as ``(Setup, Hyperparameters)``.

    From Young and Tian's MinAtar paper (its DQN baseline and the
    hyperparameters it lists): the convolutional network (one 3×3 convolution
    of 16 filters, a 128-unit ReLU layer; ``network="minatar_conv"``), a
    replay memory of 100,000 transitions, minibatches of 32, a gradient step
    every environment step from step 5,000 on (its replay start size), the
    Huber loss, a target network copied every 1,000 steps, random actions
    for the first 5,000 steps and then ε from 1 to 0.1 over the next 100,000
    (``epsilon_ramp_start``), γ = 0.99, step size 2.5e-4 and 5 million
    frames. Not theirs: Adam instead of their centered RMSProp (this
    library's optimizers are Adam and SGD; Obando-Ceron & Castro 2021,
    *Revisiting Rainbow*, also train MinAtar agents with Adam), with Adam's
    ε = 3.125e-4 (ours, ``0.01 / 32``, a value common with Adam on Atari-like
    games, instead of the default 1e-8); greedy evaluation of 10 episodes at each segment end
    (ours); aER (``adaptive``) with k = 20 and n_old = memory_size / 2,
    estimated from 1,000 old transitions, as the paper's larger games.

    The games are gymnax's MinAtar, which differ from MinAtar's own (the
    baseline's). The preset restores MinAtar's sticky actions, which gymnax
    does not have: with probability 0.1 a step repeats the previous action
    (MinAtar's default, which the baseline ran; ``Setup.sticky_action_prob``,
    :class:`~jaxreplay.envs.StickyActions`). It keeps the other differences,
    so its returns are not the baseline's to the digit:

    * minimal action sets (Asterix 5, Breakout 3, Freeway 3, Seaquest 6,
      SpaceInvaders 4 actions), where the baseline's network has 6 outputs in
      every game;
    * a time limit of 1,000 steps in Asterix, Breakout, Seaquest and
      SpaceInvaders, which MinAtar does not have: episodes are cut there (their
      returns with them) and the targets bootstrap through the cut;
    * Freeway ends after 2,500 steps in both, as a termination in MinAtar and
      a time-limit truncation in gymnax: the preset follows MinAtar and does
      not bootstrap there (``Setup.truncation_bootstrap=False`` for Freeway,
      whose episodes end no other way).

    Args:
        env_id: one of :data:`MINATAR_GAMES`.
        memory_size: the fixed memory size, or aER's initial size; None:
            their 100,000, or ``total_steps`` if the run is shorter (the
            memory allocates ``max(memory_size, 100_000)`` slots, at most
            ``total_steps``; with packed observations a Breakout slot takes
            100 + 16 bytes, so 100,000 slots are ~11 MiB a run).
        total_steps: environment steps per run (a multiple of ``20 ×
            segments``); shorter runs keep every other number, the ε ramp
            and the learning start included, unless they do not fit: then
            learning and the ε ramp (over 10% of the run) start at 1%.
        segments: record points along the run.
        adaptive: aER on top of uniform replay.

    Returns:
        ``(setup, hparams)``; ``hparams`` holds Python scalars.

    Raises:
        ValueError: naming the argument: an unknown game, or a
            ``total_steps`` / ``memory_size`` / ``segments`` that does not fit.
    """
    from jaxreplay import _validation  # (here: the CLI's parser reads this module and must not import JAX)

    _validation.check_choice("env_id", env_id, MINATAR_GAMES)
    if memory_size is None:
        _validation.check_static_int("total_steps", total_steps, low=1)
        memory_size = min(100_000, total_steps)
    for name, value in (("memory_size", memory_size), ("total_steps", total_steps), ("segments", segments)):
        _validation.check_static_int(name, value, low=1)
    if total_steps % (20 * segments):
        raise ValueError(
            f"total_steps must be a multiple of 20 × segments = {20 * segments} (whole aER cycles in every "
            f"segment), got {total_steps}."
        )
    max_capacity = min(max(memory_size, 100_000), total_steps)
    if memory_size > max_capacity:
        raise ValueError(f"memory_size must be <= total_steps ({total_steps}), got {memory_size}.")
    ramp, start = 100_000, 5_000  # Young & Tian: ε's ramp and the replay start size
    if ramp > total_steps // 2:  # a short run: keep their proportions to the 5M run's start instead
        ramp, start = total_steps // 10, max(1, total_steps // 100)
    setup = _dqn().Setup(
        env_id=env_id,
        total_steps=total_steps,
        steps_per_segment=total_steps // segments,
        max_capacity=max_capacity,
        batch_size=32,
        sampler="uniform",
        adaptive=adaptive,
        adaptive_check_every=20,
        subsample_size=1000,
        loss="huber",
        target_update="hard",
        optimizer="adam",
        train_frequency=1,
        eval_episodes=10,
        network="minatar_conv",
        truncation_bootstrap=env_id != "Freeway-MinAtar",  # MinAtar's Freeway terminates at its time limit
        sticky_action_prob=0.1,  # MinAtar's default (gymnax's games have none)
    )
    hparams = _dqn().Hyperparameters(
        memory_size=memory_size,
        step_size=2.5e-4,
        discount=0.99,
        epsilon_start=1.0,
        epsilon_end=0.1,
        epsilon_decay_steps=ramp,
        epsilon_ramp_start=start,  # Young & Tian: random actions until the replay start, then the ramp
        learning_starts=start,
        target_period=1_000,
        adaptive_interval=20,
        adaptive_num_old=max(1, memory_size // 2),
        adam_epsilon=3.125e-4,
    )
    return setup, hparams
