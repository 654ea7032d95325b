"""Run the README's own-loop example in an environment with the core alone (``pip install .``, no
extras) and check that nothing optional was installed or imported. `.ci/run` runs it in a fresh
venv; ``tests/test_readme.py`` runs the same example with the optional packages blocked."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

from jaxreplay._extras import EXTRAS

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Every optional top-level module (tests/test_packaging.py and tests/test_readme.py use this one list):
# what the extras install, and pandas, which xarray pulls in.
OPTIONAL = tuple(sorted({name for names in EXTRAS.values() for name in names} | {"pandas"}))


def main() -> int:
    # scipy is a dependency of jax itself: installed, but never imported by the core.
    installed = [m for m in OPTIONAL if m != "scipy" and importlib.util.find_spec(m) is not None]
    if installed:
        print(f"not a core-only environment: {installed} installed", file=sys.stderr)
        return 1
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- example:own-loop[^\n]*\n```python\n(.*?)\n```", text, re.S)
    if match is None:
        print("no own-loop example in README.md", file=sys.stderr)
        return 1
    namespace: dict = {}
    exec(compile(match.group(1), "README.md (own-loop example)", "exec"), namespace)
    imported = [m for m in OPTIONAL if m in sys.modules]
    shape = tuple(getattr(namespace.get("q"), "shape", ()))
    print(f"core-only: the README example ran with jax alone, q {shape}, optional modules imported: {imported}")
    return 0 if not imported and shape == (8, 3, 2) else 1


if __name__ == "__main__":
    sys.exit(main())
