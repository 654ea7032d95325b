"""The sweep engine and its results (needs the ``[sweep]`` extra).

* :mod:`jaxreplay.engine.sweep`: a grid of hyperparameters × seeds run as chunks of one
  compiled ``jit(vmap(...))`` program, sharded over devices, resumable, written as
  labeled NetCDF.
* :mod:`jaxreplay.engine.results`: statistics (IQM, bootstrap intervals, paired
  differences) and tables over those labeled results.

The engine knows experiments only through :mod:`jaxreplay.experiments`' registry; it
knows nothing of the paper.
"""
