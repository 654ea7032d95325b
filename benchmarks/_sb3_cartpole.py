"""Baseline for DQN throughput: Stable-Baselines3's DQN on gymnasium's CartPole-v1.

:func:`measure_sb3` trains one SB3 ``DQN`` (PyTorch, CPU) for ``total_steps``
environment steps and reports how fast it went: environment steps per second
and gradient updates per second, both over the wall time of
``model.learn(...)`` alone. Importing torch / SB3, building the environment
and the model (network, optimizer, replay-buffer allocation) are setup and
are timed apart (``setup_seconds``), never mixed into the rates.

The configuration is SB3's defaults (Adam at 1e-4, Huber loss, gradient-norm
clip 10, target copy every 10 000 steps, ε decayed over the first 10 % of the
steps) except what a throughput comparison has to fix: the MLP's hidden
sizes, the minibatch size, one gradient update every ``train_freq``
environment steps (``gradient_steps=1``), ``learning_starts`` and the replay
capacity (default ``total_steps``, so nothing is forgotten and no unused
memory is allocated; SB3's uniform sampling costs the same whatever the
capacity). One environment, one process: SB3 trains one agent at a time.

Both rates are aggregates over the whole ``learn`` call, which includes the
``learning_starts`` steps taken before the first update (those steps are
cheaper, so keep ``learning_starts`` small next to ``total_steps``).

Threads: torch uses ``torch_threads`` intra-op threads (default 1). For a
50 × 64 MLP one matrix product is microseconds of work, so a second thread
has nothing to gain: on this project's 2-core machine, idle, 2 threads ran
CartPole within noise of 1 thread at twice the CPU time, and while another
process used one core, 2 threads ran 5–10× *slower* than 1 (the second
thread waits for a core at every operation). ``python -m
benchmarks._sb3_cartpole`` prints both. The setting is process-wide and is
restored after the measurement.

Needs the ``bench`` extra (torch, stable-baselines3, gymnasium); without
them :func:`measure_sb3` raises ``ImportError`` saying what to install.
"""

from __future__ import annotations

import time
from typing import Sequence

from jaxreplay import _validation

INSTALL_HINT = (
    "benchmarks._sb3_cartpole needs torch, stable-baselines3 and gymnasium. Install the benchmark extra "
    "from the repository root: pip install -e '.[bench]' (install a CPU build of torch first if you do not "
    "want pip to fetch a CUDA one)."
)


def _import_sb3():
    try:
        import gymnasium
        import stable_baselines3
        import torch
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})") from error
    return gymnasium, stable_baselines3, torch


def measure_sb3(
    total_steps: int = 20_000,
    hidden_sizes: Sequence[int] = (64,),
    batch_size: int = 50,
    train_freq: int = 1,
    learning_starts: int = 100,
    seed: int = 0,
    *,
    buffer_size: int | None = None,
    torch_threads: int = 1,
) -> dict[str, float]:
    """Train SB3's DQN on CartPole-v1 for ``total_steps`` steps and time it.

    Args:
        total_steps: environment steps to train for (``learn(total_timesteps=...)``).
        hidden_sizes: widths of the Q-network's ReLU hidden layers (SB3's ``net_arch``).
        batch_size: minibatch size of each gradient update.
        train_freq: environment steps between updates (one update each time).
        learning_starts: environment steps before the first update (SB3's
            default 100).
        seed: seed of the model, its action sampling and the environment.
        buffer_size: replay capacity; ``None`` means ``total_steps``.
        torch_threads: torch's intra-op threads during the run (see the
            module docstring); the previous value is restored afterwards.

    Returns:
        A dict with ``env_steps_per_s`` and ``updates_per_s`` (each over the
        ``learn`` wall time), ``seconds`` (that wall time), ``cpu_seconds``
        (CPU time of this process during it, all threads; with one thread,
        well below ``seconds`` means other processes took the core: rerun),
        ``env_steps`` and
        ``updates`` (counted by SB3), ``setup_seconds`` (environment + model
        construction, excluded from the rates) and ``torch_threads``.

    Raises:
        ImportError: torch, stable-baselines3 or gymnasium is missing.
        ValueError: a size or count is not a positive integer (``learning_starts``: >= 0).
    """
    total_steps, batch_size, train_freq, torch_threads = (
        _validation.check_static_int(name, value, low=1)
        for name, value in (("total_steps", total_steps), ("batch_size", batch_size), ("train_freq", train_freq),
                            ("torch_threads", torch_threads))
    )
    hidden_sizes = [_validation.check_static_int("hidden_sizes", width, low=1) for width in hidden_sizes]
    learning_starts = _validation.check_static_int("learning_starts", learning_starts, low=0)
    buffer_size = total_steps if buffer_size is None else _validation.check_static_int("buffer_size", buffer_size, low=1)
    gymnasium, sb3, torch = _import_sb3()

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        start = time.perf_counter()
        env = gymnasium.make("CartPole-v1")
        model = sb3.DQN(
            "MlpPolicy",
            env,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            train_freq=train_freq,
            gradient_steps=1,
            policy_kwargs=dict(net_arch=hidden_sizes),
            seed=seed,
            device="cpu",
            verbose=0,
        )
        setup_seconds = time.perf_counter() - start

        start, cpu_start = time.perf_counter(), time.process_time()
        model.learn(total_timesteps=total_steps, progress_bar=False)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
        env.close()
    finally:
        torch.set_num_threads(previous_threads)

    env_steps, updates = int(model.num_timesteps), int(model._n_updates)
    return dict(
        env_steps_per_s=env_steps / seconds,
        updates_per_s=updates / seconds,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        env_steps=float(env_steps),
        updates=float(updates),
        setup_seconds=setup_seconds,
        torch_threads=float(torch_threads),
    )


if __name__ == "__main__":
    # python -m benchmarks._sb3_cartpole [total_steps]: the rates with 1 and 2 torch threads.
    import sys

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    for threads in (1, 2):
        result = measure_sb3(steps, torch_threads=threads)
        print(", ".join(f"{key}={value:.6g}" for key, value in result.items()), flush=True)
