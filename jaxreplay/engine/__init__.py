"""The sweep engine and its results (needs the ``[sweep]`` extra).

* :mod:`jaxreplay.engine.sweep`: a grid of hyperparameters × seeds run as chunks of one
  compiled ``jit(vmap(...))`` program, sharded over devices, resumable, written as
  labeled NetCDF; it gathers the names a user needs from the modules below.
  :func:`~jaxreplay.engine.sweep.run` is plan → execute → assemble:

  * :mod:`jaxreplay.engine.declaration`: the ``Sweep`` (what runs), its checks and its
    TOML file;
  * :mod:`jaxreplay.engine.runner`: ``run`` itself (lock the folder, then the steps
    below) and its ``SweepStats``;
  * :mod:`jaxreplay.engine.resources`: the machine's device memory, host memory and
    disk, measured as the plan's ``Resources``;
  * :mod:`jaxreplay.engine.plan`: a pure function to a ``Plan`` (chunks, byte
    estimates); every refusal happens there, before anything is written or compiled;
  * :mod:`jaxreplay.engine.execute`: the compiled, sharded chunk programs;
  * :mod:`jaxreplay.engine.store`: the output folder's contents (``ChunkStore``: manifest,
    atomic chunks, fingerprints, damaged chunks set aside);
  * :mod:`jaxreplay.engine.folder`: the output folder as a place (one writer at a time:
    ``lock_folder``; whether it can be written);
  * :mod:`jaxreplay.engine.assemble`: chunks into a labeled ``xarray.Dataset`` and NetCDF;
  * :mod:`jaxreplay.engine.records`: records on demand (which per-step records a run
    keeps, their stride, reductions over seeds), decided inside the compiled program.
* :mod:`jaxreplay.engine.results`: statistics over those labeled results (mean with a
  Student-t interval, IQM, bootstrap intervals, the best setting) and a metric plot.
  Paired comparisons and report tables belong to the paper layer
  (:mod:`jaxreplay.paper.reproduce.study`, :mod:`jaxreplay.paper.reproduce.dqn`).

The engine knows experiments only through :mod:`jaxreplay.experiments`' registry; it
knows nothing of the paper.
"""
