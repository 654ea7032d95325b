"""Reproductions of the paper's figures and claims (PNG figures, tidy CSV, markdown report).

* :mod:`jaxreplay.paper.reproduce.linesearch`: every LineSearch figure of Liu & Zou
  (2018), entry point :func:`jaxreplay.paper.reproduce.linesearch.reproduce`.
* :mod:`jaxreplay.paper.reproduce.dqn`: the fixed-vs-adaptive DQN study (Fig. 4) of
  one game, :func:`jaxreplay.paper.reproduce.dqn.reproduce`.
* :mod:`jaxreplay.paper.reproduce.paper`: all of the above and one report with every
  claim of the paper next to ours (``jaxreplay reproduce all``).
* :mod:`jaxreplay.paper.reproduce.study`: the DQN replay study (``jaxreplay study dqn``):
  memory-size response curves, aER from three starts, its controls, sensitivity and
  paired statistics per game.
* :mod:`jaxreplay.paper.reproduce.settings`: the paper's DQN configurations
  (:func:`~jaxreplay.paper.reproduce.settings.paper_setting`), used by the two DQN parts.
"""

__all__ = ["linesearch", "dqn", "paper"]
