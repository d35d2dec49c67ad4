"""Help reads as help: ``-h`` everywhere, readable metavars, no markup left raw."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from toolkit._cli import emit, make_console, table_lines
from toolkit.cli import app

COMMANDS = [c.name for c in app.registered_commands]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_has_readable_metavars_and_no_raw_markup(command: str | None) -> None:
    args = ["-h"] if command is None else [command, "-h"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "Usage: pmtk" in text
    assert not re.search(r"<(?:bool|str|int|float|list\[\w+\]|path)>", text), text
    assert "``" not in text and ":func:" not in text, text


def test_the_notebooks_help_shows_code_as_plain_text() -> None:
    result = CliRunner().invoke(app, ["notebooks", "-h"], env={"COLUMNS": "200"})
    assert "toolkit.connect()" in result.stdout and "``toolkit" not in result.stdout
    assert re.search(r"--html\s+DIR", result.stdout)


def test_a_plain_console_prints_each_observation_whole_on_one_line() -> None:
    from contracts.report import render_summary

    long_example = "x" * 400 + "\nsecond line of the same record"
    report = {
        "target": {"base_url": "http://127.0.0.1:1/main", "embedded_mock": True},
        "summary": {
            "passed": 1, "failed": 0, "skipped": 0, "observed": 2, "requests": 3,
            "by_category": {"reference": {"passed": 1, "failed": 0, "skipped": 0, "observed": 2}},
        },
        "elapsed_seconds": 1.0,
        "checks": [
            {
                "id": "reference.forms", "status": "passed",
                "observed": [
                    {"field": "Coverage.payor", "rule": "reference-form", "source": "facts",
                     "count": 102, "example": long_example},
                    {"field": "Coverage.subscriber", "rule": "reference-form", "source": "facts",
                     "count": 7, "example": "Coverage/200001 subscriber.reference"},
                ],
            }
        ],
    }  # fmt: skip
    buffer = io.StringIO()
    console = make_console(file=buffer)  # a StringIO is not a terminal: plain
    emit(console, render_summary(report))
    lines = buffer.getvalue().splitlines()
    observed = [line for line in lines if line.startswith("observed: ")]
    assert len(observed) == 2
    assert observed[0].endswith("x" * 400 + " second line of the same record")  # whole
    assert "Coverage.subscriber [reference-form, facts] x7" in observed[1]
    assert not any(set(line) & set("│┃━─…") for line in lines)
    header = next(line for line in lines if line.startswith("Category"))
    assert header.split() == ["Category", "Passed", "Failed", "Skipped", "Observed"]


def test_a_table_too_wide_for_the_terminal_is_printed_as_whole_lines() -> None:
    from rich.table import Table

    table = Table(title="pmtk sync -> store")
    for name in ("resource", "mode", "status", "fetched", "rows", "child rows", "pages"):
        table.add_column(name, justify="right" if name in ("fetched", "rows") else "left")
    table.add_row(
        "Appointment", "incremental (resumed)", "updated", "2,034", "2,034", "6,102", "21"
    )
    narrow = Console(file=io.StringIO(), width=40, force_terminal=True, color_system=None)
    emit(narrow, table)
    shown = narrow.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in shown and "2,034" in shown and "incremental (resumed)" in shown
    assert table_lines(table)[2].split()[:2] == ["Appointment", "incremental"]


def test_pmtk_without_arguments_prints_the_help_once_and_exits_2() -> None:
    import subprocess
    import sys
    from pathlib import Path

    pmtk = Path(sys.executable).parent / "pmtk"
    done = subprocess.run([str(pmtk)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    shown = done.stdout + done.stderr
    assert shown.count("Usage: pmtk") == 1, shown
    assert shown.count("Commands") == 1, shown


def _leaf_commands() -> list[list[str]]:
    """Every command path with options of its own (``views`` is a group: its commands)."""
    import typer.main

    group = typer.main.get_command(app)
    paths: list[list[str]] = []
    for name in group.list_commands(None):  # type: ignore[attr-defined]
        sub = group.get_command(None, name)  # type: ignore[attr-defined]
        if hasattr(sub, "list_commands"):
            paths += [[name, leaf] for leaf in sub.list_commands(None)]
        else:
            paths.append([name])
    return paths


@pytest.mark.parametrize("columns", [60, 79, 80])
@pytest.mark.parametrize("path", _leaf_commands(), ids=" ".join)
def test_help_shows_every_option_name_and_metavar_whole_at_terminal_width(
    path: list[str], columns: int
) -> None:
    """An 80-column terminal (and narrower) cuts no option name nor metavar (#39 item 5).

    Every option's long name stands whole on a line, followed on that same line
    by its metavar, with nothing cut (``…``) and no line wider than the terminal.
    """
    import typer.main

    result = CliRunner().invoke(app, [*path, "-h"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "…" not in result.stdout, result.stdout
    assert max(len(line) for line in lines) <= columns, result.stdout
    command = typer.main.get_command(app)
    for name in path:
        command = command.get_command(None, name)  # type: ignore[attr-defined]
    for param in command.params:
        longs = [o for o in param.opts if o.startswith("--")]
        if not longs or getattr(param, "hidden", False):
            continue
        pattern = re.escape(longs[0]) + r"(?![\w-])"
        if param.metavar:
            pattern += r".*?(?<![\w:|-])" + re.escape(param.metavar) + r"(?![\w:|-])"
        assert any(re.search(pattern, line) for line in lines), (longs[0], param.metavar)
