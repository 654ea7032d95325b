"""What every ``jaxreplay`` command shares: running a sweep as a command, bad input said as options, counts.

A command reads its options into the library's own configuration, calls the
library and formats the result. The library names what it refuses by its
fields (:class:`jaxreplay._validation.FieldError`,
:class:`jaxreplay.engine.plan.ResourceError`); each command keeps a table
from those fields to its options (``OPTIONS``) and its own advice for a sweep
too large for the machine (``ADVICE``), and :func:`named_as_options` and
:func:`run_sweep` use them, so no message is rewritten.
"""

from __future__ import annotations

import contextlib
import sys

# The --json convention (jaxreplay.engine.results.strict_json), in the help of every --json.
NULLS = "a value that cannot be given, such as NaN or an interval of too few seeds, is null with a <key>_null_reason"


def run_sweep(sweep, out, advice=None, budget=None, **options):
    """``sweep.run``; its refusals for device memory, host memory or disk (ResourceError, raised with the
    numbers before anything runs) get the command's advice, and a failed write (OSError, e.g. a full disk: it
    names the file) says which file: a ValueError, one line, exit status 2 (any other MemoryError is one line
    too: ``cli._run``). Every warning raised while it runs (the engine's, a damaged chunk
    set aside, ..., and any other, e.g. NumPy's) prints once, as one line, after the run ends or fails.
    ``advice`` (a command's ``ADVICE`` table) replaces the engine's advice for a refusal it has an entry for;
    ``budget`` names the memory budget's settings in the engine's own advice as the command does."""
    import warnings

    from jaxreplay.engine import sweep as sweep_lib
    from jaxreplay.engine.plan import ResourceError

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", sweep_lib.SweepWarning)
            try:
                return sweep_lib.run(sweep, out, **options)
            except ResourceError as e:
                ours = (advice or {}).get(e.lower)
                said = ours.format(cause=e.cause) if ours else e.advised(budget)
                raise ValueError(f"{e.problem} {said}") from None
            except OSError as e:
                raise ValueError(f"cannot write {e.filename or out}: {e.strerror or e}.") from None
    finally:
        # Printed outside the recording context: a warning emitted inside it would be appended to the
        # list being printed, and the loop would never end.
        # (dict.fromkeys: each distinct line once, in order; a cast warned by every trace is one line)
        for line in dict.fromkeys(_warning_line(w, sweep_lib.SweepWarning) for w in caught):
            print(line, file=sys.stderr)


def _warning_line(warning, engine_category: type[Warning]) -> str:
    """One line for a recorded warning: the engine's own as its message, any other with its category and
    where it was raised (``jaxreplay: warning: RuntimeWarning: overflow encountered in cast (lax.py:5304)``)."""
    import os

    if issubclass(warning.category, engine_category):
        return f"jaxreplay: warning: {warning.message}"
    message = " ".join(str(warning.message).split())  # one line, whatever the warning's text holds
    where = f"{os.path.basename(warning.filename)}:{warning.lineno}"
    return f"jaxreplay: warning: {warning.category.__name__}: {message} ({where})"


@contextlib.contextmanager
def named_as_options(options: dict[str, str]):
    """A :class:`~jaxreplay._validation.FieldError` about a field of ``options`` (a command's ``OPTIONS`` table)
    raised inside, said of the option the user typed instead: ``--step-size must be >= 0.0, got -1.0.``,
    ``--step-size 1e-50 does not fit a float32 ...``, ``--env Pendulum-v1: DQN needs ...``."""
    from jaxreplay._validation import FieldError

    try:
        yield
    except FieldError as error:
        if error.field not in options:
            raise
        option = options[error.field]
        if error.shows_value:  # as typed: the value after the option, no `=`, no quotes
            option += f" {error.value}:" if error.about else f" {error.value}"
        raise ValueError(f"{option} {error.problem}") from None


def positive(name: str, value: int) -> None:
    """Refuse a count or size option ``--name`` below 1 or beyond int32 (ValueError naming it)."""
    if value < 1:
        raise ValueError(f"--{name} must be >= 1, got {value}.")
    from jaxreplay._validation import INT32_MAX

    if value > INT32_MAX:  # counts, sizes and indices are int32 on the device
        raise ValueError(f"--{name} must be <= {INT32_MAX} (an int32), got {value}.")
