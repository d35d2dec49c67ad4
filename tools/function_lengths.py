"""Count the lines of every function and list the long ones.

A function's length runs from its first decorator (else its ``def``) to its last
line, docstring and nested functions included; a nested function is counted on its
own as well. The limits the project holds itself to (issue 26): no function over
100 lines, at most 16 over 50, across ``toolkit``, ``contracts`` and ``tools``::

    uv run python tools/function_lengths.py                 # the long ones, longest first
    uv run python tools/function_lengths.py --over 80 toolkit/store

Exit status: 0 when the limits hold, 1 when they do not (the summary line says
which). ``tests/packaging/test_function_lengths.py`` asserts the same limits.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("toolkit", "contracts", "tools")
"""The folders the limits cover."""
LONG = 50
"""A function over this many lines is long; at most :data:`MAX_LONG` may be."""
MAX_LONG = 16
MAX_LINES = 100
"""No function may be longer than this."""


@dataclass(frozen=True)
class Length:
    """One function: its lines, where it starts and its name."""

    lines: int
    path: Path
    line: int
    name: str

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{self.lines} {where}:{self.line} {self.name}"


def lengths(paths: Sequence[Path]) -> Iterator[Length]:
    """Every function and method under ``paths`` (folders or ``.py`` files)."""
    for top in paths:
        files = [top] if top.is_file() else sorted(top.rglob("*.py"))
        for path in files:
            if ".venv" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    assert node.end_lineno is not None  # set by ast.parse
                    yield Length(node.end_lineno - first + 1, path, node.lineno, node.name)


def main(argv: list[str] | None = None) -> int:
    """Print the functions over ``--over`` lines, longest first, and whether limits hold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="folders or files (default: all)")
    parser.add_argument("--over", type=int, default=LONG, help="list functions over N lines")
    args = parser.parse_args(argv)
    found = sorted(
        lengths(args.paths or [ROOT / r for r in ROOTS]), key=lambda n: (-n.lines, str(n))
    )
    for item in found:
        if item.lines > args.over:
            print(item)
    long = sum(n.lines > LONG for n in found)
    too_long = sum(n.lines > MAX_LINES for n in found)
    holds = long <= MAX_LONG and too_long == 0
    print(
        f"{long} over {LONG} (at most {MAX_LONG}); {too_long} over {MAX_LINES} (none allowed): "
        + ("the limits hold" if holds else "the limits are broken")
    )
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
