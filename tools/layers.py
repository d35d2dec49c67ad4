"""The layers of ``toolkit`` as they are: imports between its modules, checked.

Usage (from the repository root)::

    uv run python tools/layers.py            # the report; exit 1 on a broken rule
    uv run python tools/layers.py --markdown # the layers table of docs/architecture.md

Every import of the package's own modules is read from the source (``ast``), at the
top of a module or inside a function, and the rules of issue 36 are checked:

* **No private name crosses a module.** ``from toolkit.x import _y`` is refused: a
  name other modules use is public in the module that defines it.
* **No import of the package inside a function**, except where it keeps a module out
  of ``pmtk``'s start (an import in a module that ``toolkit.cli`` loads at start, of a
  module it does not: ``pmtk --help`` loads no Parquet store, lake, mock or pandera),
  where it keeps one of :data:`HEAVY_LIBRARIES` out of a module that does not load
  it, and the lazy package faces (a package's ``__getattr__``).
* **No circle between modules**, counting imports inside functions (a circle that
  only an import inside a function keeps from failing is still a circle).
* **No module over 800 lines**, except those in :data:`KNOWN_LONG` (exact too).

A package imports its ``__init__`` before any of its modules, so ``from toolkit.x
import name`` (``name`` not a module) is an arrow to the package ``toolkit.x``.
``if TYPE_CHECKING:`` imports are not arrows (they never run).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800

HEAVY_LIBRARIES = frozenset({"pandera", "pandas", "pyarrow", "deltalake", "uvicorn"})
"""Libraries whose import costs a user's start: pandera (with pandas) 2-5 s, pyarrow
0.3-0.6 s, uvicorn 0.3 s, measured on this 2-core machine against polars' 0.5-1 s
(``python -c "import pandera"``, 2026-11-28). A module that does not load one of them
may import a module of the package that does inside a function, so that importing
it stays light (``toolkit.client`` loads no pandera until a frame is validated)."""

KNOWN_LONG: dict[str, int] = {}
"""Modules over :data:`MAX_LINES` still to be split (issue 36), each with its length
now: a module listed here must not grow, and leaves the list once it is short."""


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's arrow from ``module`` to ``target``."""

    module: str
    target: str
    line: int
    function: str | None  # the enclosing function, None at the top of the module
    names: tuple[str, ...]


@dataclass
class Layers:
    """The package's modules, their arrows and their lengths."""

    base: Path  # the folder holding the package (paths in reports are relative to it)
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    libraries: dict[str, set[str]] = field(default_factory=dict)  # at the top, by module

    def arrows(self, *, top_only: bool = False) -> dict[str, set[str]]:
        graph: dict[str, set[str]] = defaultdict(set)
        for imp in self.imports:
            if not top_only or imp.function is None:
                graph[imp.module].add(imp.target)
        return graph

    def loaded_by(self, start: str) -> set[str]:
        """The modules importing ``start`` loads (top-level arrows, packages first)."""
        graph = self.arrows(top_only=True)
        seen: set[str] = set()
        todo = [start]
        while todo:
            mod = todo.pop()
            if mod in seen or mod not in self.modules:
                continue
            seen.add(mod)
            todo.extend(graph.get(mod, ()))
            todo.extend(_parents(mod))
        return seen

    def heavy(self, module: str) -> frozenset[str]:
        """The :data:`HEAVY_LIBRARIES` importing ``module`` loads."""
        return frozenset(
            lib
            for mod in self.loaded_by(module)
            for lib in self.libraries.get(mod, ())
            if lib in HEAVY_LIBRARIES
        )

    def circles(self) -> list[frozenset[str]]:
        """Every set of modules that import one another (all arrows, Tarjan's SCCs)."""
        return _strongly_connected(self.arrows(), sorted(self.modules))


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _module_name(path: Path, base: Path) -> str:
    name = ".".join(path.relative_to(base).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _resolved(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def read(root: Path = ROOT / "toolkit") -> Layers:
    """Every module of the package under ``root`` and every import of its own modules."""
    layers = Layers(root.parent)
    for path in sorted(root.rglob("*.py")):
        layers.modules[_module_name(path, root.parent)] = path
    for module, path in layers.modules.items():
        text = path.read_text(encoding="utf-8")
        layers.lines[module] = text.count("\n")
        layers.imports.extend(_imports(module, ast.parse(text), path.name == "__init__.py", layers))
    return layers


def _imports(module: str, tree: ast.Module, is_package: bool, layers: Layers) -> list[Import]:
    package = module.split(".")[0]
    where: dict[int, str] = {}
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                where.setdefault(id(inner), node.name)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = _resolved(module, node, is_package)
            if base != package and not base.startswith(package + "."):
                if node.level == 0 and id(node) not in where and base:
                    layers.libraries.setdefault(module, set()).add(base.split(".")[0])
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in layers.modules else base
                names = () if sub in layers.modules else (alias.name,)
                found.append(Import(module, target, node.lineno, where.get(id(node)), names))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == package or alias.name.startswith(package + "."):
                    found.append(Import(module, alias.name, node.lineno, where.get(id(node)), ()))
                elif id(node) not in where:
                    layers.libraries.setdefault(module, set()).add(alias.name.split(".")[0])
    return [imp for imp in found if imp.target != module]


def _strongly_connected(graph: dict[str, set[str]], nodes: list[str]) -> list[frozenset[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.add(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


def problems(
    layers: Layers,
    *,
    start: str = "toolkit.cli",
    known_long: dict[str, int] | None = None,
    max_lines: int = MAX_LINES,
) -> list[str]:
    """Every broken rule (see the module's docstring), one line each; ``start`` is the
    module a command loads first, ``known_long`` the debt (default: this package's)."""
    out: list[str] = []
    long_ok = KNOWN_LONG if known_long is None else known_long
    at_start = layers.loaded_by(start)

    def where(module: str) -> Path:
        return layers.modules[module].relative_to(layers.base)

    for imp in layers.imports:
        place = f"{where(imp.module)}:{imp.line}"
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if private:
            out.append(f"{place}: imports the private name(s) {', '.join(private)} of {imp.target}")
        if imp.function is None or imp.function == "__getattr__":
            continue
        if imp.module in at_start and imp.target not in at_start:
            continue  # keeps imp.target out of pmtk's start
        if layers.heavy(imp.target) - layers.heavy(imp.module):
            continue  # keeps a heavy library out of imp.module's importers
        out.append(f"{place}: imports {imp.target} inside {imp.function}()")
    for circle in sorted(layers.circles(), key=sorted):
        out.append(f"a circle between modules: {', '.join(sorted(circle))}")
    for module, count in sorted(layers.lines.items()):
        allowed = long_ok.get(module, max_lines)
        if count > allowed:
            out.append(f"{where(module)}: {count} lines (at most {allowed})")
    for module in sorted(long_ok):
        count = layers.lines.get(module, 0)
        if count <= max_lines:
            out.append(f"KNOWN_LONG lists {module}, now {count} lines: drop it")
    return out


def markdown(layers: Layers) -> str:
    """The packages of ``toolkit`` in layers: each imports only those in the rows below
    it or in its own row (its own row only when they form a circle, named there)."""

    def package_of(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else module

    graph: dict[str, set[str]] = defaultdict(set)
    for imp in layers.imports:
        a, b = package_of(imp.module), package_of(imp.target)
        if a != b:
            graph[a].add(b)
    packages = sorted({package_of(m) for m in layers.modules})
    groups = _strongly_connected(graph, packages)
    group_of = {p: g for g in groups for p in g}
    level: dict[str, int] = {}

    def depth(p: str) -> int:
        if p in level:
            return level[p]
        own = group_of.get(p, frozenset({p}))
        below = {q for m in own for q in graph.get(m, ()) if q not in own}
        d = 1 + max((depth(q) for q in below), default=-1)  # circles are one node
        for m in own:
            level[m] = d
        return d

    for p in packages:
        depth(p)
    rows = []
    for d in sorted(set(level.values()), reverse=True):
        names = sorted(p for p in packages if level[p] == d)
        cells = ", ".join(f"`{n}`" for n in names)
        circles = sorted({group_of[p] for p in names if p in group_of}, key=sorted)
        note = "; ".join(" <-> ".join(f"`{m}`" for m in sorted(c)) for c in circles)
        rows.append(f"| {d} | {cells} | {note or '-'} |")
    head = "| layer | packages and modules | circles within the layer |\n|---|---|---|"
    return head + "\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the layers table")
    args = parser.parse_args(argv)
    layers = read()
    if args.markdown:
        print(markdown(layers))
        return 0
    found = problems(layers)
    inside = sum(1 for imp in layers.imports if imp.function not in (None, "__getattr__"))
    print(
        f"{len(layers.modules)} modules, {len(layers.imports)} arrows, {inside} inside functions, "
        f"{len(layers.circles())} circles"
    )
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
