"""Reading ``study.json``'s entries for text: the entry of a size or start (:func:`find`), a number,
an interval or why there is none, a markdown table, the study's run time, its diverged runs."""

from __future__ import annotations


def find(entries: list[dict], **match) -> dict:
    """The entry of ``entries`` (a list of ``study.json``) whose fields equal ``match``, e.g.
    ``find(result["controls"], initial_size=100)``.

    Raises:
        ValueError: no entry matches (names the values sought and those present).
    """
    for entry in entries:
        if all(entry[key] == value for key, value in match.items()):
            return entry
    sought = ", ".join(f"{key} = {value!r}" for key, value in match.items())
    present = "; ".join(f"{key}: {[entry[key] for entry in entries]}" for key in match)
    raise ValueError(f"no entry has {sought} (the entries have {present})")


def fmt(x, spec: str = ".3g") -> str:
    """``x`` formatted by ``spec``; ``n/a`` for ``None``."""
    return "n/a" if x is None else format(x, spec)


def why_no_interval(d: dict, prefix: str = "") -> str:
    """Why the interval dict (or entry) ``d`` has no ``{prefix}low`` bound (a study.json from before
    reasons were stored says only that)."""
    return d.get(f"{prefix}low_null_reason", "no interval")


def cannot_tell(why: str) -> str:
    """The verdict where a comparison has no interval: ``cannot tell (too few seeds)``."""
    return "cannot tell (too few seeds)" if why.startswith("too few seeds") else f"cannot tell ({why})"


def interval(d: dict) -> str:
    """``estimate [low, high]`` of a confidence-interval dict, or ``estimate [why there is none]``:
    ``1.5 [too few seeds (n = 2) for an interval]``."""
    if d["low"] is None:
        return f"{fmt(d['estimate'])} [{why_no_interval(d)}]"
    return f"{fmt(d['estimate'])} [{fmt(d['low'])}, {fmt(d['high'])}]"


def score(entry: dict, prefix: str = "score") -> str:
    """``IQM [low, high]`` of an entry's ``{prefix}_iqm`` / ``_ci_low`` / ``_ci_high`` (:func:`interval`)."""
    return interval(
        {
            "estimate": entry[prefix + "_iqm"],
            "low": entry[prefix + "_ci_low"],
            "high": entry[prefix + "_ci_high"],
            "low_null_reason": why_no_interval(entry, prefix + "_ci_"),
        }
    )


def table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table as lines: ``header`` cells, a separator, then one line per row."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def by_stage(result: dict, key: str) -> tuple[int, str]:
    """``study.json``'s run counts by stage under ``key`` (``"diverged"``, ``"unscored"``, ``"soft_diverged"``):
    their total and ``"stage 2, other 1"`` (``(0, "")`` where there are none, or where a study.json predates
    the count)."""
    counts = result.get(key) or {}
    return sum(counts.values()), ", ".join(f"{label} {count}" for label, count in counts.items() if count)


def unscored_sentence(result: dict) -> str:
    """The sentence counting ``study.json``'s runs without a score that did not diverge (``unscored``, by stage):
    no training episode ended within them. "" where there are none (``unscored`` is written only then)."""
    total, stages = by_stage(result, "unscored")
    if not total:
        return ""
    return (
        f"{total} runs have no score although they did not diverge (by stage: {stages}): no training episode "
        f"ended within their {result['total_steps']} steps. They are left out like diverged runs, so the numbers "
        "they are missing from stand on the other seeds and may be biased (in CartPole these are the runs whose "
        "pole never fell): run longer than an episode can last."
    )


def soft_diverged_sentence(result: dict) -> str:
    """The sentence counting ``study.json``'s runs that soft-diverged (``soft_diverged``, by stage): scored
    runs whose Q-values went beyond every discounted return of their rewards. "" where none did, or where
    the study's runs predate the flag."""
    total, stages = by_stage(result, "soft_diverged")
    if not total:
        return ""
    return (
        f"{total} runs soft-diverged (by stage: {stages}): their Q-values went beyond every discounted return of "
        "the rewards they saw (van Hasselt et al. 2018); they kept finite weights and are scored like the rest."
    )


def runtime(result: dict) -> str:
    """``study.json``'s wall time in words: this call's, and where the study was resumed, how many of its runs
    earlier calls computed (whose time is not in it)."""
    text = f"{result['runtime_s']:.0f} s"
    resumed, runs = result.get("runs_resumed", 0), result.get("runs", 0)
    if resumed:
        text += (
            f" in the call that finished it, which found {resumed:,} of its {runs:,} runs computed by earlier "
            "calls (their time not counted)"
        )
    return text
