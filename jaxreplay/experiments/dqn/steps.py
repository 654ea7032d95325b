"""One segment of a DQN run: :func:`advance`, composed of module-level pure step functions.

:func:`advance` binds what every step reads once (:class:`_Context`: the
setup, the hyperparameters as arrays, the environment, the network, the
optimizer, the replay memory and aER's controller) and scans the step
functions over the run's state and the segment's sums: :func:`_env_step`
(one ε-greedy environment step), :func:`_train` (one update slot: a masked
gradient step on a minibatch of 1-step or n-step targets, :func:`_minibatch`,
and the target update), :func:`_updates` (a unit's update slots),
:func:`_unit` (``train_frequency`` environment steps, then the updates),
:func:`_consult_adaptive` (aER) and :func:`_cycle` (units, then one
consultation).

Why the step loop is nested. Under ``vmap`` a ``lax.cond`` whose predicate
differs per run becomes a ``select`` that runs both branches every time. The
gradient step and the aER check would then be computed at every environment
step. Instead a segment is a ``lax.scan`` over *cycles* with a static shape:
a cycle is ``adaptive_check_every / train_frequency`` *units*, a unit is
``train_frequency`` environment steps followed by ``max_updates_per_unit``
(masked) update slots, and the aER controller is consulted once at the end of
each cycle. The controller itself fires only when ``t`` is a multiple of the traced
``adaptive_interval``, which must therefore be a multiple of the static
``adaptive_check_every`` (``check`` says so). A consultation costs its TD
errors (``subsample_size`` forward passes, twice when shrinking) whether or
not it fires, so consulting every ``20`` steps instead of every step cuts aER's
overhead 20-fold. Gradient steps before ``learning_starts`` are computed and
discarded (masked), which keeps ``learning_starts`` traced; aER's checks (and
its controls') take effect only after it (``t > learning_starts``): with no
learning a check compares the same TD errors twice, and that tie enlarges. The gradient step
and the aER consultation sit behind an always-true ``lax.cond`` on the
(unbatched) scan index, a boundary XLA does not fuse across: without it XLA
fused the minibatch gather with the preceding buffer write and copied whole
buffer leaves at every step (see ``_isolated``; 4.5x slower at 10^4 slots).

The replay ratio ρ (traced) is gradient updates per environment step. The
updates due in a unit that ends after ``t`` steps are ``D(t) - D(t - F)``
(``F = train_frequency``, ``D(t) = floor(t · ρ)`` exactly: :func:`floor_product`), so ``D(T)``
updates are due in ``T`` steps whatever the unit, fractions carried over:
ρ = 0.25 updates at every 4th step, ρ = 4 four times per step. The unit runs
the static ``max_updates_per_unit`` slots and masks those beyond the due
ones, so runs of different ratios share one program and every run pays for
the bound. Slot ``j`` draws its minibatch with ``fold_in(key, j)`` (slot 0:
the unit's key itself), so a run's draws do not depend on the bound, and at
ρ = 1, F = 1 and one slot the program computes what it did before the ratio
existed. Hard target copies counted in steps come after the unit's updates.

n-step targets (``Setup.max_n_step > 1``) are read at sample time
(:func:`jaxreplay.returns.n_step`) for every update, the TD error of a start's
n-step target updates that start's stored priority. aER's consultation keeps
1-step TD errors whatever ``n_step``: Algorithm 2 compares the network's fit
to the stored transitions at two times, which the 1-step error measures
alone; an n-step error would mix in the rewards of the successors (which
change as the memory is written and resized) and make aER's decisions, and
a sweep's comparison of memory sizes, depend on n.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp

from jaxreplay import adaptive, buffer, returns
from jaxreplay import memory as memory_lib
from jaxreplay._typing import ArrayLike, PyTree
from jaxreplay.agents import dqn as agent
from jaxreplay.experiments.dqn.config import (
    RULE_EVIDENCE,
    RULE_FIXED,
    RULE_RANDOM,
    Hyperparameters,
    Setup,
    as_arrays,
    effective_replay_ratio,
)
from jaxreplay.experiments.dqn.game import _strip_weak_types, environment, evaluate, network, stored_observation
from jaxreplay.experiments.dqn.state import _STREAM_EVAL, _STREAM_STEP, State, replay_memory
from jaxreplay.experiments.dqn.summary import Record, _record_arrays

if TYPE_CHECKING:  # annotations only: the optional rl extra is checked by jaxreplay.envs on import
    import optax
    from gymnax.environments import environment as gymnax_environment


class _Accumulators(NamedTuple):
    """Sums over one segment (reset by every :func:`advance`); each a scalar.

    The capacity's sum is kept exactly, in two ``int32`` limbs of its deviations from the segment's first
    capacity (:func:`_add_capacity`): a float32 sum had drifted by 1 % over a 10^6-step segment (a plateau
    adds the same deviation at every step, and past 2^24 every add rounds the same way).
    """

    return_sum: jax.Array
    episodes: jax.Array
    loss_sum: jax.Array
    losses: jax.Array
    capacity_high: jax.Array
    capacity_low: jax.Array


def _zero_accumulators() -> _Accumulators:
    """All sums 0: ``float32[]`` for the sums, ``int32[]`` for the counts and the capacity's limbs."""
    zero_f, zero_i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
    return _Accumulators(zero_f, zero_i, zero_f, zero_i, zero_i, zero_i)


_LIMB = 16  # bits of the capacity sum's low limb


def _add_capacity(acc: _Accumulators, deviation: jax.Array) -> _Accumulators:
    """``acc`` with the ``int32[]`` ``deviation`` added to the capacity's sum, exactly.

    The sum is ``capacity_high * 2**16 + capacity_low`` with ``0 <= capacity_low < 2**16``; the high limb
    stays in int32 while ``steps_per_segment * (max_capacity + 2**16) < 2**47``
    (:class:`~jaxreplay.experiments.dqn.config.Setup` checks it with aER; a fixed memory adds 0).
    """
    low = acc.capacity_low + (deviation & (2**_LIMB - 1))
    high = acc.capacity_high + (deviation >> _LIMB) + (low >> _LIMB)  # (>>: floor division, negative too)
    return acc._replace(capacity_high=high, capacity_low=low & (2**_LIMB - 1))


def _capacity_sum(acc: _Accumulators) -> jax.Array:
    """``float32[]``; the capacity's sum of deviations (exact while below 2**24, as the float32 sum was)."""
    return acc.capacity_high.astype(jnp.float32) * jnp.float32(2**_LIMB) + acc.capacity_low.astype(jnp.float32)


class _Context(NamedTuple):
    """What every step of one segment reads, bound once by :func:`advance` from ``setup`` and ``hparams``.

    Only passed to the step functions below at trace time (closed over by the
    scans and conditionals), never as a traced argument.

    Attributes:
        setup: the static :class:`Setup`.
        hp: the run's :class:`Hyperparameters`, each field a scalar array (:func:`as_arrays`).
        env, env_params: the environment and its parameters (:func:`environment`).
        net: the Q-network (:func:`network`).
        optimizer: ``setup.optimizer`` with ``hp.adam_epsilon``.
        loss: the TD loss the gradient steps descend: ``hp.discount`` with
            ``setup``'s loss, double and batch reduction.
        replay: the replay memory with its hyperparameters bound (:func:`replay_memory`).
        controller: aER's controller with its settings bound (consulted only with ``setup.adaptive``).
        start_capacity: ``int32[]``; the memory's capacity when the segment starts.
        replay_ratio: ``float32[]``; ``hp.replay_ratio`` clipped into ``[0, setup.max_replay_ratio]``
            (:func:`~jaxreplay.experiments.dqn.config.effective_replay_ratio`).
        updates_due: ``int32[]``; the updates due in the current unit (:func:`_updates_due`), set by
            :func:`_unit` for its update slots (0 outside them).
    """

    setup: Setup
    hp: Hyperparameters
    env: gymnax_environment.Environment
    env_params: gymnax_environment.EnvParams
    net: agent.Network
    optimizer: optax.GradientTransformation
    loss: agent.LossOptions
    replay: memory_lib.Memory
    controller: adaptive.Controller
    start_capacity: jax.Array
    replay_ratio: jax.Array
    updates_due: ArrayLike = 0


# A carry of the step functions: the run's state and the segment's sums.
_Carry = tuple[State, _Accumulators]


def _aer_controller(hp: Hyperparameters, setup: Setup) -> adaptive.Controller:
    """aER's :class:`~jaxreplay.adaptive.Controller` with the run's settings bound (``hp`` as arrays)."""
    return adaptive.evidence_controller(
        # aER and its random walk act on every vote (h = 1, δ = 0: Algorithm 2, bit for bit).
        evidence_threshold=jnp.where(hp.adaptive_rule == RULE_EVIDENCE, hp.adaptive_evidence_threshold, 1.0),
        evidence_allowance=jnp.where(hp.adaptive_rule == RULE_EVIDENCE, hp.adaptive_evidence_allowance, 0.0),
        interval=hp.adaptive_interval,
        num_old=hp.adaptive_num_old,
        max_num_old=setup.num_old_bound,
        subsample_size=setup.subsample_size,
        tolerance=hp.adaptive_tolerance,
        relative_tolerance=hp.adaptive_relative_tolerance,
        shrink_reading=setup.shrink_reading,
        paired=jnp.asarray(hp.adaptive_paired) > 0,
        equal_counts=jnp.asarray(hp.adaptive_equal_counts) > 0,
        random_walk=hp.adaptive_rule == RULE_RANDOM,
    )


def _context(state: State, hparams: Hyperparameters, setup: Setup) -> _Context:
    """The :class:`_Context` of the segment that starts from ``state``."""
    hp = as_arrays(hparams)
    env, env_params = environment(setup)
    replay = replay_memory(setup, hp)
    return _Context(
        setup=setup,
        hp=hp,
        env=env,
        env_params=env_params,
        net=network(setup),
        optimizer=agent.make_optimizer(setup.optimizer, hp.adam_epsilon),
        loss=agent.LossOptions(hp.discount, setup.loss, setup.double, setup.batch_reduction),
        replay=replay,
        controller=_aer_controller(hp, setup),
        start_capacity=replay.buffer(state.memory).capacity,
        replay_ratio=effective_replay_ratio(hp.replay_ratio, setup)[0],
    )


def _repeat(body, carry, length: int):
    """``body`` applied ``length`` (static) times; a scan unless ``length == 1``."""
    if length == 1:
        return body(carry)
    return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=length)[0]


def _scan_indexed(body, carry, start, length: int, always_scan: bool = False):
    """``body(carry, index)`` for ``index = start, ..., start + length - 1`` (a scan).

    The indices come from an ``arange`` made here, so they are *unbatched*
    under ``vmap`` (what :func:`_isolated` needs).
    """
    if length == 1 and not always_scan:
        return body(carry, jnp.asarray(start, jnp.int32))
    indices = start + jnp.arange(length, dtype=jnp.int32)
    return jax.lax.scan(lambda c, i: (body(c, i), None), carry, indices)[0]


def _isolated(index, fn, carry):
    """``fn(carry)``, behind a ``lax.cond`` that XLA cannot fuse across.

    The predicate ``index >= 0`` is always true; ``index`` is an unbatched
    scan index, so under ``vmap`` this stays a real conditional (one branch
    runs) instead of a ``select``. Why: XLA otherwise fuses the minibatch
    gather (in ``fn``) with the buffer write just before it, reading the old
    buffer plus the new transition; the old buffer then stays alive and whole
    buffer leaves are copied at every step (under ``vmap``, 4.5x slower at
    10^4 slots, growing with ``max_capacity``). A conditional's branch is a
    separate computation, so nothing fuses across it and the write stays in
    place. Measured: 100 vmapped CartPole runs, ``max_capacity`` 10^4 and 10^5,
    the same ~40k steps/s as at 10^3.
    """
    return jax.lax.cond(index >= 0, fn, lambda c: c, carry)


def _step_keys(state: State) -> jax.Array:
    """Keys of the step that comes after ``state.step`` steps: (action, env, minibatch, aER)."""
    step_stream = jax.random.fold_in(state.key, _STREAM_STEP)
    return jax.random.split(jax.random.fold_in(step_stream, state.step), 4)


def _select(flag: ArrayLike, new: PyTree, old: PyTree) -> PyTree:
    """``new`` where ``flag`` (``bool[]``) else ``old``, leaf by leaf."""
    return jax.tree.map(lambda n, o: jnp.where(flag, n, o), new, old)


def _epsilon(step: jax.Array, hp: Hyperparameters) -> jax.Array:
    """ε after ``step`` environment steps: ``epsilon_start`` until ``epsilon_ramp_start``, then the ramp."""
    # (In integers: at the default start 0 the ramp reads ``step`` itself, so runs are what they were.)
    ramp_start = jnp.asarray(hp.epsilon_ramp_start, step.dtype)
    ramp = agent.epsilon_schedule(
        jnp.maximum(step - ramp_start, 0), hp.epsilon_start, hp.epsilon_end, hp.epsilon_decay_steps
    )
    # Before the ramp, the start itself: with epsilon_decay_steps 0 ("end at once") the schedule gave the end from
    # step 0, skipping the random phase of epsilon_ramp_start steps (found by a probe). With a ramp the schedule
    # already gave the start there, bit for bit.
    return jnp.where(step < ramp_start, jnp.asarray(hp.epsilon_start, jnp.float32), ramp)


def _env_step(ctx: _Context, carry: _Carry) -> _Carry:
    """One ε-greedy environment step: the transition stored, the episode bookkeeping and sums updated."""
    s, acc = carry
    hp, setup = ctx.hp, ctx.setup
    action_key, env_key, _, _ = _step_keys(s)
    epsilon = _epsilon(s.step, hp)
    q = agent.q_values(ctx.net, s.params, s.obs)
    action = agent.epsilon_greedy(action_key, q, epsilon)
    obs, env_state, reward, terminated, truncated, info = ctx.env.step(env_key, s.env_state, action, ctx.env_params)
    reward = jnp.asarray(reward, jnp.float32)
    no_bootstrap = terminated if setup.truncation_bootstrap else terminated | truncated
    transition = {
        "obs": s.obs,
        "action": action,
        "reward": reward,
        "next_obs": stored_observation(setup, info["final_observation"]),
        "terminated": no_bootstrap.astype(jnp.float32),
    }
    if setup.max_n_step > 1:  # an n-step window stops at any episode end; it bootstraps unless terminated
        transition["truncated"] = ((terminated | truncated) & ~no_bootstrap).astype(jnp.float32)
    memory = ctx.replay.add(s.memory, transition)
    done = terminated | truncated
    episode_return = s.episode_return + reward
    slot = s.episodes % setup.recent_episodes
    recent = s.recent_returns.at[slot].set(jnp.where(done, episode_return, s.recent_returns[slot]))
    q_abs = jnp.max(jnp.abs(q))  # (a NaN stays in the maximum: the run has diverged)
    trained = s.gradient_steps > 0  # the untrained network's values are its initial scale, not learned ones
    s = s._replace(
        memory=memory,
        env_state=_strip_weak_types(env_state),
        obs=stored_observation(setup, obs),
        episode_return=jnp.where(done, 0.0, episode_return),
        recent_returns=recent,
        episodes=s.episodes + done.astype(jnp.int32),
        step=s.step + 1,
        q_abs_max=jnp.where(trained, jnp.maximum(s.q_abs_max, q_abs), s.q_abs_max),
        reward_abs_max=jnp.maximum(s.reward_abs_max, jnp.abs(reward)),
    )
    acc = acc._replace(
        return_sum=acc.return_sum + jnp.where(done, episode_return, 0.0),
        episodes=acc.episodes + done.astype(jnp.int32),
    )
    # The segment's mean capacity, summed as exact deviations from its first capacity (_Accumulators).
    return s, _add_capacity(acc, ctx.replay.buffer(memory).capacity - ctx.start_capacity)


def _copy_target_by_steps(ctx: _Context, carry: _Carry) -> _Carry:
    """The hard target copy at the end of a unit, once ``learning_starts`` is reached: when a multiple
    of ``target_period`` lies in ``(t - train_frequency, t]`` (``t`` environment steps done)."""
    s, acc = carry
    hp, setup = ctx.hp, ctx.setup
    crossed = s.step // hp.target_period > (s.step - setup.train_frequency) // hp.target_period
    copied = (s.step >= hp.learning_starts) & crossed
    target = agent.hard_target_update(s.params, s.target_params, copied)
    return s._replace(target_params=target, target_copies=s.target_copies + copied.astype(jnp.int32)), acc


def _update_target(ctx: _Context, s: State, params: agent.Params, counted: jax.Array):
    """``(target_params, copied)`` after an update slot that moved the online network to ``params``
    (``counted``, ``bool[]``: the update was made): a Polyak step after every counted update, or (with
    ``target_period_in_updates``) a hard copy after every ``target_period``-th. Hard copies counted in
    steps are made at the end of the unit (:func:`_copy_target_by_steps`)."""
    hp, setup = ctx.hp, ctx.setup
    if setup.target_update == "polyak":
        polyak = agent.polyak_target_update(params, s.target_params, hp.target_tau)
        return _select(counted, polyak, s.target_params), counted
    if setup.target_period_in_updates:
        copied = counted & ((s.gradient_steps + 1) % hp.target_period == 0)
        return agent.hard_target_update(params, s.target_params, copied), copied
    return s.target_params, jnp.bool_(False)


def _minibatch(ctx: _Context, memory: memory_lib.MemoryState, indices: jax.Array):
    """``(batch, loss)``: the transitions of the sampled starts and the loss options of their targets.

    With ``max_n_step == 1`` the stored transitions and ``ctx.loss`` as they
    are (1-step targets). Otherwise the targets are n-step
    (:func:`jaxreplay.returns.n_step`): the batch's reward is the discounted
    sum, its next observation the one stored with the last summed transition,
    its ``terminated`` 0, and the loss's discount the per-start ``γ^k`` (0
    after a termination), so ``reward + discount · (1 - terminated) · V`` is
    the n-step target.
    """
    stored = ctx.replay.buffer(memory)
    batch = buffer.get(stored, indices)
    if ctx.setup.max_n_step == 1:
        return batch, ctx.loss
    pieces, last = returns.n_step(stored, indices, ctx.hp.n_step, ctx.hp.discount, ctx.setup.max_n_step)
    n_step_batch = {
        **batch,
        "reward": pieces.reward,
        "next_obs": buffer.get(stored, last)["next_obs"],
        "terminated": jnp.zeros_like(pieces.reward),
    }
    return n_step_batch, ctx.loss._replace(discount=pieces.discount)


def _train(ctx: _Context, carry: _Carry, slot: ArrayLike) -> _Carry:
    """Update slot ``slot`` of a unit: one gradient step on a sampled minibatch if the slot is among the
    ``ctx.updates_due`` updates of the unit and ``learning_starts`` is reached (else masked), the
    sampled starts' priorities stored and the target network updated (:func:`_update_target`).

    ``slot`` is 0 (a Python int) or an unbatched scan index: slot 0 draws with
    the unit's sampling key, slot ``j > 0`` with ``fold_in(key, j)``, so a run
    draws the same minibatches whatever ``max_updates_per_unit``.
    """
    s, acc = carry
    hp, setup = ctx.hp, ctx.setup
    # Keys of the unit's last step (index s.step - 1): one draw per update slot.
    _, _, sample_key, _ = _step_keys(s._replace(step=s.step - 1))
    if not (isinstance(slot, int) and slot == 0):
        sample_key = jax.lax.select(slot == 0, sample_key, jax.random.fold_in(sample_key, slot))
    do_train = (s.step >= hp.learning_starts) & (slot < jnp.asarray(ctx.updates_due))
    memory = s.memory
    sample = ctx.replay.sample(sample_key, memory, setup.batch_size)
    batch, loss_options = _minibatch(ctx, memory, sample.indices)
    params, opt_state, loss, delta = agent.train_step(
        ctx.net,
        ctx.optimizer,
        s.params,
        s.target_params,
        s.opt_state,
        batch,
        sample.weights,
        hp.step_size,
        loss_options,
    )
    params, opt_state = _select(do_train, params, s.params), _select(do_train, opt_state, s.opt_state)
    # Slot -1 is skipped: a masked step stores nothing (uniform replay stores no priorities at all).
    indices = jnp.where(do_train, sample.indices, -1)
    memory = ctx.replay.update(memory, indices, delta)
    target, copied = _update_target(ctx, s, params, do_train)
    s = s._replace(
        params=params,
        target_params=target,
        opt_state=opt_state,
        memory=memory,
        gradient_steps=s.gradient_steps + do_train.astype(jnp.int32),
        target_copies=s.target_copies + copied.astype(jnp.int32),
    )
    acc = acc._replace(
        loss_sum=acc.loss_sum + jnp.where(do_train, loss, 0.0),
        losses=acc.losses + do_train.astype(jnp.int32),
    )
    return s, acc


def _updates_due(ctx: _Context, step: jax.Array) -> jax.Array:
    """``int32[]``: the gradient updates due in the unit that ended after ``step`` environment steps:
    ``D(step) - D(step - train_frequency)`` with ``D(t) = floor(t × ratio)`` exactly
    (:func:`floor_product`), so ``D(T)`` updates are due in the first ``T`` steps, the fractions carried
    from unit to unit."""
    due = floor_product(step, ctx.replay_ratio) - floor_product(step - ctx.setup.train_frequency, ctx.replay_ratio)
    return due.astype(jnp.int32)  # (the difference of the low 32 bits of each: exact, the difference is small)


def floor_product(t: jax.Array, ratio: jax.Array) -> jax.Array:
    """``uint32[]``: ``floor(t × ratio) mod 2**32``, exactly, for an integer ``0 <= t < 2**31`` and a float32
    ``0 <= ratio < 2**23`` (:func:`~jaxreplay.experiments.dqn.config.updates_due_by` on the host).

    A float32 product rounds: past ``2**17`` updates it can round a product like 131,430.99 up to the next
    integer, one update too many, and past ``2**24`` the count drifts by more (found by a probe). Here
    ``ratio`` is read as the integer ``m × 2**-s`` it is (its 24-bit significand and exponent), ``t × m`` is
    formed in two 32-bit words from 16-bit halves, and shifted right by ``s``. Every step is integer
    arithmetic, so it is the same on every device and batch size; where the float32 product was exact (a
    dyadic ratio such as 0.25, 1 or 4, below ``2**24`` steps and updates) the two agree.
    """
    u32 = jnp.uint32
    bits = jax.lax.bitcast_convert_type(jnp.asarray(ratio, jnp.float32), u32)
    exponent = (bits >> u32(23)) & u32(0xFF)
    significand = (bits & u32(0x7FFFFF)) | jnp.where(exponent > 0, u32(0x800000), u32(0))
    shift = (u32(150) - jnp.maximum(exponent, u32(1))).astype(jnp.int32)  # ratio = significand × 2**-shift
    t = jnp.maximum(jnp.asarray(t, jnp.int32), 0).astype(u32)
    t_hi, t_lo, m_hi, m_lo = t >> u32(16), t & u32(0xFFFF), significand >> u32(16), significand & u32(0xFFFF)
    middle = t_hi * m_lo + t_lo * m_hi  # < 2**31 + 2**24: no wrap
    low = t_lo * m_lo
    low_word = low + (middle << u32(16))  # modulo 2**32; the carry out goes to the high word
    high_word = t_hi * m_hi + (middle >> u32(16)) + (low_word < low).astype(u32)

    def right(x, by):  # x >> by with by clamped into [0, 31] (XLA leaves larger shifts to the target)
        return x >> jnp.clip(by, 0, 31).astype(u32)

    def left(x, by):
        return x << jnp.clip(by, 0, 31).astype(u32)

    below_32 = left(high_word, 32 - shift) | right(low_word, shift)
    from_32 = right(high_word, shift - 32)
    return jnp.where(shift >= 64, u32(0), jnp.where(shift >= 32, from_32, below_32))


def _updates(ctx: _Context, carry: _Carry) -> _Carry:
    """The unit's ``max_updates_per_unit`` update slots (those beyond ``ctx.updates_due`` masked), then the
    hard target copy counted in steps."""
    setup = ctx.setup
    s, acc = carry
    # Updates due beyond the slots are not made: counted, so the summary can flag them.
    skipped = jnp.maximum(ctx.updates_due - setup.max_updates_per_unit, 0)
    carry = (s._replace(updates_skipped=s.updates_skipped + skipped), acc)
    if setup.max_updates_per_unit == 1:
        carry = _train(ctx, carry, 0)
    else:
        carry = _scan_indexed(functools.partial(_train, ctx), carry, 0, setup.max_updates_per_unit)
    if setup.target_update == "hard" and not setup.target_period_in_updates:
        carry = _copy_target_by_steps(ctx, carry)
    return carry


def _unit(ctx: _Context, carry: _Carry, index: jax.Array) -> _Carry:
    """``train_frequency`` environment steps, then the update slots (isolated: :func:`_isolated`)."""
    carry = _repeat(functools.partial(_env_step, ctx), carry, ctx.setup.train_frequency)
    # The updates due, computed here and passed into the conditional: computed inside, XLA copied their
    # integer arithmetic into every fusion that selects on a slot's do_train (17 copies in CartPole's step).
    ctx = ctx._replace(updates_due=_updates_due(ctx, carry[0].step))
    return _isolated(index, functools.partial(_updates, ctx), carry)


def _consult_adaptive(ctx: _Context, carry: _Carry) -> _Carry:
    """aER's controller consulted after the step ``s.step`` (it fires at multiples of
    ``adaptive_interval``), the memory resized and the straddle counts updated."""
    s, acc = carry
    hp, setup, replay = ctx.hp, ctx.setup, ctx.replay
    _, _, _, adaptive_key = _step_keys(s._replace(step=s.step - 1))
    params = s.params
    # Algorithm 2 writes Q(·; θ) on both sides; the target network is the option.
    use_target = jnp.asarray(hp.adaptive_td_target) > 0
    bootstrap = jax.tree.map(lambda t, p: jnp.where(use_target, t, p), s.target_params, params)
    td_error_fn = functools.partial(
        agent.td_errors, ctx.net, params, bootstrap, discount=hp.discount, double=setup.double
    )
    controller, capacity = ctx.controller.update(
        adaptive_key, s.controller, replay.buffer(s.memory), td_error_fn, s.step
    )
    # A fixed-rule run keeps its size and its (untouched) controller; so does every rule until learning has
    # begun: with the network frozen, a check compares the same TD errors twice, an exact tie, which enlarges
    # (CartPole from 100 grew by k at every check, to 1020 by learning_starts = 1000, before learning a thing).
    active = (hp.adaptive_rule != RULE_FIXED) & (s.step > hp.learning_starts)
    controller = _select(active, controller, s.controller)
    capacity = jnp.where(active, capacity, replay.buffer(s.memory).capacity)
    fired = controller.diagnostics.num_checks > s.controller.diagnostics.num_checks
    straddle = fired & (s.target_copies > s.copies_at_check)
    grew = controller.diagnostics.num_grows > s.controller.diagnostics.num_grows
    s = s._replace(
        controller=controller,
        memory=replay.resize(s.memory, capacity),
        copies_at_check=jnp.where(fired, s.target_copies, s.copies_at_check),
        straddle_checks=s.straddle_checks + straddle.astype(jnp.int32),
        straddle_grows=s.straddle_grows + (straddle & grew).astype(jnp.int32),
    )
    return s, acc


def _cycle(ctx: _Context, carry: _Carry, index: jax.Array) -> _Carry:
    """Cycle ``index`` of the segment: its units, then (aER) one consultation of the controller."""
    units = ctx.setup.cycle_length // ctx.setup.train_frequency
    carry = _scan_indexed(functools.partial(_unit, ctx), carry, index * units, units)
    return _isolated(index, functools.partial(_consult_adaptive, ctx), carry) if ctx.setup.adaptive else carry


def _record(ctx: _Context, state: State, acc: _Accumulators) -> Record:
    """The segment's :class:`Record` from its sums and the state at its end (scalars)."""
    hp, setup = ctx.hp, ctx.setup
    nan = jnp.float32(jnp.nan)
    eval_return = None
    if setup.eval_episodes > 0:
        eval_key = jax.random.fold_in(jax.random.fold_in(state.key, _STREAM_EVAL), state.step)
        eval_return = evaluate(eval_key, state.params, setup)
    return Record(
        train_return=jnp.where(acc.episodes > 0, acc.return_sum / jnp.maximum(acc.episodes, 1), nan),
        train_episodes=acc.episodes,
        td_loss=jnp.where(acc.losses > 0, acc.loss_sum / jnp.maximum(acc.losses, 1), nan),
        capacity=ctx.replay.buffer(state.memory).capacity,
        # A static divisor: XLA multiplies by its (rounded) reciprocal, which gives the
        # same bits at every batch size; a traced divisor is divided exactly in scalar
        # code but to 1 ulp in vectorised code, so a chunk of 1 run differed.
        capacity_mean=ctx.start_capacity.astype(jnp.float32)
        + _capacity_sum(acc) * jnp.float32(1.0 / setup.steps_per_segment),
        epsilon=_epsilon(state.step, hp),
        env_steps=state.step,
        eval_return=eval_return,
    )


def advance(state: State, hparams: Hyperparameters, setup: Setup) -> tuple[State, dict]:
    """Run ``setup.steps_per_segment`` environment steps (with training and aER) and record them.

    The segment is a scan of cycles (:func:`_cycle`), each a scan of units
    (:func:`_unit`: environment steps, then a gradient step) and an aER
    consultation (:func:`_consult_adaptive`); the module docstring says why.

    Args:
        state: from :func:`~jaxreplay.experiments.dqn.state.init` or a previous :func:`advance`.
        hparams: scalar :class:`Hyperparameters`.
        setup: static :class:`Setup`.

    Returns:
        ``(state, record)``; ``record`` maps each name of :func:`~jaxreplay.experiments.dqn.summary.record_dims` to
        an array with a leading axis of length 1 (this segment). Cost per
        step: one forward pass, one environment step, a buffer add; per
        ``train_frequency`` steps ``max_updates_per_unit`` gradient steps on
        ``batch_size`` (masked beyond the due ones; with ``max_n_step > 1``
        plus ``batch_size × max_n_step`` scalar gathers each); per
        ``adaptive_check_every`` steps an aER consultation; per segment
        ``eval_episodes`` greedy episodes, each until the batch's last one ends (at most
        ``max_steps_in_episode`` forward passes; :func:`~jaxreplay.experiments.dqn.game.evaluate`).
    """
    ctx = _context(state, hparams, setup)
    cycles = setup.steps_per_segment // setup.cycle_length
    carry = (state, _zero_accumulators())
    state, acc = _scan_indexed(functools.partial(_cycle, ctx), carry, 0, cycles, always_scan=True)
    return state, _record_arrays(_record(ctx, state, acc))
