"""The engine groups a sweep's runs by the static setup they need (``Experiment.setup_groups``).

DQN's runs of replay ratios 0.25, 1 and 4 under ``max_updates_per_unit = 4``:
the ratios 0.25 and 1 need one update slot per step, 4 needs four. Grouped,
they run in two programs (one slot, four slots), chunked apart; mixed
(``group_by_setup=False``) in one program of four slots. The plan is checked
without compiling; one grouped and one mixed sweep (in memory and on disk)
check that every run gets the same bits either way, and that a resume keeps
the grouping.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from jaxreplay.engine import plan as plan_lib
from jaxreplay.engine import sweep as sw
from jaxreplay.experiments import dqn

SETUP = dict(
    env_params={"max_steps_in_episode": 15},
    total_steps=120,
    steps_per_segment=60,
    hidden_sizes=[8],
    max_capacity=64,
    batch_size=8,
    max_updates_per_unit=4,
)
FIXED = {"memory_size": 64, "learning_starts": 20, "epsilon_decay_steps": 100}
# Configurations 0, 1, 2 (ratios 0.25, 1, 4) × 2 seeds: runs 0-3 need one slot, runs 4-5 four.
SWEEP = sw.Sweep("dqn", seeds=2, setup=SETUP, fixed=FIXED, grid={"replay_ratio": [0.25, 1.0, 4.0]})
PLENTY = plan_lib.Resources(memory_budget=1 << 30, host_memory=1 << 30, free_disk=1 << 30, num_devices=1)


def test_update_slots_needed_are_the_fewest_that_run_each_ratio_unclipped():
    setup = dqn.Setup(max_updates_per_unit=4, total_steps=1_000, steps_per_segment=100)
    assert [dqn.update_slots_needed(r, setup) for r in (0.25, 1.0, 1 / 3, 2.5, 3.0, 4.0)] == [1, 1, 1, 3, 3, 4]
    # Ten steps per unit, up to 7 updates: 0.7 needs all seven, 0.05 one (a unit of 10 steps has 0 or 1 due).
    tens = dqn.Setup(train_frequency=10, max_updates_per_unit=7, total_steps=1_000, steps_per_segment=100)
    assert [dqn.update_slots_needed(r, tens) for r in (0.05, 0.1, 0.3, 0.7)] == [1, 1, 3, 7]
    # A ratio the setup itself clips keeps the setup's bound (it runs clipped in either program).
    assert dqn.update_slots_needed(float("nan"), setup) == 4


def test_dqn_groups_configurations_by_the_update_slots_their_ratio_needs():
    setup = SWEEP.make_setup()
    group, setups = dqn.update_slot_groups(dqn.Hyperparameters(replay_ratio=np.array([4.0, 0.25, 1.0, 3.0])), setup)
    assert group.tolist() == [2, 0, 0, 1]
    assert [s.max_updates_per_unit for s in setups] == [1, 3, 4]
    assert setups[2] is setup and setups[0] == dataclasses.replace(setup, max_updates_per_unit=1)


def test_the_plan_chunks_each_group_apart_and_records_the_grouping():
    plan = plan_lib.make_plan(SWEEP, np.zeros(6, bool), PLENTY)
    assert [c.tolist() for c in plan.chunks] == [[0, 1, 2, 3], [4, 5]] and plan.chunk_groups == (0, 1)
    # One chunk size for the sweep (what the largest run fits); a smaller group runs at its own size.
    assert plan.chunk_size == 6 and [(g.chunk_size, g.runs) for g in plan.groups] == [(4, 4), (2, 2)]
    assert [g.setup.max_updates_per_unit for g in plan.groups] == [1, 4]
    # Each group's memory estimate is that of a sweep declared with its setup.
    one_slot = dataclasses.replace(
        SWEEP, setup=dict(SWEEP.setup, max_updates_per_unit=1), grid={"replay_ratio": [0.25, 1.0]}
    )
    assert plan.groups[0].bytes_per_run == sw.estimate_bytes_per_run(one_slot)
    assert plan.bytes_per_run == max(g.bytes_per_run for g in plan.groups) == sw.estimate_bytes_per_run(SWEEP)
    assert plan.batch.grouping == "grouped" and plan.batch.to_dict()["grouping"] == "grouped"
    # Asked for a chunk size: the groups are split by it, a group smaller than it is not padded beyond its runs.
    asked = plan_lib.make_plan(SWEEP, np.zeros(6, bool), PLENTY, chunk_size=3)
    assert [c.tolist() for c in asked.chunks] == [[0, 1, 2], [3], [4, 5]] and asked.chunk_groups == (0, 0, 1)
    # A resume plans the missing runs of each group at the same sizes, and two processes share the chunks.
    done = np.array([1, 0, 1, 1, 0, 1], bool)
    resumed = plan_lib.make_plan(SWEEP, done, PLENTY, recorded=plan.batch)
    assert [c.tolist() for c in resumed.chunks] == [[1], [4]] and [g.chunk_size for g in resumed.groups] == [4, 2]
    second = plan_lib.make_plan(SWEEP, np.zeros(6, bool), PLENTY, chunk_size=3, process=1, processes=2)
    assert [c.tolist() for c in second.chunks] == [[3]] and second.chunk_groups == (0,)


def test_without_grouping_or_with_one_group_the_plan_and_its_record_are_as_before():
    mixed = plan_lib.make_plan(SWEEP, np.zeros(6, bool), PLENTY, group_by_setup=False)
    assert [c.tolist() for c in mixed.chunks] == [[0, 1, 2, 3, 4, 5]] and mixed.chunk_groups == (0,)
    assert mixed.groups[0].setup == SWEEP.make_setup() and "grouping" not in mixed.batch.to_dict()
    # Every run needs the sweep's own bound: one group, the sweep's setup, nothing recorded.
    ones = dataclasses.replace(
        SWEEP, setup=dict(SWEEP.setup, max_updates_per_unit=1), grid={"replay_ratio": [0.5, 1.0]}
    )
    plan = plan_lib.make_plan(ones, np.zeros(4, bool), PLENTY, chunk_size=8)
    assert plan.batch.grouping == "" and [c.tolist() for c in plan.chunks] == [[0, 1, 2, 3]]
    assert plan.groups[0].chunk_size == 8  # padded to the chunk size asked for, as before groups existed
    # LineSearch has no groups.
    linesearch = sw.Sweep(
        "linesearch",
        setup={"steps": 20, "max_capacity": 20, "max_batch_size": 2},
        fixed={"batch_size": 2},
        grid={"memory_size": [5, 20]},
    )
    assert len(plan_lib.make_plan(linesearch, np.zeros(2, bool), PLENTY).groups) == 1


def test_a_batch_records_its_grouping_and_a_resume_with_the_other_is_refused(tmp_path):
    options = plan_lib.compiler_options_text(SWEEP.exp.compiler_options_on("cpu"))  # DQN's, on the CPU
    grouped = plan_lib.Batch("cpu", "cpu", 1, 4, "", "grouped", options)
    assert plan_lib.Batch.from_dict(json.loads(json.dumps(grouped.to_dict()))) == grouped
    old = {
        "platform": "cpu",
        "device_kind": "cpu",
        "devices": 1,
        "runs_per_device": 4,
        "xla_flags": "",
        "batch_independence_flags": False,
    }  # a record written before groups existed
    assert (
        plan_lib.Batch.from_dict(old) == plan_lib.Batch("cpu", "cpu", 1, 4, "")
        and old == plan_lib.Batch.from_dict(old).to_dict()
    )
    assert grouped.describe().endswith(", grouped by setup")
    done = np.array([1, 1, 1, 1, 0, 0], bool)
    with pytest.raises(
        ValueError,
        match=r"this call compiles every run with the sweep's own setup\. Rerun with "
        r"group_by_setup true \(\[run\] group_by_setup",
    ):
        plan_lib.make_plan(SWEEP, done, PLENTY, out=tmp_path, recorded=grouped, group_by_setup=False)
    with pytest.raises(
        ValueError,
        match=r"this call groups its runs by setup \(one program per group\)\. Rerun "
        r"with group_by_setup false",
    ):
        plan_lib.make_plan(SWEEP, done, PLENTY, out=tmp_path, recorded=grouped._replace(grouping=""))
    with pytest.raises(ValueError, match=r"^group_by_setup must be true or false, got 'no'\."):
        plan_lib.make_plan(SWEEP, done, PLENTY, group_by_setup="no")
    with pytest.raises(ValueError, match=r"^run\.group_by_setup must be true or false, got 1\."):
        sw.run_options({"run": {"group_by_setup": 1}})
    assert sw.run_options({"run": {"group_by_setup": False}}) == {"group_by_setup": False}


# 4 seeds: chunks of 4 are whole groups, and the mixed sweep's program is the four-slot group's (compiled once).
RUN_SWEEP = dataclasses.replace(SWEEP, seeds=4)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """:data:`RUN_SWEEP` grouped (on disk) and mixed (in memory), in chunks of 4."""
    out = tmp_path_factory.mktemp("groups") / "out"
    grouped = sw.run(RUN_SWEEP, out, chunk_size=4, progress=False)
    mixed = sw.run(RUN_SWEEP, None, chunk_size=4, progress=False, group_by_setup=False)
    return out, grouped, mixed


def as_bits(dataset) -> dict[str, bytes]:
    return {k: np.ascontiguousarray(dataset[k].values).tobytes() for k in sorted(dataset.data_vars)}


def test_grouped_and_mixed_give_every_run_the_same_bits(runs):
    out, grouped, mixed = runs
    assert grouped.stats.chunks == 3 and mixed.stats.chunks == 3
    # Two programs (initialisation + first segment, the others) per group; mixed: the four-slot group's, kept.
    assert grouped.stats.compilations == 4 and mixed.stats.compilations == 0
    assert as_bits(grouped.dataset) == as_bits(mixed.dataset)
    # The updates follow each ratio: floor(120 ρ) - floor(19 ρ) (the units before learning_starts masked).
    np.testing.assert_array_equal(grouped.dataset["gradient_steps"].values, [[26] * 4, [101] * 4, [404] * 4])
    assert as_bits(sw.load(out)) == as_bits(grouped.dataset)
    assert json.loads((out / "sweep.json").read_text())["batch"]["grouping"] == "grouped"


def test_the_progress_bar_counts_runs_to_one_decimal(runs, capsys):
    """The bar counts run-segments and shows runs: tqdm printed the scaled count as it was, so 76 segments of 5
    showed "15.200000000000001/16.0" (found by a probe). Now one decimal, and the total as a whole number."""
    import re

    sw.run(RUN_SWEEP, None, chunk_size=4, progress=True, group_by_setup=False)  # (its programs are kept: no compile)
    shown = re.findall(r"\| ([0-9.]+)/([0-9.]+) \[", capsys.readouterr().err)
    assert shown and shown[-1] == ("12.0", "12")
    assert all(re.fullmatch(r"\d+\.\d", n) and re.fullmatch(r"\d+", total) for n, total in shown), shown


def test_a_grouped_sweep_resumed_after_a_kill_gives_the_uninterrupted_results(runs, tmp_path):
    import shutil

    out, grouped, _ = runs
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    (resumed / "results.nc").unlink()
    chunks = sorted((resumed / "chunks").glob("*.npz"))
    assert len(chunks) == 3
    chunks[-1].unlink()  # killed before the four-slot group's chunk was saved
    with pytest.raises(ValueError, match="Rerun with group_by_setup true"):
        sw.run(RUN_SWEEP, resumed, progress=False, group_by_setup=False)
    again = sw.run(RUN_SWEEP, resumed, progress=False)
    assert again.stats.runs_computed == 4 and again.stats.runs_resumed == 8
    assert again.stats.compilations == 0  # the four-slot group's programs, kept from the first run
    assert as_bits(again.dataset) == as_bits(grouped.dataset)


@pytest.mark.slow  # two 8,000-step CartPole programs (about 30 s)
def test_grouping_leaves_the_logged_loss_alone_over_a_long_run():
    """At 8,000 steps a ratio-0.25 run's logged td_loss differed in its last bit between its own one-slot
    program and the sweep's four-slot one (5.202987 against 5.2029877 at segment 7; weights and returns the
    same): the loss's batch mean, a reduce, was compiled into another loop (found by a probe). The loss now
    sums its batch in one fixed pairwise order (jaxreplay._ordered)."""
    sweep = sw.Sweep(
        "dqn", seeds=1, seed=3,
        setup=dict(env_id="CartPole-v1", total_steps=8000, steps_per_segment=1000, max_capacity=5000, batch_size=32,
                   hidden_sizes=[32], max_updates_per_unit=4),
        fixed=dict(learning_starts=500, epsilon_decay_steps=5000, target_period=200, memory_size=5000),
        grid=dict(replay_ratio=[0.25, 4.0]),
    )
    grouped = sw.run(sweep, None, progress=False).dataset
    mixed = sw.run(sweep, None, progress=False, group_by_setup=False).dataset
    assert as_bits(grouped) == as_bits(mixed)


def test_a_new_grouped_sweep_takes_the_devices_its_largest_group_fills():
    # SWEEP's groups hold 4 runs (ratios 0.25 and 1) and 2 (ratio 4): 2 devices of 4 give its larger group 2
    # runs each; one program for all 6 runs fills 3.
    assert plan_lib.devices_for(SWEEP, 4) == 2
    assert plan_lib.devices_for(SWEEP, 4, group_by_setup=False) == 3
