"""No function over 100 lines, at most 16 over 50 (issue 26): tools/function_lengths.py.

A function's length runs from its first decorator to its last line, docstring and
nested functions included. The first test holds the whole project to the limits;
the others check that the counter counts what it says, so the limit test can fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "function_lengths.py"


counter = load_script(SCRIPT, "function_lengths")


def test_no_function_over_100_lines_and_at_most_16_over_50() -> None:
    found = list(counter.lengths([ROOT / r for r in counter.ROOTS]))
    assert len(found) > 500  # the whole project was read, not an empty folder
    long = sorted((n for n in found if n.lines > counter.LONG), key=lambda n: -n.lines)
    too_long = [str(n) for n in long if n.lines > counter.MAX_LINES]
    assert not too_long, f"functions over {counter.MAX_LINES} lines: {too_long}"
    shown = "\n".join(str(n) for n in long)
    assert len(long) <= counter.MAX_LONG, (
        f"{len(long)} functions over {counter.LONG} lines (at most {counter.MAX_LONG}):\n{shown}"
    )


def test_a_length_counts_decorators_docstrings_and_nested_functions(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        textwrap.dedent(
            '''
            import functools


            @functools.cache
            @functools.wraps(print)
            def outer() -> int:
                """A docstring

                of three lines."""

                def inner() -> int:
                    return 1

                return inner()


            class Box:
                async def method(self) -> None:
                    pass
            '''
        ),
        encoding="utf-8",
    )
    found = {n.name: (n.lines, n.line) for n in counter.lengths([source])}
    # outer: two decorator lines, def, three docstring lines, blank, inner (2), blank, return
    assert found == {"outer": (11, 7), "inner": (2, 12), "method": (2, 19)}


def test_the_command_lists_long_functions_and_fails_past_the_limits(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(101))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n", encoding="utf-8")
    (tmp_path / "short.py").write_text("def short():\n    return 1\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("102 ") and lines[0].endswith(":1 long")
    assert "short" not in done.stdout
    assert "1 over 50" in lines[-1] and "1 over 100" in lines[-1]
    (tmp_path / "long.py").unlink()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "the limits hold" in done.stdout
