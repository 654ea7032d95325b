"""A DQN replay study that can answer the paper's question: does aER find a good memory size?

Entry point: :func:`study` (``jaxreplay study dqn --env ENV --out DIR [--quick]
[--seeds S]``). Per game, every run goes through the sweep engine
(:mod:`jaxreplay.engine.sweep`, persisted under ``DIR/sweeps/``, so a rerun resumes)
and every run of a game shares one compiled program: the study's setup has
aER compiled in, and a fixed memory is the rule ``adaptive_rule = 0`` of the
same program (:data:`jaxreplay.experiments.dqn.ADAPTIVE_RULES`). Runs with the
same seed index share their random numbers across settings (the engine's
common random numbers), so comparisons are *paired* by seed.

Stages (each a sweep; later ones depend on earlier results):

1. **Response curve**: static memories on a log grid from about 100 to the run
   length (8 sizes; 5 with ``quick``), the memory-size response of the score.
2. **aER** from three starts: the smallest size, the static optimum and the
   largest (the grid's middle replaces an end that is the optimum), plus the
   **random ±k walk** control from the same starts and the **sensitivity**
   variants (one change at a time, from the smallest start): target-network
   TD errors, independent draws, literal counts, k = 100 and 500, n_old
   halved and doubled, the ε variant as a relative tolerance of 5%.
3. **Fixed at aER's time-averaged size**, per start (the control for "aER
   helps because it moves, not because of the size it sits at").
4. CartPole only: the response curve and aER under the **other optimizer
   reading** (Algorithm 1's per-transition SGD step vs Adam on the mean loss).

Scores. ``auc``: the mean over segments of the mean training-episode return
(the area under the learning curve, what the paper's figures compare);
``final``: the greedy evaluation return at the end. Per setting: the IQM over
seeds with a 95% percentile-bootstrap interval. Paired comparisons: the mean
over seeds of the per-seed difference, with a bootstrap interval. Below 6
finite seeds there is no interval (a percentile interval of a mean or IQM
cannot reach 95% coverage there:
:func:`~jaxreplay.engine.results.min_seeds_for_interval`): its bounds are
``null`` with a ``*_null_reason`` ("too few seeds (n = 2) for an interval")
and the verdict says "cannot tell (too few seeds)" instead of yes or no. The paper's
statistic (share of aER seeds above the mean of every static run) is reported
beside them with the static sizes that enter the average.

Outputs in ``DIR``: ``report.md``, ``study.json`` (``response``, ``adaptive``,
``controls``, ``sensitivity``, ``paper_share``, ``verdict``), ``runs.csv`` (one
row per run), ``curves.csv`` (seed means per setting and segment), and the
figures ``response.png`` (the response curve with aER's N(t) drawn under it on
the same memory-size axis), ``learning_curves.png`` and ``memory_size.png``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
import time
from typing import TYPE_CHECKING

import numpy as np

from jaxreplay import _validation
from jaxreplay._files import atomic_write_text, read_json, replacing

if TYPE_CHECKING:  # the experiment is imported where it runs (the study's module imports only NumPy)
    from jaxreplay.experiments.dqn import Setup

__all__ = ["ENVS", "StudyPlan", "make_plan", "study"]

ENVS = ("CartPole-v1", "MountainCar-v0", "Acrobot-v1")
DEFAULT_SEEDS = {"quick": 3, "full": 100}
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


@dataclasses.dataclass(frozen=True)
class StudyPlan:
    """What a study of one game runs (from :func:`make_plan`).

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


def _nice(x: float) -> int:
    """``x`` rounded to two significant digits."""
    digits = max(int(math.floor(math.log10(x))) - 1, 0)
    return int(round(x / 10**digits) * 10**digits)


def make_plan(
    env_id: str,
    *,
    quick: bool = False,
    seeds: int | None = None,
    steps: int | None = None,
    optimizer_reading: str = "adam",
) -> StudyPlan:
    """The study of ``env_id``: run length and settings from :func:`~jaxreplay.paper.reproduce.settings.paper_setting`.

    Args:
        env_id: one of :data:`ENVS`.
        quick: shorter runs (the paper's ``quick`` scaling), 5 sizes, 3 sensitivity variants.
        seeds: seeds per setting (default 3 quick, 100 otherwise).
        steps: cut every run to this many steps (tests); the size grid follows.
        optimizer_reading: the main reading (``"adam"`` or ``"sgd"``).
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
    return StudyPlan(
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


def _point(size, rule, *, num_old=None, interval=20, td_target=0, paired=1, equal_counts=1, relative=0.0) -> dict:
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


def _variant(name: str, start: int) -> dict:
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
    return _point(start, RULE_AER, **variants[name])


# ----------------------------------------------------------------------------
# Running


def _run_points_impl(
    plan: StudyPlan, out: pathlib.Path, label: str, points: list[dict], setup=None, progress=True, chunk_size=None
):
    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.paper.reproduce.dqn import _sweep_dir

    sweep = sweep_lib.Sweep(
        "dqn",
        seeds=plan.seeds,
        seed=0,
        fixed=plan.common,
        points=points,
        setup=setup or plan.setup,  # type: ignore[arg-type]  # Sweep.setup takes a Setup too; annotated Mapping only
    )
    return sweep_lib.run(sweep, _sweep_dir(out, label, sweep), progress=progress, chunk_size=chunk_size).dataset


class _Runs:
    """The per-run numbers of one sweep dataset (arrays ``[config, seed]``)."""

    def __init__(self, ds):
        from jaxreplay.paper.reproduce.dqn import run_scores

        self.ds = ds
        self.auc = run_scores(ds)
        final = ds.eval_return.values[..., -1] if "eval_return" in ds else ds.train_return.values[..., -1]
        self.final = np.where(ds.diverged.values, np.nan, final.astype(np.float64))
        self.mean_size = ds.capacity_mean.values.astype(np.float64).mean(-1)
        self.final_size = ds.final_capacity.values.astype(np.float64)


def _ci(values: np.ndarray, statistic: str = "iqm", seed: int = 0) -> dict:
    """``statistic`` of per-seed ``values`` (shape ``[seeds]``) with a 95% bootstrap interval:
    ``{"estimate", "low", "high"}``, a ``None`` (no finite value; too few seeds for an interval)
    with its ``*_null_reason`` (:func:`~jaxreplay.engine.results.seed_interval`)."""
    from jaxreplay.engine import results

    return results.seed_interval(values, statistic, resamples=2000, seed=seed)


def _paired(a: np.ndarray, b: np.ndarray) -> dict:
    """Mean over seeds of ``a - b`` (same seed index: common random numbers) with a bootstrap CI.

    ``significant``: whether the interval excludes 0; ``None`` (with ``significant_null_reason``)
    where there is no interval, e.g. too few seeds."""
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    out = _ci(diff[np.isfinite(diff)], "mean")
    if out["low"] is None:
        out.update(significant=None, significant_null_reason=out["low_null_reason"])
    else:
        out["significant"] = out["low"] > 0 or out["high"] < 0
    return out


def study(
    out_dir,
    env_id: str,
    *,
    quick: bool = False,
    seeds: int | None = None,
    steps: int | None = None,
    progress: bool = True,
    optimizer_reading: str = "adam",
    chunk_size: int | None = None,
) -> dict:
    """Run the study of ``env_id`` into ``out_dir`` (module docstring) and return ``study.json``'s content.

    Args:
        out_dir: output folder (created; a rerun resumes finished sweeps).
        env_id: one of :data:`ENVS`.
        quick: the CPU quick mode.
        seeds: seeds per setting (default 3 quick, 100 otherwise).
        steps: cut every run to this many environment steps (tests, smoke runs).
        progress: progress bars on stderr.
        optimizer_reading: the main optimizer reading (``"adam"`` or ``"sgd"``).
        chunk_size: runs per compiled call in every stage (default: four
            settings' worth, ``4 × seeds``; on an accelerator more runs per
            call go faster, e.g. ``8 × seeds``). One value for every stage compiles the
            program once and runs every setting in identically shaped programs
            (XLA's kernels may round differently at another batch size, and RL
            amplifies one ulp into another trajectory); the engine pads a
            stage with fewer or not a multiple of ``chunk_size`` runs.
    """
    import functools

    from jaxreplay.engine.results import jsonable
    from jaxreplay.experiments import dqn
    from jaxreplay.experiments.dqn import RULE_AER, RULE_FIXED, RULE_RANDOM

    t0 = time.perf_counter()
    plan = make_plan(env_id, quick=quick, seeds=seeds, steps=steps, optimizer_reading=optimizer_reading)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if chunk_size is None:
        chunk_size = 4 * plan.seeds
    _run_points = functools.partial(_run_points_impl, chunk_size=chunk_size)  # noqa: N806

    # 1. The response curve.
    static = _Runs(_run_points(plan, out, "response", [_point(n, RULE_FIXED) for n in plan.sizes], progress=progress))
    response = []
    for i, n in enumerate(plan.sizes):
        score, final = _ci(static.auc[i]), _ci(static.final[i])
        response.append(
            {"memory_size": int(n), **_renamed(score), **_renamed(final, "final_iqm", "final_ci_low", "final_ci_high")}
        )
    iqms = np.array([r["score_iqm"] if r["score_iqm"] is not None else -np.inf for r in response])
    best = int(np.argmax(iqms))
    worst = int(np.argmin(np.where(np.isfinite(iqms), iqms, np.inf)))
    starts = _starts(plan.sizes, best)

    # 2. aER and the random walk from each start.
    points = [_point(n, RULE_AER) for n in starts] + [_point(n, RULE_RANDOM) for n in starts]
    second = _Runs(_run_points(plan, out, "adaptive", points, progress=progress))
    aer_rows = list(range(len(starts)))
    walk_rows = list(range(len(starts), 2 * len(starts)))
    # The sensitivity variants from the smallest start, with default aER again (the same
    # seeds as the variants, for the paired comparisons) in the first row.
    sens_plan = dataclasses.replace(plan, seeds=plan.sensitivity_seeds)
    sens = _Runs(
        _run_points(
            sens_plan,
            out,
            "sensitivity",
            [_point(starts[0], RULE_AER)] + [_variant(name, starts[0]) for name in plan.sensitivity],
            progress=progress,
        )
    )
    sens_rows = list(range(1, len(plan.sensitivity) + 1))

    # 3. Fixed memories at aER's time-averaged sizes.
    mean_sizes = [int(min(max(round(np.nanmean(second.mean_size[r])), 1), plan.setup.max_capacity)) for r in aer_rows]
    third = _Runs(
        _run_points(plan, out, "fixed-at-mean", [_point(n, RULE_FIXED) for n in mean_sizes], progress=progress)
    )

    def diagnostics(runs, row):
        return dqn.adaptive_diagnostics(runs.ds.isel(config=row))

    def grow_fraction(runs, row):
        return diagnostics(runs, row)["grow_fraction"]

    adaptive = []
    static_all = static.auc.ravel()
    from jaxreplay.paper.reproduce.dqn import beats_static_average

    paper_share = []
    for j, (row, n0) in enumerate(zip(aer_rows, starts)):
        score = _ci(second.auc[row])
        start_index = plan.sizes.index(n0)
        entry = {
            "initial_size": int(n0),
            "final_size_mean": float(np.nanmean(second.final_size[row])),
            "mean_size": float(np.nanmean(second.mean_size[row])),
            "grow_fraction": grow_fraction(second, row),
            **_renamed(score),
            **_renamed(_ci(second.final[row]), "final_iqm", None, None),
            "moves_toward_optimum": _toward(n0, float(np.nanmean(second.mean_size[row])), plan.sizes[best]),
            "vs_best_static": _paired(second.auc[row], static.auc[best]),
            "vs_start_static": _paired(second.auc[row], static.auc[start_index]),
            "vs_random_walk": _paired(second.auc[row], second.auc[walk_rows[j]]),
            "vs_fixed_at_mean": _paired(second.auc[row], third.auc[j]),
            "diagnostics": diagnostics(second, row),
        }
        adaptive.append(entry)
        share = beats_static_average(second.auc[row], static_all)
        paper_share.append({"initial_size": int(n0), "static_sizes": [int(n) for n in plan.sizes], **share})

    controls = []
    for j, n0 in enumerate(starts):
        walk, fixed = _ci(second.auc[walk_rows[j]]), _ci(third.auc[j])
        controls.append(
            {
                "initial_size": int(n0),
                "random_walk_mean_size": float(np.nanmean(second.mean_size[walk_rows[j]])),
                "random_walk_final_size_mean": float(np.nanmean(second.final_size[walk_rows[j]])),
                "random_walk_grow_fraction": grow_fraction(second, walk_rows[j]),
                **_renamed(walk, "random_walk_score_iqm", "random_walk_ci_low", "random_walk_ci_high"),
                "fixed_at_mean_size": mean_sizes[j],
                **_renamed(fixed, "fixed_at_mean_score_iqm", "fixed_at_mean_ci_low", "fixed_at_mean_ci_high"),
            }
        )

    sensitivity = []
    for name, row in zip(("default (aER)",) + plan.sensitivity, [0] + sens_rows):
        score = _ci(sens.auc[row])
        sensitivity.append(
            {
                "variant": name,
                "initial_size": int(starts[0]),
                "seeds": sens_plan.seeds,
                "final_size_mean": float(np.nanmean(sens.final_size[row])),
                "grow_fraction": grow_fraction(sens, row),
                **_renamed(score),
                "vs_default": None if row == 0 else _paired(sens.auc[row], sens.auc[0]),
                "diagnostics": diagnostics(sens, row),
            }
        )

    # 4. The other optimizer reading (CartPole).
    other = None
    stages = {"response": static, "adaptive": second, "sensitivity": sens, "fixed-at-mean": third}
    if plan.other_reading is not None:
        alt_setup = dataclasses.replace(
            plan.setup, optimizer=plan.other_reading, batch_reduction="sum" if plan.other_reading == "sgd" else "mean"
        )
        alt = _Runs(
            _run_points(
                plan,
                out,
                f"reading-{plan.other_reading}",
                [_point(n, RULE_FIXED) for n in plan.sizes] + [_point(n, RULE_AER) for n in starts],
                setup=alt_setup,
                progress=progress,
            )
        )
        stages[f"reading-{plan.other_reading}"] = alt
        k = len(plan.sizes)
        other = {
            "reading": plan.other_reading,
            "response": [{"memory_size": int(n), **_renamed(_ci(alt.auc[i]))} for i, n in enumerate(plan.sizes)],
            "adaptive": [
                {
                    "initial_size": int(n0),
                    "final_size_mean": float(np.nanmean(alt.final_size[k + j])),
                    "grow_fraction": grow_fraction(alt, k + j),
                    **_renamed(_ci(alt.auc[k + j])),
                }
                for j, n0 in enumerate(starts)
            ],
        }

    matters = _paired(static.auc[best], static.auc[worst])
    verdict = _verdict(plan.sizes, response, best, worst, matters, adaptive, controls)
    result = {
        "env": env_id,
        "quick": quick,
        "seeds": plan.seeds,
        "total_steps": int(plan.setup.total_steps),
        "steps_override": steps,
        "optimizer_reading": plan.reading,
        "starts": [int(n) for n in starts],
        "response": response,
        "best_static": int(plan.sizes[best]),
        "worst_static": int(plan.sizes[worst]),
        "memory_size_effect": matters,
        "adaptive": adaptive,
        "controls": controls,
        "sensitivity": sensitivity,
        "paper_share": paper_share,
        "other_reading": other,
        "verdict": verdict,
        "settings": {"setup": dataclasses.asdict(plan.setup), "common": plan.common},
    }
    figures = _figures(out, plan, result, static, second, aer_rows, walk_rows, best)
    _write_csvs(out, plan, stages)
    result["runtime_s"] = time.perf_counter() - t0
    result["figures"] = sorted(figures)
    result = jsonable(result, strict=True)
    atomic_write_text(out / "study.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(out / "report.md", _report(result))
    return result


def relabel(result: dict) -> dict:
    """``result`` (a ``study.json``) with its derived labels recomputed by today's rules, from
    the numbers it stores: each aER start's ``moves_toward_optimum`` and the ``verdict``.

    Reruns nothing: the response curve, aER's sizes and the paired statistics are kept, except
    the intervals of a study with fewer seeds than an interval needs (written before that rule):
    they become ``null`` with the reason. Lets an earlier study be read under the current
    definitions (``jaxreplay study refresh``)."""
    from jaxreplay.engine.results import min_seeds_for_interval

    result = json.loads(json.dumps(result))  # a deep copy
    if result["seeds"] < min_seeds_for_interval():
        why = f"too few seeds (n = {result['seeds']}) for an interval"
        for key in ("response", "memory_size_effect", "adaptive", "controls", "sensitivity", "other_reading"):
            result[key] = _without_intervals(result[key], why)
    sizes = tuple(int(r["memory_size"]) for r in result["response"])
    best, worst = sizes.index(result["best_static"]), sizes.index(result["worst_static"])
    for entry in result["adaptive"]:
        entry["moves_toward_optimum"] = _toward(entry["initial_size"], entry["mean_size"], sizes[best])
    result["verdict"] = _verdict(
        sizes,
        result["response"],
        best,
        worst,
        result["memory_size_effect"],
        result["adaptive"],
        result["controls"],
    )
    return result


def _without_intervals(value, why: str):
    """``value`` (study.json data) with every stored interval, a ``*low`` / ``*high`` pair of one
    dict, and its ``significant``, made ``None`` with the reason ``why``; a missing one is kept as it is."""
    if isinstance(value, list):
        return [_without_intervals(v, why) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _without_intervals(v, why) for k, v in value.items()}
    for low in [k for k in value if k.endswith("low") and k[:-3] + "high" in value and value[k] is not None]:
        for key in (low, low[:-3] + "high") + (("significant",) if "significant" in value else ()):
            out[key], out[f"{key}_null_reason"] = None, why
    return out


def read_study(path, relabelled: bool = False) -> dict:
    """The ``study.json`` at ``path`` as stored (with ``relabelled``, as :func:`relabel` rewrites it), checked
    to be one :func:`study` wrote; ValueError, one line naming the file, when unreadable or of another shape."""
    result = read_json(path, "the study result", _STUDY_KEYS)
    try:
        fresh = relabel(result)
        summary_table([result])
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise ValueError(
            f"the study result {path} is not one `jaxreplay study dqn` wrote ({type(e).__name__}: {e})."
        ) from None
    return fresh if relabelled else result


# What relabel, summary_table and the report read of a study.json.
_STUDY_KEYS = (
    "env",
    "seeds",
    "total_steps",
    "response",
    "best_static",
    "worst_static",
    "memory_size_effect",
    "adaptive",
    "controls",
    "verdict",
)


def refresh(study_dir) -> dict:
    """Rewrite ``study_dir``'s ``study.json`` and ``report.md`` with :func:`relabel` (no runs)."""
    out = pathlib.Path(study_dir)
    path = out / "study.json"
    if not path.exists():
        raise ValueError(f"{out}: no study.json; run jaxreplay study dqn --out {out} first.")
    result = read_study(path, relabelled=True)
    atomic_write_text(path, json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(out / "report.md", _report(result))
    return result


def _renamed(ci: dict, estimate="score_iqm", low: str | None = "score_ci_low", high: str | None = "score_ci_high"):
    """``ci``'s ``estimate``, ``low`` and ``high`` (each with its ``*_null_reason``, if any) under the
    names a study.json entry gives them; a name ``None`` leaves that value out."""
    out = {}
    for key, name in (("estimate", estimate), ("low", low), ("high", high)):
        if name is not None:
            out[name] = ci[key]
            if f"{key}_null_reason" in ci:
                out[f"{name}_null_reason"] = ci[f"{key}_null_reason"]
    return out


def _starts(sizes: tuple, best: int) -> list[int]:
    """Below, near and above the static optimum: the smallest, the optimum and the largest size."""
    chosen = [sizes[0], sizes[best], sizes[-1]]
    if best in (0, len(sizes) - 1):  # the optimum is an end: add the middle
        chosen.append(sizes[len(sizes) // 2])
    return sorted(set(chosen))


def _toward(start: float, mean_size: float, optimum: float) -> str:
    """How aER's time-averaged size relates to the static optimum, compared with where it started (log scale)."""
    before, after = abs(math.log(start / optimum)), abs(math.log(max(mean_size, 1.0) / optimum))
    if before < math.log(1.5):
        return "stays near" if after < math.log(2.0) else "moves away from"
    if after < before - max(math.log(1.25), before / 3):  # at least a third of the way, in log N
        return "moves toward"
    return "moves away from" if after > before + math.log(1.25) else "moves little relative to"


def _verdict(sizes, response, best, worst, matters, adaptive, controls) -> dict:
    """The plain-language verdict from the paired statistics: yes / no, or "cannot tell (...)" where
    a comparison has no interval (too few seeds), never a yes or no from a missing interval."""
    r = response
    if matters["low"] is None:
        why = _why_no_interval(matters)
        matter_text = f"{_cannot_tell(why)}: best {sizes[best]} vs worst {sizes[worst]} differ by {_interval(matters)}"
    elif matters["significant"]:
        matter_text = (
            f"yes: the best static size {sizes[best]} beats the worst {sizes[worst]} by "
            f"{_interval(matters)} (paired over seeds)"
        )
    else:
        matter_text = (
            f"not detectably: best {sizes[best]} vs worst {sizes[worst]} differ by {_interval(matters)}, an interval "
            "that includes 0"
        )
    per_start = []
    beats_controls: list[bool | None] = []
    undecided = []
    for a, c in zip(adaptive, controls):
        vs_walk, vs_fixed, vs_best = a["vs_random_walk"], a["vs_fixed_at_mean"], a["vs_best_static"]
        missing = [d for d in (vs_walk, vs_fixed) if d["low"] is None]
        if missing:
            beats_controls.append(None)
            undecided.append(_why_no_interval(missing[0]))
        else:
            beats_controls.append(all(d["significant"] and d["estimate"] > 0 for d in (vs_walk, vs_fixed)))
        per_start.append(
            f"from {a['initial_size']}: mean size {a['mean_size']:.0f} (ends at {a['final_size_mean']:.0f}, grow share "
            f"{_fmt(a['grow_fraction'], '.2f')}): {a['moves_toward_optimum']} the optimum; score "
            f"{_fmt(a['score_iqm'])} vs best static {_fmt(r[best]['score_iqm'])} "
            f"(paired {_interval(vs_best)}); vs random walk {_interval(vs_walk)}; vs fixed at its mean "
            f"size {c['fixed_at_mean_size']}: {_interval(vs_fixed)}"
        )
    toward = [a["moves_toward_optimum"] in ("moves toward", "stays near") for a in adaptive]
    summary = (
        f"Memory size matters: {matter_text}. Static optimum: {sizes[best]}. aER moves toward it (or stays near "
        f"it) from {sum(toward)} of {len(toward)} starts and beats both controls (random walk, fixed at its "
        f"mean size) from {sum(b is True for b in beats_controls)} of {len(beats_controls)}"
        + (f", {_cannot_tell(undecided[0])} from {len(undecided)}." if undecided else ".")
    )
    verdict: dict = {
        "memory_size_matters": None if matters["low"] is None else bool(matters["significant"]),
        "static_optimum": int(sizes[best]),
        "toward_optimum": toward,
        "beats_controls": beats_controls,
        "per_start": per_start,
        "summary": summary,
    }
    if matters["low"] is None:
        verdict["memory_size_matters_null_reason"] = _why_no_interval(matters)
    if undecided:
        verdict["beats_controls_null_reason"] = undecided[0]
    return verdict


def _why_no_interval(d: dict, prefix: str = "") -> str:
    """Why the interval dict (or entry) ``d`` has no ``{prefix}low`` bound (a study.json from before
    reasons were stored says only that)."""
    return d.get(f"{prefix}low_null_reason", "no interval")


def _cannot_tell(why: str) -> str:
    """The verdict where a comparison has no interval: ``cannot tell (too few seeds)``."""
    return "cannot tell (too few seeds)" if why.startswith("too few seeds") else f"cannot tell ({why})"


def _fmt(x, spec: str = ".3g") -> str:
    return "n/a" if x is None else format(x, spec)


def _interval(d: dict) -> str:
    """``estimate [low, high]`` of a confidence-interval dict, or ``estimate [why there is none]``:
    ``1.5 [too few seeds (n = 2) for an interval]``."""
    if d["low"] is None:
        return f"{_fmt(d['estimate'])} [{_why_no_interval(d)}]"
    return f"{_fmt(d['estimate'])} [{_fmt(d['low'])}, {_fmt(d['high'])}]"


# ----------------------------------------------------------------------------
# Figures, tables, report


def _figures(out, plan, result, static, second, aer_rows, walk_rows, best) -> list[str]:
    """The study's figures; scores (and their intervals) come from ``result``, curves from the runs."""
    import matplotlib.pyplot as plt

    from jaxreplay.paper import plots

    names = []
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 7.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.2]})
    sizes = np.array(plan.sizes, float)

    def column(entries, key):
        return np.array([np.nan if e[key] is None else e[key] for e in entries], float)

    response, starts = result["response"], result["starts"]
    top.plot(sizes, column(response, "score_iqm"), "o-", color="k", label="static memory (IQM, 95% CI)")
    top.fill_between(sizes, column(response, "score_ci_low"), column(response, "score_ci_high"), color="k", alpha=0.12)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    steps = second.ds.segment.values
    for j, (row, n0, a, c) in enumerate(zip(aer_rows, starts, result["adaptive"], result["controls"])):
        color = colors[j % len(colors)]
        if a["score_iqm"] is not None:  # None: every run diverged
            no_interval = a["score_ci_low"] is None  # too few seeds
            top.errorbar(
                [a["mean_size"]],
                [a["score_iqm"]],
                yerr=None
                if no_interval
                else [[a["score_iqm"] - a["score_ci_low"]], [a["score_ci_high"] - a["score_iqm"]]],
                fmt="s",
                color=color,
                label=f"aER from {n0} (at its mean size)",
            )
        top.plot([c["random_walk_mean_size"]], [c["random_walk_score_iqm"]], "x", color=color, ms=8)
        top.plot([c["fixed_at_mean_size"]], [c["fixed_at_mean_score_iqm"]], "^", color=color, mfc="none", ms=8)
        cap = second.ds.capacity.values[row].astype(float)
        bottom.plot(cap.mean(0), steps, "-", color=color, label=f"aER from {n0}")
        bottom.fill_betweenx(steps, np.percentile(cap, 10, 0), np.percentile(cap, 90, 0), color=color, alpha=0.15)
        bottom.plot(second.ds.capacity.values[walk_rows[j]].astype(float).mean(0), steps, ":", color=color)
    top.axvline(sizes[best], color="gray", ls="--", lw=1)
    bottom.axvline(sizes[best], color="gray", ls="--", lw=1, label=f"static optimum {plan.sizes[best]}")
    top.set_xscale("log")
    top.set_ylabel("score: mean training return (AUC)")
    top.set_title(f"{plan.env_id}: memory-size response (x: random walk, △: fixed at aER's mean size)")
    top.legend(fontsize=7)
    bottom.set_xlabel("memory size N")
    bottom.set_ylabel("environment steps")
    bottom.invert_yaxis()
    bottom.set_title("aER's N(t) (mean, 10–90% of seeds; dotted: random walk)")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    plots.save(fig, out / "response.png")
    names.append("response.png")

    fig, ax = plots._figure(figsize=(7, 4.5))
    for i, n in enumerate(plan.sizes):
        if i in (0, best, len(plan.sizes) - 1):
            ax.plot(steps, _seed_mean(static.ds.train_return.values[i]), "--", label=f"fixed {n}")
    for j, (row, n0) in enumerate(zip(aer_rows, starts)):
        ax.plot(steps, _seed_mean(second.ds.train_return.values[row]), "-", label=f"aER from {n0}")
    names.append(
        _finish(
            fig,
            ax,
            "training episode return (seed mean)",
            f"{plan.env_id}: learning curves",
            out / "learning_curves.png",
        )
    )

    fig, ax = plots._figure(figsize=(7, 4.5))
    for j, (row, n0) in enumerate(zip(aer_rows, starts)):
        (line,) = ax.plot(steps, second.ds.capacity.values[row].astype(float).mean(0), label=f"aER from {n0}")
        ax.plot(
            steps,
            second.ds.capacity.values[walk_rows[j]].astype(float).mean(0),
            ":",
            color=line.get_color(),
            label=f"random walk from {n0}",
        )
    ax.axhline(plan.sizes[best], color="gray", ls="--", lw=1, label="static optimum")
    ax.set_yscale("log")
    names.append(
        _finish(fig, ax, "memory size (seed mean)", f"{plan.env_id}: memory size over time", out / "memory_size.png")
    )
    return names


def _finish(fig, ax, ylabel: str, title: str, path: pathlib.Path) -> str:
    """Label a curves-over-steps figure, save it, and return its file name."""
    from jaxreplay.paper import plots

    ax.set_xlabel("environment steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    plots.save(fig, path)
    return path.name


def _write_csvs(out, plan, stages: dict) -> None:
    """``runs.csv`` (one row per run) and ``curves.csv`` (seed means per setting and segment) of every stage."""
    with (
        replacing(out / "runs.csv", text=True, newline="") as f_runs,
        replacing(out / "curves.csv", text=True, newline="") as f_curves,
    ):
        runs, curves = csv.writer(f_runs), csv.writer(f_curves)
        runs.writerow(
            [
                "env",
                "stage",
                *POINT_KEYS,
                "seed",
                "auc",
                "final_return",
                "mean_memory_size",
                "final_memory_size",
                "checks",
                "grows",
                "shrinks",
                "straddle_checks",
                "straddle_grows",
                "diverged",
            ]
        )
        curves.writerow(
            ["env", "stage", "memory_size", "adaptive_rule", "config", "step", "train_return_mean", "memory_size_mean"]
        )
        for stage, r in stages.items():
            ds, auc = r.ds, r.auc
            for c in range(ds.sizes["config"]):
                keys = [ds[k].values[c].item() if k in ds else "" for k in POINT_KEYS]
                for s in range(ds.sizes["seed"]):
                    runs.writerow(
                        [
                            plan.env_id,
                            stage,
                            *keys,
                            s,
                            f"{auc[c, s]:.6g}",
                            f"{r.final[c, s]:.6g}",
                            f"{r.mean_size[c, s]:.6g}",
                            int(r.final_size[c, s]),
                            *(
                                int(ds[n].values[c, s])
                                for n in (
                                    "adaptive_checks",
                                    "adaptive_grows",
                                    "adaptive_shrinks",
                                    "adaptive_straddle_checks",
                                    "adaptive_straddle_grows",
                                )
                            ),
                            bool(ds.diverged.values[c, s]),
                        ]
                    )
                ret = _seed_mean(ds.train_return.values[c])
                cap = ds.capacity.values[c].astype(float).mean(0)
                for step, a, b in zip(ds.segment.values, ret, cap):
                    curves.writerow([plan.env_id, stage, keys[0], keys[1], c, int(step), f"{a:.6g}", f"{b:.6g}"])


def _table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table as lines: ``header`` cells, a separator, then one line per row."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _score(entry: dict, prefix: str = "score") -> str:
    """``IQM [low, high]`` of an entry's ``{prefix}_iqm`` / ``_ci_low`` / ``_ci_high`` (:func:`_interval`)."""
    return _interval(
        {
            "estimate": entry[prefix + "_iqm"],
            "low": entry[prefix + "_ci_low"],
            "high": entry[prefix + "_ci_high"],
            "low_null_reason": _why_no_interval(entry, prefix + "_ci_"),
        }
    )


def _report(result: dict) -> str:
    lines = [f"# DQN replay study: {result['env']}", ""]
    mode = "quick mode (CPU; shortened runs, fewer sizes and variants)" if result["quick"] else "paper-length runs"
    if result.get("steps_override"):
        mode += f", cut to {result['steps_override']} steps (a smoke run)"
    lines += [
        f"{result['seeds']} seeds per setting, {mode}: {result['total_steps']} environment steps per run; "
        f"optimizer reading: {result['optimizer_reading']}; {result['runtime_s']:.0f} s.",
        "",
        *_few_seeds_note(result["seeds"]),
        "## Verdict",
        "",
        result["verdict"]["summary"],
        "",
    ]
    lines += [f"- {line}" for line in result["verdict"]["per_start"]]
    lines += [
        "",
        "Best and worst static sizes are chosen by their IQM and then compared on the same seeds, so the "
        "effect is slightly favoured by the choice (8 sizes); an interval that includes 0 is a clear no.",
    ]
    lines += ["", "## Memory-size response (static memories)", ""]
    lines += _table(
        ["memory size", "score IQM [95% CI]", "final greedy return IQM [95% CI]"],
        [[r["memory_size"], _score(r), _score(r, "final")] for r in result["response"]],
    )
    lines += ["", "## aER from each start, and its controls", ""]
    lines += _table(
        [
            "start",
            "mean size",
            "final size",
            "grow share",
            "score IQM [95% CI]",
            "vs best static",
            "vs start",
            "vs random walk",
            "vs fixed at mean size",
        ],
        [
            [
                a["initial_size"],
                f"{a['mean_size']:.0f}",
                f"{a['final_size_mean']:.0f}",
                _fmt(a["grow_fraction"], ".2f"),
                _score(a),
                _interval(a["vs_best_static"]),
                _interval(a["vs_start_static"]),
                _interval(a["vs_random_walk"]),
                _interval(a["vs_fixed_at_mean"]),
            ]
            for a in result["adaptive"]
        ],
    )
    lines += [
        "",
        "Paired differences: mean over seeds of (aER − control) of the score, same seed index, 95% bootstrap interval.",
        "",
    ]
    lines += _table(
        ["start", "random walk: final size, grow share, score", "fixed at aER's mean size: size, score"],
        [
            [
                c["initial_size"],
                f"{c['random_walk_final_size_mean']:.0f}, "
                f"{_fmt(c['random_walk_grow_fraction'], '.2f')}, {_fmt(c['random_walk_score_iqm'])}",
                f"{c['fixed_at_mean_size']}, {_fmt(c['fixed_at_mean_score_iqm'])}",
            ]
            for c in result["controls"]
        ],
    )
    lines += ["", "## aER's checks: what drives the decisions", ""]
    lines += _table(
        [
            "start",
            "checks per run",
            "grow share at checks straddling a target copy",
            "at the others",
            "checks within 2 SE of no change",
            "mean change",
            "mean SE",
        ],
        [
            [
                a["initial_size"],
                _fmt(d["checks_mean"], ".0f"),
                _fmt(d["straddle_grow_fraction"], ".2f"),
                _fmt(d["other_grow_fraction"], ".2f"),
                _fmt(d["noisy_fraction"], ".2f"),
                _fmt(d["change_mean"]),
                _fmt(d["noise_mean"]),
            ]
            for a in result["adaptive"]
            for d in [a["diagnostics"]]
        ],
    )
    lines += [
        "",
        f"## Sensitivity (one change at a time, aER from {result['starts'][0]}, "
        f"{result['sensitivity'][0]['seeds']} seeds)",
        "",
    ]
    lines += _table(
        ["variant", "final size", "grow share", "score IQM", "vs default aER"],
        [
            [
                s["variant"],
                f"{s['final_size_mean']:.0f}",
                _fmt(s["grow_fraction"], ".2f"),
                _fmt(s["score_iqm"]),
                "–" if s["vs_default"] is None else _interval(s["vs_default"]),
            ]
            for s in result["sensitivity"]
        ],
    )
    if result["other_reading"]:
        o = result["other_reading"]
        lines += ["", f"## The other optimizer reading: {o['reading']}", ""]
        lines += _table(
            ["setting", "score IQM [95% CI]"],
            [[f"fixed {r['memory_size']}", _score(r)] for r in o["response"]]
            + [
                [f"aER from {a['initial_size']} (ends at {a['final_size_mean']:.0f})", _score(a)] for a in o["adaptive"]
            ],
        )
    lines += [
        "",
        "## The paper's statistic",
        "",
        "Share of aER seeds whose score beats the mean score of every "
        "static run (static sizes: " + ", ".join(str(n) for n in result["paper_share"][0]["static_sizes"]) + ").",
        "",
    ]
    lines += _table(
        ["start", "share", "95% CI (Clopper–Pearson)"],
        [
            [
                p["initial_size"],
                f"{_fmt(p['percent'], '.0f')}%",
                f"[{_fmt(p['low'], '.0f')}%, {_fmt(p['high'], '.0f')}%]",
            ]
            for p in result["paper_share"]
        ],
    )
    lines += [
        "",
        "Figures: " + ", ".join(f"`{f}`" for f in result["figures"]) + "; every run: `runs.csv`; seed means: "
        "`curves.csv`; labeled results: `sweeps/*/results.nc`.",
        "",
    ]
    lines += [f"![{f}]({f})" for f in result["figures"]]
    return "\n".join(lines) + "\n"


def _few_seeds_note(seeds: int) -> list[str]:
    """The report's paragraph (as lines) saying that ``seeds`` seeds give no interval; none if they do."""
    from jaxreplay.engine.results import min_seeds_for_interval

    need = min_seeds_for_interval()
    if seeds >= need:
        return []
    return [
        f"With {seeds} seeds there is no 95% interval (a percentile-bootstrap interval of a mean or IQM needs at "
        f"least {need} seeds to reach 95% coverage), so no difference is called significant and the verdict "
        "cannot tell.",
        "",
    ]


def _seed_mean(curves: np.ndarray) -> np.ndarray:
    """Mean over seeds (axis 0) ignoring NaN (segments without a finished episode); NaN where all are."""
    curves = np.asarray(curves, np.float64)
    count = np.sum(np.isfinite(curves), 0)
    return np.where(count > 0, np.nansum(curves, 0) / np.maximum(count, 1), np.nan)


def summary_table(results: list[dict]) -> str:
    """Markdown: one row per game and aER start (response optimum, aER's sizes and scores, controls).

    Args:
        results: ``study.json`` contents (from :func:`study`), one per game.
    """
    rows = []
    for r in results:
        effect, matters = r["memory_size_effect"], r["verdict"]["memory_size_matters"]
        said = _cannot_tell(_why_no_interval(effect)) if matters is None else "yes" if matters else "no"
        rows += [
            [
                r["env"],
                _label(r),
                f"{said}: {_interval(effect)}",
                r["best_static"],
                a["initial_size"],
                f"{a['mean_size']:.0f}",
                _fmt(a["grow_fraction"], ".2f"),
                _interval(a["vs_best_static"]),
                _interval(a["vs_random_walk"]),
                _interval(a["vs_fixed_at_mean"]),
            ]
            for a in r["adaptive"]
        ]
    lines = _table(
        [
            "game",
            "mode, seeds × steps",
            "memory size matters (best − worst static)",
            "static optimum",
            "aER from",
            "mean size",
            "grow share",
            "aER − best static",
            "aER − random walk",
            "aER − fixed at its mean size",
        ],
        rows,
    )
    return "\n".join(lines)


def _label(result: dict) -> str:
    """How a study ran, for the README's table: ``full, 100 × 40000`` (paper-length runs) or
    ``quick, 3 × 10000``; ``(cut short)`` after a ``--steps`` smoke run, the optimizer reading if not Adam."""
    label = "quick" if result["quick"] else "full"
    if result.get("steps_override"):
        label += " (cut short)"
    label += f", {result['seeds']} × {result['total_steps']}"
    if result.get("optimizer_reading", "adam") != "adam":
        label += f", {result['optimizer_reading']} reading"
    return label


def _refuse_duplicates(sources: list, results: list[dict]) -> None:
    """Refuse a study given twice to :func:`update_readme`: one study.json reached twice (a folder
    given twice, or a folder and its parent), or two of the same game and plan (:func:`_label`),
    whose rows the table could not tell apart. ``sources``: ``(folder given, study.json path)``
    per result."""
    by_file: dict[pathlib.Path, pathlib.Path] = {}
    by_plan: dict[tuple, pathlib.Path] = {}
    for (folder, path), result in zip(sources, results):
        real, plan = path.resolve(), (result["env"], _label(result))
        if real in by_file:
            raise ValueError(f"{path} is given twice (as {by_file[real]} and {folder}); give each study once.")
        if plan in by_plan:
            raise ValueError(
                f"{by_plan[plan]} and {path} are the same study ({plan[0]}, {plan[1]}); give each study once."
            )
        by_file[real], by_plan[plan] = folder, path


def update_readme(readme, study_dirs, note: str = "") -> pathlib.Path:
    """Write :func:`summary_table` of ``study_dirs/*/study.json`` (or ``DIR/study.json``) into the
    ``<!-- study:begin -->`` … ``<!-- study:end -->`` block of ``readme``, each row labelled with its
    study's mode and size (:func:`_label`). A study given twice is refused (:func:`_refuse_duplicates`)."""
    from jaxreplay.paper.reproduce.paper import read_readme, replace_block

    results = []
    sources = []  # (folder given, its study.json) per result
    for d in study_dirs:
        d = pathlib.Path(d)
        files = [d / "study.json"] if (d / "study.json").exists() else sorted(d.glob("*/study.json"))
        if not files:
            raise ValueError(f"{d}: no study.json in it or in its subfolders; run jaxreplay study dqn --out {d} first.")
        results += [read_study(f) for f in files]
        sources += [(d, f) for f in files]
    _refuse_duplicates(sources, results)
    order = {env: i for i, env in enumerate(ENVS)}
    results.sort(key=lambda r: order.get(r["env"], len(order)))
    readme = pathlib.Path(readme)
    text = read_readme(readme, "study")
    atomic_write_text(readme, replace_block(text, "study", f"{note}\n\n{summary_table(results)}".strip()))
    return readme
