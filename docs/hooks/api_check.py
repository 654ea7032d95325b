"""A mkdocs hook (mkdocs.yml ``hooks``): every public name of the API reference has a docstring.

mkdocstrings renders an undocumented public name as a bare signature and says nothing. This hook
loads jaxreplay with griffe (statically: nothing is imported) before the build and logs one
warning per public name without a docstring, which fails ``mkdocs build --strict``. A module's
public names are its ``__all__`` when it has one, else every name it defines (not imports) that
does not start with ``_``; a public class's public methods count too (an override documented
in a base class, as ``help()`` finds it, counts as documented). The modules are those the
reference renders (the ``::: module`` lines of ``docs/api/*.md``), so a page added there is
checked with no change here. ``python docs/hooks/api_check.py`` prints the same list and exits 1
if it is not empty.
"""

from __future__ import annotations

import logging
import pathlib
import sys

import griffe

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from roles import rendered_modules  # noqa: E402  (docs/hooks is not a package)

_log = logging.getLogger("mkdocs.hooks.api_check")  # a WARNING here fails `mkdocs build --strict`
ROOT = pathlib.Path(__file__).resolve().parents[2]


def public_names(module: griffe.Module) -> list[str]:
    """The public names of ``module``: its ``__all__``, else what it defines without a leading ``_``."""
    if module.exports is not None:
        return [str(name) for name in module.exports]
    return [name for name, member in module.members.items() if not name.startswith("_") and not member.is_alias]


def undocumented(package: griffe.Module, modules: set[str]) -> list[str]:
    """The dotted paths, in module order, of the public objects of ``modules`` without a docstring."""
    missing = []
    for path in sorted(modules):
        module = package if path == package.path else package[path[len(package.path) + 1 :]]
        if not module.docstring:
            missing.append(module.path)
        for name in public_names(module):
            obj = module[name]
            if obj.is_alias and obj.is_module:
                continue  # a submodule listed in __all__: checked as a module of its own when rendered
            if not obj.docstring:
                missing.append(f"{module.path}.{name}")
            if obj.is_class:
                missing += [
                    f"{module.path}.{name}.{m}"
                    for m, member in obj.members.items()
                    if not m.startswith("_") and member.is_function and not _inherited_docstring(obj, m)
                ]
    return missing


def _inherited_docstring(cls: griffe.Class, name: str) -> bool:
    """Whether method ``name`` of ``cls`` has a docstring, its own or a base class's (as ``help()`` finds it)."""
    for klass in (cls, *cls.mro()):
        member = klass.members.get(name)
        if member is not None and member.docstring:
            return True
    return False


def load(root: pathlib.Path = ROOT) -> griffe.Module:
    """jaxreplay as griffe sees it from the source under ``root`` (aliases resolved where they can be)."""
    package = griffe.load("jaxreplay", search_paths=[str(root)], resolve_aliases=True, resolve_external=False)
    assert isinstance(package, griffe.Module)
    return package


def on_pre_build(config, **kwargs) -> None:
    """The mkdocs event: warn once per undocumented public name."""
    for path in undocumented(load(), rendered_modules()):
        _log.warning("the public name %s has no docstring: write one (the API reference renders it)", path)


if __name__ == "__main__":
    missing = undocumented(load(), rendered_modules())
    print("\n".join(missing) or "every public name of the API reference has a docstring")
    sys.exit(1 if missing else 0)
