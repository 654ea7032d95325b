"""Documentation checks: every public module, class and function has a docstring; pydoc renders them.

The core modules (buffer, samplers, stored priorities, aER) promise shapes in
their docstrings: each public function there names at least one array shape
(``int32[...]``, ``float32[...]``, ``[batch_size]`` …) or says it returns a
state.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import pydoc
import re

import pytest

import jaxreplay

MODULES = ["jaxreplay"] + sorted(
    m.name for m in pkgutil.walk_packages(jaxreplay.__path__, "jaxreplay.") if not m.name.endswith("__main__")
)
CORE = ["jaxreplay.buffer", "jaxreplay.samplers", "jaxreplay.prioritized", "jaxreplay.adaptive"]


def _public(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield name, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        yield f"{name}.{attr}", member


def _has_doc(obj, name) -> bool:
    # A method may inherit its docstring from a base class (what help() shows); a class may not:
    # dataclasses and NamedTuples get a generated "Name(field, ...)" docstring.
    doc = obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)
    return bool(doc and doc.strip()) and not doc.startswith(name.split(".")[-1] + "(")


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_object_has_a_docstring(module_name):
    module = importlib.import_module(module_name)
    assert (module.__doc__ or "").strip(), f"{module_name} has no module docstring"
    missing = [name for name, obj in _public(module) if not _has_doc(obj, name)]
    assert not missing, f"{module_name}: no docstring on {missing}"


@pytest.mark.parametrize("module_name", CORE)
def test_core_functions_state_shapes(module_name):
    module = importlib.import_module(module_name)
    shape = re.compile(r"(int32|float32|bool|uint32)\[|\[[A-Za-z_ ,.*0-9]+\]|[Ss]hape|State\b")
    vague = [name for name, obj in _public(module) if inspect.isfunction(obj) and not shape.search(obj.__doc__)]
    assert not vague, f"{module_name}: docstrings without shapes: {vague}"


@pytest.mark.parametrize("module_name", MODULES)
def test_pydoc_renders(module_name):
    text = pydoc.render_doc(importlib.import_module(module_name), renderer=pydoc.plaintext)
    assert module_name in text and len(text) > 200
