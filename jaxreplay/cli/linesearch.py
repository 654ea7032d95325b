"""``jaxreplay linesearch``: one LineSearch configuration, the ODE theory and the seed-averaged experiment side by
side."""

from __future__ import annotations

import argparse
from typing import Any, NamedTuple

from jaxreplay.cli.common import NULLS, named_as_options, positive, run_sweep

_NO_THEORY = (
    "solver did not converge (its step budget ran out: the ODE diverges, or changes too abruptly for the budget)"
)

# Each field `jaxreplay linesearch` sets, as the library names it, and the option that sets it; a sweep names a
# fixed value fixed.<field>.
OPTIONS = {
    "memory_size": "--memory-size",
    "batch_size": "--batch-size",
    "step_size": "--step-size",
    "discount": "--discount",
    "priority_exponent": "--priority-exponent",
    "adaptive_interval": "--adaptive-interval",
    "adaptive_num_old": "--adaptive-num-old",
}
OPTIONS.update({f"fixed.{field}": option for field, option in OPTIONS.items()})
OPTIONS.update({"seed": "--seed", "seeds": "--seeds"})  # the sweep's own fields


# What the command advises where the engine refuses its sweep for memory (a ResourceError), by the fields the
# engine advises lowering; {cause} is what the engine found dominates the need.
ADVICE = {
    ("setup.max_capacity",): "Lower --memory-size ({cause}), or use a machine with more memory.",
    ("setup.max_batch_size", "setup.batch_size"): "{cause}: lower the minibatch size (--batch-size), or use a "
    "machine with more memory.",
    ("seeds", "setup.steps"): "Run fewer --seeds, or fewer --steps.",
}
ADVICE_ADAPTIVE = {
    **ADVICE,
    # aER's storage is --memory-size + --steps (as much as the memory can grow): --steps may be what dominates
    ("setup.max_capacity",): "Lower --steps or --memory-size ({cause}; aER's memory is allocated for "
    "--memory-size + --steps, as much as it can grow), or use a machine with more memory.",
}


def add_parser(commands) -> None:
    """Declare ``jaxreplay linesearch`` and its options among ``commands`` (argparse's subparsers)."""
    ls = commands.add_parser("linesearch", help="one LineSearch configuration: theory and experiment side by side")
    ls.add_argument("--memory-size", type=int, default=100, help="N, replay memory capacity (aER: initial N0)")
    ls.add_argument("--batch-size", type=int, default=5, help="m, sequential updates per step")
    ls.add_argument("--step-size", type=float, default=0.01, help="alpha")
    ls.add_argument("--discount", type=float, default=0.0, help="gamma in [0, 1)")
    ls.add_argument("--sampler", choices=("uniform", "prioritized", "adaptive"), default="uniform")
    ls.add_argument(
        "--priority-exponent", type=float, help="beta of pER, P(i) ~ |delta_i|^beta (--sampler prioritized; default 2)"
    )
    ls.add_argument("--adaptive-interval", type=int, help="aER's k (--sampler adaptive; default 20)")
    ls.add_argument("--adaptive-num-old", type=int, help="aER's n_old (--sampler adaptive; default N0 / 2)")
    ls.add_argument("--seeds", type=int, default=16)
    ls.add_argument("--seed", type=int, default=0, help="base seed; run i uses fold_in(key(seed), i)")
    ls.add_argument("--steps", type=int, default=1000, help="T")
    ls.add_argument("--json", action="store_true", help="print one JSON object (strict JSON: " + NULLS + ")")
    ls.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``jaxreplay linesearch``: its options read into a sweep, the sweep run, the ODE solved, both shown."""
    sweep = _read_sweep(args)
    advice = ADVICE_ADAPTIVE if args.sampler == "adaptive" else ADVICE
    ds = run_sweep(sweep, None, advice=advice, progress=False).dataset
    result = _result(args, ds)
    if args.json:
        _print_json(result.report, args.seeds)
    else:
        _print_text(args, result)
    return 0


def _read_sweep(args: argparse.Namespace):
    """`jaxreplay linesearch`'s options as one configuration × seeds of the sweep engine (run i's key:
    ``fold_in(key(seed), i)``), checked before anything runs; a bad value is named as the option typed."""
    import numpy as np

    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.experiments import linesearch as ls

    _sampler_options(args)
    num_old = _num_old(args)
    hparams = ls.Hyperparameters(
        memory_size=args.memory_size,
        batch_size=args.batch_size,
        step_size=args.step_size,
        discount=args.discount,
        priority_exponent=args.priority_exponent,
        adaptive_interval=args.adaptive_interval,
        adaptive_num_old=num_old,
    )
    for name in ("memory_size", "batch_size", "seeds", "steps", "adaptive_interval"):
        positive(name.replace("_", "-"), getattr(args, name))
    if args.adaptive_num_old is not None:
        positive("adaptive-num-old", args.adaptive_num_old)
    # The smallest storage that can hold the run: N itself, or for aER as much
    # as the memory can grow in `steps` steps (N grows by at most k every k steps).
    max_capacity = max(args.memory_size, 1) + (args.steps if args.sampler == "adaptive" else 0)
    setup = ls.Setup(
        steps=args.steps,
        max_capacity=max_capacity,
        max_batch_size=max(args.batch_size, 1),
        sampler=args.sampler,
        max_num_old=max(num_old, 1),
    )
    with named_as_options(OPTIONS):
        ls.check(hparams, setup)
        return sweep_lib.Sweep(
            "linesearch",
            seeds=args.seeds,
            seed=args.seed,
            setup=setup,  # type: ignore[arg-type]  # Sweep.setup takes a Setup too; annotated Mapping only (engine)
            fixed={k: np.asarray(v).item() for k, v in hparams._asdict().items()},
        )


# The options only one sampler reads, and that sampler.
_SAMPLER_OPTIONS = {"priority_exponent": "prioritized", "adaptive_interval": "adaptive", "adaptive_num_old": "adaptive"}


def _sampler_options(args: argparse.Namespace) -> None:
    """Refuse an option that ``--sampler`` does not read (``--priority-exponent 3`` with the uniform sampler ran
    uniform replay without a word, a probe); give the others the experiment's defaults, in place (n_old's is
    the command's own, N0 / 2: :func:`_num_old`)."""
    from jaxreplay.experiments import linesearch as ls

    defaults = ls.Hyperparameters()
    for name, sampler in _SAMPLER_OPTIONS.items():
        value = getattr(args, name)
        if value is not None and args.sampler != sampler:
            option = "--" + name.replace("_", "-")
            raise ValueError(f"{option} applies to --sampler {sampler} only; this run's sampler is {args.sampler}.")
        if value is None and name != "adaptive_num_old":
            setattr(args, name, getattr(defaults, name))


def _num_old(args: argparse.Namespace) -> int:
    """aER's n_old as the run uses it: ``--adaptive-num-old``, else N0 / 2 (at least 1)."""
    # `is None`, not falsiness: an explicit 0 is refused, never replaced by the default.
    return args.adaptive_num_old if args.adaptive_num_old is not None else max(args.memory_size // 2, 1)


class _Result(NamedTuple):
    """What `jaxreplay linesearch` found: its report (the --json object), the seeds' mean Δθ curve
    (``float64[T, 2]``) and the ODE's solution (None where its solver gave up)."""

    report: dict
    mean_curve: Any
    solution: Any


def _result(args: argparse.Namespace, ds) -> _Result:
    """The experiment's runs ``ds`` (one configuration × seeds) beside the ODE theory of the same setting."""
    import numpy as np

    from jaxreplay.engine import results
    from jaxreplay.experiments import linesearch as ls
    from jaxreplay.paper import theory

    adaptive = args.sampler == "adaptive"
    dtheta = ds.dtheta.values.astype(np.float64)  # [seeds, T, 2]
    mean_curve = dtheta.mean(axis=0)
    per_seed = ds.final_metric.values.astype(np.float64)
    memory_mean = ds.capacity.values.astype(np.float64).mean(axis=0)

    times = np.arange(args.steps + 1, dtype=np.float64)
    # aER's ODE averages over what each step replayed from (the live size, which lags a grown capacity).
    replayed = ls.replayed_sizes(ds.capacity.values, args.memory_size).mean(axis=0, dtype=np.float64)
    schedule = theory.MemorySizeSchedule(np.arange(1.0, args.steps + 1.0), replayed)
    solution = _solve_theory(
        memory_size=schedule if adaptive else args.memory_size,
        batch_size=args.batch_size,
        step_size=args.step_size,
        discount=args.discount,
        priority_exponent=args.priority_exponent if args.sampler == "prioritized" else None,
        times=times,
    )
    config: tuple[str, ...] = ("memory_size", "batch_size", "step_size", "discount", "sampler", "priority_exponent")
    config += ("seeds", "seed", "steps") + (("adaptive_interval",) if adaptive else ())
    report = {
        # Everything the run depends on (aER's n_old as it ran: its default is resolved here).
        "config": {name: getattr(args, name) for name in config}
        | ({"adaptive_num_old": _num_old(args)} if adaptive else {}),
        "theory": {
            "converged": True,
            "final_metric": float(solution.metric),
            "t": times.tolist(),
            "dtheta1": np.asarray(solution.dtheta1).tolist(),
            "dtheta2": np.asarray(solution.dtheta2).tolist(),
            "direction_changed": bool(solution.direction_changed),
            "overshoots": bool(solution.overshoots),
        }
        if solution is not None
        else results.strict_json(
            {
                "converged": False,
                "error": _NO_THEORY,
                "final_metric": None,
                "t": times.tolist(),
                "dtheta1": None,
                "dtheta2": None,
                "direction_changed": None,
                "overshoots": None,
            },
            reason=_NO_THEORY,
        ),
        "experiment": {
            "final_metric": float(np.abs(mean_curve[-1]).sum()),
            "final_metric_per_seed_mean": float(per_seed.mean()),
            # One seed has no standard error (0 would claim no uncertainty): null, saying why.
            "final_metric_stderr": float(per_seed.std(ddof=1) / np.sqrt(args.seeds)) if args.seeds > 1 else None,
            "t": times[1:].tolist(),
            "dtheta1_mean": mean_curve[:, 0].tolist(),
            "dtheta2_mean": mean_curve[:, 1].tolist(),
            "diverged_seeds": int(ds.diverged.values.sum()),
        },
    }
    if args.seeds == 1:
        report["experiment"]["final_metric_stderr_null_reason"] = "too few seeds (n = 1): a standard error needs 2"
    if adaptive:
        report["experiment"]["memory_size_mean"] = memory_mean.tolist()
    return _Result(report, mean_curve, solution)


def _print_text(args: argparse.Namespace, result: _Result) -> None:
    import numpy as np

    report, solution = result.report, result.solution
    exp = report["experiment"]
    print(
        f"LineSearch, sampler={args.sampler}, N={args.memory_size}, m={args.batch_size}, "
        f"alpha={args.step_size}, gamma={args.discount}, {args.seeds} seeds, T={args.steps}"
    )
    if solution is None:
        print(f"  theory      {report['theory']['error']}")
    else:
        print(f"  theory      M = {report['theory']['final_metric']:.6g}")
        if report["theory"]["overshoots"]:  # (the ODE still converges where the game diverges)
            print(
                "  (the step size is outside the ODE's small-step regime: one update overshoots its target, "
                "so the theory does not describe this game)"
            )
    print(
        f"  experiment  M = {exp['final_metric']:.6g} (of the mean curve); "
        f"per-seed mean {exp['final_metric_per_seed_mean']:.6g}"
        + (f" ± {exp['final_metric_stderr']:.2g}" if exp["final_metric_stderr"] is not None else " (one seed: no ±)")
    )
    if solution is not None:
        gap = np.abs(result.mean_curve - np.stack([solution.dtheta1, solution.dtheta2], -1)[1:]).max()
        print(f"  max |Δθ_experiment − Δθ_theory| over t = {gap:.3g}")
    if args.sampler == "adaptive":
        print(f"  memory size: start {args.memory_size}, mean at T {exp['memory_size_mean'][-1]:.1f}")
    if exp["diverged_seeds"]:
        print(f"  {exp['diverged_seeds']} seed(s) diverged ({_DIVERGED})")


_DIVERGED = "weights non-finite, or error over 1e6 times its start"  # linesearch.DIVERGED_GROWTH's rule


def _print_json(report: dict, seeds: int) -> None:
    """``report`` as strict JSON: NaN and ±inf become null, each with its <key>_null_reason."""
    import json

    from jaxreplay.engine import results

    diverged = report["experiment"]["diverged_seeds"]
    why = f"{diverged} of {seeds} seed(s) diverged ({_DIVERGED})" if diverged else None
    report = dict(report, experiment=results.strict_json(report["experiment"], reason=why))
    print(json.dumps(results.strict_json(report), allow_nan=False))


def _solve_theory(**kwargs):
    """``theory.solve(**kwargs)``, or None when the ODE solver gives up (its step budget runs out where the
    dynamics diverge: ``converged`` false): the experiment is still reported."""
    from jaxreplay.paper import theory

    solution = theory.solve(**kwargs)
    return solution if bool(solution.converged) else None
