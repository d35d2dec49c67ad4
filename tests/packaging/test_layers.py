"""The layers of ``toolkit`` (issue 36), checked by ``tools/layers.py``.

The real package must break no rule; each rule is also shown to catch the slip it is
for on a small package written here (a private name, an import inside a function, a
circle that only such an import hides, a long module), so that a checker that stops
looking would fail these tests rather than pass the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import layers  # noqa: E402


def _package(tmp_path: Path, files: dict[str, str]) -> layers.Layers:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [tmp_path / "pkg", *(tmp_path / "pkg").rglob("*")]:
        if folder.is_dir() and not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("")
    return layers.read(tmp_path / "pkg")


def _problems(found: layers.Layers, **known: object) -> list[str]:
    options: dict[str, object] = {"start": "pkg.cli", "known_long": {}}
    return layers.problems(found, **{**options, **known})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def package() -> layers.Layers:
    """The real package, read once for the tests that check it."""
    return layers.read()


def test_the_package_breaks_no_rule(package: layers.Layers) -> None:
    found = package
    assert layers.problems(found) == []
    # the checker saw the package: its modules, and imports inside functions that the
    # rules allow (pmtk's start, a heavy library kept out), and no circle
    assert "toolkit.cli" in found.modules and len(found.modules) > 100
    assert any(imp.function for imp in found.imports)


def test_the_layers_table_in_the_architecture_page_is_the_package_as_it_is(
    package: layers.Layers,
) -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    begin, end = "<!-- layers: begin -->\n", "<!-- layers: end -->"
    assert begin in page and end in page, "docs/architecture.md lost its layers table"
    shown = page.split(begin, 1)[1].split(end, 1)[0].strip()
    assert shown == layers.markdown(package), (
        "docs/architecture.md's layers table is out of date: paste "
        "`uv run python tools/layers.py --markdown` between its markers"
    )


def test_a_private_name_imported_from_another_module_is_refused(tmp_path: Path) -> None:
    found = _package(
        tmp_path,
        {
            "a.py": "_hidden = 1\n__version__ = '1'\nshown = 2\n",
            "b.py": "from pkg.a import _hidden, shown\nfrom pkg.a import __version__\n",
            "c.py": "from .a import shown\n",
        },
    )
    assert _problems(found) == ["pkg/b.py:1: imports the private name(s) _hidden of pkg.a"]


def test_an_import_inside_a_function_is_refused_unless_it_keeps_pmtk_start_light(
    tmp_path: Path,
) -> None:
    found = _package(
        tmp_path,
        {
            "cli.py": "from pkg import light\n\ndef run():\n    from pkg import heavy\n",
            "light.py": (
                "def f():\n    from pkg.cli import run\n\ndef g():\n    from pkg import heavy\n"
            ),
            "heavy.py": "def h():\n    from pkg import other\n",
            "other.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import heavy\n"
            ),
            "__init__.py": "def __getattr__(name):\n    from pkg import heavy\n    return heavy\n",
        },
    )
    # cli -> heavy and light -> heavy keep heavy out of the start: allowed; light ->
    # cli is a module the start loads anyway; heavy -> other is not at the start
    assert _problems(found) == [
        "pkg/heavy.py:2: imports pkg.other inside h()",
        "pkg/light.py:2: imports pkg.cli inside f()",
        "a circle between modules: pkg.cli, pkg.light",
    ]


def test_an_import_inside_a_function_may_keep_a_heavy_library_out(tmp_path: Path) -> None:
    """pandera costs seconds to import: a module that does not load it may import one
    that does inside a function (the client validates frames only when asked)."""
    found = _package(
        tmp_path,
        {
            "cli.py": "",
            "frames.py": "import pandera\n",
            "checks.py": "from pandera import Check\n\ndef f():\n    from pkg import frames\n",
            "client.py": "import polars\n\ndef g():\n    from pkg import frames\n",
        },
    )
    assert _problems(found) == ["pkg/checks.py:4: imports pkg.frames inside f()"]


def test_a_circle_hidden_by_an_import_inside_a_function_is_a_circle(tmp_path: Path) -> None:
    files = {
        "cli.py": "",
        "a.py": "from pkg.b import x\ny = 1\n",
        "b.py": "x = 1\n\ndef f():\n    from pkg.a import y\n    return y\n",
        "c.py": "from pkg import d\n",
        "d.py": "from pkg import e\n",
        "e.py": "from pkg import c\n",
    }
    found = _package(tmp_path, files)
    assert _problems(found) == [
        "pkg/b.py:4: imports pkg.a inside f()",
        "a circle between modules: pkg.a, pkg.b",
        "a circle between modules: pkg.c, pkg.d, pkg.e",
    ]
    # without the arrow that closes each (b's import of a, e's of c) nothing is reported
    broken = _package(tmp_path / "2", {**files, "b.py": "x = 1\n", "e.py": ""})
    assert _problems(broken) == []


def test_what_a_package_face_loads_at_start_may_import_inside_a_function(tmp_path: Path) -> None:
    """The start loads each package's ``__init__`` on the way to a module, and what
    that imports: those modules are at the start too."""
    found = _package(
        tmp_path,
        {
            "cli.py": "from pkg.sub.leaf import v\n",
            "sub/__init__.py": "from pkg import face\n",
            "sub/leaf.py": "v = 1\n",
            "face.py": "def f():\n    from pkg import heavy\n",
            "heavy.py": "",
        },
    )
    assert _problems(found) == []


def test_a_package_face_importing_its_modules_closes_a_circle(tmp_path: Path) -> None:
    """``from pkg.sub import name`` runs ``pkg/sub/__init__.py`` first: an arrow to it."""
    found = _package(
        tmp_path,
        {
            "cli.py": "",
            "sub/__init__.py": "from pkg.sub.inner import name\n",
            "sub/inner.py": "from pkg.user import used\nname = 1\n",
            "user.py": "from pkg.sub import name\nused = name\n",
        },
    )
    assert _problems(found) == ["a circle between modules: pkg.sub, pkg.sub.inner, pkg.user"]


@pytest.mark.parametrize(("lines", "refused"), [(799, False), (800, False), (801, True)])
def test_a_module_over_the_limit_is_refused(tmp_path: Path, lines: int, refused: bool) -> None:
    found = _package(tmp_path, {"cli.py": "", "long.py": "x = 1\n" * lines})
    expected = [f"pkg/long.py: {lines} lines (at most 800)"] if refused else []
    assert _problems(found) == expected


def test_a_listed_long_module_must_not_grow_and_leaves_the_list_when_short(
    tmp_path: Path,
) -> None:
    found = _package(tmp_path, {"cli.py": "", "long.py": "x = 1\n" * 900})
    assert _problems(found, known_long={"pkg.long": 900}) == []
    assert _problems(found, known_long={"pkg.long": 899}) == [
        "pkg/long.py: 900 lines (at most 899)"
    ]
    short = _package(tmp_path / "2", {"cli.py": "", "long.py": "x = 1\n" * 800})
    assert _problems(short, known_long={"pkg.long": 900}) == [
        "KNOWN_LONG lists pkg.long, now 800 lines: drop it"
    ]
