"""DQN with n-step targets (traced ``n_step``) and a traced replay ratio.

One small CartPole setup with short episodes (time-limit truncations every
15 steps, terminations in between) runs four runs of different ``n_step`` and
``replay_ratio`` in one program; the same runs alone, in a setup with the
static bounds at 1, and a chain probe with known Q-values check it.
"""

from __future__ import annotations

import dataclasses
import platform

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compile_events import COMPILE_EVENTS  # noqa: E402 (tests/ is on sys.path)

from jaxreplay.agents import dqn as agent
from jaxreplay.experiments import dqn
from jaxreplay.experiments.dqn import runs, steps

SHORT_EPISODES = (("max_steps_in_episode", 15),)
BOUNDED = dqn.Setup(
    env_params=SHORT_EPISODES,
    total_steps=240,
    steps_per_segment=120,
    hidden_sizes=(8,),
    max_capacity=256,
    batch_size=8,
    max_n_step=3,
    max_updates_per_unit=4,
)
HPARAMS = dqn.Hyperparameters(memory_size=200, learning_starts=20, target_period=30, epsilon_decay_steps=200)
# (n_step, replay_ratio) of the four runs of one program.
MIXED = ((1, 1.0), (3, 1.0), (3, 0.25), (2, 4.0))
KEYS = jax.random.split(jax.random.key(11), len(MIXED))


def mixed_hparams(pairs=MIXED) -> dqn.Hyperparameters:
    n, ratio = zip(*pairs)
    return HPARAMS._replace(n_step=np.array(n, np.int32), replay_ratio=np.array(ratio, np.float32))


def as_bits(tree) -> list[np.ndarray]:
    return [np.atleast_1d(np.asarray(x)).view(np.uint8) for x in jax.tree.leaves(tree)]


def run_of(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


@pytest.fixture(scope="module")
def mixed():
    before = COMPILE_EVENTS.backend_compiles
    out = dqn.run_batch(KEYS, mixed_hparams(), BOUNDED, return_state=True)
    jax.block_until_ready(out)
    return out, COMPILE_EVENTS.backend_compiles - before


@pytest.fixture(scope="module")
def alone():
    """Each run of :data:`MIXED` with no other hyperparameters in its batch: four copies of it, a batch of the
    mixed one's size (XLA:CPU can round a batch of 1 otherwise than larger ones, docs/guide.md; batches of 2
    to 9 agree), so the mixed runs' compiled program runs them: nothing is compiled again."""
    keys = [jnp.stack([KEYS[i]] * len(MIXED)) for i in range(len(MIXED))]
    before = COMPILE_EVENTS.backend_compiles
    out = [
        dqn.run_batch(keys[i], mixed_hparams([pair] * len(MIXED)), BOUNDED, return_state=True)
        for i, pair in enumerate(MIXED)
    ]
    jax.block_until_ready(out)
    return out, COMPILE_EVENTS.backend_compiles - before


def test_n_and_ratio_vary_in_one_compiled_program(mixed):
    (records, summary, _), compiles = mixed
    assert compiles == 1
    assert records["env_steps"].tolist() == [[120, 240]] * 4
    assert not summary["n_step_clipped"].any() and not summary["replay_ratio_clipped"].any()
    assert not summary["invalid_hyperparameters"].any()
    # n = 3 learns from other targets than n = 1 (same key stream, same ratio).
    assert not np.array_equal(records["td_loss"][0], records["td_loss"][1])


def test_gradient_updates_follow_the_replay_ratio(mixed):
    """Updates due in the first t steps: floor(t · ratio); those of the units before learning_starts
    (20) are masked: floor(240 ρ) - floor(19 ρ)."""
    (_, summary, _), _ = mixed
    assert summary["gradient_steps"].tolist() == [240 - 19, 240 - 19, 60 - 4, 960 - 76]
    # The age of the oldest policy, in updates: capacity × ratio.
    np.testing.assert_array_equal(summary["oldest_policy_age"], [200.0, 200.0, 50.0, 800.0])


def test_learning_starts_is_read_at_a_units_end():
    """A unit of train_frequency steps makes all its due updates if it ends at t >= learning_starts: the field's
    docstring said those due before it were masked (40 updates, not 39, for learning_starts 10; found by a probe)."""
    import dataclasses

    setup = dataclasses.replace(BOUNDED, total_steps=48, steps_per_segment=48, train_frequency=4)
    starts = np.array([0, 10, 12, 13], np.int32)
    hparams = HPARAMS._replace(memory_size=40, learning_starts=starts, target_period=8)
    _, summary = dqn.run_batch(KEYS, hparams, setup)
    # Units end at 4, 8, ..., 48 and make 4 updates each once they end at or after learning_starts.
    assert summary["gradient_steps"].tolist() == [4 * sum(end >= s for end in range(4, 49, 4)) for s in starts]
    assert summary["gradient_steps"].tolist() == [48, 40, 40, 36]


def test_a_mixed_chunk_gives_each_run_its_result_alone(mixed, alone):
    (records, summary, state), _ = mixed
    alone, compiles = alone
    assert compiles == 0  # the mixed runs' program, whatever the runs
    for i, result in enumerate(alone):
        rec1, sum1, state1 = run_of(result, 0)
        for together, by_itself in zip(
            as_bits(run_of((records, summary, state.params), i)), as_bits((rec1, sum1, state1.params))
        ):
            np.testing.assert_array_equal(together, by_itself)


def test_raised_static_bounds_leave_a_one_step_ratio_one_run_bit_identical(alone):
    """n = 1, ratio 1 with max_n_step 3 and 4 update slots per step: the run of the default bounds (1, 1),
    which is today's 1-step DQN with a gradient step every step (the stored transition lacks `truncated`)."""
    default = dataclasses.replace(BOUNDED, max_n_step=1, max_updates_per_unit=1)
    records, summary, state = dqn.run_batch(
        jnp.stack([KEYS[0]] * len(MIXED)), mixed_hparams([(1, 1.0)] * len(MIXED)), default, return_state=True
    )
    assert "truncated" not in state.memory.storage
    rec1, sum1, state1 = alone[0][0]
    assert summary["gradient_steps"].tolist() == [221] * len(MIXED)
    for old, new in zip(as_bits((records, summary, state.params)), as_bits((rec1, sum1, state1.params))):
        np.testing.assert_array_equal(old, new)


def test_raised_n_step_bound_changes_no_bit_for_other_keys(mixed):
    """Over other keys the two programs agree bit for bit, the logged td_loss included: its batch mean was a
    reduce XLA compiled into another loop in the two programs (3e-8 and 1.2e-7 apart, found by a probe); the
    loss now sums the batch in one fixed pairwise order (jaxreplay._ordered)."""
    # A batch of the mixed runs' size (4 runs; it was 3, and batches of 2 to 9 agree, docs/guide.md): the
    # max_n_step 3 side is then the `mixed` fixture's compiled program, not a compile of its own (~7 s cold).
    keys = jax.random.split(jax.random.key(5), len(MIXED))
    hp = mixed_hparams([(1, 1.0)] * len(MIXED))
    one = dqn.run_batch(keys, hp, dataclasses.replace(BOUNDED, max_n_step=1), return_state=True)
    three = dqn.run_batch(keys, hp, BOUNDED, return_state=True)
    for (rec_a, sum_a, st_a), (rec_b, sum_b, st_b) in ((one, three),):
        assert "td_loss" in rec_a
        for a, b in zip(as_bits((rec_a, sum_a, st_a.params)), as_bits((rec_b, sum_b, st_b.params))):
            np.testing.assert_array_equal(a, b)


# The probe's configuration whose logged td_loss differed in its last bit between max_n_step 1 and 2/4/8.
_FMA_SCRIPT = """
import dataclasses, sys, jax, numpy as np
from jaxreplay.experiments import dqn
keys = jax.random.split(jax.random.key(0), 2)
base = dqn.Setup(env_id="CartPole-v1", env_params={"max_steps_in_episode": 15}, hidden_sizes=(4,), max_capacity=64,
                 batch_size=8, total_steps=200, steps_per_segment=100, sampler="prioritized", double=True)
hp = dqn.Hyperparameters(memory_size=64, learning_starts=20, n_step=1)
for bound in (1, 2, 4):
    records, summary = dqn.run_batch(keys, hp, dataclasses.replace(base, max_n_step=bound))
    print(bound, np.asarray(records["td_loss"]).view(np.uint32).tolist(), np.asarray(summary["recent_return"]).tolist())
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 XLA:CPU flag")
def test_the_logged_td_loss_across_n_step_bounds_differs_only_by_fused_multiply_adds():
    """docs/design.md's one exception to the n = 1 bit-identity across max_n_step: with importance weights other
    than 1, the logged td_loss at max_n_step 2 or 4 could differ from max_n_step 1 in its last bit. The cause is
    XLA:CPU contracting a multiply and the add that consumes it into one fused multiply-add inside a fused kernel;
    the bounds fuse the loss's value differently. With FMA instructions off (``--xla_cpu_max_isa=SSE4_2``) the three
    programs log the same bits (without the flag they differ in one record on the machines measured)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", _FMA_SCRIPT], capture_output=True, text=True, env=env, check=True)
    lines = [line.split(" ", 1)[1] for line in out.stdout.splitlines()]
    assert len(lines) == 3 and lines[0] == lines[1] == lines[2], out.stdout


def reference_n_step(memory, start: int, n: int, gamma: float):
    """Plain Python over the stored ring: (reward sum, bootstrap discount, next observation) of one start."""
    counters = np.asarray(memory.insertion_index)
    total, size = int(memory.total_added), int(memory.size)
    slot_of = {int(c): slot for slot, c in enumerate(counters) if total - size <= c < total}
    storage = {k: np.asarray(v) for k, v in memory.storage.items()}
    counter = int(counters[start])
    g, power, discount, last = np.float32(0), np.float32(1), np.float32(0), start
    for j in range(n):
        if counter + j not in slot_of:  # past the newest transition
            break
        slot = slot_of[counter + j]
        g = np.float32(g + power * storage["reward"][slot])
        power = np.float32(power * np.float32(gamma))
        last = slot
        discount = np.float32(0) if storage["terminated"][slot] else power
        if storage["terminated"][slot] or storage["truncated"][slot]:
            break
    return g, discount, storage["next_obs"][last]


def test_n_step_targets_of_a_sampled_minibatch_match_a_plain_python_reference(mixed):
    (_, _, state), _ = mixed
    i = 1  # n = 3
    s = run_of(state, i)
    hp = run_of(dqn.broadcast_hyperparameters(mixed_hparams(), len(MIXED)), i)
    storage = s.memory.storage
    # Both episode ends occur in the stored stream: truncations (at 15 steps) and terminations.
    assert storage["truncated"].sum() > 0 and (storage["terminated"] > 0).sum() > 0
    indices = jnp.arange(200, dtype=jnp.int32)  # every live start, newest and wrapped ones included

    @jax.jit  # one program, as the DQN step runs it (op by op it took ~10 s of dispatch and compiles)
    def minibatch_and_td(s, hp, indices, ref_reward, ref_next_obs, ref_discount):
        ctx = steps._context(s, hp, BOUNDED)
        batch, loss = steps._minibatch(ctx, s.memory, indices)
        ref_batch = {**batch, "reward": ref_reward, "next_obs": ref_next_obs}
        td = agent.td_errors(ctx.net, s.params, s.target_params, batch, loss.discount)
        td_ref = agent.td_errors(ctx.net, s.params, s.target_params, ref_batch, ref_discount)
        return batch, loss.discount, td, td_ref

    gamma = float(np.float32(HPARAMS.discount))
    expected = [reference_n_step(s.memory, int(slot), 3, gamma) for slot in indices]
    rewards, discounts, next_obs = (np.array([e[k] for e in expected]) for k in range(3))
    batch, discount, td, td_ref = minibatch_and_td(s, hp, indices, rewards, next_obs, discounts)
    np.testing.assert_allclose(batch["reward"], rewards, rtol=1e-6)
    np.testing.assert_array_equal(discount, discounts)
    np.testing.assert_array_equal(batch["next_obs"], next_obs)
    np.testing.assert_array_equal(batch["terminated"], 0.0)
    # Every horizon occurs: after a termination (0), and k = 1, 2, 3 rewards.
    assert sorted(set(np.round(discounts, 6).tolist())) == pytest.approx([0.0, gamma**3, gamma**2, gamma])
    # The TD errors of the step's batch are those of the reference targets.
    np.testing.assert_allclose(td, td_ref, rtol=1e-5, atol=1e-6)


def test_traced_bad_n_and_ratio_are_clipped_and_flagged(mixed):
    """Past the concrete checks (the jitted batch runner itself): n 5 and 0 clip to 3 and 1, ratio NaN to 0
    and 9 to the bound 4; the flags say so. The same program as the mixed runs (no compile)."""
    hp = HPARAMS._replace(
        n_step=np.array([5, 0, 1, 2], np.int32), replay_ratio=np.array([np.nan, 9.0, 0.25, 1.0], np.float32)
    )
    before = COMPILE_EVENTS.backend_compiles
    _, summary, _ = runs._run_batch(KEYS, dqn.broadcast_hyperparameters(hp, 4), BOUNDED, True)
    assert COMPILE_EVENTS.backend_compiles == before
    assert summary["n_step_clipped"].tolist() == [True, True, False, False]
    assert summary["replay_ratio_clipped"].tolist() == [True, True, False, False]
    assert summary["invalid_hyperparameters"].tolist() == [True, True, False, False]
    assert summary["gradient_steps"].tolist() == [0, 960 - 76, 60 - 4, 240 - 19]


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"n_step": 4}, "n_step", "must be at most Setup.max_n_step (3)"),
        ({"n_step": 0}, "n_step", "must be >= 1"),
        ({"n_step": 1.5}, "n_step", "must be an integer"),
        ({"replay_ratio": 4.5}, "replay_ratio", "raise max_updates_per_unit"),
        ({"replay_ratio": -0.5}, "replay_ratio", "must be >= 0.0"),
        ({"replay_ratio": float("nan")}, "replay_ratio", "must be finite"),
        ({"replay_ratio": 1e-40}, "replay_ratio", "does not fit a float32"),  # would run as 0: no updates
    ],
)
def test_bad_n_and_ratio_are_refused_naming_them_before_compiling(change, field, message):
    before = COMPILE_EVENTS.lowerings
    with pytest.raises(ValueError, match=rf"^{field}\b.*{message.replace('(', '[(]').replace(')', '[)]')}"):
        dqn.run_batch(KEYS, HPARAMS._replace(**change), BOUNDED)
    assert COMPILE_EVENTS.lowerings == before


def test_static_bounds_are_checked():
    for name in ("max_n_step", "max_updates_per_unit"):
        with pytest.raises(ValueError, match=rf"^{name}\b"):
            dqn.Setup(**{name: 0})
    with pytest.raises(ValueError, match=r"^target_period_in_updates must be a bool"):
        dqn.Setup(target_period_in_updates=1)
    assert dqn.Setup(train_frequency=4, max_updates_per_unit=1).max_replay_ratio == 0.25


def test_n_step_learns_the_chain_probes_values_with_target_copies_counted_in_updates():
    """Probe-Chain (4 positions, reward 1 then 10 at the last, γ = 0.5): 3-step targets from ε = 1 play
    learn Q = 3, 4, 6, 10 (both actions alike), at 2 updates per step with a target copy every 100 updates."""
    setup = dqn.Setup(
        env_id="Probe-Chain",
        total_steps=4_000,
        steps_per_segment=2_000,
        hidden_sizes=(16,),
        max_capacity=500,
        batch_size=16,
        max_n_step=3,
        max_updates_per_unit=2,
        target_period_in_updates=True,
    )
    hp = dqn.Hyperparameters(
        memory_size=500,
        step_size=3e-3,
        discount=0.5,
        epsilon_start=1.0,
        epsilon_end=1.0,
        learning_starts=100,
        target_period=100,
        n_step=3,
        replay_ratio=2.0,
    )
    keys = jax.random.split(jax.random.key(3), 2)
    _, summary, state = dqn.run_batch(keys, hp, setup, return_state=True)
    # floor(4000 · 2) - floor(99 · 2) updates; a copy after every 100th.
    assert summary["gradient_steps"].tolist() == [8000 - 198] * 2
    assert np.asarray(state.target_copies).tolist() == [(8000 - 198) // 100] * 2
    env, env_params = dqn.environment(setup)
    positions = jnp.arange(4, dtype=jnp.float32)[:, None]
    truth = np.asarray(env.true_q(positions, env_params, 0.5))
    np.testing.assert_allclose(truth[:, 0], [3.0, 4.0, 6.0, 10.0])
    q = np.asarray(jax.vmap(lambda p: dqn.q_values(p, positions, setup))(state.params))
    np.testing.assert_allclose(q, np.broadcast_to(truth, q.shape), atol=0.02)


def test_cli_n_step_and_replay_ratio_set_the_run_and_its_static_bounds(capsys):
    """`jaxreplay dqn --n-step N --replay-ratio ρ`: n and ρ traced, the bounds just large enough (the tuned
    CartPole updates at unit ends of 10 steps: ρ = 0.5 needs 5 slots); without them the setting's own."""
    from jaxreplay import cli
    from jaxreplay.cli import dqn as dqn_command

    parser = cli.build_parser()
    setup, hp = dqn_command._read_setting(
        parser.parse_args(["dqn", "--tuned", "--n-step", "3", "--replay-ratio", "0.5"])
    )
    assert (setup.max_n_step, hp.n_step, setup.train_frequency, setup.max_updates_per_unit, hp.replay_ratio) == (
        3,
        3,
        10,
        5,
        0.5,
    )
    setup, hp = dqn_command._read_setting(parser.parse_args(["dqn", "--tuned"]))
    assert (setup.max_n_step, hp.n_step, setup.max_updates_per_unit, hp.replay_ratio) == (1, 1, 1, 0.1)
    dqn.check(hp, setup)
    setup, hp = dqn_command._read_setting(parser.parse_args(["dqn", "--replay-ratio", "0.7"]))
    dqn.check(hp._replace(replay_ratio=0.7), dataclasses.replace(setup, train_frequency=10, max_updates_per_unit=7))
    before = COMPILE_EVENTS.lowerings
    for args, message in (
        (["--n-step", "0"], "--n-step must be >= 1, got 0."),
        # n above the memory's largest size changes nothing but the compile, which it made last minutes (n = 1000:
        # over 5 min and 3.8 GB for a 100-step run; found by a probe).
        (["--n-step", "1000", "--steps", "100"], "--n-step must be <= 100, got 1000: no window holds more than"),
        (["--replay-ratio", "nan"], "--replay-ratio must be a number in (0, 2**20]"),
        (["--replay-ratio", "-1"], "--replay-ratio must be a number in (0, 2**20]"),
    ):
        assert cli.main(["dqn", "--quiet", "--seeds", "1", *args]) == 2
        assert message in capsys.readouterr().err
    assert COMPILE_EVENTS.lowerings == before


def test_sweeps_stored_before_n_step_and_ratio_keep_their_fingerprint():
    """The committed paper-scale CartPole sweep, declared again with a full Setup (its new fields at their
    defaults) and n_step = 1, replay_ratio = 1.0 fixed: the same fingerprint (and folder name) as stored;
    another ratio is another sweep."""
    import json
    import pathlib

    from jaxreplay.engine import sweep as sweep_lib

    path = pathlib.Path(__file__).parents[1] / "docs/paper_scale/dqn/CartPole-v1/sweeps/fixed-1aab90dd7c/sweep.json"
    stored = json.loads(path.read_text())
    config = stored["config"]
    setup = dqn.Setup(**{k: tuple(v) if isinstance(v, list) else v for k, v in config["setup"].items()})
    fixed = {**config["fixed"], "n_step": 1, "replay_ratio": 1.0}
    sweep = sweep_lib.Sweep(
        "dqn", seeds=config["seeds"], seed=config["seed"], setup=setup, fixed=fixed, points=config["points"]
    )
    assert sweep.fingerprint() == stored["fingerprint"]
    assert "max_n_step" not in sweep.to_dict()["setup"] and "replay_ratio" not in sweep.to_dict()["fixed"]
    other = sweep_lib.Sweep(
        "dqn",
        seeds=config["seeds"],
        seed=config["seed"],
        setup=setup,
        fixed={**fixed, "replay_ratio": 0.5},
        points=config["points"],
    )
    assert other.fingerprint() != stored["fingerprint"]


def test_a_study_written_today_lists_the_settings_a_committed_study_lists():
    """The study writer's settings leave out the new fields at their defaults (the committed study.json's
    keys); a non-default value is kept, and a bool never stands for an int default."""
    import json
    import pathlib

    committed = json.loads((pathlib.Path(__file__).parents[1] / "docs/study/CartPole-v1/study.json").read_text())
    experiment = dqn.EXPERIMENT
    assert list(experiment.without_added_defaults(dataclasses.asdict(dqn.Setup()))) == list(
        committed["settings"]["setup"]
    )
    hp = dqn.Hyperparameters()._asdict()
    assert "n_step" not in experiment.without_added_defaults(
        hp
    ) and "replay_ratio" not in experiment.without_added_defaults(hp)
    kept = experiment.without_added_defaults(
        {"max_n_step": 3, "replay_ratio": np.float32(0.5), "max_updates_per_unit": True}
    )
    assert kept == {"max_n_step": 3, "replay_ratio": np.float32(0.5), "max_updates_per_unit": True}
    assert experiment.without_added_defaults({"replay_ratio": np.float32(1.0)}) == {}


GRID_TOML = """
experiment = "dqn"
seeds = 1

[setup]
env_params = {max_steps_in_episode = 15}
total_steps = 120
steps_per_segment = 60
hidden_sizes = [8]
max_capacity = 64
batch_size = 8
max_n_step = 3
max_updates_per_unit = 4

[fixed]
learning_starts = 20
epsilon_decay_steps = 100

[grid]
n_step = [1, 3]
replay_ratio = [0.25, 4.0]
memory_size = [32, 64]
"""


def test_a_toml_grid_over_n_step_replay_ratio_and_memory_size_is_one_program(tmp_path):
    """``n_step × replay_ratio × memory_size`` declared as one TOML grid runs in one compiled program (per
    segment kind), each run's updates following its ratio and its oldest-policy age its capacity × ratio."""
    from jaxreplay.engine import sweep as sw

    config = tmp_path / "grid.toml"
    config.write_text(GRID_TOML)
    # One program for all (group_by_setup=False; the engine's default groups runs by ratio: test_engine_groups.py).
    result = sw.run(sw.Sweep.from_toml(config), tmp_path / "out", progress=False, group_by_setup=False)
    ds = sw.load(tmp_path / "out")
    # Two programs (the first segment with the runs' initialisation, and the others), whatever the grid:
    # other values of all three compile nothing new.
    assert result.stats.chunks == 1 and result.stats.compilations == 2
    other = GRID_TOML.replace("n_step = [1, 3]", "n_step = [2, 3]").replace("[0.25, 4.0]", "[0.5, 2.0]")
    config.write_text(other.replace("memory_size = [32, 64]", "memory_size = [16, 48]"))
    other_run = sw.run(sw.Sweep.from_toml(config), tmp_path / "other", progress=False, group_by_setup=False)
    assert other_run.stats.compilations == 0
    assert dict(ds.sizes)["n_step"] == 2 and dict(ds.sizes)["replay_ratio"] == 2 and dict(ds.sizes)["memory_size"] == 2
    updates = ds["gradient_steps"].sel(seed=0, memory_size=32).values  # [n_step, replay_ratio]
    # floor(120 ρ) - floor(19 ρ): the updates due, less those of the units before learning_starts.
    np.testing.assert_array_equal(updates, [[30 - 4, 480 - 76]] * 2)
    age = ds["oldest_policy_age"].sel(seed=0, n_step=3).values  # [replay_ratio, memory_size]
    np.testing.assert_array_equal(age, [[8.0, 16.0], [128.0, 256.0]])


@pytest.mark.parametrize(
    ("line", "message"),
    [("n_step = [1, 4]", "n_step"), ("n_step = [0, 1]", "n_step"), ("replay_ratio = [0.0, 1.0]", "replay_ratio"),
     ("replay_ratio = [1.0, nan]", "replay_ratio")],
)
def test_bad_grid_values_of_n_step_and_replay_ratio_are_refused_naming_their_key(tmp_path, line, message):
    from jaxreplay.engine import sweep as sw

    key = line.split(" = ")[0]
    text = "\n".join(line if row.startswith(key + " = ") else row for row in GRID_TOML.splitlines())
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(ValueError, match=rf"grid\.{message}"):
        sw.Sweep.from_toml(config)


def test_train_frequency_alone_is_refused_with_the_ratio_that_means_one_update_every_f_steps():
    """``train_frequency`` is the unit's length: the old "one update every F steps" is ``replay_ratio = 1/F``;
    leaving the ratio at 1 with F = 4 and one update slot is refused, saying so."""
    with pytest.raises(ValueError, match=r"got 1\.0; set replay_ratio = 1/4 for one update every 4 steps"):
        dqn.check(dqn.Hyperparameters(), dqn.Setup(train_frequency=4))
    dqn.check(dqn.Hyperparameters(replay_ratio=0.25), dqn.Setup(train_frequency=4))  # accepted


def test_a_ratio_whose_float32_value_needs_another_slot_is_refused_and_the_cli_sizes_for_it():
    """The updates due are counted exactly for the ratio's float32 value (``floor(t × ρ)``). 1.3 is 1.29999995:
    its units of 10 steps are due 12 or 13 (129 updates in 100 steps, one short of 130); the float32 product
    made one unit due 14, and 13 slots were refused. 0.3 is 0.30000001: in units of 10 steps three updates
    each, until the excess adds up to one more, at step 83,886,080: 3 slots are refused for such a run,
    naming the slots it needs, and the command line sizes for it."""
    import argparse

    from jaxreplay.cli import dqn as cli_dqn
    from jaxreplay.experiments.dqn import config

    setup = dqn.Setup(total_steps=100, steps_per_segment=100, train_frequency=10, max_updates_per_unit=13)
    hp = dqn.Hyperparameters(memory_size=50, replay_ratio=1.3)
    dqn.check(hp, setup)
    assert config._most_updates_due(1.3, setup) == 13 and config._most_updates_due(1.25, setup) == 13
    ends = np.arange(10, 101, 10)
    due = dqn.updates_due_by(ends, 1.3) - dqn.updates_due_by(ends - 10, 1.3)
    assert due.tolist() == [12] + [13] * 9 and due.sum() == 129
    long = dqn.Setup(total_steps=83_886_080, steps_per_segment=10_485_760, train_frequency=10, max_updates_per_unit=3)
    assert int(dqn.updates_due_by(83_886_080, 0.3) - dqn.updates_due_by(83_886_070, 0.3)) == 4
    with pytest.raises(ValueError, match=r"replay_ratio = 0.3 makes 4 updates due in some unit of 10 steps \(t × "
                                         r"ratio counted exactly for its float32 value, 0.30000001192092896\), .* "
                                         r"raise max_updates_per_unit to 4"):
        dqn.check(dqn.Hyperparameters(replay_ratio=0.3), long)
    shorter = dataclasses.replace(long, total_steps=83_886_070, steps_per_segment=1_784_810)  # a unit less: enough
    dqn.check(dqn.Hyperparameters(replay_ratio=0.3), shorter)
    # Beyond 2**24 steps the float32 product counted steps by 2 (ratio 1 made some unit due 2 and was refused).
    dqn.check(dqn.Hyperparameters(), dqn.Setup(total_steps=2**25, steps_per_segment=2**15))
    args = argparse.Namespace(n_step=None, replay_ratio=0.3)
    sized, _ = cli_dqn._with_n_step_and_ratio(args, dataclasses.replace(long, max_updates_per_unit=1),
                                              hp._replace(replay_ratio=0.3))
    assert sized.max_updates_per_unit == 4


def test_the_updates_due_are_floor_t_times_the_ratio_exactly_on_the_device_and_the_host():
    """``steps.floor_product`` (the program's count) and ``dqn.updates_due_by`` (the host's) against Python's
    exact fractions: ratios that float32 rounds up or down, tiny and large ones, steps to 2**31 - 1. The
    float32 product was one over at 3.93 × 33,443 (131,430.99 rounded up: a probe's run made 131,431 updates),
    and it agrees where it was exact (dyadic ratios, below 2**24 steps and updates), so those runs keep their bits."""
    from fractions import Fraction

    from jaxreplay.experiments.dqn.steps import floor_product

    rng = np.random.default_rng(0)
    ratios = np.concatenate([np.float32([0, 0.25, 1, 4, 0.3, 1.7, 3.93, 3.99, 2.1, 1 / 41, 1 / 3, 1e-8, 1e-45, 255.9]),
                             rng.uniform(0, 8, 40).astype(np.float32)])
    steps = np.concatenate([[0, 1, 100, 33_443, 2**17, 2**24 + 1, 786_437, 3_495_263, 27_962_043, 2**31 - 1],
                            rng.integers(0, 2**31, 40)]).astype(np.int64)
    device = np.asarray(jax.jit(jax.vmap(jax.vmap(floor_product, (None, 0)), (0, None)))(
        jnp.asarray(steps, jnp.int32), jnp.asarray(ratios)))
    host = np.stack([dqn.updates_due_by(steps, r) for r in ratios], 1)
    exact = np.array([[int(Fraction(int(t)) * Fraction(float(r))) for r in ratios] for t in steps], np.int64)
    np.testing.assert_array_equal(host, exact)
    np.testing.assert_array_equal(device.astype(np.int64), exact % 2**32)
    assert exact[steps.tolist().index(33_443), ratios.tolist().index(np.float32(3.93))] == 131_430
    assert np.floor(np.float32(33_443) * np.float32(3.93)) == 131_431  # the float32 product's count
    for r in (0.25, 1.0, 4.0):
        small = steps[(steps < 2**24) & (steps * r < 2**24)]  # (float32(t) rounds from 2**24 steps on)
        np.testing.assert_array_equal(np.floor(small.astype(np.float32) * np.float32(r)), dqn.updates_due_by(small, r))


def test_cli_lets_aer_grow_on_every_game_and_names_options_it_would_ignore(capsys):
    """Outside the paper's games `jaxreplay dqn --adaptive` capped the memory at its initial size (every check
    voted to grow, none could: 50 of 50 on Probe-Chain), and --optimizer-reading sgd, --adaptive-td and
    --adaptive-draws were silently ignored where they do nothing (found by a probe)."""
    from jaxreplay import cli
    from jaxreplay.cli import dqn as dqn_command

    parser = cli.build_parser()
    setup, _ = dqn_command._read_setting(parser.parse_args(["dqn", "--env", "Probe-Chain", "--adaptive",
                                                            "--memory-size", "20"]))
    assert setup.max_capacity == setup.total_steps == 10_000  # up to the run length, as in the paper's settings
    setup, _ = dqn_command._read_setting(parser.parse_args(["dqn", "--env", "Probe-Chain", "--adaptive",
                                                            "--memory-size", "20", "--steps", "2000"]))
    assert setup.max_capacity == 2000
    setup, _ = dqn_command._read_setting(parser.parse_args(["dqn", "--env", "Probe-Chain", "--memory-size", "20"]))
    assert setup.max_capacity == 20  # a fixed memory allocates its own size only
    for args, message in (
        (["--env", "Probe-Chain", "--optimizer-reading", "sgd"],
         "--optimizer-reading sgd reads the paper's step size, for its games only"),
        (["--adaptive-td", "target"], "--adaptive-td target sets how aER checks: add --adaptive, or leave it out."),
        (["--adaptive-draws", "independent"], "--adaptive-draws independent sets how aER checks: add --adaptive"),
    ):
        assert cli.main(["dqn", "--quiet", *args]) == 2
        assert message in capsys.readouterr().err


def test_setups_that_would_hang_or_do_nothing_are_refused():
    """max_n_step beyond the memory (a window never holds more) or beyond MAX_N_STEP (the unrolled window
    compiled for minutes: 500 took over 400 s), and a Polyak update told to count its period in updates
    (it ignored the flag)."""
    import re

    from jaxreplay import cli

    with pytest.raises(ValueError, match=re.escape("max_n_step must be <= 50, got 51: no window holds more than "
                                                   "max_capacity (50) transitions.")):
        dqn.Setup(max_capacity=50, max_n_step=51)
    with pytest.raises(ValueError, match=re.escape(f"max_n_step must be <= {dqn.MAX_N_STEP}, got 500: the n-step "
                                                   "window is unrolled when compiled")):
        dqn.Setup(max_capacity=10_000, max_n_step=500)
    assert dqn.Setup(max_capacity=10_000, max_n_step=dqn.MAX_N_STEP).max_n_step == 256
    with pytest.raises(ValueError, match="with target_update='polyak'"):
        dqn.Setup(target_update="polyak", target_period_in_updates=True)
    # The command line bounds n by the memory it runs: a fixed memory's own size (it allowed the paper's 40,000).
    assert cli.main(["dqn", "--memory-size", "100", "--n-step", "101", "--quiet"]) == 2
