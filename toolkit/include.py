"""``_include``: the records a list's matches refer to, fetched in the same walk.

``client.frames("Appointment", include=["Appointment:patient", "Appointment:actor"])``
walks the Appointments once with ``_include`` and returns, beside the Appointment
tables, the tables of every type the includes bring in (``Patient``,
``patient_name``..., ``PractitionerRole``, ``practitioner_role_healthcare_service``),
each validated by the same pandera schema as a plain frame of that type.

* The names come from the catalogue (:data:`toolkit.catalogue.INCLUDES`, derived from
  the reference fields: :func:`toolkit.catalogue.includes_of`). A name it does not
  know raises :class:`~toolkit.errors.UnknownName` naming the valid ones, and a name
  the deployment's CapabilityStatement does not declare raises
  :class:`UndeclaredInclude`, both before any list request: a server ignores an
  ``_include`` it does not support, and the included tables would be quietly empty.
* The walk (:class:`~toolkit.paging.Walk`) keeps included entries apart
  (:attr:`~toolkit.page.Page.included`): they never count toward ``Bundle.total``
  or the duplicate checks. An entry marked ``search.mode: include`` is one; so is an
  entry of another type than the walked one when the server marks nothing.
* Included records met on several pages are kept once per id: the newest
  ``meta.lastUpdated`` (ties: the later page). Included types no asked name brings in
  are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from toolkit import catalogue
from toolkit.errors import ConfigurationError, MalformedPage, NotFound, unknown_name
from toolkit.listing import Params, list_query, validated_frames
from toolkit.page import Page, micros, record_stamp

if TYPE_CHECKING:
    import httpx
    import polars as pl

__all__ = [
    "INCLUDE_KEYWORDS",
    "IncludedRecords",
    "Statement",
    "UndeclaredInclude",
    "include_names",
    "include_query",
    "included_frames",
    "split_include",
]

INCLUDE_KEYWORDS = ("include", "_include")
"""The search keywords that ask for includes (``include=`` is the Python spelling)."""


class UndeclaredInclude(ConfigurationError):
    """The deployment's CapabilityStatement does not declare an ``_include`` asked for.

    A server ignores an include it does not support, so the included tables would be
    empty without a word. ``undeclared`` names the includes, ``declared`` what it offers.
    Nothing was sent.
    """

    def __init__(self, message: str, *, undeclared: list[str], declared: list[str]) -> None:
        self.undeclared = undeclared
        self.declared = declared
        super().__init__(message)


def include_names(resource_type: str, value: Any) -> list[catalogue.Include]:
    """The catalogue's includes for ``value``: a name, a comma-separated string or a list.

    Raises
    ------
    UnknownName
        A name ``resource_type`` does not take (the message lists the valid ones).
    ConfigurationError
        An item that is not a string.

    Examples
    --------
    >>> [i.name for i in include_names("Appointment", "Appointment:patient,Appointment:actor")]
    ['Appointment:patient', 'Appointment:actor']
    """
    known = catalogue.INCLUDES.get(resource_type, {})
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Iterable) or isinstance(items, Mapping):
        msg = f"include= takes a name or a list of names, got {type(value).__name__}"
        raise ConfigurationError(msg)
    out: list[catalogue.Include] = []
    for item in items:
        if not isinstance(item, str):
            msg = f"include= names are strings such as 'Appointment:patient', got {item!r}"
            raise ConfigurationError(msg)
        for name in (n.strip() for n in item.split(",")):
            inc = known.get(name)
            if inc is None:
                where = f" for {resource_type}" + ("" if known else " (it takes none)")
                raise unknown_name("include", name, known, where)
            if inc not in out:
                out.append(inc)
    return out


def split_include(
    resource_type: str, search: Mapping[str, Any]
) -> tuple[dict[str, Any], list[catalogue.Include]]:
    """``search`` without its include keywords, and the includes they name (checked)."""
    rest = {k: v for k, v in search.items() if k not in INCLUDE_KEYWORDS}
    wanted: list[catalogue.Include] = []
    for key in INCLUDE_KEYWORDS:
        value = search.get(key)
        if value is not None:
            wanted += [i for i in include_names(resource_type, value) if i not in wanted]
    return rest, wanted


def include_query(
    resource_type: str, search: Mapping[str, Any], params: Params | None, statement: Statement
) -> list[tuple[str, str]]:
    """The query of a list walk of ``resource_type`` and its includes.

    The type, the search keywords, the includes and the page size are checked before
    any list request (the includes against the deployment's ``statement``); each
    ``include=`` name is sent as its own ``_include`` parameter.
    """
    catalogue.resource(resource_type)  # UnknownName, with the near miss
    search, wanted = split_include(resource_type, search)
    query = list_query(resource_type, search, params)
    if wanted:
        statement.check_includes(resource_type, wanted)
    return [*query, *(("_include", i.name) for i in wanted)]


class Statement:
    """A deployment's CapabilityStatement (``GET /main/metadata``), read once.

    ``get`` sends the request; a 404 means the deployment publishes none.
    """

    def __init__(self, get: Callable[[], httpx.Response]) -> None:
        self._get = get
        self._body: Any = None
        self._read = False

    def _statement(self) -> Any:
        if not self._read:
            try:
                self._body = self._get().json()
            except NotFound:
                self._body = None
            self._read = True
        return self._body

    def search(self) -> dict[str, set[str]] | None:
        """Per type, the search parameters declared; ``None`` without a statement."""
        return catalogue.declared_search(self._statement()) or None

    def includes(self) -> dict[str, set[str]] | None:
        """Per type, the ``_include`` names declared; ``None`` without a statement."""
        return catalogue.declared_includes(self._statement()) or None

    def check_includes(self, resource_type: str, wanted: list[catalogue.Include]) -> None:
        """Raise :class:`UndeclaredInclude` when the statement lists ``resource_type`` but
        not one of ``wanted``. Without a statement, or without the type in it, nothing
        can be told and nothing is refused."""
        declared = self.includes()
        if declared is None or resource_type not in declared:
            return
        have = declared[resource_type]
        missing = [i.name for i in wanted if i.name not in have]
        if missing:
            offered = ", ".join(sorted(have)) or "none"
            msg = (
                f"the deployment's CapabilityStatement does not declare _include "
                f"{', '.join(missing)} for {resource_type} (it declares: {offered}); a server "
                "ignores an include it does not support, so nothing was sent"
            )
            raise UndeclaredInclude(msg, undeclared=missing, declared=sorted(have))


class IncludedRecords:
    """The included records of a walk's pages, each ``(type, id)`` once, newest version.

    Only the ``types`` the asked includes bring in are kept.
    """

    def __init__(self, types: Iterable[str]) -> None:
        self.types = tuple(dict.fromkeys(types))
        self._records: dict[str, dict[str, tuple[int | None, dict[str, Any]]]] = {
            t: {} for t in self.types
        }

    def add(self, page: Page) -> None:
        """Note ``page``'s included records (an entry without a type or id is refused)."""
        for i, record in enumerate(page.included):
            kind, rid = record.get("resourceType"), record.get("id")
            if not isinstance(kind, str) or not isinstance(rid, str) or not rid:
                msg = f"{page.url}: included entry {i} has no resourceType and id"
                raise MalformedPage(msg, url=page.url)
            held = self._records.get(kind)
            if held is None:
                continue  # a type no asked include brings in
            stamp = micros(record_stamp(record))
            prev = held.get(rid)
            if prev is None or prev[0] is None or stamp is None or stamp >= prev[0]:
                held[rid] = (stamp, record)

    def ids(self, resource_type: str) -> list[str]:
        """The ids held of ``resource_type``, in the order first met."""
        return list(self._records.get(resource_type, {}))

    def bundle(self, resource_type: str) -> bytes:
        """The held records of ``resource_type`` as one searchset Bundle page."""
        entries = [{"resource": r} for _, r in self._records.get(resource_type, {}).values()]
        body = {"resourceType": "Bundle", "type": "searchset", "entry": entries}
        return orjson.dumps(body)


def included_frames(
    resource_type: str,
    pages: Iterable[Page],
    wanted: list[catalogue.Include],
    *,
    clean: Callable[[list[bytes]], list[bytes]],
    errors: Any,
) -> dict[str, pl.DataFrame]:
    """The walked type's tables and every included type's, from one walk's ``pages``.

    ``clean`` is the walk's :meth:`~toolkit.paging.Walk.clean` (each record once,
    newest version); it gets the pages with their included entries left out.
    """

    included = IncludedRecords(t for inc in wanted for t in inc.targets)
    main: list[bytes] = []
    for page in pages:
        main.append(page.main_raw())
        included.add(page)
    tables = validated_frames(resource_type, clean(main), errors=errors)
    for kind in included.types:
        tables.update(validated_frames(kind, [included.bundle(kind)], errors=errors))
    return tables
