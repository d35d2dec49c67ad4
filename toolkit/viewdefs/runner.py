"""Run a checked ViewDefinition over whole frames of resources.

The resources are read by Polars into one ``Struct`` column (its schema inferred
from all of them), one row per resource. Each select is evaluated on a *context
frame*: a row per focus (the resource, or an item of a ``forEach``), with

``__k``
    a key, unique in the frame and increasing in output order;
``__c``
    the focus (a struct or a primitive);
``__i``
    ``%rowIndex``: the item's position in its ``forEach``/``repeat`` (0 at the top).

``forEach`` is a ``list`` column exploded into a new context frame; a select's
own columns, its nested selects and its ``unionAll`` branches are frames keyed
by ``__k`` that are joined (a cross product per key, rows kept in order); and
``repeat`` walks the tree one depth at a time, since each depth has its own
schema, and orders the rows depth-first by a sort key. Every step is a Polars
operation over the whole frame.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import polars as pl

from toolkit.errors import DataValidationError, ViewDefinitionError
from toolkit.viewdefs import fhirpath as fp
from toolkit.viewdefs.compile import Scope, Val, compile_path, polars_type, to_bool
from toolkit.viewdefs.definition import Column, Select, View
from toolkit.views.expressions import datetime_exact, datetime_fast

__all__ = ["DEFAULT_MAX_ROWS", "evaluate"]

_MAX_DEPTH = 64

DEFAULT_MAX_ROWS = 20_000_000
"""The rows one evaluation may reach (a select's items, a cross product, a union)
unless told otherwise (``max_rows``): generous for real data (a 100k-resource page set
with a few forEach gives a few hundred thousand rows), small enough to stop a
cartesian blow-up (three sibling forEach over 500 items each: 125 million rows)
before it takes the machine's memory."""

_LIMIT: ContextVar[int] = ContextVar("pmtk_view_max_rows", default=DEFAULT_MAX_ROWS)


def _budget(count: int, where: str, what: str) -> None:
    """Raise when ``count`` rows at ``where`` would pass the evaluation's row budget."""
    limit = _LIMIT.get()
    if count > limit:
        msg = (
            f"{where or 'select'}: {what} reaches {count:,} rows, more than the row budget "
            f"of {limit:,} (max_rows); a forEach, repeat or cross product of sibling "
            "selects over large arrays multiplies rows"
        )
        raise ViewDefinitionError(msg, path=where)


def _scope(view: View, dtype: pl.DataType, where: str, source: str, *, root: bool) -> Scope:
    return Scope(Val(pl.col("__c"), dtype, False), view.constants, where, source, root=root)


_CACHED = 1024
"""Compiled paths a view keeps (:attr:`View.compiled`); more input types start it afresh."""


def _cached(view: View, key: tuple[str, pl.DataType, bool], make: Callable[[], Any]) -> Any:
    """``make()``, once per place in the view, input type and root flag.

    A view run over pages in parts (:func:`toolkit.viewdefs.run_view`) is evaluated
    once per part on the same type: compiling its paths again each time held the
    interpreter lock that the thread decoding the next part needs. Compiled
    expressions are immutable, so parts evaluated at once may share them; a path
    that does not compile raises each time and is not kept.
    """
    found = view.compiled.get(key)
    if found is None:
        found = make()
        if len(view.compiled) >= _CACHED:
            view.compiled.clear()
        view.compiled[key] = found
    return found


def _compiled(
    view: View, path: fp.Node, dtype: pl.DataType, where: str, source: str, *, root: bool
) -> Val:
    """``path`` at ``where`` in ``view`` compiled for a focus of ``dtype`` (cached)."""
    return _cached(
        view,
        (where, dtype, root),
        lambda: compile_path(path, _scope(view, dtype, where, source, root=root)),
    )


def _column(view: View, col: Column, dtype: pl.DataType, root: bool) -> tuple[pl.Expr, bool]:
    """The column's expression, and whether it must be checked to hold one value per row."""
    return _cached(view, (col.where, dtype, root), lambda: _column_expr(view, col, dtype, root))


def _column_expr(view: View, col: Column, dtype: pl.DataType, root: bool) -> tuple[pl.Expr, bool]:
    where = f"{col.where}.path"
    val = compile_path(col.path, _scope(view, dtype, where, col.source, root=root))
    if val.empty:
        target = polars_type(col.type) if col.type else pl.String()
        if col.collection:
            return pl.lit([], dtype=pl.List(target)).alias(col.name), False
        # untyped: Null, so that a unionAll branch or a repeat depth where the path has
        # data gives the column its type; what stays Null is String (see _evaluate)
        return pl.lit(None, dtype=target if col.type else pl.Null()).alias(col.name), False
    if isinstance(val.dtype, pl.Struct | pl.List):
        msg = (
            f"{where}: {col.source!r} gives a complex element, which cannot be a column: "
            "name one of its primitive children"
        )
        raise ViewDefinitionError(msg, path=where)
    target = polars_type(col.type) if col.type else val.dtype
    if col.collection:
        expr = val.expr if val.many else pl.concat_list([val.expr]).list.drop_nulls()
        expr = expr.list.eval(_cast(pl.element(), val.dtype, target))
        expr = expr.fill_null(pl.lit([], dtype=pl.List(target)))
        return expr.alias(col.name), False
    if val.many:
        # checked after the select: more than one value in a row is an error
        listed = val.expr.list.eval(_cast(pl.element(), val.dtype, target))
        return listed.alias(col.name), True
    return _cast(val.expr, val.dtype, target).alias(col.name), False


def _cast(expr: pl.Expr, source: pl.DataType, target: pl.DataType) -> pl.Expr:
    """A value in the column's declared type; one that does not convert is null.

    Polars cannot cast text to a boolean at all, so FHIR's ``true``/``false`` are
    mapped; the other casts (text to a number, a number to text) are Polars'.
    """
    if source == target:
        return expr
    if isinstance(target, pl.Boolean) and isinstance(source, pl.String):
        return expr.replace_strict(
            {"true": True, "false": False}, default=None, return_dtype=pl.Boolean
        )
    return expr.cast(target, strict=False)


def _own_columns(view: View, node: Select, frame: pl.DataFrame, root: bool) -> pl.DataFrame:
    dtype = frame.schema["__c"]
    exprs: list[pl.Expr] = []
    checked: list[Column] = []
    for col in node.columns:
        expr, check = _column(view, col, dtype, root)
        exprs.append(expr)
        if check:
            checked.append(col)
    out = frame.select(pl.col("__k"), *exprs)
    for col in checked:
        longest = out.get_column(col.name).list.len().max()
        if isinstance(longest, int) and longest > 1:
            where = f"{col.where}.path"
            msg = (
                f"{where}: {col.source!r} gives up to {longest} values in one row; "
                f"a column that is not 'collection': true must give at most one"
            )
            raise ViewDefinitionError(msg, path=where)
    if checked:
        out = out.with_columns(pl.col(c.name).list.first() for c in checked)
    temporal = [c for c in node.columns if c.ansi]
    if temporal:
        # the common forms of every temporal column in one query (Polars runs the
        # columns in parallel); the values that need more are parsed per column
        fast = out.select(_temporal_fast(pl.col(c.name), c) for c in temporal)
        out = out.with_columns(
            _temporal(out.get_column(c.name), fast.get_column(c.name), c) for c in temporal
        )
    return out


def _temporal_fast(text: pl.Expr, col: Column) -> pl.Expr:
    """The common form of a date (``YYYY-MM-DD``) or date-time (see :func:`_temporal`)."""
    if col.ansi == "Date":
        return text.str.to_date("%Y-%m-%d", strict=False).alias(col.name)
    return datetime_fast(text).alias(col.name)


def _temporal(text: pl.Series, parsed: pl.Series, col: Column) -> pl.Series:
    """A date or date-time column (``ansi/type`` tag) parsed; a value that does not parse raises.

    Date-times are converted to UTC. ``parsed`` is :func:`_temporal_fast` of
    ``text``: the common form (``YYYY-MM-DDTHH:MM:SS`` and an offset) parsed
    without chrono; the rest (fractions of a second, ...) is parsed here with
    ``%+``.
    """
    if col.ansi != "Date":
        rows = (parsed.is_null() & text.is_not_null()).arg_true()
        if rows.len():
            exact = datetime_exact(text.gather(rows))
            parsed = parsed.scatter(rows, exact)
    bad = text.filter(parsed.is_null() & text.is_not_null())
    if bad.len():
        where = f"{col.where}.tag"
        shown = ", ".join(repr(v) for v in bad.head(3).to_list())
        kind = "date" if col.ansi == "Date" else "date-time with a time zone"
        msg = f"column {col.name!r} ({where}): {bad.len()} value(s) are not a {kind}: {shown}"
        raise DataValidationError(msg, pl.DataFrame({"column": col.name, "failure_case": bad}))
    return parsed.alias(col.name)


def _body(view: View, node: Select, frame: pl.DataFrame, root: bool) -> pl.DataFrame:
    """The rows of ``node`` (without its iteration) for each row of ``frame``, keyed by ``__k``."""
    result = _own_columns(view, node, frame, root)
    for sub in node.selects:
        part = _select(view, sub, frame, root)
        joined = _gathered(result, part, frame)
        # the product: as many rows as ``part`` where each meets one row of ``result``
        product = part.height if joined is not None else _product(result, part)
        _budget(product, sub.where, "its cross product with the selects before it")
        if joined is None:
            joined = result.join(part, on="__k", how="inner", maintain_order="left_right")
        result = joined
    if node.union:
        parts = [_select(view, branch, frame, root) for branch in node.union]
        _budget(sum(p.height for p in parts), f"{node.where}.unionAll", "the unionAll")
        union = pl.concat(parts, how="vertical_relaxed").sort("__k", maintain_order=True)
        where = f"{node.where}.unionAll"
        _budget(_product(result, union), where, "its cross product with the selects before it")
        result = result.join(union, on="__k", how="inner", maintain_order="left_right")
    return result


def _gathered(result: pl.DataFrame, part: pl.DataFrame, frame: pl.DataFrame) -> pl.DataFrame | None:
    """The join of :func:`_body`, when ``result`` holds one row for each row of ``frame``.

    Then every row of ``part`` (whose keys are the frame's) meets exactly one row of
    ``result``, and the join is that row gathered beside it: the common case of a
    resource's columns beside a ``forEach`` (``id`` beside each participant), without
    the hash join and the count of its product. None when it does not apply (``result``
    already multiplied by an earlier select, or ``part``'s keys out of order).
    """
    keys = result.get_column("__k")
    if result.height != frame.height or not keys.equals(frame.get_column("__k")):
        return None
    wanted = part.get_column("__k")
    if not wanted.is_sorted():
        return None
    rows = result.gather(keys.search_sorted(wanted))
    return pl.concat([rows, part.drop("__k")], how="horizontal")


def _product(left: pl.DataFrame, right: pl.DataFrame) -> int:
    """The rows the join of ``left`` and ``right`` on ``__k`` gives, counted before it.

    Counted per key even where a side has one row: that row's key may have no match
    (a sibling select with no row for its resource), and the product of the sizes
    then passes the budget for a join that gives nothing.
    """
    counts = left.group_by("__k").len().join(right.group_by("__k").len(), on="__k")
    total = counts.select((pl.col("len") * pl.col("len_right")).sum()).item()
    return int(total or 0)


def _absent_rows(
    view: View, node: Select, absent: pl.DataFrame, like: pl.DataFrame
) -> pl.DataFrame:
    """The one row of a ``forEachOrNull`` whose collection is empty.

    Its own columns are evaluated on an empty focus (paths give null, ``%rowIndex``
    gives 0); the columns of nested selects and unionAll branches are null.
    """
    own = _own_columns(view, node, absent, False)
    nested = [n for n in node.names() if n not in own.columns]
    return own.with_columns(pl.lit(None, dtype=like.schema[n]).alias(n) for n in nested).select(
        like.columns
    )


def _iterate(frame: pl.DataFrame, val: Val, or_null: bool) -> pl.DataFrame:
    """A context frame of the items of ``val`` for each row: ``__pk`` the parent's key."""
    if val.empty:
        items = frame.select(
            pl.col("__k").alias("__pk"), pl.lit(None).alias("__c"), pl.lit(0, pl.Int64).alias("__i")
        )
        if not or_null:
            items = items.clear()
    elif val.many:
        items = frame.select(pl.col("__k").alias("__pk"), val.expr.alias("__c"))
        if not or_null:
            items = items.filter(pl.col("__c").list.len() > 0)
        # forEachOrNull: an empty list (an array where no item passed a where(), say)
        # is the empty collection exactly as an absent (null) one, and gives one row
        # of nulls; Polars' explode drops an empty list unless told otherwise
        items = items.with_columns(
            pl.int_ranges(0, pl.col("__c").list.len(), dtype=pl.Int64).alias("__i")
        ).explode(["__c", "__i"], empty_as_null=True, keep_nulls=True)
        items = items.with_columns(pl.col("__i").fill_null(0))
    else:
        items = frame.select(
            pl.col("__k").alias("__pk"), val.expr.alias("__c"), pl.lit(0, pl.Int64).alias("__i")
        )
        if not or_null:
            items = items.filter(pl.col("__c").is_not_null())
    return items.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("__k"))


def _to_parent(result: pl.DataFrame, items: pl.DataFrame) -> pl.DataFrame:
    parents = items.get_column("__pk")
    return result.with_columns(parents.gather(result.get_column("__k")).alias("__k"))


def _select(view: View, node: Select, frame: pl.DataFrame, root: bool) -> pl.DataFrame:
    """The rows of ``node`` for each row of ``frame``, keyed by the frame's ``__k``."""
    if node.repeat:
        return _repeat(view, node, frame)
    if node.for_each is None:
        return _body(view, node, frame, root)
    where = f"{node.where}.{'forEachOrNull' if node.or_null else 'forEach'}"
    val = _compiled(view, node.for_each, frame.schema["__c"], where, _text(view, where), root=root)
    items = _iterate(frame, val, node.or_null)
    _budget(items.height, where, "the items it iterates")
    if not node.or_null:
        return _to_parent(_body(view, node, items, False), items)
    present = items.filter(pl.col("__c").is_not_null())
    absent = items.filter(pl.col("__c").is_null())
    found = _body(view, node, present, False)
    if absent.height:
        nulls = _absent_rows(view, node, absent, found)
        found = pl.concat([found, nulls], how="vertical_relaxed").sort("__k", maintain_order=True)
    return _to_parent(found, items)


def _repeat_step(view: View, node: Select, level: pl.DataFrame) -> list[pl.DataFrame]:
    """The items one step below ``level``'s, by each repeat path, with their root and sort key."""
    level = level.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("__k"))
    nxt: list[pl.DataFrame] = []
    for j, path in enumerate(node.repeat):
        where = f"{node.where}.repeat[{j}]"
        val = _compiled(view, path, level.schema["__c"], where, _text(view, where), root=False)
        if val.empty:
            continue
        items = _iterate(level, val, or_null=False)
        if items.height == 0:
            continue
        step = (pl.lit(j * 1_000_000, pl.Int64) + pl.col("__i")).cast(pl.String).str.zfill(9)
        items = items.with_columns(
            level.get_column("__root").gather(items.get_column("__pk")).alias("__root"),
            (level.get_column("__s").gather(items.get_column("__pk")) + step).alias("__s"),
        ).select("__root", "__c", "__s")
        nxt.append(items)
    return nxt


def _repeat_levels(view: View, node: Select, frame: pl.DataFrame) -> list[pl.DataFrame]:
    """Every item ``repeat`` reaches: one frame per (depth, schema), within the budget.

    Each has ``__root`` (the context key), ``__c`` and ``__s`` (the depth-first sort key).
    """
    frontier = [frame.select(pl.col("__k").alias("__root"), "__c", pl.lit("").alias("__s"))]
    levels: list[pl.DataFrame] = []
    # one step more than the bound: a tree exactly _MAX_DEPTH deep ends on an empty step
    for _depth in range(_MAX_DEPTH + 1):
        nxt = [items for level in frontier for items in _repeat_step(view, node, level)]
        if not nxt:
            break
        merged: dict[str, list[pl.DataFrame]] = {}
        for f in nxt:
            merged.setdefault(str(f.schema["__c"]), []).append(f)
        frontier = [pl.concat(group) for group in merged.values()]
        levels.extend(frontier)
        reached = sum(lv.height for lv in levels)
        _budget(reached, f"{node.where}.repeat", "the items it reaches")
    else:
        where = f"{node.where}.repeat"
        msg = f"{where}: the repeat goes deeper than {_MAX_DEPTH} levels"
        raise ViewDefinitionError(msg, path=where)
    return levels


def _repeat(view: View, node: Select, frame: pl.DataFrame) -> pl.DataFrame:
    """``repeat``: every item reached by the paths, at any depth, depth-first."""
    levels = _repeat_levels(view, node, frame)
    if not levels:
        empty = frame.clear().select("__k", pl.col("__c"), pl.lit(0, pl.Int64).alias("__i"))
        return _body(view, node, empty, False)
    order = pl.concat(
        [
            lv.select("__root", "__s", pl.lit(n, pl.Int64).alias("__lvl"))
            .with_row_index("__pos")
            .with_columns(pl.col("__pos").cast(pl.Int64))
            for n, lv in enumerate(levels)
        ]
    ).sort(["__root", "__s"])
    order = order.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("__k"),
        pl.int_range(pl.len(), dtype=pl.Int64).over("__root").alias("__i"),
    )
    parts = []
    for n, lv in enumerate(levels):
        keys = order.filter(pl.col("__lvl") == n).sort("__pos")
        ctx = lv.select("__c").with_columns(keys.get_column("__k"), keys.get_column("__i"))
        parts.append(_body(view, node, ctx, False))
    found = pl.concat(parts, how="vertical_relaxed").sort("__k", maintain_order=True)
    roots = order.get_column("__root")
    return found.with_columns(roots.gather(found.get_column("__k")).alias("__k"))


def evaluate(view: View, resources: pl.DataFrame, max_rows: int | None = None) -> pl.DataFrame:
    """Run ``view`` over ``resources``: a frame with one ``Struct`` column ``__c``.

    ``max_rows`` (default :data:`DEFAULT_MAX_ROWS`) bounds the rows any step may
    reach; passing it raises :class:`ViewDefinitionError` naming the select.
    """
    token = _LIMIT.set(DEFAULT_MAX_ROWS if max_rows is None else max_rows)
    try:
        return _evaluate(view, resources)
    finally:
        _LIMIT.reset(token)


def _evaluate(view: View, resources: pl.DataFrame) -> pl.DataFrame:
    frame = resources.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("__k"),
        pl.col("__c"),
        pl.lit(0, pl.Int64).alias("__i"),
    )
    dtype = frame.schema["__c"]
    for node, where in view.where:
        source = _text(view, where)
        scope = _scope(view, dtype, where, source, root=True)
        val = _compiled(view, node, dtype, where, source, root=True)
        cond = to_bool(val, scope, "a where path")
        frame = frame.filter(cond)
    result = _select(view, view.root, frame, True)
    return result.drop("__k").with_columns(pl.col(pl.Null).cast(pl.String))


def _text(view: View, where: str) -> str:
    """The path at ``where`` in the view as written (``where[0].path``, ``select[1].forEach``)."""
    item: Any = view.raw
    for key, index in re.findall(r"(\w+)(?:\[(\d+)\])?", where):
        item = item[key][int(index)] if index else item[key]
    return str(item)
