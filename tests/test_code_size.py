"""The codebase's size budget (docs/design.md, "Size budget"), measured with ``ast`` so it stays true.

No function in ``jaxreplay/`` is longer than 80 lines without its docstring, no signature has more than
10 parameters (``self``/``cls`` not counted), no file is over 800 lines. Each exception is a row of the
table in docs/design.md with its reason; a row that is no longer needed must go, and a row's value is a
ceiling: an exception may shrink, never grow.
"""

from __future__ import annotations

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / "jaxreplay"
DESIGN = REPO / "docs" / "design.md"
LIMITS = {"lines": 800, "body": 80, "parameters": 10}


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function from its first statement after the docstring to its end."""
    body = node.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        if len(body) == 1:
            return 0
        first = body[1]
    return (node.end_lineno or first.lineno) - first.lineno + 1


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return len(names) - (1 if names and names[0] in ("self", "cls") else 0)


def measure(package: pathlib.Path = PACKAGE) -> dict[tuple[str, str], int]:
    """Every place over its limit: ``(where, measure) -> value``; ``where`` is ``path`` (lines) or
    ``path:qualified.name`` (body, parameters), paths relative to the repository."""
    over: dict[tuple[str, str], int] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        source = path.read_text()
        if len(source.splitlines()) > LIMITS["lines"]:
            over[(rel, "lines")] = len(source.splitlines())

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    for key, value in (("body", _body_lines(child)), ("parameters", _parameters(child))):
                        if value > LIMITS[key]:
                            over[(f"{rel}:{name}", key)] = value
                    visit(child, f"{name}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(source), "")
    return over


def exceptions() -> dict[tuple[str, str], tuple[int, str]]:
    """The table of docs/design.md's "Size budget": ``(where, measure) -> (value, reason)``."""
    lines = DESIGN.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Where | Measure | Value | Reason |"))
    table = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        where, what, value, reason = [c.strip() for c in line.strip().strip("|").split("|")]
        table[(where.strip("`"), what)] = (int(value), reason)
    return table


def test_every_place_over_budget_is_a_named_exception_with_its_reason():
    over, named = measure(), exceptions()
    missing = {k: v for k, v in over.items() if k not in named}
    assert not missing, f"over the size budget and not named in docs/design.md: {missing}"
    for key, (value, reason) in named.items():
        assert key in over, f"{key} is within budget now: remove its row from docs/design.md"
        assert over[key] <= value, f"{key} grew to {over[key]}, past the {value} its row allows: shrink it"
        assert len(reason.split()) >= 4, f"{key} needs a reason"


def test_the_measures_count_what_they_say(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    params = ", ".join(f"a{i}" for i in range(11))
    (pkg / "m.py").write_text(
        f'def long():\n    """doc\n\n    more doc\n    """\n{body}\n\n\n'
        f"def wide({params}):\n    pass\n\n\n"
        "class C:\n    def method(self, a, b, c, d, e, f, g, h, i, j):\n        pass\n"
        + "\n" * 800
    )
    assert measure(pkg) == {
        ("pkg/m.py", "lines"): 895,  # 95 lines of code, 800 blank ones
        ("pkg/m.py:long", "body"): 81,
        ("pkg/m.py:wide", "parameters"): 11,
    }
