"""Packaging and layering: the replay core installs and imports with JAX alone, extras say what is missing,
and each layer imports only from the layers below it."""

from __future__ import annotations

import ast
import re
import pathlib
import subprocess
import sys
import tomllib

import pytest
from readme_core_only import OPTIONAL  # tests/ is on sys.path under pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxreplay"
CORE = ("jaxreplay.buffer", "jaxreplay.samplers", "jaxreplay.prioritized", "jaxreplay.adaptive", "jaxreplay.evidence",
        "jaxreplay.memory", "jaxreplay.returns")

# Layers, bottom to top: a module may import jaxreplay modules of its own layer or below.
LAYERS = {
    "core": ("jaxreplay", "jaxreplay._validation", "jaxreplay._extras", "jaxreplay._typing", "jaxreplay._files",
             "jaxreplay._td_sums", "jaxreplay._deprecated", "jaxreplay._cond", "jaxreplay._ordered") + CORE,
    "environments and agents": ("jaxreplay.envs", "jaxreplay.agents"),
    "experiments": ("jaxreplay.experiments",),
    "sweep engine and results": ("jaxreplay.engine",),
    "the paper": ("jaxreplay.paper", "jaxreplay.cli", "jaxreplay.__main__"),
}


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_core_imports_no_optional_dependency():
    code = ("import sys\nimport " + ", ".join(CORE) + "\n"
            f"print(','.join(m for m in {OPTIONAL!r} if m in sys.modules))")
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"the core imported {result.stdout.strip()}"


def test_core_dependencies_are_jax_and_numpy_with_ranges_and_a_lock():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = [d.split(">")[0].split("<")[0].split("=")[0].strip() for d in project["dependencies"]]
    assert sorted(core) == ["jax", "numpy"]
    assert not any("==" in d for d in project["dependencies"])  # ranges in the package ...
    locked = {line.split("==")[0].lower() for line in (ROOT / "constraints.txt").read_text().splitlines()
              if "==" in line}
    extras = project["optional-dependencies"]
    for extra in ("rl", "sweep", "paper", "test"):
        for requirement in extras[extra]:
            name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()
            if name != "jaxreplay":
                assert name in locked, f"{name} ({extra}) is not pinned in constraints.txt"  # ... exact set in the lock
    assert "jax" in locked and "numpy" in locked


def test_the_extras_error_names_are_the_extras_of_pyproject():
    """jaxreplay._extras.EXTRAS (the modules each extra brings; the source of the tests' OPTIONAL list) names
    only requirements of that extra in pyproject.toml, and every extra but the aggregates."""
    from jaxreplay._extras import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        names = {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower() for r in extras[extra]}
        assert set(modules) <= names, f"{extra}: {sorted(set(modules) - names)} not in pyproject.toml"
    assert set(EXTRAS) == {"rl", "sweep", "paper"}
    assert set(OPTIONAL) == {m for names in EXTRAS.values() for m in names} | {"pandas"} and len(OPTIONAL) == 10


@pytest.mark.parametrize("module, missing, extra", [
    ("jaxreplay.experiments.dqn", "flax", "rl"),
    ("jaxreplay.engine.sweep", "xarray", "sweep"),
    ("jaxreplay.paper.theory", "diffrax", "paper"),
])
def test_a_missing_extra_is_named(module, missing, extra):
    result = _run(f"import sys\nsys.modules[{missing!r}] = None\nimport {module}")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert f"pip install 'jaxreplay[{extra}]'" in last and missing in last


def test_the_command_line_names_a_missing_extra_in_one_line():
    result = _run("import sys\nsys.modules['diffrax'] = None\nfrom jaxreplay import cli\n"
                  "sys.exit(cli.main(['linesearch', '--steps', '10', '--seeds', '1']))")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "jaxreplay linesearch: error:" in result.stderr and "pip install 'jaxreplay[paper]'" in result.stderr


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """jaxreplay modules imported anywhere in ``path`` (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("jaxreplay")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxreplay"):
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return found


def _layer(module: str) -> int:
    best = None
    for index, prefixes in enumerate(LAYERS.values()):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return best[0]


def test_each_layer_imports_only_from_the_layers_below():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    assert set(CORE) <= set(modules)
    violations = []
    for name, path in sorted(modules.items()):
        own = _layer(name)
        for imported in sorted(_imports(path)):
            target = imported if imported in modules or imported == "jaxreplay" else imported.rsplit(".", 1)[0]
            if target == "jaxreplay" and imported != "jaxreplay":  # `from jaxreplay import x`: x is the module
                continue
            if _layer(target) > own:
                violations.append(f"{name} ({list(LAYERS)[own]}) imports {imported} ({list(LAYERS)[_layer(target)]})")
    assert not violations, "\n".join(violations)


def test_the_core_imports_nothing_above_it():
    for name in CORE:
        path = PACKAGE / (name.split(".")[1] + ".py")
        above = [m for m in _imports(path) if _layer(m if m != "jaxreplay" else m) > 0]
        assert not above, f"{name} imports {above}"


def test_the_tree_shows_the_layers():
    """Every module lives in its layer's folder: the core at the top, then one folder per layer."""
    folders = {"envs": 1, "agents": 1, "experiments": 2, "engine": 3, "paper": 4, "cli": 4}
    top = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.endswith(".egg-info")}
    # A folder with no Python file is a stale leftover (e.g. __pycache__ of a moved package), not a layer.
    packages = {name for name in top if (PACKAGE / name).is_dir() and any((PACKAGE / name).rglob("*.py"))}
    assert packages == set(folders), f"unexpected folders {packages ^ set(folders)}"
    modules = {name[:-3] for name in top if name.endswith(".py")}
    private = {"_validation", "_extras", "_typing", "_files", "_td_sums", "_deprecated", "_cond", "_prng", "_ordered",
               "_scope"}
    assert modules == {"__init__", "__main__"} | private | {m.split(".")[1] for m in CORE}
    for name, index in folders.items():
        for path in (PACKAGE / name).rglob("*.py"):
            assert _layer(_module_name(path)) == index, path


# Array arguments of the core's public functions, and what their annotation must name: ArrayLike (traced or
# concrete input), jax.Array (a key), or a state type. Reverting any of them to Any fails below.
ARRAY_ARGUMENTS = {
    "jaxreplay.buffer.init": {"capacity": "ArrayLike", "example": "Transition"},
    "jaxreplay.buffer.add": {"state": "BufferState", "transition": "Transition"},
    "jaxreplay.buffer.resize": {"new_capacity": "ArrayLike"},
    "jaxreplay.buffer.oldest_indices": {"num": "ArrayLike"},
    "jaxreplay.buffer.get": {"indices": "ArrayLike"},
    "jaxreplay.samplers.uniform": {"key": "jax.Array", "state": "BufferState"},
    "jaxreplay.samplers.exact_prioritized": {"td_errors": "ArrayLike", "priority_exponent": "ArrayLike",
                                             "importance_exponent": "ArrayLike"},
    "jaxreplay.samplers.importance_weights": {"probabilities": "ArrayLike", "exponent": "ArrayLike"},
    "jaxreplay.prioritized.update_priorities": {"indices": "ArrayLike", "td_errors": "ArrayLike",
                                                "priority_exponent": "ArrayLike", "tree": "TreeMode"},
    "jaxreplay.prioritized.sample": {"key": "jax.Array", "importance_exponent": "ArrayLike"},
    "jaxreplay.adaptive.controller": {"interval": "ArrayLike", "num_old": "ArrayLike", "tolerance": "ArrayLike",
                                      "random_walk": "ArrayLike"},
    "jaxreplay.adaptive.update": {"step": "ArrayLike", "state": "AdaptiveState"},
    "jaxreplay.adaptive.old_td_error_sum": {"num_old": "ArrayLike", "start": "ArrayLike"},
}


def _public_functions(module_name: str):
    import importlib
    import inspect

    module = importlib.import_module(module_name)
    for name, value in vars(module).items():
        if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module_name:
            yield f"{module_name}.{name}", value


@pytest.mark.parametrize("module_name", CORE)
def test_the_core_annotates_arrays_not_any(module_name):
    """Every parameter and return of the core's public functions is annotated, and none with ``Any``:
    arrays are ``ArrayLike``/``jax.Array``, user pytrees the ``PyTree`` alias (``Transition``)."""
    import inspect

    functions = dict(_public_functions(module_name))
    assert functions
    for qualified, function in functions.items():
        signature = inspect.signature(function)
        annotations = {name: p.annotation for name, p in signature.parameters.items()}
        annotations["return"] = signature.return_annotation
        for name, annotation in annotations.items():
            assert annotation is not inspect.Parameter.empty, f"{qualified}: {name} is not annotated"
            assert not re.search(r"\bAny\b", str(annotation)), f"{qualified}: {name} is annotated {annotation}"
    for qualified, expected in ARRAY_ARGUMENTS.items():
        if qualified.rsplit(".", 1)[0] != module_name:
            continue
        parameters = inspect.signature(functions[qualified]).parameters
        for name, wanted in expected.items():
            assert wanted in str(parameters[name].annotation), \
                f"{qualified}: {name} is annotated {parameters[name].annotation}, expected {wanted}"


def test_the_pytree_alias_is_the_only_any():
    """``PyTree`` (= Any) is spelled as such: the core's modules do not import ``Any`` themselves."""
    for name in CORE:
        source = (PACKAGE / (name.split(".")[1] + ".py")).read_text()
        assert not re.search(r"from typing import .*\bAny\b", source), f"{name} imports typing.Any"
    from jaxreplay import _typing, buffer

    assert buffer.Transition is _typing.PyTree
