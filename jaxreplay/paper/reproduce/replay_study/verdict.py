"""The answers a replay study derives from its paired contrasts, in words (:func:`verdict`): yes / no where the
interval excludes 0, "not detectably" where it includes 0 (no effect was found, which is not evidence of none),
or "cannot tell (too few seeds)" where a contrast has no interval, never a yes or no from a missing one.
Computed from ``study.json``'s numbers, so an earlier study can be read again by today's rules."""

from __future__ import annotations

from jaxreplay.paper.reproduce.study.text import (
    by_stage,
    cannot_tell,
    fmt,
    interval,
    soft_diverged_sentence,
    unscored_sentence,
    why_no_interval,
)


def decide(effect: dict) -> str | None:
    """``"yes"`` (the interval lies above 0), ``"no"`` (below 0: the other way), ``"not detectably"`` (it
    includes 0: no effect was found, which is not evidence of none; this said "no" before), or ``None`` (no
    interval: the caller says why)."""
    if effect["low"] is None:
        return None
    if effect["significant"]:
        return "yes" if effect["estimate"] > 0 else "no"
    return "not detectably"


def _said(effect: dict, yes: str, no: str, undetected: str) -> tuple[str, str]:
    """The answer to a yes/no question on ``effect`` and its line: ``yes: <yes> by <interval>``, ``no: <no>
    (<interval>, below 0)`` or ``not detectably: <undetected> (<interval>, an interval that includes 0)``."""
    answer = decide(effect)
    if answer is None:
        told = cannot_tell(why_no_interval(effect))
        return told, f"{told}: {interval(effect)}"
    if answer == "yes":
        return "yes", f"yes: {yes} by {interval(effect)} (paired over seeds)"
    if answer == "no":
        return "no", f"no: {no} ({interval(effect)}, below 0)"
    return answer, f"{answer}: {undetected} ({interval(effect)}, an interval that includes 0)"


def capacity(entry: dict, top: int, low: int) -> dict:
    """Does the largest capacity beat the smallest at ratio 1 (``entry``: a ``capacity_effect`` entry)?"""
    answer, line = _said(
        entry,
        f"capacity {top} beats {low} at n = {entry['n_step']}",
        f"capacity {top} does worse than {low} at n = {entry['n_step']}",
        f"capacity {top} does not detectably beat {low} at n = {entry['n_step']}",
    )
    if decide(entry) is None:  # say which n it is about
        line = f"{answer} at n = {entry['n_step']}: {interval(entry)}"
    return {"n_step": entry["n_step"], "answer": answer, "line": line}


def interaction(effect: dict, n_high: int, n_low: int) -> dict:
    """Is the capacity effect larger with ``n_high``-step targets than with ``n_low``-step ones?"""
    answer, line = _said(
        effect,
        f"the capacity effect is larger with n = {n_high} than with n = {n_low}",
        f"the capacity effect is smaller with n = {n_high} than with n = {n_low}",
        f"the capacity effect is not detectably larger with n = {n_high} than with n = {n_low}",
    )
    return {"answer": answer, "line": line}


def follows(ratio: dict, age: dict) -> dict:
    """Does the score follow the replay ratio (``ratio``: a ``ratio_at_equal_age`` entry), the
    oldest-policy age (``age``: the ``age_at_equal_ratio`` entry of the same n), both, or neither?"""
    n = ratio["n_step"]
    told = f"at equal age, ratio × 4: {interval(ratio)}; at equal ratio, age × 4: {interval(age)}"
    missing = [e for e in (ratio, age) if e["low"] is None]
    if missing:
        answer = cannot_tell(why_no_interval(missing[0]))
        return {"n_step": n, "answer": answer, "line": f"{answer} at n = {n} ({told})"}
    moved = {"the replay ratio": ratio["significant"], "the oldest-policy age": age["significant"]}
    chosen = [name for name, yes in moved.items() if yes]
    answer = " and ".join(chosen) if chosen else "neither detectably"
    return {"n_step": n, "answer": answer, "line": f"the score follows {answer} at n = {n} ({told})"}


def adaptive_line(a: dict) -> str:
    """One adaptive rule from one start, in a line: where its memory went and its paired comparisons."""
    return (
        f"{a['rule']} from {a['initial_size']}: mean size {a['mean_size']:.0f} (ends at {a['final_size_mean']:.0f}, "
        f"grow share {fmt(a['grow_fraction'], '.2f')}"
        + ("" if "free_grow_fraction" not in a else f", {fmt(a['free_grow_fraction'], '.2f')} of the free checks")
        + f"); score {fmt(a['score_iqm'])}; vs its start "
        f"{interval(a['vs_start_static'])}; vs the better static end {interval(a['vs_best_static'])}; vs random walk "
        f"{interval(a['vs_random_walk'])}; vs fixed at its mean size {a['fixed_at_mean_size']}: "
        f"{interval(a['vs_fixed_at_mean'])}"
    )


def diverged(result: dict) -> str:
    """The sentence counting diverged runs ("" where none diverged, or where a study.json predates the
    count): which stages, and that every number stands on the seeds left."""
    total, stages = by_stage(result, "diverged")
    if not total:
        return ""
    return (
        f"{total} runs diverged and have no score (by stage: {stages}): each cell's IQM and each contrast stands "
        "on the seeds left (the tables say how many)."
    )


def verdict(result: dict) -> dict:
    """The answers of ``result`` (``study.json``'s ``capacities``, ``n_steps``, ``capacity_effect``,
    ``interaction``, ``ratio_at_equal_age``, ``age_at_equal_ratio`` and ``adaptive``) in words, and a summary.

    Raises:
        KeyError, ValueError: ``result`` lacks a field or an entry of one n.
    """
    top, low = max(result["capacities"]), min(result["capacities"])
    n_high, n_low = max(result["n_steps"]), min(result["n_steps"])
    by_n = {e["n_step"]: e for e in result["age_at_equal_ratio"]}
    helps = [capacity(e, top, low) for e in result["capacity_effect"]]
    larger = interaction(result["interaction"], n_high, n_low)
    track = [follows(e, by_n[e["n_step"]]) for e in result["ratio_at_equal_age"]]
    summary = (
        f"Does a larger memory help (capacity {top} vs {low}, ratio 1)? "
        + "; ".join(f"at n = {c['n_step']}: {c['answer']}" for c in helps)
        + f". Larger with n = {n_high}? {larger['answer']}. Does the score follow the replay ratio or the "
        + "oldest-policy age? "
        + "; ".join(f"at n = {f['n_step']}: {f['answer']}" for f in track)
        + "."
    )
    for said in (diverged(result), unscored_sentence(result), soft_diverged_sentence(result)):
        summary += f" {said}" if said else ""
    return {
        "capacity_helps": helps,
        "interaction": larger,
        "follows": track,
        "adaptive": [adaptive_line(a) for a in result["adaptive"]["rules"]],
        "summary": summary,
    }
