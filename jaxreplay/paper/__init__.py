"""The paper: Liu & Zou, *The Effects of Memory Replay in Reinforcement Learning* (2018).

* :mod:`jaxreplay.paper.theory`: the replay ODE (diffrax) and the appendix's closed forms.
* :mod:`jaxreplay.paper.reproduce`: the paper's settings, every figure and claim, the
  DQN study, and ``jaxreplay reproduce all``.
* :mod:`jaxreplay.paper.plots`: the figures.

This layer sits on top of everything else (needs the ``[paper]`` extra); nothing below
it imports it.
"""
