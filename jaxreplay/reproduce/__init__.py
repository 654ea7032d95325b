"""Reproductions of the paper's figures and claims (PNG figures, tidy CSV, markdown report).

* :mod:`jaxreplay.reproduce.linesearch`: every LineSearch figure of Liu & Zou
  (2018), entry point :func:`jaxreplay.reproduce.linesearch.reproduce`.
"""

__all__ = ["linesearch"]
