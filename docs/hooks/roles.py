"""A griffe extension (mkdocs.yml, mkdocstrings' ``extensions``): the docstrings' reST roles as links.

The docstrings are written for ``pydoc`` and editors, in reST's inline roles (``:func:`add```,
``:class:`~jaxreplay.buffer.BufferState```). Before mkdocstrings renders them, this extension
rewrites each role into Markdown:

* a role naming an object of jaxreplay that the API reference renders (a public object of a
  module named by a ``::: module`` line of ``docs/api/*.md``) becomes a cross-reference
  ``[`add`][jaxreplay.buffer.add]`` (autorefs resolves it; ``mkdocs build --strict`` fails on
  one it cannot);
* a role naming an object of jaxreplay that is not rendered (private, or in a module outside the
  reference) or an object outside jaxreplay (``jax.jit``, a builtin, a standard-library module)
  becomes inline code;
* a role naming nothing (a misspelt or removed name) is reported as a warning, which fails the
  strict build, naming the docstring and the role.

Names are looked up as Python would from the docstring's place: in the object, then each scope
around it (class, module, packages), then from the top (``jaxreplay.…``); a name the module imports
resolves to what it imports. ``.. code-block::`` directives and ``::`` literal-block markers
become plain Markdown code blocks.
"""

from __future__ import annotations

import builtins
import logging
import pathlib
import re
import sys

import griffe

_log = logging.getLogger("mkdocs.plugins.jaxreplay_roles")  # a WARNING here fails `mkdocs build --strict`

ROLE = re.compile(r":(?:func|class|mod|data|attr|meth|obj|exc|const):`(?P<name>[^`]+)`")
_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. code-block::.*\n(?:[ \t]*\n)?", re.MULTILINE)
_LITERAL_MARKER = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)
_API_PAGES = pathlib.Path(__file__).resolve().parents[1] / "api"


def rendered_modules(pages: pathlib.Path = _API_PAGES) -> set[str]:
    """The modules the API reference renders: every ``::: dotted.name`` line of ``pages/*.md``."""
    names = set()
    for page in sorted(pages.glob("*.md")):
        names.update(re.findall(r"^:::[ \t]+([\w.]+)[ \t]*$", page.read_text(encoding="utf-8"), re.MULTILINE))
    return names


def _member(root: griffe.Object, path: str) -> griffe.Object | None:
    """The object at dotted ``path`` below ``root`` (aliases followed), or None if nothing is there."""
    obj: griffe.Object | griffe.Alias = root
    for part in path.split("."):
        try:
            if obj.is_alias:
                obj = obj.final_target  # type: ignore[union-attr]
            obj = obj.members[part]
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    try:
        return obj.final_target if obj.is_alias else obj  # type: ignore[union-attr,return-value]
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None  # an import from outside jaxreplay


def resolve(name: str, where: griffe.Object, package: griffe.Module) -> griffe.Object | None:
    """The object of ``package`` that ``name`` means in a docstring of ``where``, or None."""
    scope: griffe.Object | None = where
    while scope is not None:
        found = _member(scope, name)
        if found is not None:
            return found
        scope = scope.parent
    if name == package.name:
        return package
    if name.startswith(package.name + "."):
        return _member(package, name[len(package.name) + 1 :])
    return None


def _outside(name: str) -> bool:
    """Whether the bare ``name`` is Python's own: a builtin (``open``) or a standard-library module (``csv``)."""
    return hasattr(builtins, name) or name in sys.stdlib_module_names


def is_rendered(obj: griffe.Object, modules: set[str]) -> bool:
    """Whether the API reference has a heading for ``obj``: a rendered module, or a public member of one."""
    if obj.path in modules:
        return True
    parts = obj.path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in modules:
            return not any(p.startswith("_") for p in parts[i:])
    return False


def rewrite(text: str, where: griffe.Object, package: griffe.Module, modules: set[str]) -> tuple[str, list[str]]:
    """``text`` with its roles as Markdown links or code, and the roles that name nothing."""
    broken = []

    def one(match: re.Match) -> str:
        written = match.group("name")
        name = written.lstrip("~").removesuffix("()")
        shown = name.rsplit(".", 1)[-1] if written.startswith("~") else name
        target = resolve(name, where, package)
        if target is None:
            # Outside jaxreplay (jax.jit, xarray.Dataset, open, csv): code. Any other bare name, or a
            # jaxreplay.… one, was meant to be ours and must resolve.
            top = name.split(".")[0]
            if top == package.name or ("." not in name and not _outside(name)):
                broken.append(written)
            return f"`{shown}`"
        return f"[`{shown}`][{target.path}]" if is_rendered(target, modules) else f"`{shown}`"

    text = ROLE.sub(one, text)
    text = _CODE_BLOCK.sub("\n", text)
    text = _LITERAL_MARKER.sub(":", text)
    return text, broken


def _objects(obj: griffe.Object):
    """``obj`` and every object defined under it (imports skipped)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)  # type: ignore[arg-type]


class RolesToLinks(griffe.Extension):
    """Rewrite every docstring of the loaded package once, when the whole package is known."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        modules = rendered_modules()
        for obj in _objects(pkg):
            if obj.docstring is None:
                continue
            obj.docstring.value, broken = rewrite(obj.docstring.value, obj, pkg, modules)
            for role in broken:
                _log.warning("the docstring of %s: %r names nothing in %s", obj.path, role, pkg.name)
