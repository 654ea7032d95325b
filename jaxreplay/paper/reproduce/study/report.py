"""The study's text, from a ``study.json``: ``report.md`` (:func:`report`, one function per section)
and the README's summary table of several games (:func:`summary_table`)."""

from __future__ import annotations

import math

from jaxreplay.paper.reproduce.dqn import percent_text
from jaxreplay.paper.reproduce.study.text import (
    cannot_tell,
    find,
    fmt,
    interval,
    runtime,
    score,
    table,
    why_no_interval,
)


def _few_seeds_note(seeds: int) -> list[str]:
    """The report's paragraph (as lines) saying that ``seeds`` seeds give no interval; none if they do."""
    from jaxreplay.engine.results import min_seeds_for_interval

    need = min_seeds_for_interval()
    if seeds >= need:
        return []
    return [
        f"With {seeds} seeds there is no 95% interval (an interval of a mean or IQM needs at "
        f"least {need} seeds to reach 95% coverage), so no difference is called significant and the verdict "
        "cannot tell.",
        "",
    ]


def _header(result: dict) -> list[str]:
    mode = "quick mode (CPU; shortened runs, fewer sizes and variants)" if result["quick"] else "paper-length runs"
    if result.get("steps_override"):
        mode += f", cut to {result['steps_override']} steps (a smoke run)"
    return [
        f"# DQN replay study: {result['env']}",
        "",
        f"{result['seeds']} seeds per setting, {mode}: {result['total_steps']} environment steps per run; "
        f"optimizer reading: {result['optimizer_reading']}; {runtime(result)}.",
        "",
        *_few_seeds_note(result["seeds"]),
    ]


def _verdict(result: dict) -> list[str]:
    return [
        "## Verdict",
        "",
        result["verdict"]["summary"],
        "",
        *(f"- {line}" for line in result["verdict"]["per_start"]),
        "",
        "Whether memory size matters is tested over every static size at once: the spread of their IQMs "
        "(largest minus smallest) against the same spread with the sizes relabelled at random within each seed "
        f"(a permutation test, significant below p = 0.05). The best and worst of the {len(result['response'])} "
        "sizes are then compared on the same seeds (IQM difference, seeds resampled in pairs); that interval "
        "measures the effect but is favoured by the choice of its two ends, so it is not the test.",
    ]


def _response(result: dict) -> list[str]:
    counted = all("diverged" in r for r in result["response"])  # (a study.json from before the count: none)
    return ["", "## Memory-size response (static memories)", ""] + table(
        ["memory size", "score IQM [95% CI]", "final greedy return IQM [95% CI]"] + ["diverged runs"] * counted,
        [[r["memory_size"], score(r), score(r, "final")] + [r["diverged"]] * counted for r in result["response"]],
    )


def _adaptive(result: dict) -> list[str]:
    header = ["start", "mean size", "final size", "grow share", "score IQM [95% CI]", "vs best static", "vs start"]
    header += ["vs random walk", "vs fixed at mean size"]
    aer = table(
        header,
        [
            [
                a["initial_size"],
                f"{a['mean_size']:.0f}",
                f"{a['final_size_mean']:.0f}",
                fmt(a["grow_fraction"], ".2f"),
                score(a),
                interval(a["vs_best_static"]),
                interval(a["vs_start_static"]),
                interval(a["vs_random_walk"]),
                interval(a["vs_fixed_at_mean"]),
            ]
            for a in result["adaptive"]
        ],
    )
    controls = table(
        ["start", "random walk: final size, grow share, score", "fixed at aER's mean size: size, score"],
        [
            [
                c["initial_size"],
                f"{c['random_walk_final_size_mean']:.0f}, "
                f"{fmt(c['random_walk_grow_fraction'], '.2f')}, {fmt(c['random_walk_score_iqm'])}",
                f"{c['fixed_at_mean_size']}, {fmt(c['fixed_at_mean_score_iqm'])}",
            ]
            for c in result["controls"]
        ],
    )
    paired = "Paired differences: IQM of aER's scores minus IQM of the other's, over the same seeds (seeds "
    paired += "resampled in pairs: 95% expanded percentile-bootstrap interval)."
    return ["", "## aER from each start, and its controls", "", *aer, "", paired, "", *controls]


def _checks(result: dict) -> list[str]:
    header = ["start", "checks per run", "grow share at checks straddling a target copy", "at the others"]
    header += ["checks within 2 SE of no change", "mean change", "mean SE"]
    # (a study whose runs predate the floor count has no such columns)
    forced = all("free_grow_fraction" in a["diagnostics"] for a in result["adaptive"])
    header += ["checks forced by the floor", "grow share of the free checks"] * forced
    lines = ["", "## aER's checks: what drives the decisions", ""] + table(
        header,
        [
            [
                a["initial_size"],
                fmt(d["checks_mean"], ".0f"),
                fmt(d["straddle_grow_fraction"], ".2f"),
                fmt(d["other_grow_fraction"], ".2f"),
                fmt(d["noisy_fraction"], ".2f"),
                fmt(d["change_mean"]),
                fmt(d["noise_mean"]),
            ]
            + [fmt(d.get("forced_fraction"), ".2f"), fmt(d.get("free_grow_fraction"), ".2f")] * forced
            for a in result["adaptive"]
            for d in [a["diagnostics"]]
        ],
    )
    if forced:
        lines += [
            "",
            "A check at the floor (N − k < k) enlarges whatever the sums: after a shrink to it the next check "
            "compares an empty reference window (0 with 0). The grow share of the free checks leaves these out: "
            "what the TD errors decided.",
        ]
    return lines


def _sensitivity(result: dict) -> list[str]:
    default = find(result["sensitivity"], variant="default (aER)")
    title = f"## Sensitivity (one change at a time, aER from {default['initial_size']}, {default['seeds']} seeds)"
    return ["", title, ""] + table(
        ["variant", "final size", "grow share", "score IQM", "vs default aER"],
        [
            [
                s["variant"],
                f"{s['final_size_mean']:.0f}",
                fmt(s["grow_fraction"], ".2f"),
                fmt(s["score_iqm"]),
                "–" if s["vs_default"] is None else interval(s["vs_default"]),
            ]
            for s in result["sensitivity"]
        ],
    )


def _other_reading(result: dict) -> list[str]:
    if not result["other_reading"]:
        return []
    o = result["other_reading"]
    rows = [[f"fixed {r['memory_size']}", score(r)] for r in o["response"]]
    rows += [[f"aER from {a['initial_size']} (ends at {a['final_size_mean']:.0f})", score(a)] for a in o["adaptive"]]
    return ["", f"## The other optimizer reading: {o['reading']}", ""] + table(["setting", "score IQM [95% CI]"], rows)


def _paper_share(result: dict) -> list[str]:
    static_sizes = find(result["paper_share"], initial_size=min(result["starts"]))["static_sizes"]
    return [
        "",
        "## The paper's statistic",
        "",
        "Share of aER seeds whose score beats the mean score of every "
        "static run (static sizes: " + ", ".join(str(n) for n in static_sizes) + ").",
        "",
    ] + table(
        ["start", "share", "95% CI (Clopper–Pearson)"],
        [
            [p["initial_size"], percent_text(p["percent"]), f"[{percent_text(p['low'])}, {percent_text(p['high'])}]"]
            if p.get("percent") is not None and math.isfinite(p["percent"])
            else [p["initial_size"], "n/a", f"no share: {p.get('reason', 'no reason stored')}"]
            for p in result["paper_share"]
        ],
    )


def _figures(result: dict) -> list[str]:
    return [
        "",
        "Figures: " + ", ".join(f"`{f}`" for f in result["figures"]) + "; every run: `runs.csv`; seed means: "
        "`curves.csv`; labeled results: `sweeps/*/results.nc`.",
        "",
        *(f"![{f}]({f})" for f in result["figures"]),
    ]


SECTIONS = (_header, _verdict, _response, _adaptive, _checks, _sensitivity, _other_reading, _paper_share, _figures)


def report(result: dict) -> str:
    """``report.md``'s text of the study ``result`` (a ``study.json``): the sections of :data:`SECTIONS` in order."""
    return "\n".join(line for section in SECTIONS for line in section(result)) + "\n"


def label(result: dict) -> str:
    """How a study ran, for the README's table: ``full, 100 × 40000`` (paper-length runs) or
    ``quick, 3 × 10000``; ``(cut short)`` after a ``--steps`` smoke run, the optimizer reading if not Adam."""
    text = "quick" if result["quick"] else "full"
    if result.get("steps_override"):
        text += " (cut short)"
    text += f", {result['seeds']} × {result['total_steps']}"
    if result.get("optimizer_reading", "adam") != "adam":
        text += f", {result['optimizer_reading']} reading"
    return text


def summary_table(results: list[dict]) -> str:
    """Markdown: one row per game and aER start (response optimum, aER's sizes and scores, controls).

    Args:
        results: ``study.json`` contents (from :func:`~jaxreplay.paper.reproduce.study.study`), one per game.
    """
    rows = []
    for r in results:
        effect, matters = r["memory_size_effect"], r["verdict"]["memory_size_matters"]
        why = r["verdict"].get("memory_size_matters_null_reason") or why_no_interval(effect)
        # (As the verdict says it: a test that finds no difference is "not detectably", not "no".)
        said = cannot_tell(why) if matters is None else "yes" if matters else "not detectably"
        p = (r.get("memory_size_test") or {}).get("p_value")
        said += "" if p is None else f" (p = {fmt(p, '.2g')})"
        rows += [
            [
                r["env"],
                label(r),
                f"{said}: {interval(effect)}",
                r["best_static"],
                a["initial_size"],
                f"{a['mean_size']:.0f}",
                fmt(a["grow_fraction"], ".2f"),
                interval(a["vs_best_static"]),
                interval(a["vs_random_walk"]),
                interval(a["vs_fixed_at_mean"]),
            ]
            for a in r["adaptive"]
        ]
    header = ["game", "mode, seeds × steps", "memory size matters (best − worst static IQM)", "static optimum"]
    header += ["aER from", "mean size", "grow share", "aER − best static", "aER − random walk"]
    header += ["aER − fixed at its mean size"]
    return "\n".join(table(header, rows))
