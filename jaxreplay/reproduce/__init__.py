"""Reproductions of the paper's figures and claims (PNG figures, tidy CSV, markdown report).

* :mod:`jaxreplay.reproduce.linesearch`: every LineSearch figure of Liu & Zou
  (2018), entry point :func:`jaxreplay.reproduce.linesearch.reproduce`.
* :mod:`jaxreplay.reproduce.dqn`: the fixed-vs-adaptive DQN study (Fig. 4) of
  one game, :func:`jaxreplay.reproduce.dqn.reproduce`.
* :mod:`jaxreplay.reproduce.paper`: all of the above and one report with every
  claim of the paper next to ours (``jaxreplay reproduce all``).
"""

__all__ = ["linesearch", "dqn", "paper"]
