"""Records on demand: keep, stride and seed reductions, computed in the chunk program."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

import warnings

import jax
import numpy as np
import pytest

from jaxreplay.engine import plan as plan_lib
from jaxreplay.engine import records as records_lib
from jaxreplay.engine import sweep as sw

REPO = pathlib.Path(__file__).resolve().parents[1]
SETUP = {"steps": 20, "max_capacity": 20, "max_batch_size": 2}
BASE = dict(seeds=3, seed=5, setup=SETUP, fixed={"step_size": 0.05},
            grid={"memory_size": [5, 20], "batch_size": [1, 2]})


def _sweep(record=None, **changes):
    return sw.Sweep("linesearch", **{**BASE, **changes}, record=record)


@pytest.fixture(scope="module")
def full():
    """Every run's full records (today's default), in memory."""
    return sw.run(_sweep(), None, progress=False).dataset


def test_stride_keeps_exactly_every_kth_point(full):
    ds = sw.run(_sweep(sw.Record(keep=("dtheta",), stride=3)), None, chunk_size=5, progress=False).dataset
    assert set(ds.data_vars) == {"dtheta", "final_metric", "diverged", "invalid_hyperparameters"}  # summaries kept
    np.testing.assert_array_equal(ds.dtheta.values, full.dtheta.values[..., ::3, :])
    assert ds.step.values.tolist() == [1, 4, 7, 10, 13, 16, 19]
    np.testing.assert_array_equal(ds.final_metric.values, full.final_metric.values)
    # No records at all: summaries only, and no dangling step coordinate.
    none = sw.run(_sweep(sw.Record(keep=())), None, progress=False).dataset
    assert set(none.data_vars) == {"final_metric", "diverged", "invalid_hyperparameters"}
    assert "step" not in none.coords
    np.testing.assert_array_equal(none.final_metric.values, full.final_metric.values)


def test_seed_mean_and_quantiles_on_the_device_match_numpy_for_any_chunk_size(full):
    record = sw.Record(stride=2, reduce=["mean", "q0.1", "q0.5", "q1"])
    results = [sw.run(_sweep(record), None, chunk_size=c, progress=False) for c in (3, 6, 12)]
    assert [r.stats.chunk_size for r in results] == [3, 6, 12] and [r.stats.chunks for r in results] == [4, 2, 1]
    ds = results[0].dataset
    assert ds.dtheta.dims == ("memory_size", "batch_size", "stat", "step", "weight")
    assert ds.stat.values.tolist() == ["mean", "q0.1", "q0.5", "q1"] and ds.final_metric.dims[-1] == "seed"
    dtheta = full.dtheta.values[..., ::2, :]  # [4, 2, seed, step, weight]
    capacity = full.capacity.values[..., ::2].astype(np.float64)
    # The mean is NumPy's to the bit, and nanmean's where nothing is NaN (jnp.mean rounded a third of the means an
    # ulp otherwise, a probe).
    np.testing.assert_array_equal(ds.dtheta.sel(stat="mean").values, dtheta.mean(axis=2))
    np.testing.assert_allclose(ds.capacity.sel(stat="mean").values, capacity.mean(axis=2), rtol=1e-6)
    for p in (0.1, 0.5, 1.0):
        name = f"q{p:g}"
        np.testing.assert_allclose(ds.dtheta.sel(stat=name).values, np.quantile(dtheta, p, axis=2), rtol=1e-6,
                                   atol=1e-7)
        np.testing.assert_allclose(ds.capacity.sel(stat=name).values, np.quantile(capacity, p, axis=2), rtol=1e-6)
    assert float(ds.capacity.sel(stat="q1", memory_size=5).max()) == 5.0  # the quantiles are not all one value
    assert np.ptp(ds.dtheta.sel(stat=["q0.1", "q1"]).isel(step=slice(1, None)).values, axis=2).min() > 0  # (step 1:
    # every seed alike)
    for other in results[1:]:  # bit-identical whatever the chunk size
        for name in ds.data_vars:
            np.testing.assert_array_equal(other.dataset[name].values, ds[name].values, err_msg=name)


def test_reduced_sweep_saves_resumes_and_loads(tmp_path, full):
    record = sw.Record(keep=["capacity"], reduce="mean")
    out = tmp_path / "out"
    first = sw.run(_sweep(record), out, chunk_size=3, progress=False)
    chunks = sorted((out / "chunks").glob("runs-*.npz"))
    assert len(chunks) == 4
    with np.load(chunks[1]) as data:  # configuration 1's three seeds, one reduced row
        assert data["reduced.capacity"].shape == (1, 1, 20) and data["config_index"].tolist() == [1]
        assert data["run_index"].tolist() == [3, 4, 5] and "record.capacity" not in data.files
    chunks[2].unlink()
    again = sw.run(_sweep(record), out, chunk_size=3, progress=False)
    assert again.stats.runs_computed == 3 and again.stats.runs_resumed == 9
    loaded = sw.load(out)
    assert loaded.stat.values.tolist() == ["mean"]
    for ds in (again.dataset, loaded):
        np.testing.assert_array_equal(ds.capacity.values, first.dataset.capacity.values)
    np.testing.assert_allclose(loaded.capacity.sel(stat="mean").values, full.capacity.values.mean(axis=2), rtol=1e-6)
    # Another record spec is another sweep: refused in the same folder, naming what differs.
    with pytest.raises(ValueError, match=r"different sweep \(differs in: record\)"):
        sw.run(_sweep(sw.Record(keep=["capacity"], reduce="q0.5")), out, progress=False)


def test_defaults_are_todays_sweep_and_the_spec_is_in_the_fingerprint():
    default = _sweep()
    assert default.record == sw.Record() and "record" not in default.to_dict()
    assert _sweep(sw.Record(keep=None, stride=1, reduce=())).fingerprint() == default.fingerprint()
    assert _sweep({"keep": ["dtheta", "capacity"]}).record.keep == ("dtheta", "capacity")
    strided = _sweep(sw.Record(stride=2))
    assert strided.to_dict()["record"] == {"stride": 2} and strided.fingerprint() != default.fingerprint()


def test_the_order_records_are_named_in_is_not_another_sweep():
    """``keep`` is held in the experiment's order (records, then summaries), the order they are kept in: a
    sweep declared with ``["capacity", "dtheta"]`` is the sweep of ``["dtheta", "capacity"]`` (it had another
    fingerprint, so its folder was "a different sweep"), and the reproduction's order keeps its fingerprint."""
    ordered = _sweep({"keep": ["dtheta", "capacity"]})
    swapped = _sweep({"keep": ["capacity", "dtheta"]})
    assert swapped.record.keep == ordered.record.keep == ("dtheta", "capacity")
    assert swapped == ordered and swapped.fingerprint() == ordered.fingerprint()
    assert swapped.to_dict()["record"] == {"keep": ["dtheta", "capacity"]}
    assert _sweep({"keep": ["final_metric", "capacity"]}).record.keep == ("capacity", "final_metric")


def test_a_folder_written_with_keep_in_another_order_is_finished_not_refused(tmp_path, monkeypatch):
    """A folder begun before keep was held in the experiment's order has the fingerprint of the order typed,
    in sweep.json and in every chunk: it was refused as "a different sweep (differs in: record)" (found by a
    review). It is the same sweep: its finished chunks are reused and it keeps its own fingerprint."""
    from jaxreplay.engine import declaration

    typed = {"keep": ["capacity", "dtheta"]}
    monkeypatch.setattr(declaration, "_keep_in_order", lambda record, names: record)  # as jaxreplay did before
    older = _sweep(typed)
    assert older.record.keep == ("capacity", "dtheta")
    sw.run(older, tmp_path / "out", chunk_size=4, progress=False)
    monkeypatch.undo()
    chunks = sorted((tmp_path / "out" / "chunks").glob("runs-*.npz"))
    assert len(chunks) == 3  # 12 runs in chunks of 4
    chunks[1].unlink()
    (tmp_path / "out" / "results.nc").unlink()
    stored = json.loads((tmp_path / "out" / "sweep.json").read_text())["fingerprint"]
    now = _sweep(typed)
    assert now.record.keep == ("dtheta", "capacity") and now.fingerprint() != stored
    resumed = sw.run(now, tmp_path / "out", progress=False)
    assert (resumed.stats.runs_resumed, resumed.stats.runs_computed) == (8, 4)
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["fingerprint"] == stored
    # results.nc names the folder's sweep as sweep.json and the chunks do (it named the new fingerprint).
    on_disk = sw.load(tmp_path / "out")
    assert on_disk.attrs["fingerprint"] == resumed.dataset.attrs["fingerprint"] == stored
    assert json.loads(on_disk.attrs["config"])["record"] == {"keep": ["capacity", "dtheta"]}
    fresh = sw.run(now, None, progress=False).dataset
    for name in ("dtheta", "capacity", "final_metric"):
        np.testing.assert_array_equal(resumed.dataset[name].values, fresh[name].values, err_msg=name)
    with pytest.raises(ValueError, match=r"holds a different sweep \(differs in: record\)"):
        sw.run(_sweep({"keep": ["dtheta"]}), tmp_path / "out", progress=False)  # another keep is another sweep


def test_record_table_round_trips_through_toml(tmp_path):
    text = textwrap.dedent("""
        experiment = "linesearch"
        seeds = 3
        [setup]
        steps = 20
        max_capacity = 20
        max_batch_size = 2
        [fixed]
        batch_size = 2
        [grid]
        memory_size = [5, 20]
        [record]
        keep = ["dtheta"]
        stride = 10
        reduce = ["mean", "q0.1"]
        """)
    (tmp_path / "s.toml").write_text(text)
    sweep = sw.Sweep.from_toml(tmp_path / "s.toml")
    assert sweep.record == sw.Record(keep=("dtheta",), stride=10, reduce=("mean", "q0.1"))
    back = sw.Sweep.from_dict(tomllib.loads(sweep.to_toml()))
    assert back.record == sweep.record and back.fingerprint() == sweep.fingerprint()
    assert json.loads(json.dumps(sweep.to_dict()))["record"] == {"keep": ["dtheta"], "stride": 10,
                                                                 "reduce": ["mean", "q0.1"]}


from compile_events import COMPILE_EVENTS as _LOWERINGS  # noqa: E402


@pytest.mark.parametrize("record, message", [
    ('keep = ["dtheta", "speed"]', r"record\.keep: unknown record 'speed' of 'linesearch'; records: dtheta, "
                                   r"capacity; summaries \(always kept\): final_metric, diverged, "
                                   r"invalid_hyperparameters"),
    ('keep = "dtheta"\nstride = 0', r"record\.stride must be a positive integer, got 0"),
    ('stride = 2.5', r"record\.stride must be a positive integer, got 2\.5"),
    ('reduce = ["median"]', r"record\.reduce: unknown reduction 'median'"),
    ('reduce = ["q1.5"]', r"record\.reduce: unknown reduction 'q1\.5'"),
    ('reduce = ["mean", "mean"]', r"record\.reduce names a reduction twice"),
    # Spellings Python's float reads but a stat label should not be (".sel(stat='q0.5')" missed "q 0.5").
    ('reduce = ["q 0.5"]', r"record\.reduce: unknown reduction 'q 0\.5'"),
    ('reduce = ["q1e-1"]', r"record\.reduce: unknown reduction 'q1e-1'"),
    ('reduce = ["q０.５"]', r"record\.reduce: unknown reduction 'q０\.５'"),  # (not ASCII digits)
    ('reduce = ["q0.1_0"]', r"record\.reduce: unknown reduction 'q0\.1_0'"),
    ('keep = []\nreduce = ["mean"]', r"record\.reduce reduces the kept records, but record\.keep is empty"),
    # Summaries are kept per run, never reduced: this ran, reducing nothing beside an unused stat coordinate.
    ('keep = ["final_metric"]\nreduce = ["mean"]', r"record\.reduce reduces the kept records, but record\.keep "
                                                    r"names summaries only \(\['final_metric'\]"),
    ('reduce = ["nanq1.5"]', r"record\.reduce: unknown reduction 'nanq1\.5'"),
    ('reduce = ["nan"]', r"record\.reduce: unknown reduction 'nan'"),
    ('reduce = ["nanq0.5", "nanq0.50"]', r"record\.reduce names a reduction twice"),
    ('every = 3', r"record\.every: unknown key; known: keep, stride, reduce"),
])
def test_bad_record_specs_name_the_key_before_compiling(tmp_path, record, message):
    (tmp_path / "s.toml").write_text(f'experiment = "linesearch"\n[record]\n{record}\n')
    before = _LOWERINGS.lowerings
    with pytest.raises(ValueError, match=message):
        sw.Sweep.from_toml(tmp_path / "s.toml")
    with pytest.raises(ValueError, match=r"^record must be a Record or a table"):
        _sweep(record=3)
    assert _LOWERINGS.lowerings == before


def test_stride_over_segments_must_fit_them():
    spec = sw.Record(stride=4)
    records_lib.check_stride(spec, points=8, num_segments=5)  # 4 divides 8: [::4] in every segment
    records_lib.check_stride(spec, points=2, num_segments=5)  # 2 divides 4: every other segment's first point
    records_lib.check_stride(spec, points=3, num_segments=1)  # one segment: any stride
    with pytest.raises(ValueError, match=r"record\.stride = 4: each of the 5 segments records 3 points"):
        records_lib.check_stride(spec, points=3, num_segments=5)
    assert [records_lib.segment_kept(spec, s, 2) for s in range(5)] == [True, False, True, False, True]
    assert all(records_lib.segment_kept(spec, s, 8) for s in range(5))


def test_result_bytes_shrink_with_what_is_kept():
    # seeds 3, 20 steps: dtheta [20, 2] float32 (160 B), capacity [20] int32 (80 B), summary 4 + 1 + 1, index 8.
    assert sw.estimate_result_bytes_per_run(_sweep()) == 160 + 80 + 6 + 8
    assert sw.estimate_result_bytes_per_run(_sweep(sw.Record(keep=()))) == 14
    assert sw.estimate_result_bytes_per_run(_sweep(sw.Record(keep=["dtheta"], stride=10))) == 2 * 2 * 4 + 14
    # Reduced: per configuration 2 stats × 2 points × 2 weights × 4 B + an 8 B index = 40 B, shared by 3 seeds.
    reduced = _sweep(sw.Record(keep=["dtheta"], stride=10, reduce=["mean", "q0.5"]))
    assert sw.estimate_result_bytes_per_run(reduced) == 14 + 14  # ceil(40 / 3)
    result = sw.run(reduced, None, progress=False)
    assert result.stats.result_bytes_per_run == 28
    assert result.dataset.dtheta.nbytes == 4 * 40 - 4 * 8  # 4 configurations
    # A seed reduction aligns chunks to whole configurations, and refuses a budget below one.
    per_run = sw.estimate_bytes_per_run(reduced)
    resources = plan_lib.Resources(memory_budget=5 * per_run, host_memory=1 << 30, free_disk=None, num_devices=2)
    plan = plan_lib.make_plan(reduced, np.zeros(12, bool), resources._replace(memory_budget=13 * per_run))
    assert plan.chunk_size == 12 and plan.align == 3  # lcm(3 seeds, 2 devices) = 6 per unit
    with pytest.raises(MemoryError, match=r"needs every seed of a configuration in one chunk on one device: 6 runs"):
        plan_lib.make_plan(reduced, np.zeros(12, bool), resources)


def _on_four_devices(script: str) -> list[str]:
    """The words ``script`` prints, run in a process of its own with 4 forced CPU devices."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_four_devices_reduce_like_one(tmp_path):
    record = sw.Record(stride=4, reduce=["mean", "q0.25"])
    reference = sw.run(_sweep(record), None, progress=False).dataset
    script = textwrap.dedent(f"""
        import jax
        from jaxreplay.engine import sweep as sw
        assert jax.device_count() == 4
        sweep = sw.Sweep("linesearch", **{BASE!r}, record=sw.Record(stride=4, reduce=["mean", "q0.25"]))
        r = sw.run(sweep, {str(tmp_path / "d4")!r}, chunk_size=12, progress=False)
        print("chunk", r.stats.chunk_size, "chunks", r.stats.chunks)
        """)
    assert _on_four_devices(script) == ["chunk", "12", "chunks", "1"]
    d4 = sw.load(tmp_path / "d4")
    for name in reference.data_vars:
        np.testing.assert_array_equal(d4[name].values, reference[name].values, err_msg=name)


DQN_REDUCED = dict(
    seeds=4, seed=7,
    setup=dict(env_id="CartPole-v1", total_steps=400, steps_per_segment=100, max_capacity=200, batch_size=8,
               hidden_sizes=[8], max_updates_per_unit=4, adaptive=True, adaptive_check_every=20),
    fixed=dict(learning_starts=60, epsilon_decay_steps=200, target_period=50, adaptive_interval=20,
               adaptive_num_old=20, memory_size=60, adaptive_rule=1),
    grid=dict(replay_ratio=[0.25, 0.5, 1.0]),  # (one update slot: one program, where grouping is not the question)
)


def test_a_seed_mean_on_four_devices_keeps_each_configuration_on_one_device(tmp_path):
    """4 seeds on 4 devices: the plan's unit was lcm(seeds, devices) = 4 runs, so a configuration's seeds lay on
    four devices and were summed across them in another order: 5 of 12 seed means of a DQN train_return differed
    by an ulp from one device's (found by a probe). Each device now holds whole configurations."""
    record = sw.Record(keep=["train_return", "td_loss"], reduce=["mean"])
    reference = sw.run(sw.Sweep("dqn", **DQN_REDUCED, record=record), None, progress=False).dataset
    script = textwrap.dedent(f"""
        import jax
        from jaxreplay.engine import sweep as sw
        assert jax.device_count() == 4
        keep = ["train_return", "td_loss"]
        sweep = sw.Sweep("dqn", **{DQN_REDUCED!r}, record=sw.Record(keep=keep, reduce=["mean"]))
        r = sw.run(sweep, {str(tmp_path / "d4")!r}, chunk_size=4, progress=False)
        print("chunk", r.stats.chunk_size, "chunks", r.stats.chunks)
        """)
    assert _on_four_devices(script)[:2] == ["chunk", "16"]  # 4 seeds × 4 devices: one configuration each
    d4 = sw.load(tmp_path / "d4")
    # Every seed mean and every run's summary, aER's adaptive_change_sum and the TD loss's mean included: Adam's
    # bias corrections rounded otherwise in the partitioned program (agents.dqn._scale_by_adam), so those two
    # differed in their last digits, and over 20,000 steps one CartPole run in 8 played other episodes.
    assert set(reference.data_vars) >= {"td_loss", "adaptive_change_sum", "recent_return"}
    for name in reference.data_vars:
        np.testing.assert_array_equal(d4[name].values, reference[name].values, err_msg=name)

def test_a_reduced_folder_begun_at_the_older_unit_is_finished_at_its_own_batch(tmp_path):
    """A seed reduction's chunks were a multiple of lcm(seeds, devices) before they were one of seeds × devices:
    such a folder (4 seeds, 4 devices, chunks of 8) was refused on resume, with advice that could not work (raise
    the memory budget; rerun with chunk_size 8, which was what had been refused) (found by a review)."""
    script = textwrap.dedent(f"""
        import math, pathlib
        import jax
        from jaxreplay.engine import plan as plan_lib
        from jaxreplay.engine import sweep as sw
        assert jax.device_count() == 4
        out = pathlib.Path({str(tmp_path / "d4")!r})
        sweep = sw.Sweep("linesearch", seeds=4, seed=5, setup={SETUP!r}, fixed={{"step_size": 0.05}},
                         grid={{"memory_size": [5, 10, 20], "batch_size": [1, 2]}},
                         record=sw.Record(keep=["capacity"], reduce=["mean"]))
        newer, plan_lib._chunk_unit = plan_lib._chunk_unit, lambda align, devices: math.lcm(align, devices)
        sw.run(sweep, out, chunk_size=8, progress=False)  # as jaxreplay did before
        plan_lib._chunk_unit = newer
        sorted((out / "chunks").glob("runs-*.npz"))[-1].unlink()
        (out / "results.nc").unlink()
        r = sw.run(sweep, out, progress=False)
        print("chunk", r.stats.chunk_size, "computed", r.stats.runs_computed)
        """)
    assert _on_four_devices(script) == ["chunk", "8", "computed", "8"]

def test_dqn_stride_over_segments_copies_only_the_kept_segments(tmp_path):
    from jaxreplay.experiments import dqn

    setup = dqn.Setup(env_id="CartPole-v1", total_steps=400, steps_per_segment=100, hidden_sizes=(8,),
                      max_capacity=400, eval_episodes=0)
    fixed = {"learning_starts": 50, "memory_size": 200}
    full = sw.run(sw.Sweep("dqn", seeds=2, setup=setup, fixed=fixed), None, progress=False).dataset
    record = sw.Record(keep=["td_loss", "capacity"], stride=2, reduce=["mean", "q0.5"])
    ds = sw.run(sw.Sweep("dqn", seeds=2, setup=setup, fixed=fixed, record=record), tmp_path, progress=False).dataset
    assert full.segment.values.tolist() == [100, 200, 300, 400] and ds.segment.values.tolist() == [100, 300]
    # The returned dataset's coordinates are as results.nc stores them (segment was int64 returned, int32 loaded).
    loaded = sw.load(tmp_path)
    assert {k: v.dtype for k, v in ds.coords.items() if v.dtype.kind in "iu"} == {
        k: v.dtype for k, v in loaded.coords.items() if v.dtype.kind in "iu"} and ds.segment.dtype == np.int32
    assert set(ds.data_vars) == {"td_loss", "capacity"} | set(dqn.summary_dims(setup))
    assert ds.td_loss.dims == ("stat", "segment") and ds.recent_return.dims == ("seed",)
    loss = full.td_loss.values[:, ::2]  # [seed, segment]
    assert loss.min() > 0  # trained: not a constant
    np.testing.assert_allclose(ds.td_loss.sel(stat="mean").values, loss.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(ds.td_loss.sel(stat="q0.5").values, np.quantile(loss, 0.5, axis=0), rtol=1e-6)
    np.testing.assert_array_equal(ds.recent_return.values, full.recent_return.values)


@pytest.mark.parametrize("seeds, p", [(26, 0.6), (46, 0.6), (51, 0.3), (51, 0.54), (51, 0.6), (5, 0.25), (2, 0.5),
                                      (1, 0.9), (7, 1.0), (7, 0.0)])
def test_device_quantiles_are_numpys_linear_quantiles_where_the_position_is_whole(seeds, p):
    """The position p (n − 1) is computed as NumPy does (float64): in float32 it came out just above a whole
    number at these (n, p), and a 1e-6 share of the next seed was added (9.5e21 where NumPy gives 0.5)."""
    rng = np.random.default_rng(seeds)
    values = np.full((3, seeds), 1e28, np.float32)
    values[0, : int(np.floor(p * (seeds - 1))) + 1] = 0.5  # the order statistic at the position is 0.5, the next 1e28
    values[0] = rng.permutation(values[0])
    values[1] = rng.standard_normal(seeds) ** 3  # ordinary ones
    values[2, -1] = np.nan  # a diverged seed: NaN, as in np.quantile
    got = records_lib.reduce_seeds(records_lib.Record(reduce=f"q{p}"), {"x": jax.numpy.asarray(values.ravel())},
                                   seeds)["x"][:, 0]
    want = np.quantile(values.astype(np.float64), p, axis=1)
    np.testing.assert_allclose(np.asarray(got[:2], np.float64), want[:2], rtol=2e-7)
    assert np.isnan(got[2])


def test_nan_skipping_reductions_are_numpys_over_the_seeds_with_a_value():
    """DQN's records are NaN where nothing was measured (no episode ended in the segment, no gradient step yet):
    with one such seed "mean" and every "q<p>" were NaN (probe: 19 of 20 CartPole segments, none diverged).
    "nanmean" and "nanq<p>" are np.nanmean and np.nanquantile, "count" the seeds with a value."""
    rng = np.random.default_rng(0)
    seeds = 7
    values = (rng.standard_normal((40, seeds, 3)) ** 3).astype(np.float32)
    values[rng.random(values.shape) < 0.3] = np.nan  # unmeasured seeds, up to all 7 of a configuration
    values[0, :, 0] = np.nan
    values[1, :, 1] = np.nan
    values[1, 3, 1] = 2.5  # one seed with a value
    values[2, :, 2] = [1e28, 0.5, np.nan, 0.5, np.nan, 1e28, 0.5]  # a fraction of 0: the order statistic alone
    names = ("nanmean", "count", "nanq0", "nanq0.25", "nanq0.5", "nanq0.6", "nanq1", "mean", "q0.5")
    got = records_lib.reduce_seeds(records_lib.Record(reduce=names), {"x": jax.numpy.asarray(values.reshape(-1, 3))},
                                   seeds)["x"]
    got = np.asarray(got, np.float64)  # [configurations, stat, 3]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (all-NaN slices)
        x = values.astype(np.float64)
        np.testing.assert_allclose(got[:, 0], np.nanmean(x, axis=1), rtol=2e-6)
        np.testing.assert_array_equal(got[:, 1], np.sum(~np.isnan(x), axis=1))
        for i, p in enumerate((0, 0.25, 0.5, 0.6, 1), start=2):
            np.testing.assert_allclose(got[:, i], np.nanquantile(x, p, axis=1), rtol=2e-6, atol=1e-8, err_msg=str(p))
    assert np.isnan(got[0, :, 0]).tolist() == [True, False, True, True, True, True, True, True, True]  # no value
    assert got[1, [0, 2, 4, 6], 1].tolist() == [2.5, 2.5, 2.5, 2.5] and got[1, 1, 1] == 1
    assert got[2, 4, 2] == 0.5 and np.isnan(got[2, 7, 2])  # (the mean propagates the NaN, as before)
    assert np.isnan(got[:, 7]).mean() > 0.9  # what "mean" gave: NaN almost everywhere


def test_a_dqn_sweep_reduces_its_unmeasured_segments_with_nanmean(tmp_path):
    from jaxreplay.experiments import dqn

    setup = dqn.Setup(env_id="CartPole-v1", total_steps=400, steps_per_segment=20, hidden_sizes=(8,),
                      max_capacity=400, eval_episodes=0)
    fixed = {"learning_starts": 50, "memory_size": 200}
    full = sw.run(sw.Sweep("dqn", seeds=3, setup=setup, fixed=fixed), None, progress=False).dataset
    record = sw.Record(keep=["train_return"], reduce=["mean", "nanmean", "count"])
    ds = sw.run(sw.Sweep("dqn", seeds=3, setup=setup, fixed=fixed, record=record), None, progress=False).dataset
    returns = full.train_return.values  # [seed, segment]: NaN where a seed finished no episode in the segment
    measured = ~np.isnan(returns)
    assert 0 < measured.mean() < 1 and not full.diverged.values.any()
    assert np.isnan(ds.train_return.sel(stat="mean").values).sum() == (~measured.all(axis=0)).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(ds.train_return.sel(stat="nanmean").values, np.nanmean(returns, axis=0), rtol=1e-6)
    np.testing.assert_array_equal(ds.train_return.sel(stat="count").values, measured.sum(axis=0))
