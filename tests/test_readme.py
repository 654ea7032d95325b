"""The README's own-loop example runs as printed and learns what its comment says."""

from __future__ import annotations

import pathlib
import re

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _block(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(re.escape(marker) + r"[^\n]*\n```python\n(.*?)\n```", text, re.S)
    assert match, f"no python block after {marker!r} in README.md"
    return match.group(1)


def test_own_loop_example_learns_the_arm_means(capsys):
    code = _block("<!-- example:own-loop")
    namespace: dict = {}
    exec(compile(code, "README.md (own-loop example)", "exec"), namespace)
    q = np.asarray(namespace["q"])
    assert q.shape == (8, 3, 2)
    # Arm means are 0 and 1 (unit-variance noise); the seed mean of each memory size is close.
    np.testing.assert_allclose(q.mean(axis=0), np.tile([0.0, 1.0], (3, 1)), atol=0.2)
    assert "[[" in capsys.readouterr().out


def test_own_loop_example_runs_with_jax_alone():
    """Without any extra (every optional dependency made unimportable), the example still runs and
    imports nothing optional: the replay core drops into a project that has only JAX."""
    import subprocess
    import sys

    from readme_core_only import OPTIONAL

    code = ("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in OPTIONAL) + _block("<!-- example:own-loop")
            + "\nimport numpy as np\nprint('shape', np.asarray(q).shape)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "shape (8, 3, 2)" in result.stdout


def test_ci_runs_the_readme_test_command_verbatim_and_stops_at_any_failure_in_it():
    """`.ci/run` runs README's command 2 as printed, each &&-chain in a subshell: under `set -e` a failure
    inside an unwrapped && list (a failed install, lint or type check) is not fatal, so CI would pass."""
    import subprocess

    readme = (ROOT / "README.md").read_text()
    command = re.search(r"# 2\. [^\n]*\n([^\n]+)\n", readme).group(1)
    assert command.endswith("python -m pytest") and " && " in command
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"({command})\n" in ci
    chains = [line for line in ci.splitlines() if " && " in line and not line.lstrip().startswith("#")]
    assert len(chains) == 3 and all(line.startswith("(") and line.endswith(")") for line in chains)
    # Why: an && list whose first command fails does not stop a `set -e` script; a subshell around it does.
    script = "set -euo pipefail; {}; echo reached"
    assert subprocess.run(["bash", "-c", script.format("false && true")], capture_output=True).stdout == b"reached\n"
    wrapped = subprocess.run(["bash", "-c", script.format("(false && true)")], capture_output=True)
    assert wrapped.returncode == 1 and wrapped.stdout == b""
