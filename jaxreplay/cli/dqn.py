"""``jaxreplay dqn``: one DQN setting on a gymnax game, vmapped over seeds."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from jaxreplay.cli.common import NULLS, named_as_options, positive, run_sweep

if TYPE_CHECKING:  # (imported where used: `jaxreplay --help` imports no JAX)
    from jaxreplay.experiments import dqn

# Each field `jaxreplay dqn` sets, as the library names it, and the option that sets it.
OPTIONS = {
    "env_id": "--env",
    "memory_size": "--memory-size",
    "n_step": "--n-step",
    "max_n_step": "--n-step",
    "replay_ratio": "--replay-ratio",
    "sticky_action_prob": "--sticky-actions",
    "steps": "--steps",
}
OPTIONS.update({f"fixed.{field}": option for field, option in OPTIONS.items() if field not in ("env_id", "steps")})
OPTIONS.update({"seed": "--seed", "seeds": "--seeds"})  # the sweep's own fields

# What the command advises where the engine refuses its sweep for memory (a ResourceError), by the fields the
# engine advises lowering; {cause} is what the engine found dominates the need.
ADVICE = {
    ("setup.max_capacity",): "Lower --memory-size or --steps ({cause}), or use a machine with more memory.",
    ("setup.max_batch_size", "setup.batch_size"): "{cause}: lower the minibatch size (the Setup's batch_size: run "
    "it as a sweep), or use a machine with more memory.",
    ("seeds", "setup.steps"): "Run fewer --seeds, or fewer --steps.",
}


def add_parser(commands) -> None:
    """Declare ``jaxreplay dqn`` and its options among ``commands`` (argparse's subparsers)."""
    dq = commands.add_parser("dqn", help="one DQN setting on a gymnax game, vmapped over seeds")
    dq.add_argument(
        "--env",
        default="CartPole-v1",
        help="gymnax id (CartPole-v1, MountainCar-v0, Acrobot-v1, Breakout-MinAtar, ...)",
    )
    dq.add_argument("--memory-size", type=int, default=100, help="N (aER: the initial N0)")
    dq.add_argument("--adaptive", action="store_true", help="aER: adapt the memory size (k = 20, n_old = N0/2)")
    dq.add_argument("--sampler", choices=("uniform", "prioritized", "cer"), default="uniform")
    dq.add_argument("--seeds", type=int, default=8)
    dq.add_argument("--seed", type=int, default=0, help="base seed")
    dq.add_argument("--steps", type=int, default=None, help="environment steps per run (default: the paper's)")
    dq.add_argument("--tuned", action="store_true", help="CartPole: a configuration that learns (not the paper's)")
    dq.add_argument(
        "--optimizer-reading",
        choices=("adam", "sgd"),
        default="adam",
        help="the paper's step size as Adam's rate on the mean loss (default) or as Algorithm 1's "
        "per-transition SGD step",
    )
    dq.add_argument(
        "--adaptive-td",
        choices=("online", "target"),
        default="online",
        help="aER's TD errors: online network on both sides (Algorithm 2, default) or target bootstrap",
    )
    dq.add_argument(
        "--adaptive-draws",
        choices=("paired", "independent"),
        default="paired",
        help="aER's subsample: the same transitions at both times (default) or fresh draws",
    )
    dq.add_argument(
        "--n-step",
        type=int,
        default=None,
        help="n-step targets: up to N rewards, then γ^k times the bootstrap (default 1)",
    )
    dq.add_argument(
        "--replay-ratio",
        type=float,
        default=None,
        help="gradient updates per environment step, fractional ones accumulating (default: the setting's; 1, "
        "--tuned 0.1)",
    )
    dq.add_argument(
        "--sticky-actions",
        type=float,
        default=None,
        metavar="P",
        help="repeat the previous action with probability P instead of the chosen one (MinAtar's default 0.1; "
        "default: the game as gymnax makes it, 0)",
    )
    dq.add_argument("--json", action="store_true", help="print one JSON object (strict JSON: " + NULLS + ")")
    dq.add_argument("--quiet", action="store_true", help="no progress bar")
    dq.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``jaxreplay dqn``: the options read into the experiment's setting, its seeds run as a sweep, the result shown."""
    import json

    import numpy as np

    from jaxreplay.engine import results
    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.experiments import dqn as dqn_lib

    setup, hparams = _read_setting(args)
    with named_as_options(OPTIONS):  # a value refused by the library is said of the option that set it
        dqn_lib.check(hparams, setup)
        sweep = sweep_lib.Sweep(
            "dqn",
            seeds=args.seeds,
            seed=args.seed,
            setup=setup,  # type: ignore[arg-type]  # Sweep.setup takes a Setup too; annotated Mapping only (engine)
            fixed=hparams._asdict(),
        )
    ds = run_sweep(sweep, None, advice=ADVICE, progress=not args.quiet and not args.json).dataset
    result = _result(args, setup, hparams, ds)
    if not any(result.report["gradient_steps"]):  # the returns of an untrained network, said as such
        starts, ratio = int(np.asarray(hparams.learning_starts)), float(np.asarray(hparams.replay_ratio))
        first_unit = dqn_lib.first_unit_end(starts, setup)
        if first_unit > setup.total_steps:
            cause = f"learning starts after {starts} steps and the run has {setup.total_steps}"
            advice = "use more --steps"
        else:  # an update due only before learning_starts is not made (it blamed the ratio with a step in the run)
            before = int(dqn_lib.updates_due_by(first_unit - setup.train_frequency, ratio))
            cause = (
                f"at replay ratio {ratio:g} the first update due from learning_starts ({starts}) on comes at step "
                f"{dqn_lib.first_update_due(ratio, starts, setup):,} and the run has {setup.total_steps}"
                + (f"; the {before} due before it are not made" if before else "")
            )
            advice = "raise --replay-ratio or use more --steps"
        print(
            f"jaxreplay dqn: warning: no gradient step was taken: {cause} ({advice}); these returns are the "
            "untrained network's.",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(results.strict_json(result.report), allow_nan=False))
    else:
        _print_text(args, result)
    return 0


def _read_setting(args: argparse.Namespace) -> tuple[dqn.Setup, dqn.Hyperparameters]:
    """`jaxreplay dqn`'s options as the experiment's ``(Setup, Hyperparameters)``: the paper's setting of a game it
    ran, else the defaults; checked before anything runs, a bad value named as the option typed."""
    import dataclasses

    from jaxreplay.experiments import dqn
    from jaxreplay.paper.reproduce import settings as paper_settings

    positive("seeds", args.seeds)
    positive("memory-size", args.memory_size)
    if args.steps is not None:
        positive("steps", args.steps)
    if not args.adaptive:  # (aER's options do nothing without it: said, not ignored)
        for option, given, default in (
            ("adaptive-td", args.adaptive_td, "online"),
            ("adaptive-draws", args.adaptive_draws, "paired"),
        ):
            if given != default:
                raise ValueError(f"--{option} {given} sets how aER checks: add --adaptive, or leave it out.")
    if args.tuned and args.env != "CartPole-v1":
        raise ValueError(f"--tuned is only available for CartPole-v1, not --env {args.env}.")
    if args.env in paper_settings.PAPER_TOTAL_STEPS:
        setup, hparams = paper_settings.paper_setting(
            args.env, args.memory_size, args.adaptive, tuned=args.tuned, optimizer_reading=args.optimizer_reading
        )
    else:
        if args.optimizer_reading != "adam":  # (it reads the paper's step size: only its games have one)
            raise ValueError(
                f"--optimizer-reading {args.optimizer_reading} reads the paper's step size, for its games only "
                f"({', '.join(paper_settings.PAPER_TOTAL_STEPS)}); --env {args.env} runs the defaults (Adam)."
            )
        with named_as_options(OPTIONS):
            setup = dqn.Setup(env_id=args.env, adaptive=args.adaptive)
        # aER may grow up to the run length (as in the paper's settings); a fixed memory needs its own size only.
        setup = dataclasses.replace(
            setup, max_capacity=max(args.memory_size, setup.total_steps if args.adaptive else 1)
        )
        hparams = dqn.Hyperparameters(memory_size=args.memory_size, adaptive_num_old=max(args.memory_size // 2, 1))
    setup = dataclasses.replace(setup, sampler=args.sampler)
    hparams = hparams._replace(
        adaptive_td_target=int(args.adaptive_td == "target"), adaptive_paired=int(args.adaptive_draws == "paired")
    )
    if args.steps is not None:
        # A run of T steps never stores more than T transitions: allocate no more.
        with named_as_options(OPTIONS):
            timed = dqn.with_total_steps(setup, args.steps)
        setup = dataclasses.replace(
            timed,
            max_capacity=max(min(setup.max_capacity, args.steps), hparams.memory_size),
        )
    setup, hparams = _with_n_step_and_ratio(args, setup, hparams)  # after --steps: the ratio's slots count units
    if args.sticky_actions is not None:
        with named_as_options(OPTIONS):
            setup = dataclasses.replace(setup, sticky_action_prob=args.sticky_actions)
    _check_episodes(setup)
    return setup, hparams


def _with_n_step_and_ratio(args: argparse.Namespace, setup, hparams):
    """``(setup, hparams)`` with ``--n-step`` and ``--replay-ratio`` applied (each sets its static bound to
    what one run needs); unchanged without them. ValueError naming the option for a bad value."""
    import dataclasses

    from jaxreplay.experiments import dqn

    if args.n_step is not None:
        positive("n-step", args.n_step)  # (above a fixed memory's size: refused by dqn.check, said of --n-step)
        with named_as_options(OPTIONS):  # (Setup's own bounds, said of --n-step)
            setup = dataclasses.replace(setup, max_n_step=args.n_step)
        hparams = hparams._replace(n_step=args.n_step)
    if args.replay_ratio is not None:
        ratio = args.replay_ratio
        if not (math.isfinite(ratio) and 0 < ratio <= 2**20):
            raise ValueError(f"--replay-ratio must be a number in (0, 2**20] (updates per step), got {ratio}.")
        # The update slots per unit that this ratio needs, counted as the program counts (float32: 1.3 with
        # units of 10 steps has a unit of 14 updates due); ceil(ρF) + 1 bounds it.
        room = dataclasses.replace(setup, max_updates_per_unit=math.ceil(ratio * setup.train_frequency) + 1)
        setup = dataclasses.replace(setup, max_updates_per_unit=dqn.update_slots_needed(ratio, room))
        hparams = hparams._replace(replay_ratio=ratio)
    return setup, hparams


def _check_episodes(setup) -> None:
    """Refuse, before compiling, a run whose return cannot be reported (ValueError naming --env and why).

    LineSearch never terminates: its only episode end is at ``max_steps_in_episode``, so a
    run whose last segment contains none would report a NaN return. (A game
    DQN cannot play, with continuous actions or a single one, is refused by
    ``dqn.Setup`` itself.)
    """
    from jaxreplay.experiments import dqn

    if setup.env_id != "LineSearch":
        return
    _, params = dqn.environment(setup)  # (its env_params applied as the experiment does)
    length, total = int(params.max_steps_in_episode), setup.total_steps
    last_start = total - setup.steps_per_segment
    if total // length * length <= last_start:
        raise ValueError(
            f"--env LineSearch: its episode never terminates and lasts max_steps_in_episode = {length} steps, so no "
            f"episode ends in the last segment (steps {last_start + 1}-{total}) and the return would be NaN; "
            f"use --steps {max(length, total // length * length)} (a multiple of {length}), or "
            "`jaxreplay linesearch` for the paper's LineSearch experiment."
        )


class _Result(NamedTuple):
    """What `jaxreplay dqn` found: its report (the --json object), each seed's final return (``float64[seeds]``,
    NaN where none was measured) and whether each seed diverged (``bool[seeds]``)."""

    report: dict
    final: Any
    diverged: Any


def _result(args: argparse.Namespace, setup, hparams, ds) -> _Result:
    """The runs ``ds`` of one DQN setting × seeds (``hparams`` in ``setup``): the setting, final returns, their
    IQM and interval, memory sizes."""
    import numpy as np

    from jaxreplay.engine import results
    from jaxreplay.paper.reproduce.dqn import final_returns

    final_kind, final = final_returns(ds)  # (NaN where a seed diverged: no score, its null reason says so)
    final, diverged = final.reshape(-1), ds.diverged.values.reshape(-1)
    ci = results.seed_interval(final, "iqm")
    report = {
        "env": args.env,
        "memory_size": args.memory_size,
        "adaptive": args.adaptive,
        "sampler": args.sampler,
        "n_step": int(hparams.n_step),
        "replay_ratio": float(hparams.replay_ratio),
        "seeds": args.seeds,
        "steps": setup.total_steps,
        "final_return_kind": final_kind,
        "final_returns": [None if not np.isfinite(x) else float(x) for x in final],
        "final_returns_null_reason": _unmeasured_seeds(final, diverged, final_kind),
        "iqm": ci["estimate"],
        "iqm_null_reason": ci.get("estimate_null_reason"),
        "iqm_ci95": None if ci["low"] is None else [ci["low"], ci["high"]],
        "iqm_ci95_null_reason": ci.get("low_null_reason"),
        "segment_steps": ds.segment.values.tolist(),
        "memory_size_mean": ds.capacity.mean("seed").values.astype(float).tolist(),
        "diverged": int(diverged.sum()),
        "soft_diverged": int(ds.soft_diverged.values.sum()),
        "q_abs_max": ds.q_abs_max.values.reshape(-1).astype(float).tolist(),
        "gradient_steps": ds.gradient_steps.values.reshape(-1).astype(int).tolist(),
        "oldest_policy_age": ds.oldest_policy_age.values.reshape(-1).astype(float).tolist(),
    }
    report = {k: v for k, v in report.items() if not (k.endswith("_null_reason") and v is None)}
    if setup.sticky_action_prob:  # (only then: without it the report is the bytes it was)
        report["sticky_action_prob"] = setup.sticky_action_prob
    if args.adaptive:
        report["adaptive"] = _adaptive_report(ds)
    return _Result(report, final, diverged)


def _print_text(args: argparse.Namespace, result: _Result) -> None:
    import numpy as np

    report, final = result.report, result.final
    print(
        f"DQN {args.env}, {'aER from' if args.adaptive else 'fixed memory'} {args.memory_size}, sampler "
        f"{args.sampler}, {report['n_step']}-step returns, replay ratio {report['replay_ratio']:g}, {args.seeds} "
        f"seeds, {report['steps']} steps" + (f", sticky actions {args.sticky_actions:g}" if args.sticky_actions else "")
    )
    print(f"  final {report['final_return_kind']} per seed: " + ", ".join(f"{x:.1f}" for x in final))
    interval = (
        report["iqm_ci95_null_reason"]
        if report["iqm_ci95"] is None
        else f"95% expanded bootstrap CI [{report['iqm_ci95'][0]:.1f}, {report['iqm_ci95'][1]:.1f}]"
    )
    print(f"  IQM {'n/a' if report['iqm'] is None else format(report['iqm'], '.1f')} ({interval})")
    print(f"  memory size: start {args.memory_size}, mean at the end {report['memory_size_mean'][-1]:.0f}")
    if args.adaptive:
        a = report["adaptive"]
        show = lambda x, spec: "n/a" if x is None else format(x, spec)  # noqa: E731
        print(
            f"  aER checks {sum(a['checks'])}: grow fraction {show(a['grow_fraction'], '.2f')} "
            f"({show(a['straddle_grow_fraction'], '.2f')} at checks straddling a target copy, "
            f"{show(a['other_grow_fraction'], '.2f')} at the others; {sum(a['forced'])} forced by the floor, "
            f"{show(a['free_grow_fraction'], '.2f')} of the free ones); estimate's standard error "
            f"{show(a['noise_mean'], '.3g')} vs mean |change| {show(a['change_mean'], '.3g')}"
        )
    if report["diverged"]:
        print(f"  {report['diverged']} seed(s) diverged (non-finite parameters)")
    if report["soft_diverged"]:
        print(
            f"  {report['soft_diverged']} seed(s) soft-diverged: Q-values beyond any discounted return of their "
            f"rewards (largest |Q| {max(report['q_abs_max']):.3g})"
        )
    unmeasured = int(np.sum(~np.isfinite(final) & ~result.diverged))
    if unmeasured:
        print(
            f"  {unmeasured} seed(s) finished no {report['final_return_kind'].split('_')[0]} episode in the last "
            "segment: their return is NaN (not measured, not diverged)"
        )


def _unmeasured_seeds(final, diverged, final_kind: str) -> str | None:
    """Why each seed's final return (``final``, shape ``[seeds]``) is missing, or None if none is."""
    episode = final_kind.removesuffix("_return")  # eval or train
    why = {True: "diverged (non-finite parameters)", False: f"finished no {episode} episode in the last segment"}
    missing = [f"seed {i}: {why[bool(bad)]}" for i, (x, bad) in enumerate(zip(final, diverged)) if not math.isfinite(x)]
    return "; ".join(missing) or None


# Why a pooled share of aER's diagnostics is None (its denominator is 0).
_ADAPTIVE_NULL_REASONS = {
    "checks_mean": "no run",
    "grow_fraction": "no aER check ran",
    "straddle_grow_fraction": "no aER check straddled a target-network copy",
    "other_grow_fraction": "every aER check straddled a target-network copy (or none ran)",
    "noisy_fraction": "no aER check had a reference to compare with",
    "change_mean": "no aER check had a reference to compare with",
    "noise_mean": "no aER check had a reference to compare with",
    "forced_fraction": "no aER check ran",
    "free_grow_fraction": "every valid aER check was forced by the floor (or none ran)",
}


def _adaptive_report(ds) -> dict:
    """aER's diagnostics of a DQN sweep with one configuration: per-seed counts and pooled shares
    (a share whose denominator is 0 is None, with its ``<key>_null_reason``)."""
    import numpy as np

    from jaxreplay.experiments import dqn

    def seeds(name):
        return [int(x) for x in np.asarray(ds[name].values).reshape(-1)]

    shares = dqn.adaptive_diagnostics(ds)
    reasons = {f"{k}_null_reason": _ADAPTIVE_NULL_REASONS[k] for k, v in shares.items() if v is None}
    return {
        "checks": seeds("adaptive_checks"),
        "grows": seeds("adaptive_grows"),
        "shrinks": seeds("adaptive_shrinks"),
        "invalid": seeds("adaptive_invalid"),
        "forced": seeds("adaptive_forced"),
        "final_memory_size": seeds("final_capacity"),
        "straddle_checks": seeds("adaptive_straddle_checks"),
        "straddle_grows": seeds("adaptive_straddle_grows"),
        **shares,
        **reasons,
    }
