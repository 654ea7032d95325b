"""aER with accumulated evidence (jaxreplay.evidence in adaptive.controller, DQN's RULE_EVIDENCE).

Every controller run below shares one compiled program (the module fixture
``runs``): ``R`` vmapped runs of ``STEPS`` steps, each with its own |δ| level
script, initial capacity, threshold ``h``, allowance ``δ`` and coin flag. The
|δ| of *every* stored transition at step ``t`` is ``level[t]``, so a check's
sum is ``NUM_OLD · level[t]`` and its vote is "grow" iff the level rose since
the previous check (the first check compares with ``|δ_old| = 0``: a grow).
Checks fire at every multiple of ``K`` from the first full memory on.

The expectations are computed in plain Python: the rule on a list of votes
(:func:`reference_sizes`) and, for the statistical tests, the exact law of
the CUSUM as a Markov chain on its (dyadic, finite) states
(:func:`exact_acts`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxreplay import adaptive, buffer, evidence
from jaxreplay.experiments import dqn

MAX_CAPACITY = 320
NUM_OLD = 4
K = 4
STEPS = 416
EXAMPLE = {"index": jnp.int32(0)}
RUNS = 1000  # per statistical setting


# ----------------------------------------------------------------------------
# Plain-Python references


def reference_sizes(votes, n0, h, delta, k=K, max_capacity=MAX_CAPACITY):
    """``(sizes, resizes)``: the memory size after each check fed ``votes`` (+1 grow, -1 shrink) from
    ``n0``, and how many checks took a branch (an enlargement at ``max_capacity`` counts, as in aER).

    Two-sided CUSUM ``U ← max(0, U + x - δ)``, ``D ← max(0, D - x - δ)``;
    grow by ``k`` (at most ``max_capacity``) when ``U >= h``, shrink by ``k``
    when ``D >= h``, then both restart at 0. At the floor (``N - k < k``) a
    check enlarges, casts no vote and restarts the statistic (aER's boundary).
    """
    up = down = 0.0
    n, sizes, resizes = n0, [], 0
    for x in votes:
        if n - k < k:
            n, up, down, resizes = min(n + k, max_capacity), 0.0, 0.0, resizes + 1
        else:
            up, down = max(0.0, up + x - delta), max(0.0, down - x - delta)
            if up >= h:
                n, up, down, resizes = min(n + k, max_capacity), 0.0, 0.0, resizes + 1
            elif down >= h:
                n, up, down, resizes = n - k, 0.0, 0.0, resizes + 1
        sizes.append(n)
    return sizes, resizes


def exact_acts(grow_probabilities, h, delta):
    """``(E[grows], E[shrinks])`` over votes that grow with the given probabilities (no boundaries).

    The CUSUM's states ``(U, D)`` lie on a finite lattice (``δ`` dyadic); their
    law after each vote is propagated exactly and the probability of acting
    at each vote summed.
    """
    law = {(0.0, 0.0): 1.0}
    grows = shrinks = 0.0
    for p in grow_probabilities:
        new: dict = {}
        for (u, d), mass in law.items():
            for x, px in ((1.0, p), (-1.0, 1.0 - p)):
                if px == 0.0:
                    continue
                uu, dd = max(0.0, u + x - delta), max(0.0, d - x - delta)
                if uu >= h:
                    grows, uu, dd = grows + mass * px, 0.0, 0.0
                elif dd >= h:
                    shrinks, uu, dd = shrinks + mass * px, 0.0, 0.0
                new[(uu, dd)] = new.get((uu, dd), 0.0) + mass * px
        law = new
    return grows, shrinks


def levels_from_votes(votes, n0):
    """``level[0..STEPS]`` whose checks (at ``n0, n0 + K, ...``) vote ``votes[1:]`` (the first is a grow)."""
    level = np.full(STEPS + 1, 1000.0, np.float32)
    value = 1000.0
    for j, x in enumerate(votes[1:], start=1):
        value += x
        level[n0 + j * K :] = value
    return level


def checks_from(n0):
    return (STEPS - n0) // K + 1


# ----------------------------------------------------------------------------
# One compiled program for every controller run


@jax.jit
def _run(levels, capacities, thresholds, allowances, coins, keys):
    """Each run's capacity after each step ``[R, STEPS]``, whether a check fired there, and its final state."""

    def one(level, capacity, h, delta, coin, key):
        memory = buffer.init(EXAMPLE, MAX_CAPACITY, capacity=capacity)
        aer = adaptive.evidence_controller(
            interval=K,
            num_old=NUM_OLD,
            max_num_old=NUM_OLD,
            random_walk=coin,
            evidence_threshold=h,
            evidence_allowance=delta,
        )

        def body(carry, xs):
            memory, state = carry
            t, step_key = xs
            memory = buffer.add(memory, {"index": t})
            before = state.diagnostics.num_checks
            state, new_capacity = aer.update(
                step_key, state, memory, lambda tr: jnp.full(tr["index"].shape, level[t], jnp.float32), t
            )
            fired = state.diagnostics.num_checks > before
            return (buffer.resize(memory, new_capacity), state), (new_capacity, fired)

        steps = jnp.arange(1, STEPS + 1, dtype=jnp.int32)
        (_, state), out = jax.lax.scan(body, (memory, aer.init()), (steps, jax.random.split(key, STEPS)))
        return out, state

    return jax.vmap(one)(levels, capacities, thresholds, allowances, coins, keys)


# The scripted settings: (h, δ) pairs, all dyadic so float32 and Python agree exactly.
SCRIPTED = [(1.0, 0.0), (2.0, 0.0), (3.0, 0.25), (1.5, 0.5), (4.0, 0.25)]
COIN = [(1.0, 0.0), (4.0, 0.25), (4.0, 0.0)]  # aER's walk, the DQN default, no allowance
BIASED_P = 0.75


def _scripted_votes():
    """Per start: a vote script mixing runs (to the floor and the ceiling) and noise; the first vote grows."""
    rng = np.random.default_rng(7)
    down = [1] + [-1] * 40 + [int(x) for x in rng.choice([-1, 1], 56)]  # from 32: to the floor, then noise
    up = [1] * 20 + [-1, 1] * 4  # from 308: to the ceiling (320), then alternating
    return {32: down, 308: up[: checks_from(308)]}


@pytest.fixture(scope="module")
def runs():
    """Every run at once; returns ``{name: (capacity [r, STEPS], fired [r, STEPS], state)}``."""
    rng = np.random.default_rng(2024)
    groups = {}
    for n0, votes in _scripted_votes().items():
        for h, delta in SCRIPTED:
            groups[("scripted", n0, h, delta)] = ([levels_from_votes(votes, n0)], n0, h, delta, False)
    flat = np.full(STEPS + 1, 1000.0, np.float32)
    for h, delta in COIN:
        groups[("coin", h, delta)] = ([flat] * RUNS, 160, h, delta, True)
    biased = [levels_from_votes([1] + list(np.where(rng.random(99) < BIASED_P, 1, -1)), 32) for _ in range(RUNS)]
    groups[("biased", 4.0, 0.25)] = (biased, 32, 4.0, 0.25, False)
    groups[("invalid",)] = ([flat], 32, 0.5, 0.0, False)  # traced h < 1: flagged, no decision
    columns = [[], [], [], [], []]
    sizes = {}
    for name, (levels, n0, h, delta, coin) in groups.items():
        sizes[name] = len(levels)
        for column, value in zip(columns, (None, n0, h, delta, coin)):
            column.extend([value] * len(levels))
        columns[0][-len(levels) :] = levels
    keys = jax.random.split(jax.random.key(11), len(columns[0]))
    arrays = [jnp.asarray(np.stack(columns[0]))] + [jnp.asarray(c) for c in columns[1:]]
    arrays[2], arrays[3] = arrays[2].astype(jnp.float32), arrays[3].astype(jnp.float32)
    (capacity, fired), state = _run(*arrays, keys)
    capacity, fired = np.asarray(capacity), np.asarray(fired)
    out, start = {}, 0
    for name, size in sizes.items():
        part = slice(start, start + size)
        out[name] = (capacity[part], fired[part], jax.tree.map(lambda leaf: np.asarray(leaf)[part], state))
        start += size
    return out


def _at_checks(capacity, fired):
    """The capacity after each check of one run."""
    return capacity[fired].tolist()


# ----------------------------------------------------------------------------
# The rule against its plain-Python reference


@pytest.mark.parametrize("h, delta", SCRIPTED)
@pytest.mark.parametrize("n0", [32, 308])
def test_controller_follows_the_reference_on_scripted_votes(runs, n0, h, delta):
    capacity, fired, state = runs[("scripted", n0, h, delta)]
    votes = _scripted_votes()[n0]
    sizes, resizes = reference_sizes(votes, n0, h, delta)
    assert int(fired[0].sum()) == len(votes) == checks_from(n0)
    assert _at_checks(capacity[0], fired[0]) == sizes
    assert int(state.diagnostics.num_grows[0] + state.diagnostics.num_shrinks[0]) == resizes
    assert int(state.diagnostics.num_invalid[0]) == 0


@pytest.mark.parametrize("threshold, allowance, name", [(0.0, 0.0, "evidence_threshold"), (2.0, 1.0, "evidence_allowance")])
def test_evidence_update_refuses_concrete_and_voids_traced_bad_settings(threshold, allowance, name):
    """update ran settings check refuses: a threshold of 0 answered six shrink votes with six grows (+1), an
    allowance of 1 never acted. A concrete one is refused, naming it; a traced one acts never and says so with
    a NaN statistic."""
    with pytest.raises(ValueError, match=f"^{name}"):
        evidence.update(evidence.init(), True, threshold, allowance)
    step = jax.jit(evidence.update)
    stat, acts = evidence.init(), []
    for _ in range(6):
        stat, act = step(stat, True, jnp.float32(threshold), jnp.float32(allowance))
        acts.append(int(act))
    assert acts == [0] * 6 and np.isnan(np.asarray(stat)).all()
    stat, act = step(evidence.init(), True, jnp.float32(1.0), jnp.float32(0.0))  # valid: one shrink vote acts
    assert int(act) == -1 and np.asarray(stat).tolist() == [0.0, 0.0]


def test_evidence_update_is_the_two_sided_cusum():
    """jaxreplay.evidence.update scanned over 200 random votes: every (U, D) and act equal the plain CUSUM."""
    votes = np.random.default_rng(5).random(200) < 0.4  # shrink votes

    @jax.jit
    def scan(h, delta):
        def body(stat, shrink_vote):
            stat, act = evidence.update(stat, shrink_vote, h, delta)
            return stat, (stat, act)

        return jax.lax.scan(body, evidence.init(), jnp.asarray(votes))[1]

    for h, delta in SCRIPTED:
        stats, acts = map(np.asarray, scan(h, delta))
        up = down = 0.0
        for i, shrink_vote in enumerate(votes):
            x = -1.0 if shrink_vote else 1.0
            up, down = max(0.0, up + x - delta), max(0.0, down - x - delta)
            act = 1 if up >= h else -1 if down >= h else 0
            if act:
                up = down = 0.0
            assert (stats[i].tolist(), int(acts[i])) == ([up, down], act), (h, delta, i)
    assert np.sum(np.asarray(scan(3.0, 0.25)[1]) != 0) > 0  # the script acts


def test_reference_reaches_both_boundaries_and_h1_is_aer():
    """The scripts exercise the floor and the ceiling; with h = 1, δ = 0 every vote acts (aER's rule)."""
    votes = _scripted_votes()
    down = reference_sizes(votes[32], 32, 1.0, 0.0)[0]
    assert min(down) == 4 and down[:8] == [36, 32, 28, 24, 20, 16, 12, 8]
    assert down[8:11] == [4, 8, 4]  # at the floor a check enlarges, then the next shrink vote acts
    assert max(reference_sizes(votes[308], 308, 1.0, 0.0)[0]) == MAX_CAPACITY
    # aER acting on every vote: +k for a grow, -k for a shrink, between the boundaries.
    expected, n = [], 32
    for x in votes[32]:
        n = min(n + K, MAX_CAPACITY) if (x > 0 or n - K < K) else n - K
        expected.append(n)
    assert down == expected


def test_every_vote_agreeing_moves_the_size_every_ceil_h_over_1_minus_delta_checks(runs):
    # The first 20 votes from 308 all grow: a resize every ⌈h / (1 - δ)⌉ votes until the ceiling.
    for h, delta in SCRIPTED:
        capacity, fired, _ = runs[("scripted", 308, h, delta)]
        sizes = _at_checks(capacity[0], fired[0])
        period = int(np.ceil(h / (1 - delta)))
        expected = [min(308 + K * (j // period), MAX_CAPACITY) for j in range(1, 21)]
        assert sizes[:20] == expected, (h, delta)


def test_an_invalid_traced_threshold_is_flagged_and_keeps_the_size(runs):
    capacity, fired, state = runs[("invalid",)]
    assert bool(state.diagnostics.invalid_parameters[0])
    assert int(state.diagnostics.num_invalid[0]) == checks_from(32)
    assert set(capacity[0].tolist()) == {32}


# ----------------------------------------------------------------------------
# Coin-toss votes: the spread after T checks


def _displacement(runs, name, n0):
    """Each run's ``N_T - N_0`` and its final controller state; checks that no run met a boundary."""
    capacity, fired, state = runs[name]
    assert np.all(fired.sum(axis=1) == checks_from(n0))
    assert capacity.min() >= 2 * K and capacity.max() < MAX_CAPACITY  # the chain below has no boundaries
    return capacity[:, -1].astype(np.float64) - n0, state


@pytest.mark.parametrize("h, delta", COIN)
def test_coin_toss_votes_spread_as_k_squared_times_the_expected_resizes(runs, h, delta):
    """Var(N_T - N_0) = k² E[resizes]: every resize is ±k with a fair sign independent of the rest (the
    CUSUM restarts from (0, 0) and is symmetric under x → -x). E[resizes] is exact from the chain; the
    sample variance of RUNS runs must be within 5 standard errors of k² E[resizes] (its standard error from
    the sample's fourth moment), and the mean number of resizes within 5 standard errors of E[resizes]."""
    checks = checks_from(160)
    moved, state = _displacement(runs, ("coin", h, delta), 160)
    grows, shrinks = exact_acts([0.5] * checks, h, delta)
    variance = K**2 * (grows + shrinks)
    sample = moved.var()
    se = np.sqrt((np.mean((moved - moved.mean()) ** 4) - sample**2) / RUNS)
    assert abs(sample - variance) <= 5 * se, (sample, variance, se)
    resizes = (state.diagnostics.num_grows + state.diagnostics.num_shrinks).astype(np.float64)
    assert abs(resizes.mean() - (grows + shrinks)) <= 5 * resizes.std() / np.sqrt(RUNS) + 1e-9


def test_with_an_allowance_coin_votes_barely_move_the_memory(runs):
    """aER's walk spreads as k √T; the rule's as k √E[resizes]. After 65 coin votes the chain puts the
    ratio under 1/4 for h = 4, δ = 0.25 and above it without the allowance (δ is what separates signal
    from noise; δ = 0 only slows the walk); the runs show the same."""
    checks = checks_from(160)
    assert exact_acts([0.5] * checks, 1.0, 0.0) == (checks / 2, checks / 2)
    ratio = np.sqrt(sum(exact_acts([0.5] * checks, 4.0, 0.25)) / checks)
    ratio_no_allowance = np.sqrt(sum(exact_acts([0.5] * checks, 4.0, 0.0)) / checks)
    assert ratio < 0.25 < ratio_no_allowance, (ratio, ratio_no_allowance)
    walk, _ = _displacement(runs, ("coin", 1.0, 0.0), 160)
    held, _ = _displacement(runs, ("coin", 4.0, 0.25), 160)
    assert held.std() < 0.3 * walk.std(), (held.std(), walk.std())


def test_a_biased_signal_moves_the_memory_at_the_chains_rate(runs):
    """Votes that grow with probability p = 3/4 (after the first, a sure grow against |δ_old| = 0):
    E[N_T - N_0] = k (E[grows] - E[shrinks]) from the chain, met by the runs' mean within 5 standard
    errors. aER moves k (2p - 1) = 2 per check. The rule (h = 4, δ = 0.25): U gains at least 2p - 1 - δ
    per vote on average (more near 0, where the max clips shrink votes) and acts at most h + (1 - δ)
    above 0, so it grows by k at least every (h + 1 - δ) / (2p - 1 - δ) = 19 votes (rate > 0.21 per
    check, false shrinks aside), and at most every ⌈h / (1 - δ)⌉ = 6 (rate < 0.67)."""
    checks = checks_from(32)
    probabilities = [1.0] + [BIASED_P] * (checks - 1)
    grows, shrinks = exact_acts(probabilities, 1.0, 0.0)  # aER: every vote acts
    assert grows == pytest.approx(sum(probabilities)) and shrinks == pytest.approx(checks - sum(probabilities))
    moved, _ = _displacement(runs, ("biased", 4.0, 0.25), 32)
    grows, shrinks = exact_acts(probabilities, 4.0, 0.25)
    expected = K * (grows - shrinks)
    assert abs(moved.mean() - expected) <= 5 * moved.std() / np.sqrt(RUNS), (moved.mean(), expected)
    assert K * 0.25 / 4.75 < expected / checks < K / 6, expected / checks  # measured 0.31


# ----------------------------------------------------------------------------
# Bad settings, refused before anything is traced


@pytest.mark.parametrize(
    "settings, name",
    [
        ({"evidence_threshold": 0.5}, "evidence_threshold"),
        ({"evidence_threshold": float("nan")}, "evidence_threshold"),
        ({"evidence_allowance": 1.0}, "evidence_allowance"),
        ({"evidence_allowance": -0.1}, "evidence_allowance"),
        ({"evidence_allowance": 0.99999999}, r"evidence_allowance = 0.99999999 \(runs as 1.0, a float32\): must be <"),
        ({"num_old": 5}, "num_old"),  # controller's own checks
        ({"evidence": 2.0}, "adaptive.evidence_controller got unknown keyword.s. evidence; it takes interval,"),
    ],
)
def test_bad_evidence_settings_are_refused_naming_the_setting(settings, name):
    settings = {"interval": 4, "num_old": 2, "max_num_old": 4, "evidence_threshold": 2.0, **settings}
    with pytest.raises(ValueError, match=f"^{name} "):
        adaptive.evidence_controller(**settings)


@pytest.mark.parametrize(
    "field, value",
    [("adaptive_evidence_threshold", 0.0), ("adaptive_evidence_allowance", 1.0), ("adaptive_rule", 4)],
)
def test_bad_dqn_evidence_hyperparameters_are_refused_naming_the_field(field, value):
    setup = dqn.Setup(total_steps=200, steps_per_segment=100, max_capacity=200, adaptive=True)
    with pytest.raises(ValueError, match=f"^{field} "):
        dqn.check(dqn.Hyperparameters(memory_size=100, **{field: value}), setup)


# ----------------------------------------------------------------------------
# DQN: rule 3 with h = 1, δ = 0 is aER, record for record

DQN_SETUP = dqn.Setup(
    env_id="CartPole-v1",
    total_steps=600,
    steps_per_segment=200,
    hidden_sizes=(16,),
    max_capacity=300,
    batch_size=16,
    adaptive=True,
    adaptive_check_every=20,
    subsample_size=20,
)
# aER (given evidence settings it must ignore), rule 3 at h = 1, δ = 0, rule 3 at its defaults.
DQN_RULES = [dqn.RULE_AER, dqn.RULE_EVIDENCE, dqn.RULE_EVIDENCE]


@pytest.fixture(scope="module")
def dqn_runs():
    hparams = dqn.Hyperparameters(
        memory_size=60,
        learning_starts=50,
        epsilon_decay_steps=300,
        target_period=100,
        adaptive_interval=20,
        adaptive_num_old=30,
        adaptive_rule=np.array(DQN_RULES),
        adaptive_evidence_threshold=np.array([4.0, 1.0, 4.0]),
        adaptive_evidence_allowance=np.array([0.25, 0.0, 0.25]),
    )
    keys = jnp.stack([jax.random.key(3)] * len(DQN_RULES))  # one seed: the runs differ by their rule only
    records, summary = dqn.run_batch(keys, hparams, DQN_SETUP)
    return jax.tree.map(np.asarray, records), jax.tree.map(np.asarray, summary)


def test_dqn_rule_evidence_with_h1_and_no_allowance_is_aer_bit_for_bit(dqn_runs):
    records, summary = dqn_runs
    for name in records:
        np.testing.assert_array_equal(records[name][1], records[name][0], err_msg=name)
    for name in summary:
        np.testing.assert_array_equal(summary[name][1], summary[name][0], err_msg=name)
    # Checks at every 20th step from the first full memory (step 60) to 600: 28, whatever the rule.
    assert summary["adaptive_checks"].tolist() == [28, 28, 28]
    assert summary["adaptive_grows"][0] + summary["adaptive_shrinks"][0] == 28  # aER acts at every check
    # The rule at h = 4, δ = 0.25 acts at most every ⌈4 / 0.75⌉ = 6 votes (the floor aside: N >= 40 here).
    capacity = records["capacity"][2]
    assert summary["adaptive_grows"][2] + summary["adaptive_shrinks"][2] <= 28 // 6 or capacity.min() < 40
    assert np.all((capacity - 60) % 20 == 0)
