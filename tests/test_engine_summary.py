"""The sweep's one-line summary names each setup group's chunk size where they differ."""

from jaxreplay.engine.runner import SweepStats


def _stats(**changes):
    base = dict(runs=40, runs_computed=40, runs_resumed=0, chunks=6, chunk_size=8, devices=1, processes=1,
                compilations=2, compile_seconds=1.0, run_seconds=2.0, runs_per_second=20.0, diverged=0,
                bytes_per_run=2**20, memory_budget=2**30)
    return SweepStats(**{**base, **changes})


def test_one_chunk_size_or_each_group_s():
    assert "in 6 chunk(s) of 8 on 1 device(s)" in _stats().describe()
    assert "in 6 chunk(s) of 8 on" in _stats(group_chunk_sizes=(8, 8)).describe()  # groups of one size: as before
    # Two groups of 40 in an 80-run sweep: their chunks of 40, not the sweep's 80 (it said 80).
    assert "in 2 chunk(s) of 40 on" in _stats(chunks=2, chunk_size=80, group_chunk_sizes=(40, 40)).describe()
    line = _stats(group_chunk_sizes=(8, 2, 8)).describe()
    assert "in 6 chunk(s) of 2 / 8 (by setup group) on 1 device(s)" in line


def test_the_line_counts_soft_diverged_runs_where_there_are_some():
    assert "; 1 diverged; ~1.0 MiB per run" in _stats(diverged=1).describe()  # none: the line as before
    line = _stats(diverged=1, soft_diverged=3).describe()
    assert "; 1 diverged; 3 soft-diverged (Q-values beyond every return); ~1.0 MiB per run" in line


def test_the_line_counts_runs_that_made_no_gradient_step_where_there_are_some():
    assert "no gradient step" not in _stats().describe()
    line = _stats(untrained=4).describe()
    assert ("; 0 diverged; 4 made no gradient step (no update due from learning_starts to the run's end: learning "
            "starts too late or the replay ratio is too small; their returns are the untrained network's); ~1.0 MiB "
            "per run") in line
