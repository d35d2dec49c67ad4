"""FHIRPath syntax trees compiled to Polars expressions over whole frames.

Every FHIRPath value is a :class:`Val`: a Polars expression evaluated once per
row of a frame (a resource, or an item of a ``forEach``), its Polars type, and
whether it is a *collection* (a ``List`` column whose lists never hold nulls)
or a *singleton* (a scalar column where null means the empty collection).
Navigation uses the frame's inferred schema: ``name.family`` on a
``List(Struct)`` is ``list.eval(element().struct.field("family"))``, ``where``
is ``list.eval(element().filter(...))``, and so on. Nothing is evaluated per
record in Python.

FHIR choice elements are read by their JSON names: ``value.ofType(Quantity)``
is the field ``valueQuantity``; ``value`` alone is the one ``value[x]`` field the
data has (or their common value when several have the same type).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from toolkit.errors import ViewDefinitionError
from toolkit.viewdefs import fhirpath as fp
from toolkit.viewdefs.definition import FHIR_TYPES

__all__ = ["Scope", "Val", "compile_path", "polars_type", "to_bool"]

_NULL = pl.Null()


@dataclass(frozen=True)
class Val:
    """A compiled FHIRPath value: ``expr`` of type ``dtype`` (a list of it when ``many``)."""

    expr: pl.Expr
    dtype: pl.DataType
    many: bool
    #: the FHIR type when the path names it (``value.ofType(dateTime)``)
    fhir: str | None = None

    @property
    def empty(self) -> bool:
        """True when the value is known to be empty whatever the data."""
        return isinstance(self.dtype, pl.Null)


def _empty() -> Val:
    return Val(pl.lit(None), _NULL, False)


@dataclass(frozen=True)
class Scope:
    """Where an expression is compiled.

    ``this`` is the focus (``$this``); ``root`` is True when the focus is the
    resource itself; ``in_list`` is True inside ``list.eval`` (a ``where`` on a
    collection), where other columns (``%rowIndex``) cannot be read.
    """

    this: Val
    constants: dict[str, tuple[object, str]]
    where: str
    source: str
    root: bool = False
    in_list: bool = False

    def fail(self, message: str) -> ViewDefinitionError:
        """A :class:`ViewDefinitionError` at this scope's place in the view."""
        return ViewDefinitionError(f"{self.where}: {message}, in {self.source!r}", path=self.where)


def polars_type(fhir_type: str) -> pl.DataType:
    """The Polars type of a column declared with a FHIR primitive type."""
    name = FHIR_TYPES[fhir_type]
    return {"Boolean": pl.Boolean(), "Int64": pl.Int64(), "Float64": pl.Float64()}.get(
        name, pl.String()
    )


def _literal(value: object, ftype: str) -> Val:
    if ftype == "empty" or value is None:
        return _empty()
    if ftype in {"boolean"}:
        return Val(pl.lit(bool(value), pl.Boolean), pl.Boolean(), False)
    if ftype in {"integer", "integer64", "positiveInt", "unsignedInt"}:
        return Val(pl.lit(value, pl.Int64), pl.Int64(), False)
    if ftype == "decimal":
        return Val(pl.lit(value, pl.Float64), pl.Float64(), False)
    return Val(pl.lit(str(value), pl.String), pl.String(), False)


def _as_list(v: Val) -> pl.Expr:
    """The value as a list expression (a singleton becomes a list of 0 or 1 item)."""
    if v.many:
        return v.expr
    if v.empty:
        return pl.lit([], dtype=pl.List(pl.String))
    return pl.concat_list([v.expr]).list.drop_nulls()


def _single(v: Val) -> pl.Expr:
    """The value as one item: a collection of exactly one item gives that item, else null."""
    if not v.many:
        return v.expr
    return pl.when(v.expr.list.len() == 1).then(v.expr.list.first())


def to_bool(v: Val, scope: Scope, what: str) -> pl.Expr:
    """The value as a FHIRPath boolean singleton; anything but a boolean is an error."""
    if v.empty:
        return pl.lit(None, pl.Boolean)
    if not isinstance(v.dtype, pl.Boolean):
        raise scope.fail(f"{what} must be a boolean, but it is {_type_name(v.dtype)}")
    return _single(v)


def _type_name(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Struct):
        return "a complex element"
    if isinstance(dtype, pl.List):
        return "a collection"
    return {
        pl.String: "a string",
        pl.Boolean: "a boolean",
        pl.Int64: "an integer",
        pl.Float64: "a decimal",
    }.get(type(dtype), str(dtype))


def _dt(dtype: Any) -> pl.DataType:
    """An instance of a Polars type (the schema may hold a class for simple types)."""
    return dtype() if isinstance(dtype, type) else dtype


def _fields(dtype: pl.DataType) -> dict[str, pl.DataType]:
    if isinstance(dtype, pl.Struct):
        return {f.name: _dt(f.dtype) for f in dtype.fields}
    return {}


def _map(
    v: Val, fn: Callable[[pl.Expr], pl.Expr], dtype: pl.DataType, *, keep: bool = False
) -> Val:
    """Apply ``fn`` to each item of ``v`` (a collection stays a collection, nulls dropped)."""
    if not v.many:
        return Val(fn(v.expr), dtype, False)
    inner = fn(pl.element())
    return Val(v.expr.list.eval(inner if keep else inner.drop_nulls()), dtype, True)


def member(v: Val, name: str, scope: Scope) -> Val:
    """``v.name``: the children called ``name`` of every item of ``v``."""
    fields = _fields(v.dtype)
    if name not in fields:
        choices = [
            f for f in fields if f.startswith(name) and f[len(name) : len(name) + 1].isupper()
        ]
        if not choices:
            return _empty()
        if len(choices) > 1:
            types = {str(fields[c]) for c in choices}
            if len(types) > 1 or isinstance(fields[choices[0]], pl.List | pl.Struct):
                listed = ", ".join(choices)
                msg = f"{name!r} is a choice of types ({listed}): say which with {name}.ofType(T)"
                raise scope.fail(msg)
            dtype = fields[choices[0]]
            return _map(v, lambda e: pl.coalesce([e.struct.field(c) for c in choices]), dtype)
        name = choices[0]
    fdt = fields[name]
    if isinstance(fdt, pl.List):
        if not v.many:
            return Val(v.expr.struct.field(name), _dt(fdt.inner), True)
        flat = pl.element().struct.field(name).explode().drop_nulls()
        return Val(v.expr.list.eval(flat), _dt(fdt.inner), True)
    return _map(v, lambda e: e.struct.field(name), fdt)


_PRIMITIVE_CLASSES: dict[str, tuple[type[pl.DataType], ...]] = {
    "boolean": (pl.Boolean,),
    "integer": (pl.Int64, pl.Int32, pl.UInt32, pl.UInt64),
    "decimal": (pl.Float64, pl.Int64),
}


def _type_name_of(arg: str | None, scope: Scope) -> str:
    if not arg:
        raise scope.fail("a type name is needed")
    return arg.split(".")[-1]


def _of_type(node: fp.Call, scope: Scope) -> Val:
    tname = _type_name_of(node.type_args[0], scope)
    suffix = tname[:1].upper() + tname[1:]
    if isinstance(node.base, fp.Member):
        base = compile_node(node.base.base, scope)
        fields = _fields(base.dtype)
        if node.base.name + suffix in fields:
            return replace(member(base, node.base.name + suffix, scope), fhir=tname)
        if node.base.name not in fields:
            return _empty()
    v = compile_node(node.base, scope)
    return _filter_type(v, tname)


def _filter_type(v: Val, tname: str) -> Val:
    if v.empty:
        return v
    fields = _fields(v.dtype)
    if tname[:1].isupper() and "resourceType" in fields:
        return _where(v, lambda e: e.struct.field("resourceType") == tname)
    classes = _PRIMITIVE_CLASSES.get(tname)
    if classes is not None:
        return v if isinstance(v.dtype, classes) else _empty()
    if tname in FHIR_TYPES:
        return v if isinstance(v.dtype, pl.String) else _empty()
    return v if isinstance(v.dtype, pl.Struct) else _empty()


def _where(v: Val, cond: Callable[[pl.Expr], pl.Expr]) -> Val:
    if v.many:
        return Val(v.expr.list.eval(pl.element().filter(cond(pl.element()))), v.dtype, True)
    return Val(pl.when(cond(v.expr)).then(v.expr), v.dtype, False)


def _inner_scope(v: Val, scope: Scope) -> Scope:
    """The scope of an argument evaluated once per item of ``v`` (``where``, ``exists``)."""
    if v.many:
        return replace(scope, this=Val(pl.element(), v.dtype, False), root=False, in_list=True)
    return replace(scope, this=v, root=False)


def _filter(v: Val, cond_node: fp.Node, scope: Scope, fname: str) -> Val:
    if v.empty:
        return v
    inner = _inner_scope(v, scope)
    cond = to_bool(compile_node(cond_node, inner), inner, f"the argument of {fname}()")
    return _where(v, lambda _e: cond)


def _exists(v: Val) -> pl.Expr:
    if v.empty:
        return pl.lit(False)
    if v.many:
        return v.expr.list.len().fill_null(0) > 0
    return v.expr.is_not_null()


_REF = r"([A-Za-z][A-Za-z0-9]*)/([A-Za-z0-9\-\.]{1,64})(?:/_history/[^/]+)?$"


def _reference_key(v: Val, type_arg: str | None, scope: Scope) -> Val:
    ref = member(v, "reference", scope)
    if ref.empty:
        return ref
    tname = type_arg.split(".")[-1] if type_arg else None

    def key(e: pl.Expr) -> pl.Expr:
        ident = e.str.extract(_REF, 2)
        if tname is None:
            return ident
        return pl.when(e.str.extract(_REF, 1) == tname).then(ident)

    return _map(ref, key, pl.String())


_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def _decimal_boundary(e: pl.Expr, high: bool) -> pl.Expr:
    """A number's boundary: half a unit of its last decimal place above or below it."""
    text = e.cast(pl.String)
    decimals = text.str.extract(r"\.(\d+)$", 1).str.len_chars().fill_null(0)
    half = pl.lit(0.5) * pl.lit(10.0).pow(-decimals.cast(pl.Float64))
    out = e.cast(pl.Float64) + half if high else e.cast(pl.Float64) - half
    return out.round(8)


def _clock_boundary(clock: pl.Expr, hh: pl.Expr, high: bool) -> pl.Expr:
    """``hh:mm:ss.fff`` from a time ``hh[:mm[:ss[.fff]]]``, the missing parts at their bound."""
    return pl.format(
        "{}:{}:{}.{}",
        hh,
        pl.coalesce(clock.str.extract(r"^\d{2}:(\d{2})", 1), pl.lit("59" if high else "00")),
        pl.coalesce(clock.str.extract(r"^\d{2}:\d{2}:(\d{2})", 1), pl.lit("59" if high else "00")),
        pl.coalesce(
            clock.str.extract(r"\.(\d+)", 1).str.pad_end(3, "9" if high else "0").str.slice(0, 3),
            pl.lit("999" if high else "000"),
        ),
    )


def _date_boundary(e: pl.Expr, high: bool) -> pl.Expr:
    """``YYYY-MM-DD`` from a date (or a date-time's date), the missing parts at their bound."""
    year = e.str.slice(0, 4)
    month = e.str.slice(5, 2)
    last_day = (
        pl.date(year.cast(pl.Int32, strict=False), month.cast(pl.Int8, strict=False), 1)
        .dt.month_end()
        .dt.day()
        .cast(pl.String)
        .str.zfill(2)
    )
    day_len = e.str.len_chars()
    mon = pl.when(day_len >= 7).then(month).otherwise(pl.lit("12" if high else "01"))
    day = (
        pl.when(day_len >= 10)
        .then(e.str.slice(8, 2))
        .otherwise(
            pl.when(day_len >= 7).then(last_day).otherwise(pl.lit("31" if high else "01"))
            if high
            else pl.lit("01")
        )
    )
    return pl.format("{}-{}-{}", year, mon, day)


def _text_boundary(e: pl.Expr, high: bool, fhir: str | None) -> pl.Expr:
    """The boundary of a time, a date-time (``fhir`` says one without a ``T`` is) or a date."""
    is_time = e.str.contains(r"^\d{2}:")
    time = _clock_boundary(e, e.str.slice(0, 2), high)
    date = _date_boundary(e, high)
    is_datetime = e.str.contains("T") | pl.lit(fhir in {"dateTime", "instant"})
    tz = e.str.extract(r"(Z|[+-]\d{2}:\d{2})$", 1)
    clock = e.str.extract(r"T([0-9:.]+)", 1)
    c_hh = pl.coalesce(clock.str.slice(0, 2).replace("", None), pl.lit("23" if high else "00"))
    dt_time = _clock_boundary(clock, c_hh, high)
    # no time zone: the earliest instant is at +14:00, the latest at -12:00
    zone = pl.coalesce(tz, pl.lit("-12:00" if high else "+14:00"))
    datetime = pl.format("{}T{}{}", date, dt_time, zone)
    return (
        pl.when(is_time)
        .then(time)
        .when(is_datetime)
        .then(datetime)
        .when(e.str.contains(r"^\d{4}(-\d{2}(-\d{2})?)?$"))
        .then(date)
    )


def _boundary(v: Val, high: bool, scope: Scope) -> Val:
    """``lowBoundary()``/``highBoundary()`` of decimals, dates, date-times and times."""
    if v.empty:
        return v
    if isinstance(v.dtype, pl.Float64 | pl.Int64):
        return _map(v, lambda e: _decimal_boundary(e, high), pl.Float64())
    if not isinstance(v.dtype, pl.String):
        raise scope.fail(f"lowBoundary()/highBoundary() of {_type_name(v.dtype)}")
    return _map(v, lambda e: _text_boundary(e, high, v.fhir), pl.String())


def _compare(op: str, left: Val, right: Val, scope: Scope) -> Val:
    if left.empty or right.empty:
        return Val(pl.lit(None, pl.Boolean), pl.Boolean(), False)
    lt, rt = left.dtype, right.dtype
    numeric = (pl.Int64, pl.Float64, pl.Int32, pl.UInt32, pl.UInt64)
    if isinstance(lt, pl.Struct | pl.List) or isinstance(rt, pl.Struct | pl.List):
        raise scope.fail(f"cannot compare {_type_name(lt)} with {_type_name(rt)} by {op!r}")
    same = type(lt) is type(rt) or (isinstance(lt, numeric) and isinstance(rt, numeric))

    def fix(v: Val) -> Val:
        if same:
            return v
        return _map(v, lambda e: e.cast(pl.String), pl.String())

    left, right = fix(left), fix(right)
    if op in {"=", "!="}:
        if left.many or right.many:
            a, b = _as_list(left), _as_list(right)
            eq = pl.when((a.list.len() == 0) | (b.list.len() == 0)).then(None).otherwise(a == b)
        else:
            eq = left.expr == right.expr
        return Val(eq if op == "=" else ~eq, pl.Boolean(), False)
    a, b = _single(left), _single(right)
    out = {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    return Val(out, pl.Boolean(), False)


def _arith(op: str, left: Val, right: Val, scope: Scope) -> Val:
    if op == "&":
        a = _single(left).cast(pl.String).fill_null("") if not left.empty else pl.lit("")
        b = _single(right).cast(pl.String).fill_null("") if not right.empty else pl.lit("")
        return Val(a + b, pl.String(), False)
    if left.empty or right.empty:
        return _empty()
    a, b = _single(left), _single(right)
    lt, rt = left.dtype, right.dtype
    if isinstance(lt, pl.String) and isinstance(rt, pl.String):
        if op != "+":
            raise scope.fail(f"{op!r} is not defined for strings")
        return Val(a + b, pl.String(), False)
    numeric = (pl.Int64, pl.Float64)
    if not (isinstance(lt, numeric) and isinstance(rt, numeric)):
        raise scope.fail(f"{op!r} needs numbers, not {_type_name(lt)} and {_type_name(rt)}")
    both_int = isinstance(lt, pl.Int64) and isinstance(rt, pl.Int64)
    # FHIRPath: a division or remainder by 0 is empty (Polars gives inf, NaN or fails)
    divisor = pl.when(b != 0).then(b)
    if op == "/":
        return Val(a.cast(pl.Float64) / divisor.cast(pl.Float64), pl.Float64(), False)
    if op == "div":
        return Val((a / divisor).cast(pl.Int64), pl.Int64(), False)
    result = {"+": a + b, "-": a - b, "*": a * b, "mod": _remainder(a, divisor)}[op]
    return Val(result, pl.Int64() if both_int else pl.Float64(), False)


def _remainder(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """FHIRPath's ``mod``: the remainder of the truncated division, of ``a``'s sign.

    Polars' ``%`` floors (its remainder has ``b``'s sign): where the two differ,
    the truncated remainder is the floored one less ``b``.
    """
    floored = a % b
    return pl.when((floored != 0) & ((floored < 0) != (a < 0))).then(floored - b).otherwise(floored)


def compile_node(node: fp.Node, scope: Scope) -> Val:
    """Compile one syntax tree node in ``scope``."""
    if isinstance(node, fp.This):
        return scope.this
    if isinstance(node, fp.Literal):
        return _literal(node.value, node.kind)
    if isinstance(node, fp.Constant):
        return _constant(node.name, scope)
    if isinstance(node, fp.Member):
        return member(compile_node(node.base, scope), node.name, scope)
    if isinstance(node, fp.Index):
        return _index(node, scope)
    if isinstance(node, fp.Unary):
        v = compile_node(node.operand, scope)
        if node.op == "-":
            return _map(v, lambda e: -e, v.dtype)
        return v
    if isinstance(node, fp.Binary):
        return _binary(node, scope)
    if isinstance(node, fp.Call):
        return _call(node, scope)
    raise scope.fail(f"cannot compile {type(node).__name__}")


def _constant(name: str, scope: Scope) -> Val:
    if name == "rowIndex":
        if scope.in_list:
            raise scope.fail("%rowIndex cannot be read inside where() or exists() of a collection")
        return Val(pl.col("__i"), pl.Int64(), False)
    if name in {"resource", "rootResource", "context"}:
        if not scope.root:
            raise scope.fail(f"%{name} is only supported where the focus is the resource itself")
        return scope.this
    if name not in scope.constants:
        raise scope.fail(f"unknown constant %{name}")
    value, ftype = scope.constants[name]
    return _literal(value, ftype)


def _index(node: fp.Index, scope: Scope) -> Val:
    base = compile_node(node.base, scope)
    idx = compile_node(node.index, scope)
    if base.empty:
        return base
    if not isinstance(idx.dtype, pl.Int64) or idx.many:
        raise scope.fail("an index must be an integer")
    if base.many:
        # a negative index is outside the collection (Polars would count from the end)
        at = pl.when(idx.expr >= 0).then(idx.expr)
        return Val(base.expr.list.get(at, null_on_oob=True), base.dtype, False)
    return Val(pl.when(idx.expr == 0).then(base.expr), base.dtype, False)


def _binary(node: fp.Binary, scope: Scope) -> Val:
    op = node.op
    left = compile_node(node.left, scope)
    right = compile_node(node.right, scope)
    if op in {"and", "or", "xor", "implies"}:
        a = to_bool(left, scope, f"the left side of {op!r}")
        b = to_bool(right, scope, f"the right side of {op!r}")
        if op == "and":
            out = a & b
        elif op == "or":
            out = a | b
        elif op == "xor":
            out = a != b
        else:
            out = ~a | b
        return Val(out, pl.Boolean(), False)
    if op in {"=", "!=", "<", ">", "<=", ">="}:
        return _compare(op, left, right, scope)
    if op in {"+", "-", "*", "/", "div", "mod", "&"}:
        return _arith(op, left, right, scope)
    if op == "|":
        if left.empty:
            return right
        if right.empty:
            return left
        numeric = (pl.Int64, pl.Float64)
        if isinstance(left.dtype, numeric) and isinstance(right.dtype, numeric):
            if left.dtype != right.dtype:
                left = _map(left, lambda e: e.cast(pl.Float64), pl.Float64())
                right = _map(right, lambda e: e.cast(pl.Float64), pl.Float64())
        elif str(left.dtype) != str(right.dtype):
            raise scope.fail(f"'|' of {_type_name(left.dtype)} and {_type_name(right.dtype)}")
        # an absent collection is a null list, which would make the whole union null
        sides = [_as_list(v).fill_null(pl.lit([], dtype=pl.List(v.dtype))) for v in (left, right)]
        union = pl.concat_list(sides).list.unique(maintain_order=True)
        return Val(union, left.dtype, True)
    raise scope.fail(f"the operator {op!r} is not supported")


def _count(base: Val) -> Val:
    """``count()``: how many items (0 for none)."""
    if base.empty:
        return Val(pl.lit(0, pl.Int64), pl.Int64(), False)
    if base.many:
        return Val(base.expr.list.len().fill_null(0).cast(pl.Int64), pl.Int64(), False)
    return Val(base.expr.is_not_null().cast(pl.Int64), pl.Int64(), False)


def _join(base: Val, node: fp.Call, scope: Scope) -> Val:
    """``join([separator])``: the items as one string (a constant string separator, else none)."""
    sep = ""
    if node.args:
        arg = compile_node(node.args[0], scope)
        if not isinstance(node.args[0], fp.Literal | fp.Constant) or not isinstance(
            arg.dtype, pl.String
        ):
            raise scope.fail("join() needs a string separator")
        sep = str(_const_value(node.args[0], scope))
    if base.empty:
        return Val(pl.lit(""), pl.String(), False)
    if base.many:
        joined = base.expr.cast(pl.List(pl.String)).list.join(sep).fill_null("")
    else:
        joined = base.expr.cast(pl.String).fill_null("")
    return Val(joined, pl.String(), False)


def _extension(base: Val, node: fp.Call, scope: Scope) -> Val:
    """``extension(url)``: the extensions with that url."""
    url = _const_value(node.args[0], scope)
    ext = member(base, "extension", scope)
    if ext.empty or "url" not in _fields(ext.dtype):
        return _empty()
    return _where(ext, lambda e: e.struct.field("url") == str(url))


def _call(node: fp.Call, scope: Scope) -> Val:
    name = node.name
    if name == "ofType":
        return _of_type(node, scope)
    base = compile_node(node.base, scope)
    if name == "first" and isinstance(node.base, fp.Binary) and node.base.op == "|":
        return _first_of_union(node.base, base, scope)
    if name == "where":
        return _filter(base, node.args[0], scope, "where")
    if name == "exists":
        if node.args:
            base = _filter(base, node.args[0], scope, "exists")
        return Val(_exists(base), pl.Boolean(), False)
    if name == "empty":
        return Val(~_exists(base), pl.Boolean(), False)
    if name == "hasValue":
        return Val(_exists(base), pl.Boolean(), False)
    if name == "is":
        typed = _filter_type(base, _type_name_of(node.type_args[0], scope))
        return Val(_exists(typed), pl.Boolean(), False)
    if name in {"first", "last"}:
        if not base.many:
            return base
        return Val(getattr(base.expr.list, name)(), base.dtype, False)
    if name == "count":
        return _count(base)
    if name == "not":
        return Val(~to_bool(base, scope, "the input of not()"), pl.Boolean(), False)
    if name == "join":
        return _join(base, node, scope)
    if name == "toString":
        return _map(base, lambda e: e.cast(pl.String), pl.String())
    if name == "extension":
        return _extension(base, node, scope)
    if name == "getResourceKey":
        return member(base, "id", scope)
    if name == "getReferenceKey":
        return _reference_key(base, node.type_args[0] if node.args else None, scope)
    if name in {"startsWith", "endsWith", "matches", "replaceMatches"}:
        mapped = _string_function(name, base, node, scope)
        return _map_before_where(node, mapped, scope)
    if name in {"lowBoundary", "highBoundary"}:
        return _boundary(base, name == "highBoundary", scope)
    raise scope.fail(f"the function {name}() is not supported")


def _map_before_where(node: fp.Call, mapped: Val, scope: Scope) -> Val:
    """``x.where(c).f()`` as ``f`` of ``x`` where ``c`` holds, for a single ``x``.

    The same value (``f`` maps each item alone, and empty to empty), but ``f``
    reads ``x`` itself rather than a copy of it filtered by ``c``: the declared
    views' precision columns apply four such filters and maps to one date-time,
    and Polars then computes what they share (the text's length, whether it has a
    line feed) once. ``mapped`` is the plain compilation, which has already
    checked the types.
    """
    where = node.base
    if not isinstance(where, fp.Call) or where.name != "where" or mapped.empty:
        return mapped
    inner = compile_node(where.base, scope)
    if inner.many or inner.empty:
        return mapped
    direct = _string_function(node.name, inner, node, scope)
    within = _inner_scope(inner, scope)
    cond = to_bool(compile_node(where.args[0], within), within, "the argument of where()")
    return Val(pl.when(cond).then(direct.expr), direct.dtype, False)


def _union_branches(node: fp.Node) -> list[fp.Node]:
    if isinstance(node, fp.Binary) and node.op == "|":
        return [*_union_branches(node.left), *_union_branches(node.right)]
    return [node]


def _first_of_union(node: fp.Binary, union: Val, scope: Scope) -> Val:
    """``(a | b | ...).first()`` as the first item of the first branch that has one.

    The same value as the union's first item (removing duplicates never moves the
    first item), without building a list per row: the declared views' precision
    columns are such unions of singletons. ``union`` is the compiled union, which
    has already checked the branches' types and gives the result's type.
    """
    if union.empty or not union.many:
        return union
    firsts: list[pl.Expr] = []
    for branch in _union_branches(node):
        v = compile_node(branch, scope)
        if v.empty:
            continue
        expr = v.expr.list.first() if v.many else v.expr
        if v.dtype != union.dtype:
            expr = expr.cast(union.dtype)  # an integer branch of a decimal union
        firsts.append(expr)
    return Val(pl.coalesce(firsts), union.dtype, False)


def _string_function(name: str, base: Val, node: fp.Call, scope: Scope) -> Val:
    args = [_const_value(a, scope) for a in node.args]
    if not all(isinstance(a, str) for a in args):
        raise scope.fail(f"{name}() needs string arguments")
    if base.empty:
        return base
    if not isinstance(base.dtype, pl.String):
        raise scope.fail(f"{name}() needs a string input, not {_type_name(base.dtype)}")
    first = str(args[0])
    if name == "startsWith":
        return _map(base, lambda e: e.str.starts_with(first), pl.Boolean())
    if name == "endsWith":
        return _map(base, lambda e: e.str.ends_with(first), pl.Boolean())
    try:
        re.compile(first)
    except re.error as exc:
        raise scope.fail(f"{name}() has a bad regular expression {first!r}: {exc}") from None
    if name == "matches":
        return _map(base, _matcher(first), pl.Boolean())
    return _map(base, _replacer(first, str(args[1])), pl.String())


_LENGTHS = re.compile(r"\^(?:\.\{(\d+)\}|\((\.\{\d+\}(?:\|\.\{\d+\})*)\))\$")
"""``^.{4}$`` or ``^(.{4}|.{7}|.{10})$``: a text of one of these lengths."""


def _matcher(pattern: str) -> Callable[[pl.Expr], pl.Expr]:
    """``matches(pattern)``; a pattern that only fixes the length without a regex.

    The exported views' precision columns ask ``matches('^.{4}$')`` and the like
    four times per date-time column. In Rust's regex ``.`` is any character but a
    line feed and ``$`` the end of the text, so ``^.{4}$`` holds exactly for a
    text of four characters none of which is a line feed: the shortcut counts
    characters instead of running the regex.
    """
    fixed = _LENGTHS.fullmatch(pattern)
    if fixed is None:
        return lambda e: e.str.contains(pattern)
    spec = fixed.group(1) or fixed.group(2)
    lengths = sorted({int(n) for n in re.findall(r"\d+", spec)})
    if len(lengths) == 1:
        return lambda e: (e.str.len_chars() == lengths[0]) & ~e.str.contains("\n", literal=True)
    return lambda e: e.str.len_chars().is_in(lengths) & ~e.str.contains("\n", literal=True)


def _replacer(pattern: str, replacement: str) -> Callable[[pl.Expr], pl.Expr]:
    """``replaceMatches(pattern, replacement)``; ``^.*$`` (the whole text) without a regex.

    The exported views' precision columns replace ``^.*$`` four times per
    date-time column, and a regex replacement took five times as long as the
    rest of such a column. In Rust's regex ``^.*$`` matches a whole text that
    has no line feed (the empty one too) and nothing in one that has (``.`` is
    any character but a line feed; ``$`` is the end of the text): the shortcut
    gives ``replacement`` or the text unchanged, as the regex does.
    """
    # FHIRPath writes groups as $1; Polars (Rust regex) reads ${1}
    subst = re.sub(r"\$(\d+)", r"${\1}", replacement)
    if pattern != "^.*$" or "$" in replacement:
        return lambda e: e.str.replace_all(pattern, subst)
    return lambda e: (
        pl.when(~e.str.contains("\n", literal=True)).then(pl.lit(replacement)).otherwise(e)
    )


def _const_value(node: fp.Node, scope: Scope) -> object:
    if isinstance(node, fp.Literal):
        return node.value
    if isinstance(node, fp.Constant) and node.name in scope.constants:
        return scope.constants[node.name][0]
    raise scope.fail("a literal or a view constant is needed here")


def compile_path(node: fp.Node, scope: Scope) -> Val:
    """Compile a parsed FHIRPath in ``scope`` (see :class:`Scope`)."""
    return compile_node(node, scope)
