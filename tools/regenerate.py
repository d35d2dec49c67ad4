"""Rewrite every generated block of the repository from the code that owns it.

Run it after a change to the catalogue, the views, the fault profiles or the mock's
data (``docs/architecture.md``, "Recipes")::

    uv run python tools/regenerate.py            # rewrite what is stale
    uv run python tools/regenerate.py --check    # exit 1 and name what is stale

A generated block sits between two markers of one style, written in the comment
syntax of its file: ``<!-- generated: NAME -->`` ... ``<!-- end generated: NAME -->``
in Markdown, ``# generated: NAME`` ... ``# end generated: NAME`` in Python. A block
of kind ``file`` is the whole file (``contracts/openapi.yaml``). Nothing outside
the markers is read or written, so prose around a block stays the author's.

Exit status: 0 when nothing is (or, with ``--check``, would be) changed; 1 with
``--check`` when something is stale (each stale file and block named on stderr);
2 when a file or one of its markers is missing (named on stderr), nothing written.

This is a script of the repository, not a ``pmtk`` command: what it writes (the
manuals, ``contracts/openapi.yaml``, the tables pinned in tests) is the
repository's, and an installed pmtk has none of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
LINE_LENGTH = 100
"""ruff's line length (pyproject.toml): a Python block is written as ruff formats it."""

Kind = Literal["md", "py", "file"]


@dataclass(frozen=True, slots=True)
class Block:
    """One generated block: its name, the files that hold it and how it is rendered."""

    name: str
    paths: tuple[str, ...]
    kind: Kind
    render: Callable[[], str]
    why: str

    def markers(self) -> tuple[str, str]:
        """The start and end marker lines (with their newlines) of this block."""
        if self.kind == "md":
            return f"<!-- generated: {self.name} -->\n", f"<!-- end generated: {self.name} -->\n"
        return f"# generated: {self.name}\n", f"# end generated: {self.name}\n"


class MarkerError(Exception):
    """A file of a block, or one of its markers, is missing or doubled."""


# ------------------------------------------------------------------------- renderers


def _views_tables() -> str:
    from toolkit.views import views_markdown

    return views_markdown()


def _frame_rules() -> str:
    from toolkit.rule_sources import rules_markdown

    return rules_markdown()


def _catalogue_rules() -> str:
    from toolkit.rules import non_spec_rules_table

    return non_spec_rules_table()


def _fault_table() -> str:
    from toolkit.mock.faults import fault_table

    return fault_table()


def _openapi() -> str:
    from contracts.openapi import render_openapi

    return render_openapi()


def _py_str(text: str) -> str:
    """A Python string literal as ruff formats it (double quotes unless the text has one)."""
    if '"' in text and "'" not in text:
        return "'" + text.replace("\\", "\\\\") + "'"
    return json.dumps(text, ensure_ascii=False)


def _py_key(items: Sequence[str], indent: int) -> list[str]:
    """A tuple as ruff formats it: on one line, or exploded (magic trailing comma) when long."""
    pad = " " * indent
    one = pad + "(" + ", ".join(_py_str(i) for i in items) + ")"
    if len(one) + len(": [") <= LINE_LENGTH:
        return [one]
    return [pad + "(", *(pad + "    " + _py_str(i) + "," for i in items), pad + ")"]


def _py_dict_of_lists(name: str, annotation: str, rows: dict[Any, list[str]]) -> str:
    """A dict of tuple keys to lists of strings, each list exploded so ruff keeps it."""
    lines = [f"{name}: {annotation} = {{"]
    for key, values in rows.items():
        head = _py_key(key, 4)
        if not values:
            lines += [*head[:-1], head[-1] + ": [],"]
            continue
        lines += [*head[:-1], head[-1] + ": ["]
        lines += [" " * 8 + _py_str(v) + "," for v in values]
        lines.append("    ],")
    return "\n".join([*lines, "}"]) + "\n"


def _pinned_digests() -> str:
    """``PINNED`` of tests/mock/test_data_pinned.py: generates the four practices (~20 s)."""
    from toolkit.mock.data import generate
    from toolkit.mock.shapes import SHAPES

    digests = _load_test_module("tests/mock/test_data_pinned.py").digests
    lines = ["PINNED: dict[tuple[str, str], dict[str, str]] = {"]
    for scale in ("small", "medium"):
        for shape in SHAPES:
            lines.append(f"    ({_py_str(scale)}, {_py_str(shape)}): {{")
            for name, digest in digests(generate(0, scale, shape)).items():
                lines.append(f"        {_py_str(name)}: {_py_str(digest)},")
            lines.append("    },")
    return "\n".join([*lines, "}"]) + "\n"


def _pinned_rules() -> str:
    """The one pinned list of the rules that are not the spec's, with their frame checks."""
    from toolkit.rule_sources import pinned_rows

    annotation = "dict[tuple[str, str, str, str], list[str]]"
    return _py_dict_of_lists("NON_SPEC", annotation, pinned_rows())


def _load_test_module(path: str) -> Any:
    """A test module by path (tests are no package; pytest imports them with importlib)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BLOCKS: tuple[Block, ...] = (
    Block(
        "views-tables",
        ("docs/views.md",),
        "md",
        _views_tables,
        "every view's columns (toolkit.views.views_markdown)",
    ),
    Block(
        "frame-rules",
        ("docs/views.md",),
        "md",
        _frame_rules,
        "the frames' checks of rules not the spec's (toolkit.rule_sources.rules_markdown)",
    ),
    Block(
        "catalogue-rules",
        ("docs/contracts.md",),
        "md",
        _catalogue_rules,
        "the catalogue's rules not the spec's (toolkit.rules.non_spec_rules_table)",
    ),
    Block(
        "fault-table",
        ("docs/mock.md", "docs/interfaces.md"),
        "md",
        _fault_table,
        "the mock's fault profiles (toolkit.mock.faults.fault_table)",
    ),
    Block(
        "openapi",
        ("contracts/openapi.yaml",),
        "file",
        _openapi,
        "the OpenAPI document schemathesis runs (contracts.openapi.render_openapi)",
    ),
    Block(
        "pinned-rules",
        ("tests/rules/test_rule_sources.py",),
        "py",
        _pinned_rules,
        "the reviewed list of rules not the spec's (toolkit.rule_sources.non_spec_model)",
    ),
    Block(
        "pinned-digests",
        ("tests/mock/test_data_pinned.py",),
        "py",
        _pinned_digests,
        "the digests of the generated practices (slow: builds four of them)",
    ),
)
"""Every generated block of the repository, in the order they are written."""


# ------------------------------------------------------------------------- splicing


def splice(text: str, block: Block, body: str, where: str) -> str:
    """``text`` with ``block``'s body between its markers replaced by ``body``.

    Raises
    ------
    MarkerError
        A marker is missing, doubled, or the end comes before the start.
    """
    if block.kind == "file":
        return body
    start, end = block.markers()
    if text.count(start) != 1 or text.count(end) != 1:
        msg = (
            f"{where}: expected one {start.strip()!r} and one {end.strip()!r} "
            f"(found {text.count(start)} and {text.count(end)})"
        )
        raise MarkerError(msg)
    head, rest = text.split(start)
    if end not in rest:
        msg = f"{where}: {end.strip()!r} comes before {start.strip()!r}"
        raise MarkerError(msg)
    _, tail = rest.split(end)
    return head + start + body + end + tail


def plan(root: Path, blocks: Sequence[Block]) -> dict[Path, tuple[str, str, list[str]]]:
    """Per file: its text now, its text regenerated, and the names of its stale blocks.

    Raises
    ------
    MarkerError
        A file is missing, or a marker is (nothing is written then).
    """
    out: dict[Path, tuple[str, str, list[str]]] = {}
    for block in blocks:
        body = block.render()
        for rel in block.paths:
            path = root / rel
            if path not in out:
                if not path.is_file():
                    msg = f"{rel}: missing (block {block.name!r})"
                    raise MarkerError(msg)
                now = path.read_text(encoding="utf-8")
                out[path] = (now, now, [])
            now, new, stale = out[path]
            spliced = splice(new, block, body, rel)
            if spliced != new:
                stale.append(block.name)
            out[path] = (now, spliced, stale)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: see the module's docstring."""
    names = [b.name for b in BLOCKS]
    parser = argparse.ArgumentParser(
        prog="tools/regenerate.py",
        description="Rewrite every generated block of the repository.",
        epilog="blocks: " + "; ".join(f"{b.name} ({', '.join(b.paths)}): {b.why}" for b in BLOCKS),
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--only", action="append", choices=names, help="only these blocks")
    parser.add_argument("--skip", action="append", choices=names, default=[], help="not these")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this)")
    args = parser.parse_args(argv)
    chosen = [b for b in BLOCKS if (not args.only or b.name in args.only)]
    chosen = [b for b in chosen if b.name not in args.skip]
    try:
        files = plan(args.root.resolve(), chosen)
    except MarkerError as exc:
        print(f"regenerate: {exc}", file=sys.stderr)
        return 2
    stale = {path: (new, blocks) for path, (now, new, blocks) in files.items() if new != now}
    for path, (new, blocks) in stale.items():
        rel = path.relative_to(args.root.resolve())
        if args.check:
            print(f"stale: {rel} ({', '.join(blocks)})", file=sys.stderr)
        else:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {rel} ({', '.join(blocks)})")
    if args.check and stale:
        print("regenerate: run `uv run python tools/regenerate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # contracts and toolkit of this checkout, not another
    sys.exit(main())
