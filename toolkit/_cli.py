"""What every ``pmtk`` command shares: exit codes, consoles, help and usage errors.

One exit-code table serves every command (README "Exit codes"):

====  =========================================================================
0     done: conformant (``check``), synced or verified (``sync``), rendered
      (``notebooks``); ``mock`` and ``listen`` also exit 0 when stopped by Ctrl-C
1     the run ended with problems: findings (``check``), a resource failed or the
      network or server failed during the sync (``sync``), a notebook failed
      (``notebooks``), the receiver stopped on an error (``listen``)
2     refused, nothing done: a usage error (bad option or value), a setting
      (``PM_*``, ``.env``, ``PM_TIMEZONE``), credentials refused, a wrong address or
      one that cannot be reached before anything was fetched, a folder that is not
      a pmtk store
3     ``sync --verify`` found damaged or missing data files
4     writing the store failed locally (disk full, read-only, permission)
130   interrupted (Ctrl-C) before the end
====  =========================================================================

Output follows where it goes: on a terminal, rich's live view (bars, colour);
on a pipe, in a file, or with ``NO_COLOR`` or ``TERM=dumb``, plain full lines,
never cut nor wrapped, tables as aligned text.
"""

from __future__ import annotations

import io
import os
import re
import sys
import warnings
from typing import IO, Any

import typer
from typer.core import TyperGroup

__all__ = [
    "EXIT_CODES",
    "EXIT_DAMAGED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_WRITE_FAILED",
    "PmtkGroup",
    "emit",
    "is_plain",
    "make_console",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_REFUSED = 2
EXIT_DAMAGED = 3
EXIT_WRITE_FAILED = 4
EXIT_INTERRUPTED = 130
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "done",
    EXIT_FAILED: "ended with problems (findings, failed resources or notebooks)",
    EXIT_REFUSED: "refused, nothing done (usage, settings, credentials, address, folder)",
    EXIT_DAMAGED: "damaged store files (sync --verify)",
    EXIT_WRITE_FAILED: "writing the store failed locally",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
"""The one exit-code table of every ``pmtk`` command."""

PLAIN_WIDTH = 100_000
"""Console width for plain output: wide enough that rich never cuts or wraps a line."""


# -- consoles ------------------------------------------------------------------------


def is_plain(stream: IO[str] | None = None) -> bool:
    """Whether output to ``stream`` should be plain lines rather than rich's live view.

    Plain when the stream is not a terminal, when ``NO_COLOR`` is set (to anything
    non-empty, per no-color.org) or when ``TERM=dumb``.
    """
    stream = stream if stream is not None else sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return True
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Any:
    """A rich console for stdout (or stderr, or ``file``) fit for where it writes.

    On a terminal: colour and live views, text wrapped at word boundaries. Otherwise
    no colour, no live view, and a width no line reaches, so nothing is cut or wrapped.
    """
    from rich.console import Console

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    if is_plain(stream):
        return Console(
            file=stream,
            width=PLAIN_WIDTH,
            soft_wrap=True,
            color_system=None,
            force_terminal=False,
            force_interactive=False,
            highlight=False,
            emoji=False,
        )
    return Console(file=stream, soft_wrap=True, highlight=False)


def _cell_text(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def table_lines(table: Any) -> list[str]:
    """A rich table as plain aligned lines: title, header, one line per row, caption.

    Every cell is shown whole; columns are separated by two spaces; a cell's
    newlines become spaces, so each row stays one line (grep finds it).
    """
    columns = table.columns
    header = [_cell_text(c.header) for c in columns]
    body = [[" ".join(_cell_text(cell).split()) for cell in c.cells] for c in columns]
    rows = [list(row) for row in zip(*body, strict=True)] if body else []
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(columns))]

    def line(cells: list[str]) -> str:
        out = []
        for i, text in enumerate(cells):
            right = columns[i].justify == "right"
            out.append(text.rjust(widths[i]) if right else text.ljust(widths[i]))
        return "  ".join(out).rstrip()

    lines = []
    if table.title:
        lines.append(" ".join(_cell_text(table.title).split()))
    if table.show_header:
        lines.append(line(header))
    lines.extend(line(r) for r in rows)
    if table.caption:
        lines.append(" ".join(_cell_text(table.caption).split()))
    return lines


_WHOLE_VALUE = re.compile(r"[-+]?[\d][\d.,]*(?:\s?(?:s|ms|%))?|-|[-+]?[\d.,]+/[\d.,?]+")
"""A cell that is a value (``1,641``, ``53.5 s``, ``-``): never wrapped nor cut."""


def fitted_table(table: Any, width: int) -> Any:
    """``table`` laid out in ``width`` columns without losing a value, or ``None``.

    The one rule of every command on a terminal: a cell of text may wrap (at word
    boundaries), a number or a name never does. The first column (the names) and
    every column whose cells are all values keep their width; the others wrap. The
    layout is drawn once off-screen and refused (``None``: the caller prints whole
    lines) when any value, name or word did not come out whole.
    """
    import copy

    from rich.console import Console

    fitted = copy.copy(table)
    fitted.columns = [copy.copy(c) for c in table.columns]
    whole: list[str] = []
    words: list[str] = []
    for i, column in enumerate(fitted.columns):
        cells = [" ".join(_cell_text(c).split()) for c in column.cells]
        if i == 0 or all(_WHOLE_VALUE.fullmatch(c) for c in cells if c):
            column.no_wrap = True
            whole.extend(c for c in cells if c)
        else:
            column.no_wrap, column.overflow, column.max_width = False, "fold", None
            words.extend(w for c in cells for w in c.split())
        words.extend(_cell_text(column.header).split())
    for box in (fitted.box, None):  # with its lines, else without (3 columns a cell less)
        fitted.box = box
        fitted.pad_edge = box is not None
        probe = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
        probe.print(fitted)
        drawn = probe.file.getvalue()  # type: ignore[attr-defined]
        cut = "…" in drawn or any(len(line) > width for line in drawn.splitlines())
        if not cut and all(text in drawn for text in (*whole, *words)):
            return fitted
    return None


def record_lines(table: Any) -> list[Any]:
    """A table as one paragraph per row, for a terminal too narrow for its columns.

    ``Organization: mode full, status updated, fetched 23, rows 23, ...``: the row's
    name, then each column's header and value; the console wraps the paragraph at
    spaces, so every value and name stays whole and every row stays together.
    """
    from rich.text import Text

    columns = table.columns
    header = [" ".join(_cell_text(c.header).split()) for c in columns]
    body = [[" ".join(_cell_text(cell).split()) for cell in c.cells] for c in columns]
    out: list[Any] = []
    if table.title:
        out.append(Text(" ".join(_cell_text(table.title).split())))
    for row in zip(*body, strict=True) if body else []:
        pairs = [f"{header[i]} {value}" for i, value in enumerate(row) if i and value]
        out.append(Text(f"{row[0]}: {', '.join(pairs)}"))
    if table.caption:
        out.append(Text(" ".join(_cell_text(table.caption).split())))
    return out


def emit(console: Any, renderable: Any) -> None:
    """Print ``renderable``; on a plain console, tables become aligned lines of text."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if console.is_terminal and not console.no_color:
        from rich.measure import Measurement

        if isinstance(renderable, Group):
            for part in renderable.renderables:
                emit(console, part)
            return
        fits = not isinstance(renderable, Table) or (
            Measurement.get(console, console.options.update(width=PLAIN_WIDTH), renderable).maximum
            <= console.width
        )
        if fits:
            console.print(renderable)
            return
        # Too wide: rich would squeeze every column ("2,…"). Wrap the text cells instead,
        # keeping every number and name whole; where even that cannot fit, whole lines.
        fitted = fitted_table(renderable, console.width)
        if fitted is not None:
            console.print(fitted)
            return
        for text in record_lines(renderable):
            console.print(text, soft_wrap=False, overflow="fold")
        return
    if isinstance(renderable, Group):
        for part in renderable.renderables:
            emit(console, part)
    elif isinstance(renderable, Table):
        for text in table_lines(renderable):
            console.print(Text(text))
    else:
        console.print(renderable)


# -- warnings ------------------------------------------------------------------------


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: IO[str] | None = None,
    line: str | None = None,
) -> None:
    """``pmtk: warning: <message>``: one line, no source path, no code line."""
    stream = file if file is not None else sys.stderr
    text = " ".join(str(message).split())
    try:
        stream.write(f"pmtk: warning: {text}\n")
    except OSError:  # a closed pipe: the warning is not worth a traceback
        return


def one_line_warnings() -> None:
    """Show warnings from here on as one line each (the command line's way)."""
    warnings.showwarning = _one_line_warning


# -- help and usage errors -----------------------------------------------------------

_RST_LITERAL = re.compile(r"``([^`]+)``")
_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain_help(text: str | None) -> str | None:
    """Help text without reStructuredText markup (````x```` and ``:func:`x``` become ``x``)."""
    if not text:
        return text
    return _RST_ROLE.sub(r"\1", _RST_LITERAL.sub(r"\1", text))


def _metavar(param: Any) -> str:
    """A readable metavar: ``DIR``, ``FILE``, ``N``, ``URL``, ``NAME``, ``TEXT``."""
    name = (param.name or "").lower()
    desc = getattr(param, "type_descriptor", None)
    if desc is not None and desc.is_choice and desc.choices:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    if desc is not None and desc.is_path:
        if any(word in name for word in ("baseline", "file")):
            return "FILE"
        return "DIR"
    annotation = getattr(desc, "annotation", None)
    if annotation in (int, float) or "seconds" in name or name in ("port", "seed"):
        return "N"
    if "url" in name:
        return "URL"
    if name in ("resource", "only", "fault"):
        return "NAME"
    if name == "auth_header":
        return "NAME:VALUE"
    return "TEXT"


def tidy_command(command: Any) -> Any:
    """Readable metavars (no ``<bool>``) and help without markup, once per command."""
    if getattr(command, "_pmtk_tidy", False):
        return command
    command.help = plain_help(command.help)
    command.short_help = plain_help(command.short_help)
    for param in command.params:
        param.help = plain_help(getattr(param, "help", None))
        if getattr(param, "metavar", None) is not None:
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""  # a flag takes no value: show none
        else:
            param.metavar = _metavar(param)
    original = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = original(ctx)
        if option is not None:
            option.metavar = ""  # -h takes no value
        return option

    command.get_help_option = help_option
    if not hasattr(command, "list_commands"):  # a group's help lists its commands: keep it boxed
        _fit_help_to_width(command)
    command._pmtk_tidy = True
    return command


def _fit_help_to_width(command: Any) -> None:
    """The boxed help when the terminal fits it, else :func:`plain_help_page`."""
    rich_help = command.format_help

    def format_help(ctx: Any, formatter: Any) -> None:
        width = _help_width()
        if width >= rich_help_width(command, ctx):
            rich_help(ctx, formatter)
        else:
            formatter.write(plain_help_page(command, ctx, width))

    command.format_help = format_help


HELP_COLUMN_MIN = 30
"""Narrowest help column of the boxed (rich) help; below it, help is printed as lines."""

# The boxed help: a panel (border and padding, 4 columns) around a table whose
# columns (long names, short names, negative long and short names, metavar, help)
# are 2 apart.
_PANEL_AND_GAPS = 4 + 2 * 5


def _help_width() -> int:
    """The width help is laid out in: the terminal's (``COLUMNS`` when set), as rich sees it."""
    from rich.console import Console

    return int(Console().width)


def _option_cells(param: Any) -> tuple[str, str, str, str, str]:
    """The texts of an option's first five help columns, as typer lays them out."""
    opts, negative = list(getattr(param, "opts", [])), list(getattr(param, "secondary_opts", []))
    described = getattr(param, "_get_number_range_help_str", None)
    span = described() if callable(described) else None
    kind = (getattr(param, "metavar", None) or "") + (f" [{span}]" if span else "")
    return (
        ",".join(o for o in opts if o.startswith("--")),
        ",".join(o for o in opts if not o.startswith("--")),
        ",".join(o for o in negative if o.startswith("--")),
        ",".join(o for o in negative if not o.startswith("--")),
        kind,
    )


def rich_help_width(command: Any, ctx: Any) -> int:
    """Columns the boxed help needs to show every option name and metavar whole,
    beside a help column of :data:`HELP_COLUMN_MIN`."""
    rows = [_option_cells(p) for p in command.get_params(ctx)]
    names = sum(max((len(row[i]) for row in rows), default=0) for i in range(5))
    return _PANEL_AND_GAPS + names + HELP_COLUMN_MIN


def plain_help_page(command: Any, ctx: Any, width: int) -> str:
    """Help as lines for a terminal too narrow for the boxed help.

    Each option's names and metavar stand whole on a line of their own and its
    help is wrapped below them, at spaces only: a name or value is never cut
    nor broken at a hyphen (the one rule of ``pmtk`` output: wrap a cell, never
    a name or a number).
    """
    import textwrap

    def wrapped(text: str, indent: str) -> list[str]:
        return textwrap.wrap(
            " ".join(text.split()),
            max(20, width - len(indent)),
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )

    lines = [f"Usage: {ctx.command_path} {' '.join(command.collect_usage_pieces(ctx))}", ""]
    for paragraph in (command.help or "").split("\n\n"):
        lines += [*wrapped(paragraph, "  "), ""]
    lines.append("Options:")
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        lines.append(f"  {names}")
        lines += wrapped(text, "      ")
    return "\n".join(lines) + "\n"


def usage_message(exc: Any) -> str:
    """pmtk's one-line wording of a usage error, without the parser's own phrases."""
    from pydantic import ValidationError

    cause = exc.__cause__
    param = getattr(exc, "param", None)
    if isinstance(cause, ValidationError) and param is not None:
        errors = cause.errors()
        value = errors[0].get("input") if errors else None
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        option = opts[0] if opts else (param.name or "value")
        metavar = getattr(param, "metavar", None) or ""
        want = {
            "N": "a whole number",
            "DIR": "a folder",
            "FILE": "a file",
        }.get(metavar, f"a {metavar}" if metavar else "a valid value")
        return f"{option}: {value!r} is not {want}"
    return " ".join(exc.format_message().split()).rstrip(".")


class PmtkGroup(TyperGroup):
    """The ``pmtk`` group: tidy help for each command, one-line usage errors, exit codes."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        return tidy_command(command) if command is not None else None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        tidy_command(self)
        for name in self.list_commands(ctx):
            self.get_command(ctx, name)
        super().format_help(ctx, formatter)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run a command; a usage error is ``pmtk <cmd>: <what>; see pmtk <cmd> -h``, exit 2."""
        from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
        from typer.exceptions import Abort

        standalone = kwargs.pop("standalone_mode", True)
        one_line_warnings()
        try:
            result = super().main(*args, **{**kwargs, "standalone_mode": False})
        except NoArgsIsHelpError as exc:  # plain `pmtk`: the help, as a usage error
            if not standalone:
                raise
            # The error was built from ctx.get_help(), which with rich help has printed
            # the help already (and returned ""): print only what it returned, so the
            # help appears once, never twice.
            if exc.message:
                sys.stderr.write(exc.message + "\n")
            sys.exit(EXIT_REFUSED)
        except UsageError as exc:
            if not standalone:
                raise
            ctx = exc.ctx
            path = ctx.command_path if ctx is not None else "pmtk"
            sys.stderr.write(f"{path}: {usage_message(exc)}; see '{path} -h'\n")
            sys.exit(EXIT_REFUSED)
        except ClickException as exc:
            if not standalone:
                raise
            sys.stderr.write(f"pmtk: {' '.join(exc.format_message().split())}\n")
            sys.exit(exc.exit_code)
        except Abort:
            if not standalone:
                raise
            sys.stderr.write("pmtk: interrupted\n")
            sys.exit(EXIT_INTERRUPTED)
        if not standalone:
            return result
        sys.exit(result if isinstance(result, int) else EXIT_OK)


def typer_app(**kwargs: Any) -> typer.Typer:
    """A :class:`typer.Typer` with pmtk's conventions: ``-h``, :class:`PmtkGroup`."""
    settings = {"help_option_names": ["-h", "--help"]}
    return typer.Typer(cls=PmtkGroup, context_settings=settings, **kwargs)
