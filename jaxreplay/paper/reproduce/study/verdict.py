"""The labels a study derives from its numbers: where aER went (:func:`toward`) and the verdict
(:func:`verdict`), computed by one rule when a study is written and when an earlier ``study.json``
is read again under today's definitions (:func:`relabel`, ``jaxreplay study refresh``)."""

from __future__ import annotations

import json
import math

from jaxreplay.paper.reproduce.study.text import (
    by_stage,
    cannot_tell,
    find,
    fmt,
    interval,
    soft_diverged_sentence,
    unscored_sentence,
    why_no_interval,
)


def toward(start: float, mean_size: float, optimum: float) -> str:
    """How aER's time-averaged size relates to the static optimum, compared with where it started (log scale)."""
    before, after = abs(math.log(start / optimum)), abs(math.log(max(mean_size, 1.0) / optimum))
    if before < math.log(1.5):
        return "stays near" if after < math.log(2.0) else "moves away from"
    if after < before - max(math.log(1.25), before / 3):  # at least a third of the way, in log N
        return "moves toward"
    return "moves away from" if after > before + math.log(1.25) else "moves little relative to"


SIGNIFICANCE = 0.05
"""The level of the permutation test of whether memory size matters (``memory_size_test``)."""


def _matters(best: int, worst: int, effect: dict, test: dict | None) -> tuple[bool | None, str, str]:
    """Whether memory size matters, in words (yes / not detectably / cannot tell), and why it cannot
    tell ("" where it can).

    Decided by ``test`` (:func:`~jaxreplay.paper.reproduce.study.runs.differ_test`: do the sizes'
    IQMs spread more than relabelling the sizes within seeds gives), not by the best − worst
    ``effect`` alone, whose two ends are chosen by the same data; the effect is the size of the
    difference. A study.json written before the test was recorded cannot tell (``study refresh``
    recomputes it from runs.csv); one whose test has no spread cannot tell for the test's reason (fewer than
    two sizes, or no seed with a score at every size)."""
    contrast = f"best {best} vs worst {worst}: {interval(effect)} (IQM difference, paired over seeds)"
    if test is None:
        why = "no test of every size recorded: run jaxreplay study refresh"
        return None, f"{cannot_tell(why)}: {contrast}", why
    if test.get("observed") is None:
        why = test.get("observed_null_reason", "no spread of the sizes' IQMs recorded")
        return None, f"{cannot_tell(why)}: {contrast}", why
    if best == worst and test["observed"] != 0:  # one size alone ranked (the others diverged too often)
        contrast = f"{best} is the only size ranked and has the lowest IQM: no best − worst contrast"
    if test["observed"] == 0:
        return False, f"no: every static size has the same IQM ({contrast})", ""
    if test["p_value"] is None:
        why = test.get("p_value_null_reason", "no test")
        return None, f"{cannot_tell(why)}: the sizes' IQMs spread by {fmt(test['observed'])}; {contrast}", why
    spread = f"the sizes' IQMs spread by {fmt(test['observed'])} (p = {fmt(test['p_value'], '.2g')}, sizes relabelled"
    spread += " within seeds)"
    if test["p_value"] < SIGNIFICANCE:
        estimate = effect.get("estimate")
        if best == worst:
            tail = contrast
        elif estimate is None or estimate > 0:
            tail = f"the best static size {best} beats the worst {worst} by {interval(effect)}"
        else:  # ranked by each size's IQM over its own scored runs, paired over the seeds both scored (a probe)
            tail = (
                f"paired over the seeds both scored, the best static size {best} (by its IQM over its own scored "
                f"runs) vs the worst {worst} is {interval(effect)}: the ranking rests on runs without a score"
            )
        return True, f"yes: {spread}; {tail}", ""
    return False, f"not detectably: {spread}, no more than relabelling gives; {contrast}", ""


def _diverged(result: dict) -> str:
    """The sentence counting diverged runs ("" where none diverged, or where a study.json predates the count)."""
    total, stages = by_stage(result, "diverged")
    if not total:
        return ""
    sizes = ", ".join(f"{r['memory_size']}: {r['diverged']}" for r in result["response"] if r.get("diverged"))
    return (
        f" {total} runs diverged and have no score (by stage: {stages}"
        + (f"; static sizes: {sizes}" if sizes else "")
        + "); a size with more than a quarter of its runs diverged is never the optimum."
    )


def _walk_toward(result: dict, best: int) -> int | None:
    """From how many starts the random walk moves toward (or stays near) the optimum by :func:`toward`
    (None where a study.json predates the walk's mean size)."""
    sizes = [c.get("random_walk_mean_size") for c in result["controls"]]
    if any(s is None for s in sizes):
        return None
    moved = [toward(c["initial_size"], s, best) for c, s in zip(result["controls"], sizes)]
    return sum(m in ("moves toward", "stays near") for m in moved)


def verdict(result: dict) -> dict:
    """The plain-language verdict of ``result`` (``study.json``'s ``response``, ``best_static``,
    ``worst_static``, ``memory_size_effect``, ``adaptive`` with each start's ``moves_toward_optimum``,
    and ``controls``) from its paired statistics: yes / no, or "cannot tell (...)" where a comparison
    has no interval (too few seeds), never a yes or no from a missing interval.

    Raises:
        KeyError, ValueError: ``result`` lacks a field, or an entry for the optimum or a start.
    """
    best, worst, effect = result["best_static"], result["worst_static"], result["memory_size_effect"]
    best_score = find(result["response"], memory_size=best)["score_iqm"]
    per_start = []
    beats_controls: list[bool | None] = []
    undecided = []
    for a in result["adaptive"]:
        fixed_size = find(result["controls"], initial_size=a["initial_size"])["fixed_at_mean_size"]
        vs_walk, vs_fixed, vs_best = a["vs_random_walk"], a["vs_fixed_at_mean"], a["vs_best_static"]
        missing = [d for d in (vs_walk, vs_fixed) if d["low"] is None]
        if missing:
            beats_controls.append(None)
            undecided.append(why_no_interval(missing[0]))
        else:
            beats_controls.append(all(d["significant"] and d["estimate"] > 0 for d in (vs_walk, vs_fixed)))
        per_start.append(
            f"from {a['initial_size']}: mean size {a['mean_size']:.0f} (ends at {a['final_size_mean']:.0f}, grow share "
            f"{fmt(a['grow_fraction'], '.2f')}): {a['moves_toward_optimum']} the optimum; score "
            f"{fmt(a['score_iqm'])} vs best static {fmt(best_score)} "
            f"(paired {interval(vs_best)}); vs random walk {interval(vs_walk)}; vs fixed at its mean "
            f"size {fixed_size}: {interval(vs_fixed)}"
        )
    moved = [a["moves_toward_optimum"] in ("moves toward", "stays near") for a in result["adaptive"]]
    walk = _walk_toward(result, best)
    matters, said, why = _matters(best, worst, effect, result.get("memory_size_test"))
    summary = (
        f"Memory size matters: {said}. Static optimum: {best}. aER moves toward it (or "
        f"stays near it) from {sum(moved)} of {len(moved)} starts"
        + ("" if walk is None else f" (the random walk, by the same rule: {walk} of {len(moved)})")
        + f" and beats both controls (random walk, fixed at its mean size) from "
        f"{sum(b is True for b in beats_controls)} of {len(beats_controls)}"
        + (f", {cannot_tell(undecided[0])} from {len(undecided)}." if undecided else ".")
        + _diverged(result)
        + (f" {unscored}" if (unscored := unscored_sentence(result)) else "")
        + (f" {soft}" if (soft := soft_diverged_sentence(result)) else "")
    )
    out: dict = {
        "memory_size_matters": matters,
        "static_optimum": int(best),
        "toward_optimum": moved,
        "beats_controls": beats_controls,
        "per_start": per_start,
        "summary": summary,
    }
    if matters is None:
        out["memory_size_matters_null_reason"] = why
    if undecided:
        out["beats_controls_null_reason"] = undecided[0]
    return out


def relabel(result: dict) -> dict:
    """``result`` (a ``study.json``) with its derived labels recomputed by today's rules, from
    the numbers it stores: each aER start's ``moves_toward_optimum`` and the ``verdict``.

    Reruns nothing: the response curve, aER's sizes and the paired statistics are kept, except
    the intervals (and the test of every size) of a study with fewer seeds than an interval needs
    (written before that rule): they become ``null`` with the reason. Lets an earlier study be read under the current
    definitions (``jaxreplay study refresh``)."""
    from jaxreplay.engine.results import min_seeds_for_interval

    result = json.loads(json.dumps(result))  # a deep copy
    if result["seeds"] < min_seeds_for_interval():
        why = f"too few seeds (n = {result['seeds']}) for an interval"
        for key in ("response", "memory_size_effect", "adaptive", "controls", "sensitivity", "other_reading"):
            result[key] = _without_intervals(result[key], why)
        if result.get("memory_size_test", {}).get("p_value") is not None:  # no test either
            result["memory_size_test"].update(p_value=None, p_value_null_reason=why)
    for entry in result["adaptive"]:
        entry["moves_toward_optimum"] = toward(entry["initial_size"], entry["mean_size"], result["best_static"])
    result["verdict"] = verdict(result)
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
