"""A ViewDefinition read and checked before any data is read.

:func:`load_view` accepts a dict, a JSON string or bytes, a path to a JSON
file, or a pydantic model, and returns a :class:`View`: the tree of selects
with every FHIRPath parsed, every function and constant checked, every column
name and type checked. A fault raises :class:`ViewDefinitionError` with the
path to it inside the view (``select[1].column[0].path``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import ViewDefinitionError, unknown_name
from toolkit.viewdefs import fhirpath as fp

if TYPE_CHECKING:
    import polars as pl

__all__ = ["FHIR_TYPES", "Column", "Select", "View", "load_view"]

#: FHIR primitive types a column may declare, and the Polars type each becomes.
#: Dates and times stay strings: FHIR allows partial dates (``1970-06``), which no
#: Polars temporal type holds without inventing a day.
FHIR_TYPES: dict[str, str] = {
    "boolean": "Boolean",
    "integer": "Int64",
    "integer64": "Int64",
    "positiveInt": "Int64",
    "unsignedInt": "Int64",
    "decimal": "Float64",
    **{
        t: "String"
        for t in (
            "string",
            "code",
            "id",
            "uri",
            "url",
            "canonical",
            "oid",
            "uuid",
            "markdown",
            "base64Binary",
            "date",
            "dateTime",
            "instant",
            "time",
            "xhtml",
        )
    },
}

#: FHIRPath functions the compiler knows, with the number of arguments each takes.
FUNCTIONS: dict[str, tuple[int, int]] = {
    "where": (1, 1),
    "exists": (0, 1),
    "empty": (0, 0),
    "first": (0, 0),
    "last": (0, 0),
    "count": (0, 0),
    "join": (0, 1),
    "ofType": (1, 1),
    "is": (1, 1),
    "extension": (1, 1),
    "getResourceKey": (0, 0),
    "getReferenceKey": (0, 1),
    "not": (0, 0),
    "lowBoundary": (0, 1),
    "highBoundary": (0, 1),
    "hasValue": (0, 0),
    "toString": (0, 0),
    "startsWith": (1, 1),
    "endsWith": (1, 1),
    "matches": (1, 1),
    "replaceMatches": (2, 2),
}

#: ``tag`` values of ``ansi/type`` that give a column a Polars temporal type
#: (a string that does not parse is then an error, not a null).
ANSI_TYPES: dict[str, str] = {
    "DATE": "Date",
    "TIMESTAMP WITH TIME ZONE": "Datetime",
    "TIMESTAMP": "Datetime",
}

MAX_SELECT_DEPTH = 32
"""The deepest selects may nest (``select``, ``unionAll`` and their iterations)."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_BUILTIN_CONSTANTS = {"rowIndex", "resource", "rootResource", "context", "ucum", "sct", "loinc"}
_SELECT_KEYS = {"column", "select", "unionAll", "forEach", "forEachOrNull", "repeat"}


@dataclass(frozen=True)
class Column:
    """One output column: ``name``, the parsed ``path``, its FHIR ``type`` (or None)."""

    name: str
    path: fp.Node
    source: str
    type: str | None
    collection: bool
    where: str  # the path to this column in the view, for messages
    ansi: str | None = None  # a temporal ``ansi/type`` tag (see ANSI_TYPES)


@dataclass(frozen=True)
class Select:
    """A select node: its own columns, nested selects, unionAll branches and iteration."""

    columns: tuple[Column, ...] = ()
    selects: tuple[Select, ...] = ()
    union: tuple[Select, ...] = ()
    for_each: fp.Node | None = None
    or_null: bool = False
    repeat: tuple[fp.Node, ...] = ()
    where: str = ""

    def names(self) -> list[str]:
        """The names of the columns this node produces, in output order."""
        out = [c.name for c in self.columns]
        for s in self.selects:
            out.extend(s.names())
        if self.union:
            out.extend(self.union[0].names())
        return out


@dataclass(frozen=True)
class View:
    """A checked ViewDefinition."""

    resource: str
    root: Select
    where: tuple[tuple[fp.Node, str], ...] = ()
    constants: dict[str, tuple[object, str]] = field(default_factory=dict)
    name: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    compiled: dict[tuple[str, pl.DataType, bool], Any] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    """The runner's compiled paths by place in the view and input type (its cache)."""

    @property
    def column_names(self) -> list[str]:
        """Every output column name, in order."""
        return self.root.names()

    @property
    def columns(self) -> list[Column]:
        """Every output column, in order (a unionAll contributes its first branch's)."""
        out: list[Column] = []

        def walk(s: Select) -> None:
            out.extend(s.columns)
            for sub in s.selects:
                walk(sub)
            if s.union:
                walk(s.union[0])

        walk(self.root)
        return out


def _fail(where: str, message: str) -> ViewDefinitionError:
    return ViewDefinitionError(f"{where}: {message}" if where else message, path=where)


def _as_dict(view: Any) -> dict[str, Any]:
    if isinstance(view, dict):
        return view
    if hasattr(view, "model_dump"):  # a pydantic model
        dumped = view.model_dump(by_alias=True, exclude_none=True, mode="json")
        if isinstance(dumped, dict):
            return dumped
    if isinstance(view, bytes | bytearray):
        view = bytes(view).decode("utf-8", "replace")
    if isinstance(view, Path) or (isinstance(view, str) and not view.lstrip().startswith("{")):
        path = Path(view)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"cannot read the ViewDefinition file {str(path)!r}: {exc.strerror or exc}"
            raise ViewDefinitionError(msg, path="") from None
        return _parse_json(text, f"file {str(path)!r}")
    if isinstance(view, str):
        return _parse_json(view, "text")
    msg = (
        "a ViewDefinition must be a dict, JSON text, a file path or a pydantic model, "
        f"not {type(view).__name__}"
    )
    raise ViewDefinitionError(msg, path="")


def _parse_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except RecursionError:
        msg = f"the ViewDefinition {what} nests its JSON too deep to be a view"
        raise ViewDefinitionError(msg, path="") from None
    except json.JSONDecodeError as exc:
        msg = (
            f"the ViewDefinition {what} is not JSON: {exc.msg} "
            f"at line {exc.lineno} column {exc.colno}"
        )
        raise ViewDefinitionError(msg, path="") from None
    if not isinstance(data, dict):
        msg = f"the ViewDefinition {what} is not a JSON object"
        raise ViewDefinitionError(msg, path="")
    return data


def _check_select_keys(raw: Any, where: str) -> None:
    """A select is an object, not nested too deep, of known keys, with one iteration at most."""
    if not isinstance(raw, dict):
        raise _fail(where, "a select must be an object")
    if where.count(".") >= MAX_SELECT_DEPTH:
        msg = f"selects are nested more than {MAX_SELECT_DEPTH} deep"
        raise _fail(where, msg)
    unknown = set(raw) - _SELECT_KEYS - {"description"}
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(sorted(unknown))} in a select")
    iterations = [k for k in ("forEach", "forEachOrNull", "repeat") if k in raw]
    if len(iterations) > 1:
        raise _fail(where, f"a select may have only one of {', '.join(iterations)}")


def _check_union(union: tuple[Select, ...], where: str) -> None:
    """Every unionAll branch gives the first one's columns, in its order and collection flags."""
    first = union[0].names()
    for i, branch in enumerate(union[1:], start=1):
        if branch.names() != first:
            msg = (
                f"every unionAll branch must give the same columns in the same order: "
                f"unionAll[0] gives {first}, unionAll[{i}] gives {branch.names()}"
            )
            raise _fail(f"{where}.unionAll[{i}]", msg)
        shape = _collection_flags(branch)
        if shape != _collection_flags(union[0]):
            msg = (
                "every unionAll branch must give the same columns: "
                f"unionAll[0] has 'collection': true on {_collections(union[0])}, "
                f"unionAll[{i}] on {_collections(branch)}"
            )
            raise _fail(f"{where}.unionAll[{i}]", msg)


class _Checker:
    def __init__(self, constants: dict[str, tuple[object, str]]) -> None:
        self.constants = constants
        self.seen: dict[str, str] = {}

    def path(self, raw: Any, where: str) -> fp.Node:
        if not isinstance(raw, str):
            raise _fail(where, f"a FHIRPath must be a string, not {type(raw).__name__} {raw!r}")
        try:
            node = fp.parse(raw)
        except fp.FhirPathSyntaxError as exc:
            raise _fail(where, f"{raw!r} is not FHIRPath: {exc}") from None
        self.check_node(node, where, raw)
        return node

    def check_node(self, node: fp.Node, where: str, raw: str) -> None:
        if isinstance(node, fp.Constant):
            name = node.name.lstrip("$")
            if node.name.startswith("$") and name != "index":
                raise _fail(where, f"{node.name} is not supported in {raw!r}")
            if node.name == "$index":
                raise _fail(where, f"$index is not supported in {raw!r}")
            if name not in self.constants and name not in _BUILTIN_CONSTANTS:
                known = ", ".join(sorted(self.constants)) or "none"
                raise _fail(where, f"unknown constant %{name} in {raw!r} (view constants: {known})")
        elif isinstance(node, fp.Call):
            arity = FUNCTIONS.get(node.name)
            if arity is None:
                err = unknown_name("FHIRPath function", node.name, FUNCTIONS, f" in {raw!r}")
                raise _fail(where, str(err))
            low, high = arity
            if not low <= len(node.args) <= high:
                want = str(low) if low == high else f"{low} to {high}"
                msg = f"{node.name}() takes {want} argument(s), got {len(node.args)} in {raw!r}"
                raise _fail(where, msg)
            typed = {"ofType", "is", "getReferenceKey"}
            if node.name in typed and node.args and node.type_args[0] is None:
                raise _fail(where, f"{node.name}() needs a type name, in {raw!r}")
            if node.name == "extension" and not (
                isinstance(node.args[0], fp.Literal | fp.Constant)
            ):
                raise _fail(where, f"extension() needs a url string or constant, in {raw!r}")
            if node.name in {"matches", "replaceMatches"}:
                self.regex(node, where, raw)
            self.check_node(node.base, where, raw)
            for i, arg in enumerate(node.args):
                if node.name in typed and node.type_args[i] is not None:
                    continue
                self.check_node(arg, where, raw)
        elif isinstance(node, fp.Member):
            self.check_node(node.base, where, raw)
        elif isinstance(node, fp.Index):
            self.check_node(node.base, where, raw)
            self.check_node(node.index, where, raw)
        elif isinstance(node, fp.Binary):
            if node.op in {"in", "contains", "~", "!~"}:
                raise _fail(where, f"the operator {node.op!r} is not supported, in {raw!r}")
            self.check_node(node.left, where, raw)
            self.check_node(node.right, where, raw)
        elif isinstance(node, fp.Unary):
            self.check_node(node.operand, where, raw)

    def regex(self, node: fp.Call, where: str, raw: str) -> None:
        """The pattern of ``matches``/``replaceMatches`` compiled by the engine that runs it.

        Polars runs it with Rust's ``regex`` crate, which has no look-around and no
        back-references (both valid for Python's ``re``): the pattern is compiled by
        Polars itself here, so a view it cannot run is refused before any data is read.
        """
        arg = node.args[0]
        pattern: object = None
        if isinstance(arg, fp.Literal):
            pattern = arg.value
        elif isinstance(arg, fp.Constant) and arg.name in self.constants:
            pattern = self.constants[arg.name][0]
        if not isinstance(pattern, str):
            raise _fail(where, f"{node.name}() needs a string pattern, in {raw!r}")
        refused = _regex_refusal(pattern)
        if refused is not None:
            detail = " ".join(refused.split())[:300]
            msg = (
                f"{node.name}() has a regular expression {pattern!r} that Polars (Rust's "
                f"regex: no look-ahead, look-behind or back-reference) cannot run: {detail}, "
                f"in {raw!r}"
            )
            raise _fail(where, msg) from None

    def column(self, raw: Any, where: str) -> Column:
        if not isinstance(raw, dict):
            raise _fail(where, "a column must be an object with a name and a path")
        unknown = set(raw) - {"name", "path", "type", "collection", "description", "tag"}
        if unknown:
            raise _fail(where, f"unknown key(s) {', '.join(sorted(unknown))} in a column")
        name = raw.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            msg = f"column name {name!r} must be a letter then letters, digits or '_'"
            raise _fail(f"{where}.name", msg)
        if "path" not in raw:
            raise _fail(f"{where}.path", f"column {name!r} has no path")
        node = self.path(raw["path"], f"{where}.path")
        ftype = raw.get("type")
        if ftype is not None and ftype not in FHIR_TYPES:
            known = ", ".join(FHIR_TYPES)
            msg = f"column {name!r}: type {ftype!r} is not a FHIR primitive type (known: {known})"
            raise _fail(f"{where}.type", msg)
        collection = raw.get("collection", False)
        if not isinstance(collection, bool):
            raise _fail(
                f"{where}.collection", f"collection must be true or false, not {collection!r}"
            )
        tags = raw.get("tag", [])
        ansi = None
        if not isinstance(tags, list) or not all(
            isinstance(t, dict)
            and isinstance(t.get("name"), str)
            and isinstance(t.get("value"), str)
            for t in tags
        ):
            raise _fail(f"{where}.tag", "tag must be a list of {name, value} strings")
        for i, tag in enumerate(tags):
            if tag["name"] == "ansi/type" and tag["value"].upper() in ANSI_TYPES:
                if ftype not in {"date", "dateTime", "instant"} or collection:
                    msg = f"the ansi/type {tag['value']!r} needs a date, dateTime or instant column"
                    raise _fail(f"{where}.tag[{i}]", msg)
                ansi = ANSI_TYPES[tag["value"].upper()]
        return Column(name, node, raw["path"], ftype, collection, where, ansi)

    def select(self, raw: Any, where: str) -> Select:
        _check_select_keys(raw, where)
        for_each, repeat = self.iteration(raw, where)
        columns = tuple(
            self.column(c, f"{where}.column[{i}]")
            for i, c in enumerate(self.as_list(raw, "column", where))
        )
        selects = tuple(
            self.select(s, f"{where}.select[{i}]")
            for i, s in enumerate(self.as_list(raw, "select", where))
        )
        union = tuple(
            self.select(s, f"{where}.unionAll[{i}]")
            for i, s in enumerate(self.as_list(raw, "unionAll", where))
        )
        node = Select(columns, selects, union, for_each, "forEachOrNull" in raw, repeat, where)
        if union:
            _check_union(union, where)
        if not node.names() and not selects and not union:
            raise _fail(where, "a select needs a column, a select or a unionAll")
        return node

    def iteration(
        self, raw: dict[str, Any], where: str
    ) -> tuple[fp.Node | None, tuple[fp.Node, ...]]:
        """A select's ``forEach``/``forEachOrNull`` path (or None) and its ``repeat`` paths."""
        for_each: fp.Node | None = None
        repeat: tuple[fp.Node, ...] = ()
        if "forEach" in raw or "forEachOrNull" in raw:
            key = "forEach" if "forEach" in raw else "forEachOrNull"
            for_each = self.path(raw[key], f"{where}.{key}")
        if "repeat" in raw:
            paths = raw["repeat"]
            if not isinstance(paths, list) or not paths:
                raise _fail(f"{where}.repeat", "repeat must be a non-empty list of paths")
            repeat = tuple(self.path(p, f"{where}.repeat[{i}]") for i, p in enumerate(paths))
        return for_each, repeat

    def as_list(self, raw: dict[str, Any], key: str, where: str) -> list[Any]:
        value = raw.get(key, [])
        if not isinstance(value, list):
            raise _fail(f"{where}.{key}", f"{key} must be a list")
        return value

    def names(self, node: Select) -> None:
        """Each output column name once (unionAll branches share theirs)."""

        def walk(s: Select) -> None:
            for c in s.columns:
                if c.name in self.seen:
                    msg = f"column name {c.name!r} is used twice (also at {self.seen[c.name]})"
                    raise _fail(f"{c.where}.name", msg)
                self.seen[c.name] = c.where
            for sub in s.selects:
                walk(sub)
            if s.union:
                walk(s.union[0])

        walk(node)


def _branch_columns(node: Select) -> list[Column]:
    out = list(node.columns)
    for sub in node.selects:
        out.extend(_branch_columns(sub))
    if node.union:
        out.extend(_branch_columns(node.union[0]))
    return out


def _collection_flags(node: Select) -> list[bool]:
    """Whether each column of a unionAll branch is a collection, in output order."""
    return [c.collection for c in _branch_columns(node)]


def _collections(node: Select) -> list[str]:
    return [c.name for c in _branch_columns(node) if c.collection] or ["no column"]


def _regex_refusal(pattern: str) -> str | None:
    """What Polars' own regex engine says of ``pattern`` when it cannot compile it."""
    import polars as pl

    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
    except (pl.exceptions.PolarsError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return None


def _constants(raw: Any) -> dict[str, tuple[object, str]]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _fail("constant", "constant must be a list")
    out: dict[str, tuple[object, str]] = {}
    for i, item in enumerate(raw):
        where = f"constant[{i}]"
        if not isinstance(item, dict):
            raise _fail(where, "a constant must be an object with a name and one value[x]")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise _fail(f"{where}.name", f"constant name {name!r} is not a name")
        values = [k for k in item if k.startswith("value")]
        if len(values) != 1:
            msg = f"constant {name!r} needs exactly one value[x], found {len(values)}"
            raise _fail(where, msg)
        key = values[0]
        ftype = key[5:6].lower() + key[6:]
        if ftype not in FHIR_TYPES:
            raise _fail(f"{where}.{key}", f"constant {name!r}: {key} is not a primitive value[x]")
        if name in out:
            raise _fail(f"{where}.name", f"constant {name!r} is defined twice")
        out[name] = (item[key], ftype)
    return out


def _resource_type(raw: dict[str, Any]) -> str:
    """The view's resource type, once its ``resourceType`` (if any) is ViewDefinition."""
    if raw.get("resourceType", "ViewDefinition") != "ViewDefinition":
        msg = f"resourceType is {raw['resourceType']!r}, not 'ViewDefinition'"
        raise _fail("resourceType", msg)
    resource = raw.get("resource")
    if not isinstance(resource, str) or not re.fullmatch(r"[A-Z][A-Za-z]*", resource):
        raise _fail("resource", f"the view needs a resource type, found {resource!r}")
    return resource


def _wheres(raw: dict[str, Any], checker: _Checker) -> tuple[tuple[fp.Node, str], ...]:
    """The view's ``where`` paths, checked, each with its path in the view."""
    wheres_raw = raw.get("where", [])
    if not isinstance(wheres_raw, list):
        raise _fail("where", "where must be a list")
    wheres: list[tuple[fp.Node, str]] = []
    for i, item in enumerate(wheres_raw):
        where = f"where[{i}].path"
        if not isinstance(item, dict) or "path" not in item:
            raise _fail(f"where[{i}]", "a where needs a path")
        node = checker.path(item["path"], where)
        wheres.append((node, where))
    return tuple(wheres)


def load_view(view: Any) -> View:
    """Read and check a ViewDefinition.

    Parameters
    ----------
    view
        A dict, JSON text or bytes, a path to a JSON file, a pydantic model, or a
        :class:`View` (returned as is).

    Raises
    ------
    ViewDefinitionError
        Anything wrong in the view, with ``.path`` the path to the fault.

    Examples
    --------
    >>> column = {"name": "id", "path": "id"}
    >>> v = load_view({"resource": "Patient", "select": [{"column": [column]}]})
    >>> v.resource, v.column_names
    ('Patient', ['id'])
    >>> column = {"name": "n", "path": "name.fist()"}
    >>> bad = {"resource": "Patient", "select": [{"column": [column]}]}
    >>> try:
    ...     load_view(bad)
    ... except ViewDefinitionError as exc:
    ...     print(exc.path, "|", str(exc).split(":")[1])
    select[0].column[0].path |  unknown FHIRPath function 'fist' in 'name.fist()'

    """
    if isinstance(view, View):
        return view
    raw = _as_dict(view)
    resource = _resource_type(raw)
    constants = _constants(raw.get("constant"))
    checker = _Checker(constants)
    selects = raw.get("select")
    if not isinstance(selects, list) or not selects:
        raise _fail("select", "the view needs a non-empty list of selects")
    root = Select(selects=tuple(checker.select(s, f"select[{i}]") for i, s in enumerate(selects)))
    checker.names(root)
    wheres = _wheres(raw, checker)
    name = raw.get("name")
    return View(resource, root, wheres, constants, name if isinstance(name, str) else None, raw)


def _uses_resource(node: fp.Node) -> bool:
    if isinstance(node, fp.Constant):
        return node.name in {"resource", "rootResource", "context"}
    return any(_uses_resource(child) for child in _children(node))


def _children(node: fp.Node) -> list[fp.Node]:
    if isinstance(node, fp.Member):
        return [node.base]
    if isinstance(node, fp.Call):
        return [node.base, *node.args]
    if isinstance(node, fp.Index):
        return [node.base, node.index]
    if isinstance(node, fp.Binary):
        return [node.left, node.right]
    if isinstance(node, fp.Unary):
        return [node.operand]
    return []


def _root_names(node: fp.Node) -> set[str] | None:
    """The resource's top-level fields a path read at the resource uses (None: any)."""
    if isinstance(node, fp.This):
        return None
    if isinstance(node, fp.Literal):
        return set()
    if isinstance(node, fp.Constant):
        return None if _uses_resource(node) else set()
    if isinstance(node, fp.Member):
        return {node.name} if isinstance(node.base, fp.This) else _root_names(node.base)
    if isinstance(node, fp.Call):
        if (
            node.name == "ofType"
            and isinstance(node.base, fp.Member)
            and isinstance(node.base.base, fp.This)
            and node.type_args
            and node.type_args[0]
        ):
            # value.ofType(Coding) reads the JSON field valueCoding when there is one
            tname = node.type_args[0].split(".")[-1]
            return {node.base.name, node.base.name + tname[:1].upper() + tname[1:]}
        if isinstance(node.base, fp.This):
            known = {"getResourceKey": {"id"}, "extension": {"extension"}}
            return set(known[node.name]) if node.name in known else None
        if any(_uses_resource(arg) for arg in node.args):
            return None
        return _root_names(node.base)
    names: set[str] = set()
    for child in _children(node):  # Index, Binary, Unary: every part is read at the resource
        found = _root_names(child)
        if found is None:
            return None
        names |= found
    return names


def root_fields(view: View) -> set[str] | None:
    """Every top-level field of the resource that ``view`` can read, or None when any.

    A read may then skip the other fields. Paths inside a ``forEach`` or ``repeat``
    read the items, which come from the fields their iteration path names.
    """
    names: set[str] = {"resourceType", "id"}
    paths: list[fp.Node] = [node for node, _ in view.where]

    def walk(node: Select) -> None:
        if node.for_each is not None:
            paths.append(node.for_each)
            return
        if node.repeat:
            paths.extend(node.repeat)
            return
        paths.extend(c.path for c in node.columns)
        for sub in (*node.selects, *node.union):
            walk(sub)

    walk(view.root)
    for path in paths:
        found = _root_names(path)
        if found is None:
            return None
        names |= found
    return names
