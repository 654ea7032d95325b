"""The sweep engine and its results (needs the ``[sweep]`` extra).

* :mod:`jaxreplay.engine.sweep`: a grid of hyperparameters × seeds run as chunks of one
  compiled ``jit(vmap(...))`` program, sharded over devices, resumable, written as
  labeled NetCDF; :func:`~jaxreplay.engine.sweep.run` is plan → execute → assemble:

  * :mod:`jaxreplay.engine.plan`: a pure function to a ``Plan`` (chunks, byte
    estimates); every refusal happens there, before anything is written or compiled;
  * :mod:`jaxreplay.engine.execute`: the compiled, sharded chunk programs;
  * :mod:`jaxreplay.engine.store`: the output folder (``ChunkStore``: manifest,
    atomic chunks, fingerprints, damaged chunks set aside);
  * :mod:`jaxreplay.engine.assemble`: chunks into a labeled ``xarray.Dataset`` and NetCDF.
* :mod:`jaxreplay.engine.results`: statistics (IQM, bootstrap intervals, paired
  differences) and tables over those labeled results.

The engine knows experiments only through :mod:`jaxreplay.experiments`' registry; it
knows nothing of the paper.
"""
