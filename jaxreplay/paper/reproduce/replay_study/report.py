"""The replay study's text, from a ``study.json``: ``report.md`` (:func:`report`, one function per
section) and the README's table of several games (:func:`summary_table`)."""

from __future__ import annotations

from jaxreplay.paper.reproduce.replay_study.verdict import decide, diverged
from jaxreplay.paper.reproduce.study.text import (
    by_stage,
    find,
    fmt,
    interval,
    runtime,
    score,
    soft_diverged_sentence,
    table,
    unscored_sentence,
)

FEDUS = "Fedus et al. 2020 (*Revisiting Fundamentals of Experience Replay*, ICML, arXiv:2007.06700)"
"""The paper the study is compared with, as the report cites it."""


def brief(d: dict, seeds: int | None = None) -> str:
    """``estimate [low, high]`` of an interval dict, or the estimate alone where there is no interval (the
    report says why once, above its tables); with ``seeds`` (the study's), the seeds it stands on where
    diverged runs left fewer (``d["seeds"]``)."""
    text = fmt(d["estimate"]) if d["low"] is None else interval(d)
    if seeds is not None and d.get("seeds", seeds) < seeds:
        text += f" ({d['seeds']} of {seeds} seeds)"
    return text


def brief_score(entry: dict, prefix: str = "score") -> str:
    """:func:`brief` of an entry's ``{prefix}_iqm`` / ``_ci_low`` / ``_ci_high``, and its runs without a score
    if any (``entry["diverged"]``, ``entry["unscored"]``: the score stands on the other seeds)."""
    text = fmt(entry[f"{prefix}_iqm"]) if entry[f"{prefix}_ci_low"] is None else score(entry, prefix)
    if entry.get("diverged"):
        text += f" ({entry['diverged']} diverged)"
    if entry.get("unscored"):
        text += f" ({entry['unscored']} without a finished episode)"
    return text


def mode(result: dict) -> str:
    """How the study ran, in words: ``quick mode (CPU)`` or ``full scale``, and a ``--steps`` cut."""
    text = "quick mode (CPU; short runs, labelled as such)" if result["quick"] else "full scale"
    if result.get("steps_override"):
        text += f", cut to {result['steps_override']} steps (a smoke run)"
    return text


def _header(result: dict) -> list[str]:
    reduced = f" Reduced from the preset: {result['reduced']}." if result.get("reduced") else ""
    return [
        f"# Replay study: {result['env']}",
        "",
        f"{result['seeds']} seeds per setting, {mode(result)}: {result['total_steps']} environment steps per run; "
        f"{runtime(result)}.{reduced} Grid: capacity {', '.join(map(str, result['capacities']))} × replay "
        f"ratio {', '.join(f'{r:g}' for r in result['ratios'])} (gradient updates per environment step) × n-step "
        f"{', '.join(map(str, result['n_steps']))}; oldest-policy age = capacity × ratio (gradient updates).",
        "",
        *_few_seeds(result["seeds"]),
        *([lost, ""] if (lost := diverged(result)) else []),
        *([unscored, ""] if (unscored := unscored_sentence(result)) else []),
        *([soft, ""] if (soft := soft_diverged_sentence(result)) else []),
    ]


def _few_seeds(seeds: int) -> list[str]:
    """Why ``seeds`` seeds give no interval (a paragraph, as lines); nothing when they do."""
    from jaxreplay.engine.results import min_seeds_for_interval

    if seeds >= min_seeds_for_interval():
        return []
    return [
        f"With {seeds} seeds there is no 95% interval (an interval of a mean or IQM needs at least "
        f'{min_seeds_for_interval()} seeds to reach 95% coverage): every answer is "cannot tell (too few seeds)".',
        "",
    ]


def _answers(result: dict) -> list[str]:
    v = result["verdict"]
    lines = [f"- Does a larger memory help? {c['line']}" for c in v["capacity_helps"]]
    lines += [f"- Is the capacity effect larger with n-step returns? {v['interaction']['line']}"]
    lines += [f"- Ratio or age? {f['line']}" for f in v["follows"]]
    return ["## Answers", "", v["summary"], "", *lines, ""]


def _grid(result: dict, key: str, title: str) -> list[str]:
    out = ["", f"## {title}", ""]
    for n in result["n_steps"]:
        rows = [
            [c]
            + [
                brief_score(find(result["cells"], memory_size=c, replay_ratio=r, n_step=n), key)
                for r in result["ratios"]
            ]
            for c in result["capacities"]
        ]
        out += [f"n = {n} (rows: capacity; columns: replay ratio):", ""]
        out += table(["capacity"] + [f"ratio {r:g}" for r in result["ratios"]], rows) + [""]
    return out


def _contrasts(result: dict) -> list[str]:
    seeds = result["seeds"]
    rows = [
        [f"capacity {max(result['capacities'])} − {min(result['capacities'])} at ratio 1", e["n_step"]]
        + [brief(e, seeds)]
        for e in result["capacity_effect"]
    ]
    rows += [["capacity effect at n = 3 − at n = 1 (interaction)", "–", brief(result["interaction"], seeds)]]
    rows += [
        [f"equal age, ratio × 4 ({len(e['pairs'])} pairs)", e["n_step"], brief(e, seeds)]
        for e in result["ratio_at_equal_age"]
    ]
    rows += [
        [f"equal ratio, age × 4 ({len(e['pairs'])} pairs)", e["n_step"], brief(e, seeds)]
        for e in result["age_at_equal_ratio"]
    ]
    note = (
        "Paired contrasts of the score (mean over seeds of the per-seed difference, the same seed index "
        "sharing its random numbers across cells; 95% paired Student-t interval). A contrast over several pairs "
        "averages them per seed first."
    )
    return ["## Paired contrasts", "", note, ""] + table(["contrast", "n", "estimate [95% CI]"], rows)


def _adaptive(result: dict) -> list[str]:
    a = result["adaptive"]
    free = all("free_grow_fraction" in r for r in a["rules"])  # (a study from before the floor count: none)
    static = ", ".join(f"fixed {s['memory_size']}: {brief_score(s)}" for s in a["static"])
    rows = [
        [
            r["rule"],
            r["initial_size"],
            f"{r['mean_size']:.0f}",
            f"{r['final_size_mean']:.0f}",
            fmt(r["grow_fraction"], ".2f"),
            *[fmt(r.get("free_grow_fraction"), ".2f")] * free,
            brief_score(r),
            brief(r["vs_start_static"]),
            brief(r["vs_best_static"]),
            brief(r["vs_random_walk"]),
            f"{r['fixed_at_mean_size']}: {brief(r['vs_fixed_at_mean'])}",
        ]
        for r in a["rules"]
    ]
    header = ["rule", "start", "mean size", "final size", "grow share", *["of the free checks"] * free]
    header += ["score IQM [95% CI]", "vs its start"]
    header += ["vs better static end", "vs random walk", "vs fixed at its mean size"]
    walks = "; ".join(
        f"from {w['initial_size']}: mean size {w['mean_size']:.0f}, score {brief_score(w)}" for w in a["walks"]
    )
    return [
        "",
        f"## Adaptive memories where capacity matters (n = {a['n_step']}, ratio {a['replay_ratio']:g})",
        "",
        f"The n-step setting with the larger capacity effect. Static ends in the same program: {static}. "
        f"Random ±k walk: {walks}.",
        "",
        *table(header, rows),
    ]


def _literature(result: dict) -> list[str]:
    v = result["verdict"]
    helps = {c["n_step"]: c["answer"] for c in v["capacity_helps"]}
    n1, n_high = min(helps), max(helps)
    follows = "; ".join(f"n = {f['n_step']}: {f['answer']}" for f in v["follows"])
    older = {e["n_step"]: decide(e) or "cannot tell" for e in result["age_at_equal_ratio"]}
    return [
        "",
        "## Compared with the literature",
        "",
        f"Findings of {FEDUS}, Atari with Dopamine, and ours on this game:",
        "",
        "- Capacity with 1-step DQN: they report that a larger memory helps Rainbow but not DQN. "
        f"Ours at n = {n1}: {helps[n1]}. " + _compare(result, helps[n1], "no"),
        "- n-step returns: they find the n-step return is the Rainbow component that makes the larger memory pay "
        "off (their study adding Rainbow's components to DQN one at a time). "
        f"Ours, capacity at n = {n_high}: {helps[n_high]}; larger than at n = {n1}: {v['interaction']['answer']}. "
        + _compare(result, v["interaction"]["answer"], "yes"),
        "- Replay ratio against oldest-policy age: varying capacity and the oldest-policy age separately for "
        "Rainbow, they report that a younger oldest policy helps at a fixed capacity, and that with the replay "
        "ratio held fixed a larger memory (so an older oldest policy) still helps. Ours, a memory 4 times larger at "
        f"the same ratio, n = {n_high}: {older[n_high]}; does the score follow the ratio or the age: {follows}. "
        + _compare(result, older[n_high], "yes"),
    ]


def _compare(result: dict, ours: str, theirs: str) -> str:
    """Whether our answer ``ours`` agrees with Fedus et al.'s (``theirs``, yes or no), and where it differs,
    the likely reasons, stated as hypotheses. An effect we do not detect neither differs from their "yes" nor
    confirms their "no"."""
    if ours.startswith("cannot tell"):
        return f"We cannot compare yet: {result['seeds']} seeds give no interval."
    if ours == theirs:
        return "We agree."
    if ours == "not detectably" and theirs == "no":
        return "Consistent with theirs: we detect no effect either (which does not show there is none)."
    short = "short CPU runs" if result["quick"] else f"{result['total_steps']} steps per run"
    reasons = (
        "plain DQN rather than Rainbow, an easier game than Atari's, "
        f"{short} (a memory of a few thousand transitions already covers much of what the agent sees)"
    )
    if ours == "not detectably":
        return f"We do not detect it at {result['seeds']} seeds (our interval includes 0); possible reasons: {reasons}."
    return f"We differ; likely reasons (hypotheses, not facts): {reasons}."


def _figures(result: dict) -> list[str]:
    files = ", ".join(f"`{f}`" for f in result["figures"])
    return [
        "",
        f"Figures: {files}; every run: `runs.csv`; seed means: `curves.csv`; labelled results: `sweeps/*/results.nc`.",
        "",
        *(f"![{f}]({f})" for f in result["figures"]),
    ]


def _scores(result: dict) -> list[str]:
    return _grid(result, "auc", "Score (mean training return over the run): IQM over seeds [95% CI]")


def _finals(result: dict) -> list[str]:
    return _grid(result, "final", "Final greedy return: IQM over seeds [95% CI]")


SECTIONS = (_header, _answers, _contrasts, _scores, _finals, _adaptive, _literature, _figures)
"""The sections of ``report.md``, in order: each a function of the study's result to its lines."""


def report(result: dict) -> str:
    """``report.md``'s text of the study ``result`` (a ``study.json``): the sections of :data:`SECTIONS` in order."""
    return "\n".join(line for section in SECTIONS for line in section(result)) + "\n"


def label(result: dict) -> str:
    """How a study ran, for the README's table: ``quick (CPU), 3 × 6000`` or ``full, 100 × 200000``."""
    text = "quick (CPU)" if result["quick"] else "full"
    if result.get("steps_override"):
        text += " (cut short)"
    (lost, _), (unscored, _) = by_stage(result, "diverged"), by_stage(result, "unscored")
    return (
        f"{text}, {result['seeds']} × {result['total_steps']}"
        + (f", {lost} runs diverged" if lost else "")
        + (f", {unscored} runs without a finished episode" if unscored else "")
    )


def summary_table(results: list[dict]) -> str:
    """Markdown: one row per game: its answers, each with its paired contrast."""
    rows = []
    for r in results:
        v = r["verdict"]
        helps = [
            f"n = {c['n_step']}: {c['answer']}, {interval(e)}"
            for c, e in zip(v["capacity_helps"], r["capacity_effect"])
        ]
        follows = [f"n = {f['n_step']}: {f['answer']}" for f in v["follows"]]
        rows.append(
            [
                r["env"],
                label(r),
                "; ".join(helps),
                f"{v['interaction']['answer']}, {interval(r['interaction'])}",
                "; ".join(follows),
            ]
        )
    header = ["game", "mode, seeds × steps", "larger memory helps (largest − smallest, ratio 1)"]
    header += ["larger with n = 3 (interaction)", "score follows"]
    return "\n".join(table(header, rows))
