"""jaxreplay: experience replay in JAX with a traced buffer size.

The replay core:

* :mod:`jaxreplay.buffer`: a FIFO ring buffer whose *logical* capacity is a
  traced scalar over storage allocated once at a static ``max_capacity``.
* :mod:`jaxreplay.samplers`: uniform, exact prioritized (P(i) ∝ |δ_i|^β) and
  combined (CER) sampling from a :class:`~jaxreplay.buffer.BufferState`.
* :mod:`jaxreplay.prioritized`: stored-priority replay (Schaul et al. 2016)
  on a sum tree that does not drift.
* :mod:`jaxreplay.adaptive`: the adaptive memory size controller (aER,
  Algorithm 2 of Liu & Zou 2018).
"""

__version__ = "0.1.0"
