"""The whole paper in one command: LineSearch and the three DQN games, one report.

Entry point: :func:`reproduce` (``jaxreplay reproduce all --out DIR
[--quick] [--seeds S] [--readme docs/claims.md]``). It runs, in order,

* ``DIR/linesearch/``: :func:`jaxreplay.paper.reproduce.linesearch.reproduce`
  (every LineSearch figure of the paper and its claims; the ``default``
  resolution with ``quick``, the paper's ``full`` resolution otherwise);
* ``DIR/dqn/<game>/``: :func:`jaxreplay.paper.reproduce.dqn.reproduce` for
  CartPole-v1, MountainCar-v0 and Acrobot-v1 (4 seeds and shortened runs with
  ``quick``; the paper's 100 seeds and run lengths otherwise),

every experiment through the sweep engine (:mod:`jaxreplay.engine.sweep`), and writes

* ``DIR/report.md``: one table of every quantitative claim of the paper next
  to our number (LineSearch claims from the ODE and the simulation, and the
  DQN headline statistic per game and initial memory size), then every figure;
* ``DIR/claims.json``: the same table as data (a list of rows with ``part``,
  ``id``, ``claim``, ``paper``, ``ours``, ``agrees``, ``source``);
* with ``readme=``, the claims table between the ``<!-- claims:begin -->`` and
  ``<!-- claims:end -->`` markers of that file (docs/claims.md's table is
  generated, never typed).

**Resuming.** The DQN sweeps are persisted and resume (see
:mod:`jaxreplay.engine.sweep`); the finished LineSearch part is recorded in
``DIR/linesearch/summary.json`` and skipped when rerun with the same settings.
A run killed in the third game therefore redoes only that game's missing runs.

**Scale.** ``quick`` is sized for a 2-core CPU: 6.4 minutes measured on an idle
2-core AMD EPYC (LineSearch 55 s, CartPole 34 s, MountainCar 179 s, Acrobot 114 s). Without it the DQN part is
the paper's scale (100 seeds per setting, 300k–500k-step runs): meant for an
accelerator, where the seeds of one setting run as one compiled program.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
import time
import warnings
from typing import Iterable, Sequence

from jaxreplay._files import atomic_write, atomic_write_text, clear_outputs, read_json, read_text, refuse_other_owner

__all__ = ["reproduce", "dqn_claims", "claims_table", "replace_block", "update_readme", "tally", "AGREEMENT"]

#: Values of the ``agrees`` column, best first.
AGREEMENT = ("yes", "consistent", "partly", "no", "cannot tell")

# A DQN claim counts as reproduced ("yes") when the paper's share of winning
# seeds lies inside our 95% Clopper–Pearson interval and that interval is
# narrower than this many percentage points; inside but wider is only
# "consistent" (few seeds cannot say much).
_DQN_DECISIVE_WIDTH = 40.0

_README_BEGIN = "<!-- {name}:begin -->"
_README_END = "<!-- {name}:end -->"


def dqn_claims(env_id: str, percent: dict, *, tuned: bool = False) -> list[dict]:
    """Claim rows for one game's DQN headline statistic.

    Args:
        env_id: the game (a key of :data:`jaxreplay.paper.reproduce.dqn.PAPER_PERCENT`).
        percent: ``{N0: statistic}`` as returned by
            :func:`jaxreplay.paper.reproduce.dqn.reproduce` (``percent``, ``low``,
            ``high`` in %, ``wins``, ``n``).
        tuned: the run used the tuned CartPole configuration (said in the row).

    Returns:
        One row per initial memory size ``N0``: ``part``, ``id``, ``claim``,
        ``paper``, ``ours``, ``agrees`` (``yes``: the paper's share is inside
        our 95% interval and the interval is narrower than 40 points;
        ``consistent``: inside a wider one; ``no``: outside), ``source``.
    """
    from jaxreplay.paper.reproduce.dqn import PAPER_PERCENT, share_text

    rows = []
    for N0, stat in percent.items():
        paper = PAPER_PERCENT[env_id][int(N0)]
        inside = stat["low"] <= paper <= stat["high"]
        if "reason" in stat:  # no share at all (no episode finished): nothing to compare
            agrees = "cannot tell"
        elif not inside:
            agrees = "no"
        elif stat["high"] - stat["low"] <= _DQN_DECISIVE_WIDTH:
            agrees = "yes"
        else:
            agrees = "consistent"
        config = " (tuned configuration)" if tuned else ""
        rows.append(
            dict(
                part=f"dqn/{env_id}",
                id=f"dqn_{env_id}_aer_from_{int(N0)}",
                claim=f"{env_id}: aER from N0 = {int(N0)} beats the averaged static memory{config} (share of seeds)",
                paper=f"{paper:.0f}%",
                ours=share_text(stat, paper),
                agrees=agrees,
                source="experiment",
            )
        )
    return rows


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def claims_table(claims: Sequence[dict]) -> str:
    """The claims as a markdown table (columns part, claim, paper, ours, agrees?, source)."""
    lines = ["| part | claim | paper | ours | agrees? | source |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [
        f"| {_cell(c['part'])} | {_cell(c['claim'])} | {_cell(c['paper'])} | {_cell(c['ours'])} | "
        f"{_cell(c['agrees'])} | {_cell(c['source'])} |"
        for c in claims
    ]
    return "\n".join(lines)


def tally(claims: Iterable[dict]) -> str:
    """``"20 yes, 3 partly, 1 no"``: how many claims agree, by value of ``agrees``."""
    counts = {a: 0 for a in AGREEMENT}
    for c in claims:
        counts[c["agrees"]] = counts.get(c["agrees"], 0) + 1
    return ", ".join(f"{n} {a}" for a, n in counts.items() if n)


def replace_block(text: str, name: str, content: str) -> str:
    """Replace what lies between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in ``text``.

    Raises:
        ValueError: the markers are missing, repeated or out of order; ``content`` holds a block marker
            (a ``--note`` with one broke every later update of the README).
    """
    begin, end = _README_BEGIN.format(name=name), _README_END.format(name=name)
    marker = re.search(r"<!--\s*[\w-]+:(begin|end)\s*-->", content)
    if marker:
        raise ValueError(f"the {name} block's text holds the block marker {marker.group(0)!r} (in --note?): remove it.")
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(
            f"expected exactly one '{begin}' followed by one '{end}'; add them where the "
            f"generated {name} block belongs."
        )
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{content.strip()}\n{end}{tail}"


def update_readme(path: str | pathlib.Path, claims: Sequence[dict], note: str, block: str = "claims") -> pathlib.Path:
    """Write the claims table (with ``note`` above it) into the ``block`` block of ``path``
    (``claims``; :func:`reproduce` writes ``claims-gpu`` when JAX's backend is a GPU, so a CPU
    quick run and a paper-scale GPU run keep their own tables)."""
    path = pathlib.Path(path)
    atomic_write_text(path, replace_block(read_readme(path, block), block, f"{note}\n\n{claims_table(claims)}"), True)
    return path


def read_readme(path: str | pathlib.Path, block: str) -> str:
    """The text of the README ``path``, which must hold one ``block`` block; ValueError, one line naming
    the file, when it is missing, a folder, not UTF-8 or without the block's markers."""
    text = read_text(path, "the README")
    try:
        replace_block(text, block, "")
    except ValueError as e:
        raise ValueError(f"the README {path}: {e}") from None
    return text


def _claims_block(backend: str) -> str:
    """The README block of a run on ``backend``: ``claims`` for the CPU, ``claims-<backend>`` otherwise."""
    return "claims" if backend == "cpu" else f"claims-{backend}"


def read_claims(path: pathlib.Path) -> tuple[list, dict, str]:
    """``(claims, context, backend)`` of the ``claims.json`` at ``path`` (as :func:`reproduce` writes it);
    ValueError, one line naming the file, when it is unreadable, not JSON or of another shape."""
    record = read_json(path, "the claims file", ("context", "claims"))
    claims, context = record["claims"], record["context"]
    try:
        backend = context["devices"].rsplit("(", 1)[-1].rstrip(")")
        claims_table(claims)  # every claim has its columns
        readme_note(dict(context, resumed=context.get("resumed", {})), claims)  # and the context its fields
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise ValueError(
            f"the claims file {path} is not one `jaxreplay reproduce all` wrote ({type(e).__name__}: {e})."
        ) from None
    return claims, context, backend


def readme_note(context: dict, claims: Sequence[dict]) -> str:
    """The line above a README claims table: command, date, devices, scale, time and tally.

    When the run resumed parts that earlier calls computed into the same folder, its own
    runtime is only the assembling: the note names what was resumed instead of a misleading
    total (the earlier calls' times are in their logs)."""
    resumed = context.get("resumed") or {}
    parts = (["LineSearch"] if resumed.get("linesearch") else []) + [
        f"{env} ({done}/{total} runs)" for env, (done, total) in (resumed.get("dqn_runs") or {}).items() if done
    ]
    timing = (
        f"{context['runtime_s'] / 60:.0f} min"
        if not parts
        else f"assembled in {context['runtime_s']:.0f} s from parts that earlier calls computed into the same "
        f"folder: {', '.join(parts)}"
    )
    return (
        f"Generated by `{context['command']} --out DIR --readme docs/claims.md` on {context['date']} "
        f"({context['devices']}, {timing}; LineSearch mode `{context['linesearch_mode']}`, DQN "
        f"{context['dqn_seeds']} seeds per setting): {tally(claims)}."
    )


def readme_from(out_dir: str | pathlib.Path, readme: str | pathlib.Path) -> pathlib.Path:
    """Write the claims table of a finished ``reproduce all`` run (``out_dir/claims.json``) into
    ``readme``: its ``claims`` block for a CPU run, ``claims-<backend>`` otherwise (the backend
    the run recorded, not this machine's), so a paper-scale GPU run's table can be written on
    another machine.

    Raises:
        FileNotFoundError: ``out_dir`` holds no ``claims.json`` (run ``reproduce all`` first).
    """
    path = pathlib.Path(out_dir) / "claims.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run `jaxreplay reproduce all --out {out_dir}` first.")
    claims, context, backend = read_claims(path)
    if "resumed" not in context:  # written before runs recorded it: read it from the folder
        context["resumed"] = _resumed_from_files(pathlib.Path(out_dir), context)
    return update_readme(readme, claims, readme_note(context, claims), block=_claims_block(backend))


def _resumed_from_files(out: pathlib.Path, context: dict) -> dict:
    """What the run that wrote ``out/claims.json`` resumed, from the files it left: each DQN
    sweep's ``summary.json`` (runs it found finished) and the LineSearch part's recorded
    compute time against the time that run spent on it."""
    dqn_runs = {}
    for env in context.get("dqn_steps", {}):
        done = total = 0
        for summary in sorted((out / "dqn" / env / "sweeps").glob("*/summary.json")):
            stats = json.loads(summary.read_text())
            done, total = done + int(stats["runs_resumed"]), total + int(stats["runs"])
        dqn_runs[env] = [done, total]
    ls = out / "linesearch" / "summary.json"
    computed = json.loads(ls.read_text()).get("runtime_s", 0.0) if ls.exists() else 0.0
    return dict(linesearch=bool(computed > 2 * context["part_seconds"].get("linesearch", 0.0)), dqn_runs=dqn_runs)


def _digest(path: pathlib.Path) -> str | None:
    """SHA-256 of the file at ``path`` (None if there is none)."""
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _digests(folder: pathlib.Path, names) -> dict[str, str | None]:
    """:func:`_digest` of each file ``names`` in ``folder``, by name."""
    return {name: _digest(folder / name) for name in names}


def _parts(out: pathlib.Path, envs, mode: str, seeds, options: dict) -> tuple[dict, dict, dict]:
    """``reproduce``'s parts in ``out``: ``(linesearch summary, {env: DQN summary}, part seconds)``.

    The earlier run's table goes first: a rerun killed before the end must not leave it beside new parts
    (`reproduce readme` would publish it). It is put back where the call is refused before any part wrote
    anew (a rerun refused for memory deleted a finished folder's table)."""
    from jaxreplay.paper.reproduce import dqn as reproduce_dqn

    earlier = {name: (out / name).read_bytes() for name in _TABLE if (out / name).is_file()}
    clear_outputs(out, _TABLE)
    part_seconds: dict[str, float] = {}
    ls: dict = {}
    dqn: dict[str, dict] = {}
    try:
        start = time.perf_counter()
        ls.update(_linesearch_part(out / "linesearch", mode, None, options["seed"], options["progress"]))
        part_seconds["linesearch"] = time.perf_counter() - start
        for env_id in envs:
            start = time.perf_counter()
            dqn[env_id] = reproduce_dqn.reproduce(out / "dqn" / env_id, env_id, seeds=seeds, **options)
            part_seconds[env_id] = time.perf_counter() - start
    except (ValueError, MemoryError):  # (refused: a part plans before it computes; a kill leaves it deleted)
        if (not ls or ls.get("resumed")) and all(s["runs_resumed"] == s["runs"] for s in dqn.values()):
            for name, data in earlier.items():
                atomic_write(out / name, data)
        raise
    return ls, dqn, part_seconds


_TABLE = ("claims.json", "report.md")  # what `reproduce all` writes itself, beside its parts' folders


def _refuse_other_commands_parts(out: pathlib.Path, envs) -> None:
    """ValueError where a part's folder holds another command's output (a sweep's summary.json was taken for the
    LineSearch part's record, deleted and replaced): before anything is claimed or deleted."""
    refuse_other_owner(out / "linesearch", "reproduce linesearch")
    for env_id in envs:
        refuse_other_owner(out / "dqn" / env_id, "reproduce dqn")


def _linesearch_part(out: pathlib.Path, mode: str, seeds, seed: int, progress: bool) -> dict:
    from jaxreplay.engine import results
    from jaxreplay.paper.reproduce import linesearch

    record = out / "summary.json"
    settings = dict(mode=mode, seeds=seeds, seed=seed)
    if record.exists():
        try:
            previous = read_json(record, "the LineSearch part's record", keys=("settings", "figures"))
        except ValueError as e:  # a damaged record only costs the part's recomputation: say so, and recompute
            warnings.warn(f"{e} Its LineSearch part is computed again.", stacklevel=2)
            previous = {}
        recorded = previous.get("outputs_sha256")
        if (
            previous.get("settings") == settings
            # every file it wrote is in the folder as it wrote it: not truncated, deleted, or rewritten by a
            # `reproduce linesearch` there since (a record from before the digests: computed again)
            and isinstance(recorded, dict)
            and None not in recorded.values()
            and recorded == _digests(out, recorded)
        ):
            previous["resumed"] = True
            # Its paths where the folder is now (a record written before it named its files within the folder
            # kept the old ones: the report's links were then made relative to the wrong folder).
            return {**previous, **_files_in(previous, out)}
    record.unlink(missing_ok=True)  # (a run killed below must not leave the earlier run's record beside its files)
    summary = results.jsonable(linesearch.reproduce(out, mode=mode, seeds=seeds, seed=seed, progress=progress))
    summary["settings"] = settings
    written = [*summary["figures"], pathlib.Path(summary["csv"]).name, pathlib.Path(summary["report"]).name]
    summary["outputs_sha256"] = _digests(out, written)
    # The record names its files within the folder (a folder moved or copied keeps its record true); the
    # summary returned has the paths, as a resumed one does.
    within = _files_in(summary, pathlib.PurePath("."))
    atomic_write_text(record, json.dumps({**summary, **within}, indent=1, allow_nan=True))
    summary["resumed"] = False
    return summary


def _files_in(summary: dict, folder: pathlib.PurePath) -> dict:
    """The LineSearch part's ``out_dir``, ``figures``, ``csv`` and ``report`` as paths in ``folder`` (``.``:
    names within the part's folder), from its ``summary`` (paths anywhere, or names)."""
    return dict(
        out_dir=str(folder),
        figures={name: str(folder / name) for name in summary["figures"]},
        **{key: str(folder / pathlib.PurePath(summary[key]).name) for key in ("csv", "report") if key in summary},
    )


def reproduce(
    out_dir,
    *,
    quick: bool = False,
    seeds: int | None = None,
    progress: bool = True,
    seed: int = 0,
    envs: Sequence[str] | None = None,
    readme: str | pathlib.Path | None = None,
    linesearch_mode: str | None = None,
    dqn_steps: int | None = None,
) -> dict:
    """Reproduce every experiment of the paper into ``out_dir`` and write one report.

    Args:
        out_dir: output folder (created); layout in the module docstring.
        quick: CPU scale (LineSearch ``default`` mode, DQN 4 seeds and
            shortened runs); otherwise the paper's scale.
        seeds: DQN seeds per setting (default 4 with ``quick``, else 100).
        progress: progress bars on stderr.
        seed: base PRNG seed of every part.
        envs: DQN games to run (default all three), each once; run and reported in the paper's order
            (:data:`~jaxreplay.paper.reproduce.settings.ENVS`), whatever order they are given in.
        readme: also write the claims table into this markdown file's
            ``claims`` block (see :func:`update_readme`).
        linesearch_mode: override the LineSearch mode (``"tiny"`` for tests).
        dqn_steps: cut every DQN run to this many steps (tests, smoke runs).

    Returns:
        A dict: ``report`` and ``claims_json`` (paths), ``claims`` (rows),
        ``linesearch`` (that part's summary), ``dqn`` (game → summary),
        ``runtime_s`` and ``part_seconds``.
    """
    import jax

    from jaxreplay import _validation
    from jaxreplay.paper.reproduce import settings as paper_settings

    given = tuple(paper_settings.ENVS if envs is None else envs)
    unknown = [e for e in given if e not in paper_settings.ENVS]
    if unknown or not given:
        raise ValueError(f"envs must be a non-empty subset of {paper_settings.ENVS}, got {given!r}.")
    # A game named twice ran twice, the second pass resuming the first's runs and publishing them as "computed by
    # earlier calls", with its time; and the published tables followed the order given, under a command recorded
    # the same for every order (found by a probe). Once each, in the paper's order.
    twice = sorted({e for e in given if given.count(e) > 1})
    if twice:
        raise ValueError(f"envs names {', '.join(twice)} more than once (--env): give each game once.")
    envs = tuple(e for e in paper_settings.ENVS if e in given)
    if seeds is not None:
        seeds = _validation.check_static_int("seeds", seeds, low=1)
    if readme is not None:  # checked now, not after the runs
        read_readme(readme, _claims_block(jax.default_backend()))
    t0 = time.perf_counter()
    from jaxreplay.paper.reproduce.study.writer import writing

    # One writer at a time (another call's files would mix with this one's).
    _refuse_other_commands_parts(pathlib.Path(out_dir), envs)
    with writing(out_dir, "reproduce all", _TABLE) as (out, _):
        mode = linesearch_mode or ("default" if quick else "full")
        ls, dqn, part_seconds = _parts(
            out, envs, mode, seeds, dict(quick=quick, progress=progress, seed=seed, steps=dqn_steps)
        )
        claims = [
            dict(part="linesearch", **{k: c[k] for k in ("id", "claim", "paper", "ours", "agrees", "source")})
            for c in ls["claims"]
        ]
        for env_id, summary in dqn.items():
            claims += dqn_claims(env_id, summary["percent"])
        runtime = time.perf_counter() - t0
        devices = jax.devices()
        context = dict(
            date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            command="jaxreplay reproduce all"
            + (" --quick" if quick else "")
            + (f" --seeds {seeds}" if seeds else "")
            + ("".join(f" --env {e}" for e in envs) if set(envs) != set(paper_settings.ENVS) else ""),
            devices=f"{len(devices)} × {devices[0].device_kind} ({jax.default_backend()})",
            linesearch_mode=mode,
            dqn_seeds=next(iter(dqn.values()))["seeds"] if dqn else None,
            dqn_steps={e: s["total_steps"] for e, s in dqn.items()},
            runtime_s=runtime,
            part_seconds=part_seconds,
            # What this call found finished in `out_dir` (computed by earlier calls): its own
            # runtime then measures assembling, not computing, and the README note says so.
            resumed=dict(
                linesearch=bool(ls.get("resumed")),
                dqn_runs={e: [int(s["runs_resumed"]), int(s["runs"])] for e, s in dqn.items()},
            ),
        )
        claims_path = out / "claims.json"
        atomic_write_text(claims_path, json.dumps(dict(context=context, claims=claims), indent=1))
        report_path = out / "report.md"
        atomic_write_text(report_path, _report(out, claims, ls, dqn, context))
        if readme is not None:
            update_readme(readme, claims, readme_note(context, claims), block=_claims_block(jax.default_backend()))
        return dict(
            report=report_path,
            claims_json=claims_path,
            claims=claims,
            linesearch=ls,
            dqn=dqn,
            runtime_s=runtime,
            part_seconds=part_seconds,
        )


def _report(out: pathlib.Path, claims, ls: dict, dqn: dict, context: dict) -> str:
    from jaxreplay.paper.reproduce import dqn as reproduce_dqn
    from jaxreplay.paper.reproduce import linesearch as reproduce_linesearch

    def rel(path) -> str:
        # Lexical (no symbolic link followed): a part folder that links elsewhere is still the part's folder.
        return pathlib.Path(os.path.relpath(os.path.abspath(path), os.path.abspath(out))).as_posix()

    lines = [
        "# Liu & Zou (2018), *The Effects of Memory Replay in Reinforcement Learning*: reproduced",
        "",
        f"`{context['command']}`, {context['date']}, on {context['devices']}; "
        f"{context['runtime_s'] / 60:.1f} min in total ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in context["part_seconds"].items())
        + (", LineSearch reused from an earlier run" if ls.get("resumed") else "")
        + ").",
        "",
        f"LineSearch: mode `{context['linesearch_mode']}` (theory: the replay ODE; experiment: seed-averaged "
        f"simulation). DQN: {context['dqn_seeds']} seeds per setting, "
        + ", ".join(f"{e} {s:,} steps per run" for e, s in context["dqn_steps"].items())
        + ".",
        "",
        f"## Claims ({len(claims)}: {tally(claims)})",
        "",
        "`agrees?` for LineSearch claims is decided by the reproduction's own rule (see "
        "`linesearch/report.md`); for DQN, `yes` means the paper's share of winning seeds is inside our 95% "
        f"Clopper–Pearson interval and the interval is narrower than {_DQN_DECISIVE_WIDTH:.0f} points, "
        "`consistent` inside a wider one, `no` outside.",
        "",
        claims_table(claims),
        "",
        "## LineSearch figures",
        "",
        "Details, choices where the paper is silent, and the CSV: [`linesearch/report.md`](linesearch/report.md).",
        "",
    ]
    for name, desc in reproduce_linesearch.FIGURES.items():
        if name in ls["figures"]:
            lines += [f"### {desc}", "", f"![{name}]({rel(ls['figures'][name])})", ""]
    lines += ["## DQN: fixed vs adaptive memory (Fig. 4)", ""]
    for env_id, summary in dqn.items():
        lines += [
            f"### {env_id}",
            "",
            f"Report: [`{rel(summary['report'])}`]({rel(summary['report'])}); every run: `{rel(summary['csv'])}`.",
            "",
        ]
        lines += [reproduce_dqn.iqm_table(summary["iqm"]), ""]
        for name, path in summary["figures"].items():
            lines += [f"![{env_id} {name}]({rel(path)})", ""]
    if any(e == "CartPole-v1" for e in dqn):
        lines += [
            "Under the paper's own CartPole setting (γ = 0.9, step size 2e-5) our DQN does not learn "
            "CartPole, so its headline row compares two non-learning agents; "
            "`jaxreplay reproduce dqn --env CartPole-v1 --tuned` runs a configuration that learns.",
            "",
        ]
    return "\n".join(lines) + "\n"
