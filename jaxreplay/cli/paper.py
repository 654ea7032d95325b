"""``jaxreplay reproduce`` and ``jaxreplay study``: the paper's figures and claims, and the DQN replay study."""

from __future__ import annotations

import argparse
import functools

from jaxreplay.cli.common import named_as_options, positive

# The library's fields these commands set, by the option that sets them (its errors are said of the option).
OPTIONS = {"steps": "--steps", "seeds": "--seeds", "chunk_size": "--chunk-size", "env_id": "--env"}


def _as_options(handler):
    """``handler`` with a library error about one of ``OPTIONS`` said of the option the user typed."""

    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace) -> int:
        with named_as_options(OPTIONS):
            return handler(args)

    return wrapped


def _scale(parser, default: str, quick_help: str, full_help: str) -> None:
    """``--quick`` and ``--full`` on every command that has a scale (one meaning each: a CPU's scale, the
    paper's), mutually exclusive; ``default`` is the scale the command runs without either. Sets
    ``args.quick`` (False: the paper's scale)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", dest="quick", action="store_true", help=quick_help)
    group.add_argument("--full", dest="quick", action="store_false", help=full_help)
    parser.set_defaults(quick=default == "quick")


def add_reproduce_parser(commands) -> None:
    """Declare ``jaxreplay reproduce`` (linesearch, dqn, all, readme) among ``commands`` (argparse's subparsers)."""
    from jaxreplay.paper.reproduce.settings import ENVS  # the games of the paper (no JAX import)

    reproduce = commands.add_parser("reproduce", help="reproduce the paper's figures and claims")
    targets = reproduce.add_subparsers(dest="target", metavar="TARGET", required=True)
    rls = targets.add_parser("linesearch", help="every LineSearch figure, metric_grid.csv and report.md")
    rls.add_argument("--out", required=True, help="output folder")
    _scale(
        rls,
        "quick",
        "a CPU's resolution (the default; about 2 minutes on 2 cores)",
        "the paper's resolution (minutes, not seconds)",
    )
    rls.add_argument("--seeds", type=int, default=None, help="ER/aER seeds per setting (pER gets a quarter)")
    rls.add_argument("--quiet", action="store_true", help="no progress bar")
    rls.set_defaults(handler=_reproduce)
    rdq = targets.add_parser("dqn", help="the paper's fixed-vs-adaptive DQN comparison for one game")
    rdq.add_argument("--env", required=True, choices=ENVS)
    rdq.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    rdq.add_argument("--seeds", type=int, default=None, help="seeds per setting (default 4 quick, 100 otherwise)")
    _scale(rdq, "full", "shortened runs for a CPU", "the paper's run lengths (the default)")
    rdq.add_argument("--tuned", action="store_true", help="CartPole: a configuration that learns (not the paper's)")
    rdq.add_argument("--steps", type=int, default=None, help="cut every run to this many steps (smoke runs)")
    rdq.add_argument("--quiet", action="store_true", help="no progress bar")
    rdq.set_defaults(handler=_reproduce)
    ral = targets.add_parser("all", help="LineSearch and the three DQN games: every figure and one claims report")
    ral.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    _scale(ral, "full", "CPU scale: about 3 minutes on 2 cores", "the paper's scale (the default)")
    ral.add_argument("--seeds", type=int, default=None, help="DQN seeds per setting (default 4 quick, 100 otherwise)")
    ral.add_argument("--env", action="append", choices=ENVS, help="only this DQN game (repeatable; default all three)")
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


@_as_options
def _reproduce(args: argparse.Namespace) -> int:
    if args.seeds is not None:
        positive("seeds", args.seeds)
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
            published = reproduce_dqn.PAPER_PERCENT[args.env][N0]
            print(
                f"aER from {N0}: share of seeds beating the averaged static memory "
                f"{reproduce_dqn.share_text(p, published)} (paper {published:.0f}%)"
            )
        print(
            f"wrote {len(summary['figures'])} figures, {summary['csv']} and {summary['report']} "
            f"in {summary['runtime_s']:.0f} s"
        )
        return 0
    from jaxreplay.paper.reproduce import linesearch as reproduce_linesearch

    summary = reproduce_linesearch.reproduce(args.out, full=not args.quick, seeds=args.seeds, progress=not args.quiet)
    print(
        f"wrote {len(summary['figures'])} figures, {summary['csv']} and {summary['report']} "
        f"in {summary['runtime_s']:.0f} s"
    )
    return 0


def _reproduce_readme(args: argparse.Namespace) -> int:
    from jaxreplay.paper.reproduce import paper

    path = paper.readme_from(args.dir, args.readme)
    print(f"wrote the claims table of {args.dir}/claims.json into {path}")
    return 0


def add_study_parser(commands) -> None:
    """Declare ``jaxreplay study`` (dqn, readme, refresh, replay, replay-readme) among ``commands``
    (argparse's subparsers)."""
    from jaxreplay.paper.reproduce.settings import ENVS  # no JAX import

    st = commands.add_parser(
        "study", help="the DQN replay study (dqn) and the capacity x ratio x n-step replay study (replay)"
    )
    kinds = st.add_subparsers(dest="kind", metavar="KIND", required=True)
    sd = kinds.add_parser("dqn", help="one game (or all) of the DQN replay study")
    sd.add_argument("--env", required=True, choices=ENVS + ("all",))
    sd.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    _scale(
        sd, "full", "CPU quick mode: shortened runs, fewer sizes and variants", "the study's full scale (the default)"
    )
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
    sf = kinds.add_parser(
        "refresh",
        help="recompute a finished study's statistics and verdict from its runs.csv by today's rules (no runs)",
    )
    sf.add_argument("dirs", nargs="+", help="study output folders, of either study (each holding study.json)")
    sf.set_defaults(handler=_study)
    _add_replay_parsers(kinds)


def _add_replay_parsers(kinds) -> None:
    """``jaxreplay study replay`` and ``jaxreplay study replay-readme`` among ``kinds`` (``study``'s subparsers)."""
    from jaxreplay.paper.reproduce.replay_study.settings import GAMES  # no JAX import

    rp = kinds.add_parser("replay", help="capacity x replay ratio x n-step for one game (after Fedus et al. 2020)")
    rp.add_argument("--env", required=True, choices=tuple(GAMES))
    rp.add_argument("--out", required=True, help="output folder (rerun the same command to resume)")
    _scale(rp, "full", "CPU quick mode: short runs, 3 seeds, labelled quick", "the presets' run lengths (the default)")
    rp.add_argument(
        "--seeds", type=int, default=None, help="seeds per setting (default 3 quick, else 100; 20 for MinAtar)"
    )
    rp.add_argument("--steps", type=int, default=None, help="cut every run to this many steps, a multiple of 20")
    rp.add_argument("--chunk-size", type=int, default=None, help="runs per compiled call (default 4 x seeds)")
    rp.add_argument("--quiet", action="store_true", help="no progress bar")
    rp.set_defaults(handler=_replay_study)
    rr = kinds.add_parser("replay-readme", help="write the summary of finished replay studies into a README block")
    rr.add_argument("dirs", nargs="+", help="replay study output folders (or folders holding one per game)")
    rr.add_argument("--readme", required=True, metavar="docs/replay_study.md")
    rr.add_argument("--note", default="", help="a line written above the table")
    rr.set_defaults(handler=_replay_study)


@_as_options
def _replay_study(args: argparse.Namespace) -> int:
    from jaxreplay.paper.reproduce import replay_study

    if args.kind == "replay-readme":
        path = replay_study.update_readme(args.readme, args.dirs, note=args.note)
        print(f"wrote the replay-study block of {path} from {', '.join(args.dirs)}")
        return 0
    for name in ("seeds", "steps", "chunk_size"):
        if getattr(args, name) is not None:
            positive(name.replace("_", "-"), getattr(args, name))
    if args.steps is not None and args.steps % 20:
        raise ValueError(f"--steps must be a multiple of 20 (whole aER checks), got {args.steps}.")
    from jaxreplay import _files

    _files.check_output_folder(args.out)
    result = replay_study.study(
        args.out,
        args.env,
        quick=args.quick,
        seeds=args.seeds,
        steps=args.steps,
        progress=not args.quiet,
        chunk_size=args.chunk_size,
    )
    print(f"{args.env}: wrote {args.out}/report.md and {args.out}/study.json in {result['runtime_s']:.0f} s")
    print("  " + result["verdict"]["summary"])
    return 0


def _refreshable(folder: str) -> None:
    """ValueError (one line) where ``folder`` cannot be a study's folder for ``study refresh``: a file, or a folder
    without study.json that holds studies in its subfolders (the games' parent: give the games)."""
    import pathlib

    path = pathlib.Path(folder)
    if path.is_file():
        raise ValueError(f"{folder} is a file: give a study's folder (the one holding study.json).")
    games = sorted(p.parent.name for p in path.glob("*/study.json")) if path.is_dir() else []
    if games and not (path / "study.json").exists():
        raise ValueError(
            f"{folder} holds no study.json but studies in its folders {', '.join(games)}: give those "
            f"(e.g. {path / games[0]})."
        )


@_as_options
def _study(args: argparse.Namespace) -> int:
    from jaxreplay.paper.reproduce import study as study_lib

    if args.kind == "readme":
        path = study_lib.update_readme(args.readme, args.dirs, note=args.note)
        print(f"wrote the study block of {path} from {', '.join(args.dirs)}")
        return 0
    if args.kind == "refresh":
        from jaxreplay import _files
        from jaxreplay.paper.reproduce import replay_study

        for d in args.dirs:
            _refreshable(d)
        for d in args.dirs:  # each by the study that wrote it
            replay = _files.owner_of(d) == "study replay"
            result = replay_study.refresh(d) if replay else study_lib.refresh(d)
            old = replay and not replay_study.runs_csv_has_counts(d)
            said = " (its answers only: its runs.csv, if any, predates aER's check counts)" if old else ""
            print(f"{d}{said}: {result['verdict']['summary']}")
        return 0

    for name in ("seeds", "steps", "chunk_size"):  # one line naming the option, before any folder is made
        if getattr(args, name, None) is not None:
            positive(name.replace("_", "-"), getattr(args, name))
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
