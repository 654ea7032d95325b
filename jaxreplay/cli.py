"""The ``jaxreplay`` command line.

Subcommands:
    info        versions of jaxreplay and its stack, and the devices JAX sees.
    linesearch  one LineSearch configuration: the ODE theory and the seed-averaged
                experiment side by side.
    dqn         one DQN setting on a gymnax game, vmapped over seeds.
    sweep       run a sweep declared in a TOML file: ``sweep CONFIG.toml --out DIR``.
    reproduce   reproduce the paper: ``reproduce linesearch --out DIR [--full]``.
    study       the DQN replay study: ``study dqn --env ENV --out DIR [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import math
import platform
import sys
from typing import Any, NamedTuple

import jaxreplay

_STACK = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "diffrax", "equinox", "numpy", "scipy", "matplotlib")


def _versions() -> dict[str, str]:
    versions = {"jaxreplay": jaxreplay.__version__, "python": platform.python_version()}
    for name in _STACK:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _info(args: argparse.Namespace) -> int:
    import jax

    for name, version in _versions().items():
        print(f"{name:<11} {version}")
    print(f"{'backend':<11} {jax.default_backend()}")
    for device in jax.devices():
        print(f"{'device':<11} {device.id}: {device.device_kind} ({device.platform})")
    return 0


_NO_THEORY = "solver did not converge (its step budget ran out: the ODE diverges)"

# Each field `jaxreplay linesearch` sets, as the library names it, and the option that sets it; a sweep names a
# fixed value fixed.<field>.
_LINESEARCH_OPTIONS = {
    "memory_size": "--memory-size",
    "batch_size": "--batch-size",
    "step_size": "--step-size",
    "discount": "--discount",
    "priority_exponent": "--priority-exponent",
    "adaptive_interval": "--adaptive-interval",
    "adaptive_num_old": "--adaptive-num-old",
}
_LINESEARCH_OPTIONS.update({f"fixed.{field}": option for field, option in _LINESEARCH_OPTIONS.items()})


def _linesearch(args: argparse.Namespace) -> int:
    sweep = _linesearch_sweep(args)
    ds = _run(sweep, None, advice=_LINESEARCH_ADVICE, progress=False).dataset
    result = _linesearch_result(args, ds)
    if args.json:
        _print_linesearch_json(result.report, args.seeds)
    else:
        _print_linesearch(args, result)
    return 0


def _linesearch_sweep(args: argparse.Namespace):
    """`jaxreplay linesearch`'s options as one configuration × seeds of the sweep engine (run i's key:
    ``fold_in(key(seed), i)``), checked before anything runs; a bad value is named as the option typed."""
    import numpy as np

    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.experiments import linesearch as ls

    # `is None`, not falsiness: an explicit 0 is refused below, never replaced by the default.
    num_old = args.adaptive_num_old if args.adaptive_num_old is not None else max(args.memory_size // 2, 1)
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
        _positive(name.replace("_", "-"), getattr(args, name))
    if args.adaptive_num_old is not None:
        _positive("adaptive-num-old", args.adaptive_num_old)
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
    with _named_as_options(_LINESEARCH_OPTIONS):
        ls.check_hyperparameters(hparams, setup)
        return sweep_lib.Sweep(
            "linesearch",
            seeds=args.seeds,
            seed=args.seed,
            setup=setup,  # type: ignore[arg-type]  # Sweep.setup takes a Setup too; annotated Mapping only (engine)
            fixed={k: np.asarray(v).item() for k, v in hparams._asdict().items()},
        )


class _LineSearchResult(NamedTuple):
    """What `jaxreplay linesearch` found: its report (the --json object), the seeds' mean Δθ curve
    (``float64[T, 2]``) and the ODE's solution (None where its solver gave up)."""

    report: dict
    mean_curve: Any
    solution: Any


def _linesearch_result(args: argparse.Namespace, ds) -> _LineSearchResult:
    """The experiment's runs ``ds`` (one configuration × seeds) beside the ODE theory of the same setting."""
    import numpy as np

    from jaxreplay.engine import results
    from jaxreplay.paper import theory

    adaptive = args.sampler == "adaptive"
    dtheta = ds.dtheta.values.astype(np.float64)  # [seeds, T, 2]
    mean_curve = dtheta.mean(axis=0)
    per_seed = ds.final_metric.values.astype(np.float64)
    memory_mean = ds.capacity.values.astype(np.float64).mean(axis=0)

    times = np.arange(args.steps + 1, dtype=np.float64)
    schedule = theory.MemorySizeSchedule(np.arange(args.steps + 1.0), np.concatenate([[args.memory_size], memory_mean]))
    solution = _solve_theory(
        memory_size=schedule if adaptive else args.memory_size,
        batch_size=args.batch_size,
        step_size=args.step_size,
        discount=args.discount,
        priority_exponent=args.priority_exponent if args.sampler == "prioritized" else None,
        times=times,
    )
    config = ("memory_size", "batch_size", "step_size", "discount", "sampler", "priority_exponent", "seeds", "steps")
    report = {
        "config": {name: getattr(args, name) for name in config},
        "theory": {
            "converged": True,
            "final_metric": float(solution.metric),
            "t": times.tolist(),
            "dtheta1": np.asarray(solution.dtheta1).tolist(),
            "dtheta2": np.asarray(solution.dtheta2).tolist(),
            "direction_changed": bool(solution.direction_changed),
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
            },
            reason=_NO_THEORY,
        ),
        "experiment": {
            "final_metric": float(np.abs(mean_curve[-1]).sum()),
            "final_metric_per_seed_mean": float(per_seed.mean()),
            "final_metric_stderr": float(per_seed.std(ddof=1) / np.sqrt(args.seeds)) if args.seeds > 1 else 0.0,
            "t": times[1:].tolist(),
            "dtheta1_mean": mean_curve[:, 0].tolist(),
            "dtheta2_mean": mean_curve[:, 1].tolist(),
            "diverged_seeds": int(ds.diverged.values.sum()),
        },
    }
    if adaptive:
        report["experiment"]["memory_size_mean"] = memory_mean.tolist()
    return _LineSearchResult(report, mean_curve, solution)


def _print_linesearch(args: argparse.Namespace, result: _LineSearchResult) -> None:
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
    print(
        f"  experiment  M = {exp['final_metric']:.6g} (of the mean curve); "
        f"per-seed mean {exp['final_metric_per_seed_mean']:.6g} ± {exp['final_metric_stderr']:.2g}"
    )
    if solution is not None:
        gap = np.abs(result.mean_curve - np.stack([solution.dtheta1, solution.dtheta2], -1)[1:]).max()
        print(f"  max |Δθ_experiment − Δθ_theory| over t = {gap:.3g}")
    if args.sampler == "adaptive":
        print(f"  memory size: start {args.memory_size}, mean at T {exp['memory_size_mean'][-1]:.1f}")
    if exp["diverged_seeds"]:
        print(f"  {exp['diverged_seeds']} seed(s) diverged (non-finite weights)")


def _print_linesearch_json(report: dict, seeds: int) -> None:
    """``report`` as strict JSON: NaN and ±inf become null, each with its <key>_null_reason."""
    import json

    from jaxreplay.engine import results

    diverged = report["experiment"]["diverged_seeds"]
    why = f"{diverged} of {seeds} seed(s) diverged (non-finite weights)" if diverged else None
    report = dict(report, experiment=results.strict_json(report["experiment"], reason=why))
    print(json.dumps(results.strict_json(report), allow_nan=False))


def _reproduce_readme(args: argparse.Namespace) -> int:
    from jaxreplay.paper.reproduce import paper

    path = paper.readme_from(args.dir, args.readme)
    print(f"wrote the claims table of {args.dir}/claims.json into {path}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    if args.seeds is not None:
        _positive("seeds", args.seeds)
    if args.target == "all":
        from jaxreplay.paper.reproduce import paper

        summary = paper.reproduce(
            args.out, quick=args.quick, seeds=args.seeds, progress=not args.quiet, envs=args.env, readme=args.readme
        )
        print(f"{len(summary['claims'])} claims: {paper.tally(summary['claims'])}")
        print(
            f"wrote {summary['report']} and {summary['claims_json']} in {summary['runtime_s']:.0f} s"
            + (f"; updated {args.readme}" if args.readme else "")
        )
        return 0
    if args.target == "dqn":
        from jaxreplay.paper.reproduce import dqn as reproduce_dqn

        summary = reproduce_dqn.reproduce(
            args.out,
            args.env,
            seeds=args.seeds,
            quick=args.quick,
            progress=not args.quiet,
            tuned=args.tuned,
            steps=args.steps,
        )
        for N0, p in summary["percent"].items():
            print(
                f"aER from {N0}: beats the averaged static memory in {p['percent']:.0f}% of seeds "
                f"(95% CI [{p['low']:.0f}%, {p['high']:.0f}%], "
                f"paper {reproduce_dqn.PAPER_PERCENT[args.env][N0]:.0f}%)"
            )
        print(
            f"wrote {len(summary['figures'])} figures, {summary['csv']} and {summary['report']} "
            f"in {summary['runtime_s']:.0f} s"
        )
        return 0
    from jaxreplay.paper.reproduce import linesearch as reproduce_linesearch

    summary = reproduce_linesearch.reproduce(args.out, full=args.full, seeds=args.seeds, progress=not args.quiet)
    print(
        f"wrote {len(summary['figures'])} figures, {summary['csv']} and {summary['report']} "
        f"in {summary['runtime_s']:.0f} s"
    )
    return 0


# Each field `jaxreplay dqn` sets, as the library names it, and the option that sets it.
_DQN_OPTIONS = {"env_id": "--env"}


def _dqn(args: argparse.Namespace) -> int:
    import json

    from jaxreplay.engine import results
    from jaxreplay.engine import sweep as sweep_lib

    setup, hparams = _dqn_setting(args)
    sweep = sweep_lib.Sweep(
        "dqn",
        seeds=args.seeds,
        seed=args.seed,
        setup=setup,  # type: ignore[arg-type]  # Sweep.setup takes a Setup too; annotated Mapping only (engine)
        fixed=hparams._asdict(),
    )
    ds = _run(sweep, None, advice=_DQN_ADVICE, progress=not args.quiet and not args.json).dataset
    result = _dqn_result(args, setup, ds)
    if args.json:
        print(json.dumps(results.strict_json(result.report), allow_nan=False))
    else:
        _print_dqn(args, result)
    return 0


def _dqn_setting(args: argparse.Namespace):
    """`jaxreplay dqn`'s options as the experiment's ``(Setup, Hyperparameters)``: the paper's setting of a game it
    ran, else the defaults; checked before anything runs, a bad value named as the option typed."""
    import dataclasses

    from jaxreplay.experiments import dqn
    from jaxreplay.paper.reproduce import settings as paper_settings

    _positive("seeds", args.seeds)
    if args.env in paper_settings.PAPER_TOTAL_STEPS:
        setup, hparams = paper_settings.paper_setting(
            args.env, args.memory_size, args.adaptive, tuned=args.tuned, optimizer_reading=args.optimizer_reading
        )
    else:
        if args.tuned:
            raise ValueError("--tuned is only available for CartPole-v1.")
        with _named_as_options(_DQN_OPTIONS):
            setup = dqn.Setup(env_id=args.env, max_capacity=max(args.memory_size, 1), adaptive=args.adaptive)
        hparams = dqn.Hyperparameters(memory_size=args.memory_size, adaptive_num_old=max(args.memory_size // 2, 1))
    setup = dataclasses.replace(setup, sampler=args.sampler)
    hparams = hparams._replace(
        adaptive_td_target=int(args.adaptive_td == "target"), adaptive_paired=int(args.adaptive_draws == "paired")
    )
    if args.steps is not None:
        # A run of T steps never stores more than T transitions: allocate no more.
        setup = dataclasses.replace(
            dqn.with_total_steps(setup, args.steps),
            max_capacity=max(min(setup.max_capacity, args.steps), hparams.memory_size),
        )
    _check_dqn_episodes(setup)
    return setup, hparams


class _DQNResult(NamedTuple):
    """What `jaxreplay dqn` found: its report (the --json object), each seed's final return (``float64[seeds]``,
    NaN where none was measured) and whether each seed diverged (``bool[seeds]``)."""

    report: dict
    final: Any
    diverged: Any


def _dqn_result(args: argparse.Namespace, setup, ds) -> _DQNResult:
    """The runs ``ds`` of one DQN setting × seeds: final returns, their IQM and interval, memory sizes."""
    import numpy as np

    from jaxreplay.engine import results

    final_kind = "eval_return" if "eval_return" in ds else "train_return"
    final = ds[final_kind].isel(segment=-1).values.astype(np.float64)
    diverged = ds.diverged.values.reshape(-1)
    ci = results.seed_interval(final, "iqm")
    report = {
        "env": args.env,
        "memory_size": args.memory_size,
        "adaptive": args.adaptive,
        "sampler": args.sampler,
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
    }
    report = {k: v for k, v in report.items() if not (k.endswith("_null_reason") and v is None)}
    if args.adaptive:
        report["adaptive"] = _adaptive_report(ds)
    return _DQNResult(report, final, diverged)


def _print_dqn(args: argparse.Namespace, result: _DQNResult) -> None:
    import numpy as np

    report, final = result.report, result.final
    print(
        f"DQN {args.env}, {'aER from' if args.adaptive else 'fixed memory'} {args.memory_size}, sampler "
        f"{args.sampler}, {args.seeds} seeds, {report['steps']} steps"
    )
    print(f"  final {report['final_return_kind']} per seed: " + ", ".join(f"{x:.1f}" for x in final))
    interval = (
        report["iqm_ci95_null_reason"]
        if report["iqm_ci95"] is None
        else f"95% bootstrap CI [{report['iqm_ci95'][0]:.1f}, {report['iqm_ci95'][1]:.1f}]"
    )
    print(f"  IQM {'n/a' if report['iqm'] is None else format(report['iqm'], '.1f')} ({interval})")
    print(f"  memory size: start {args.memory_size}, mean at the end {report['memory_size_mean'][-1]:.0f}")
    if args.adaptive:
        a = report["adaptive"]
        show = lambda x, spec: "n/a" if x is None else format(x, spec)  # noqa: E731
        print(
            f"  aER checks {sum(a['checks'])}: grow fraction {show(a['grow_fraction'], '.2f')} "
            f"({show(a['straddle_grow_fraction'], '.2f')} at checks straddling a target copy, "
            f"{show(a['other_grow_fraction'], '.2f')} at the others); estimate's standard error "
            f"{show(a['noise_mean'], '.3g')} vs mean |change| {show(a['change_mean'], '.3g')}"
        )
    if report["diverged"]:
        print(f"  {report['diverged']} seed(s) diverged (non-finite parameters)")
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
        "final_memory_size": seeds("final_capacity"),
        "straddle_checks": seeds("adaptive_straddle_checks"),
        "straddle_grows": seeds("adaptive_straddle_grows"),
        **shares,
        **reasons,
    }


def _sweep(args: argparse.Namespace) -> int:
    import tomllib

    from jaxreplay import _files
    from jaxreplay.engine import sweep as sweep_lib

    try:
        config = tomllib.loads(_files.read_text(args.config, "CONFIG"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"CONFIG {args.config} is not valid TOML: {e}") from None
    options = sweep_lib.run_options(config)
    if args.chunk_size is not None:
        _positive("chunk-size", args.chunk_size)
        options["chunk_size"] = args.chunk_size
    if args.memory_fraction is not None:
        if not 0.0 < args.memory_fraction <= 1.0:  # (NaN fails too)
            raise ValueError(f"--memory-fraction must be in (0, 1], got {args.memory_fraction}.")
        options["memory_fraction"] = args.memory_fraction
    if args.memory_budget_mib is not None:
        if not 0.0 < args.memory_budget_mib < float("inf"):
            raise ValueError(f"--memory-budget-mib must be a positive number of MiB, got {args.memory_budget_mib}.")
        options["memory_budget"] = max(int(args.memory_budget_mib * 2**20), 1)
    sweep = sweep_lib.Sweep.from_dict(config)
    result = _run(sweep, args.out, progress=not args.quiet, **options)
    print(result.stats.describe())
    print(f"results: {args.out}/results.nc (open with jaxreplay.engine.sweep.load)")
    return 0


def _solve_theory(**kwargs):
    """``theory.solve(**kwargs)``, or None when the ODE solver gives up (its step budget runs out where the
    dynamics diverge): the experiment is still reported. JAX's log of the failed callback is silenced."""
    import logging

    from jaxreplay.paper import theory

    logger = logging.getLogger("jax._src.callback")
    disabled, logger.disabled = logger.disabled, True
    try:
        return theory.solve(**kwargs)
    except (RuntimeError, ValueError) as error:  # equinox's "maximum number of solver steps was reached"
        # (a RuntimeError, or a ValueError once the solver's program is cached: JAX re-raises differently)
        if "maximum number of solver steps" not in str(error):
            raise
        return None
    finally:
        logger.disabled = disabled


# What a command advises where the engine refuses its sweep for memory (a ResourceError), by the fields the engine
# advises lowering; {cause} is what the engine found dominates the need.
_LINESEARCH_ADVICE = {
    ("setup.max_capacity",): "Lower --memory-size ({cause}), or use a machine with more memory.",
    ("setup.max_batch_size", "setup.batch_size"): "{cause}: lower the minibatch size (--batch-size), or use a "
    "machine with more memory.",
    ("seeds", "setup.steps"): "Run fewer --seeds, or fewer --steps.",
}
_DQN_ADVICE = {
    ("setup.max_capacity",): "Lower --memory-size or --steps ({cause}), or use a machine with more memory.",
    ("setup.max_batch_size", "setup.batch_size"): "{cause}: lower the minibatch size (the Setup's batch_size: run "
    "it as a sweep), or use a machine with more memory.",
    ("seeds", "setup.steps"): "Run fewer --seeds, or fewer --steps.",
}


def _run(sweep, out, advice=None, **options):
    """``sweep.run``; its refusals for device memory, host memory or disk (MemoryError, raised with the
    numbers before anything runs) and a failed write (OSError, e.g. a full disk: it names the file) become a
    ValueError: one line, exit status 2. Every warning raised while it runs (the engine's, a damaged chunk
    set aside, ..., and any other, e.g. NumPy's) prints once, as one line, after the run ends or fails.
    ``advice`` (a command's table above) replaces the engine's advice for a refusal it has an entry for."""
    import warnings

    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.engine.plan import ResourceError

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", sweep_lib.SweepWarning)
            try:
                return sweep_lib.run(sweep, out, **options)
            except MemoryError as e:
                ours = (advice or {}).get(e.lower) if isinstance(e, ResourceError) else None
                raise ValueError(f"{e.problem} {ours.format(cause=e.cause)}" if ours else str(e)) from None
            except OSError as e:
                raise ValueError(f"cannot write {e.filename or out}: {e.strerror or e}.") from None
    finally:
        # Printed outside the recording context: a warning emitted inside it would be appended to the
        # list being printed, and the loop would never end.
        # (dict.fromkeys: each distinct line once, in order; a cast warned by every trace is one line)
        for line in dict.fromkeys(_warning_line(w, sweep_lib.SweepWarning) for w in caught):
            print(line, file=sys.stderr)


def _warning_line(warning, engine_category: type[Warning]) -> str:
    """One line for a recorded warning: the engine's own as its message, any other with its category and
    where it was raised (``jaxreplay: warning: RuntimeWarning: overflow encountered in cast (lax.py:5304)``)."""
    import os

    if issubclass(warning.category, engine_category):
        return f"jaxreplay: warning: {warning.message}"
    message = " ".join(str(warning.message).split())  # one line, whatever the warning's text holds
    where = f"{os.path.basename(warning.filename)}:{warning.lineno}"
    return f"jaxreplay: warning: {warning.category.__name__}: {message} ({where})"


@contextlib.contextmanager
def _named_as_options(options: dict[str, str]):
    """A :class:`~jaxreplay._validation.FieldError` about a field of ``options`` (a command's table above) raised
    inside, said of the option the user typed instead: ``--step-size must be >= 0.0, got -1.0.``,
    ``--step-size 1e-50 does not fit a float32 ...``, ``--env Pendulum-v1: DQN needs ...``."""
    from jaxreplay._validation import FieldError

    try:
        yield
    except FieldError as error:
        if error.field not in options:
            raise
        option = options[error.field]
        if error.shows_value:  # as typed: the value after the option, no `=`, no quotes
            option += f" {error.value}:" if error.about else f" {error.value}"
        raise ValueError(f"{option} {error.problem}") from None


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"--{name} must be >= 1, got {value}.")
    if value > 2**31 - 1:  # counts, sizes and indices are int32 on the device
        raise ValueError(f"--{name} must be <= {2**31 - 1} (an int32), got {value}.")


def _check_dqn_episodes(setup) -> None:
    """Refuse, before compiling, a run whose return cannot be reported (ValueError naming --env and why).

    LineSearch never terminates: its only episode end is at ``horizon``, so a
    run whose last segment contains none would report a NaN return. (A game
    DQN cannot play, with continuous actions or a single one, is refused by
    ``dqn.Setup`` itself.)
    """
    from jaxreplay.experiments import dqn

    if setup.env_id != "LineSearch":
        return
    _, params = dqn.environment(setup)  # (its env_params applied as the experiment does)
    horizon, total = int(params.horizon), setup.total_steps
    last_start = total - setup.steps_per_segment
    if total // horizon * horizon <= last_start:
        raise ValueError(
            f"--env LineSearch: its episode never terminates and lasts horizon = {horizon} steps, so no "
            f"episode ends in the last segment (steps {last_start + 1}-{total}) and the return would be NaN; "
            f"use --steps {max(horizon, total // horizon * horizon)} (a multiple of {horizon}), or "
            "`jaxreplay linesearch` for the paper's LineSearch experiment."
        )


# The --json convention (jaxreplay.engine.results.strict_json), in the help of every --json.
_NULLS = "a value that cannot be given, such as NaN or an interval of too few seeds, is null with a <key>_null_reason"


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxreplay`` argument parser (subcommands info, linesearch, dqn, sweep, reproduce, study)."""
    parser = argparse.ArgumentParser(prog="jaxreplay", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"jaxreplay {jaxreplay.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser("info", help="print versions and the devices JAX sees")
    info.set_defaults(handler=_info)
    for add_parser in (_add_linesearch_parser, _add_dqn_parser, _add_sweep_parser, _add_reproduce_parser):
        add_parser(commands)
    _add_study_parser(commands)
    return parser


def _add_linesearch_parser(commands) -> None:
    ls = commands.add_parser("linesearch", help="one LineSearch configuration: theory and experiment side by side")
    ls.add_argument("--memory-size", type=int, default=100, help="N, replay memory capacity (aER: initial N0)")
    ls.add_argument("--batch-size", type=int, default=5, help="m, sequential updates per step")
    ls.add_argument("--step-size", type=float, default=0.01, help="alpha")
    ls.add_argument("--discount", type=float, default=0.0, help="gamma in [0, 1)")
    ls.add_argument("--sampler", choices=("uniform", "prioritized", "adaptive"), default="uniform")
    ls.add_argument("--priority-exponent", type=float, default=2.0, help="beta of pER, P(i) ~ |delta_i|^beta")
    ls.add_argument("--adaptive-interval", type=int, default=20, help="aER's k")
    ls.add_argument("--adaptive-num-old", type=int, default=None, help="aER's n_old (default N0 / 2)")
    ls.add_argument("--seeds", type=int, default=16)
    ls.add_argument("--seed", type=int, default=0, help="base seed; run i uses fold_in(key(seed), i)")
    ls.add_argument("--steps", type=int, default=1000, help="T")
    ls.add_argument("--json", action="store_true", help="print one JSON object (strict JSON: " + _NULLS + ")")
    ls.set_defaults(handler=_linesearch)


def _add_dqn_parser(commands) -> None:
    dq = commands.add_parser("dqn", help="one DQN setting on a gymnax game, vmapped over seeds")
    dq.add_argument("--env", default="CartPole-v1", help="gymnax id (CartPole-v1, MountainCar-v0, Acrobot-v1, ...)")
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
    dq.add_argument("--json", action="store_true", help="print one JSON object (strict JSON: " + _NULLS + ")")
    dq.add_argument("--quiet", action="store_true", help="no progress bar")
    dq.set_defaults(handler=_dqn)


def _add_sweep_parser(commands) -> None:
    sw = commands.add_parser("sweep", help="run a sweep declared in a TOML file (resumable)")
    sw.add_argument("config", help="TOML file: experiment, seeds, [setup], [fixed], [grid] or [[points]], [run]")
    sw.add_argument("--out", required=True, help="output folder (rerun with the same config to resume)")
    sw.add_argument("--chunk-size", type=int, default=None, help="most runs per compiled call")
    sw.add_argument("--memory-fraction", type=float, default=None, help="fraction of free device memory to use")
    sw.add_argument("--memory-budget-mib", type=float, default=None, help="device memory budget in MiB")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.set_defaults(handler=_sweep)


def _add_reproduce_parser(commands) -> None:
    from jaxreplay.paper.reproduce import dqn as reproduce_dqn  # the games of the paper (no JAX import)

    reproduce = commands.add_parser("reproduce", help="reproduce the paper's figures and claims")
    targets = reproduce.add_subparsers(dest="target", metavar="TARGET", required=True)
    rls = targets.add_parser("linesearch", help="every LineSearch figure, metric_grid.csv and report.md")
    rls.add_argument("--out", required=True, help="output folder")
    rls.add_argument("--full", action="store_true", help="the paper's resolution (minutes, not seconds)")
    rls.add_argument("--seeds", type=int, default=None, help="ER/aER seeds per setting (pER gets a quarter)")
    rls.add_argument("--quiet", action="store_true", help="no progress bar")
    rls.set_defaults(handler=_reproduce)
    rdq = targets.add_parser("dqn", help="the paper's fixed-vs-adaptive DQN comparison for one game")
    rdq.add_argument("--env", required=True, choices=reproduce_dqn.ENVS)
    rdq.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    rdq.add_argument("--seeds", type=int, default=None, help="seeds per setting (default 4 quick, 100 otherwise)")
    rdq.add_argument("--quick", action="store_true", help="shortened runs for a CPU")
    rdq.add_argument("--tuned", action="store_true", help="CartPole: a configuration that learns (not the paper's)")
    rdq.add_argument("--steps", type=int, default=None, help="cut every run to this many steps (smoke runs)")
    rdq.add_argument("--quiet", action="store_true", help="no progress bar")
    rdq.set_defaults(handler=_reproduce)
    ral = targets.add_parser("all", help="LineSearch and the three DQN games: every figure and one claims report")
    ral.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    ral.add_argument("--quick", action="store_true", help="CPU scale: about 6-7 minutes on 2 cores")
    ral.add_argument("--seeds", type=int, default=None, help="DQN seeds per setting (default 4 quick, 100 otherwise)")
    ral.add_argument(
        "--env", action="append", choices=reproduce_dqn.ENVS, help="only this DQN game (repeatable; default all three)"
    )
    ral.add_argument(
        "--readme",
        default=None,
        metavar="docs/claims.md",
        help="also write the claims table into this file's <!-- claims:begin/end --> block",
    )
    ral.add_argument("--quiet", action="store_true", help="no progress bars")
    ral.set_defaults(handler=_reproduce)
    rrm = targets.add_parser(
        "readme",
        help="write a finished `reproduce all` run's claims table into a README "
        "(the block of the backend it ran on: claims, claims-gpu, ...)",
    )
    rrm.add_argument("dir", help="the --out folder of `reproduce all`")
    rrm.add_argument("--readme", required=True, metavar="docs/claims.md")
    rrm.set_defaults(handler=_reproduce_readme)


def _study(args: argparse.Namespace) -> int:
    from jaxreplay.paper.reproduce import study as study_lib

    if args.kind == "readme":
        path = study_lib.update_readme(args.readme, args.dirs, note=args.note)
        print(f"wrote the study block of {path} from {', '.join(args.dirs)}")
        return 0
    if args.kind == "refresh":
        for d in args.dirs:
            result = study_lib.refresh(d)
            print(f"{d}: {result['verdict']['summary']}")
        return 0

    if args.seeds is not None:
        _positive("seeds", args.seeds)
    envs = study_lib.ENVS if args.env == "all" else (args.env,)
    import pathlib

    from jaxreplay import _files

    outs = {env: pathlib.Path(args.out) / env if args.env == "all" else pathlib.Path(args.out) for env in envs}
    for out in outs.values():  # each game's folder, before the first game runs
        _files.check_output_folder(out)
    for env, out in outs.items():
        result = study_lib.study(
            out,
            env,
            quick=args.quick,
            seeds=args.seeds,
            steps=args.steps,
            progress=not args.quiet,
            optimizer_reading=args.optimizer_reading,
            chunk_size=args.chunk_size,
        )
        print(f"{env}: wrote {out / 'report.md'} and {out / 'study.json'} in {result['runtime_s']:.0f} s")
        print("  " + result["verdict"]["summary"])
    return 0


def _add_study_parser(commands) -> None:
    from jaxreplay.paper.reproduce import study as study_lib  # no JAX import

    st = commands.add_parser("study", help="the DQN replay study: response curves, aER from three starts, controls")
    kinds = st.add_subparsers(dest="kind", metavar="KIND", required=True)
    sd = kinds.add_parser("dqn", help="one game (or all) of the DQN replay study")
    sd.add_argument("--env", required=True, choices=study_lib.ENVS + ("all",))
    sd.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    sd.add_argument("--quick", action="store_true", help="CPU quick mode: shortened runs, fewer sizes and variants")
    sd.add_argument("--seeds", type=int, default=None, help="seeds per setting (default 3 quick, 100 otherwise)")
    sd.add_argument("--steps", type=int, default=None, help="cut every run to this many steps (smoke runs)")
    sd.add_argument(
        "--optimizer-reading",
        choices=("adam", "sgd"),
        default="adam",
        help="the main reading of the paper's step size (CartPole also runs the other)",
    )
    sd.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="runs per compiled call in every stage (default 4 x seeds; larger is faster on a GPU)",
    )
    sd.add_argument("--quiet", action="store_true", help="no progress bar")
    sd.set_defaults(handler=_study)
    sr = kinds.add_parser("readme", help="write the summary of finished studies into a README's study block")
    sr.add_argument("dirs", nargs="+", help="study output folders (or folders holding one per game)")
    sr.add_argument("--readme", required=True, metavar="docs/study.md")
    sr.add_argument("--note", default="", help="a line written above the table")
    sr.set_defaults(handler=_study)
    sf = kinds.add_parser("refresh", help="recompute a finished study's labels and verdict (no runs) by today's rules")
    sf.add_argument("dirs", nargs="+", help="study output folders (each holding study.json)")
    sf.set_defaults(handler=_study)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status (2: bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        if hasattr(args, "out"):  # every command that writes a folder: refused before anything runs
            from jaxreplay import _files

            _files.check_output_folder(args.out)
        return args.handler(args)
    # Bad input, or a file that cannot be read or written (a full disk: WriteError names the file, kept whole).
    except (ValueError, OSError) as error:
        print(f"jaxreplay {args.command}: error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if "pip install 'jaxreplay[" not in str(error):  # not an optional dependency of ours
            raise
        print(f"jaxreplay {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
