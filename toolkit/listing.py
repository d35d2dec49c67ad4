"""What the read verbs of :class:`toolkit.Client` share: queries, walks and their results.

Search keywords become query parameters (:func:`search_params`) and a list query
is checked before any request (:func:`list_query`); a
:class:`~toolkit.paging.Walk` is opened on the request pipeline
(:func:`open_walk`) and run with its progress bar and the request counts of its
summary (:func:`walked`); its pages become records (:func:`newest_records`) or
validated frames (:func:`validated_frame`, :func:`validated_frames`,
:func:`proposed_frame`). The verbs' options are checked before any request
(``check_*``), and a read's answer is refused unless it is a record of the type
asked for (:func:`record_of`).

It is apart from :mod:`toolkit.paging`, which knows pages and walks but not the
client's pipeline, counters or progress display, and apart from
:mod:`toolkit.client`, which keeps only the verbs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from toolkit import catalogue
from toolkit.errors import ApiError, ConfigurationError, MalformedPage, unknown_name
from toolkit.page import Page
from toolkit.paging import IGNORED_FILTERS, FetchSummary, Walk, local_now
from toolkit.views import flatten, flatten_tables, table_names

if TYPE_CHECKING:
    import polars as pl

    from toolkit.http import Pipeline, Reply

__all__ = [
    "check_duration",
    "check_errors",
    "check_ignored_filters",
    "check_max_pages",
    "frame_table",
    "list_query",
    "newest_records",
    "open_walk",
    "param_value",
    "param_values",
    "proposed_frame",
    "record_of",
    "search_pairs",
    "search_params",
    "validated_frame",
    "validated_frames",
    "walked",
]

# Walk summaries have always been logged as the client's; the name users configure.
log = logging.getLogger("toolkit.client")

_SEARCH_ALIASES = catalogue.SEARCH_ALIASES

Params = Mapping[str, Any] | Sequence[tuple[str, Any]]
"""Raw query parameters: a mapping, or ``(name, value)`` pairs when a name repeats
(``[("date", "ge2026-11-01"), ("date", "lt2026-11-15")]``: both bounds, ANDed)."""


# ---------------------------------------------------------------------- queries


def param_value(value: Any) -> str:
    """One query parameter value as the API reads it.

    A collection becomes one comma-separated value, which FHIR reads as *any of* (OR):
    this is what a set gives as a search keyword. A list or tuple given as a search
    keyword instead repeats the parameter (:func:`search_pairs`).

    Examples
    --------
    >>> param_value(True), param_value(date(2026, 1, 2)), param_value(["a", "b"])
    ('true', '2026-01-02', 'a,b')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(param_value(v) for v in value)
    return str(value)


ANY_OF_PARAMETERS = frozenset({"_id"})
"""Parameters whose list is *any of* (one comma-joined value): a record has one id, so
``_id=a&_id=b`` (all of two ids) could match nothing; ``ids=[...]`` asks for those records."""


def param_values(name: str, value: Any) -> list[str]:
    """The values of one query parameter: one per item of a list or tuple, else one.

    FHIR reads a repeated parameter as *all of* (AND) and a comma inside one value as
    *any of* (OR): ``date=["ge2026-11-02", "lt2026-11-09"]`` is the week (two
    parameters), never ``date=ge2026-11-02,lt2026-11-09`` (any date at all, which
    servers refuse). A set or frozenset stays one comma-joined value (OR), as does a
    string with commas in it, and a list of ids (:data:`ANY_OF_PARAMETERS`).

    Raises
    ------
    ConfigurationError
        An empty list or tuple: it would drop the filter and return every record.

    Examples
    --------
    >>> param_values("date", ["ge2026-11-02", "lt2026-11-09"])
    ['ge2026-11-02', 'lt2026-11-09']
    >>> param_values("_id", ["a", "b"]), param_values("subject", frozenset({"a"}))
    (['a,b'], ['a'])
    """
    if isinstance(value, list | tuple) and name in ANY_OF_PARAMETERS and value:
        return [param_value(value)]
    if isinstance(value, list | tuple):
        if not value:
            msg = (
                f"{name}= got an empty {type(value).__name__}: it would drop the filter and "
                "return every record; leave the keyword out (or pass None) for no filter"
            )
            raise ConfigurationError(msg)
        return [param_value(v) for v in value]
    return [param_value(value)]


def search_pairs(
    search: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Map Python keyword names to API query parameters, as ``(name, value)`` pairs.

    ``last_updated`` -> ``_lastUpdated``, ``count`` -> ``_count``, ``id`` ->
    ``_id``, ``sort`` -> ``_sort``, ``total`` -> ``_total``; other underscores
    become hyphens (``practitioner_role`` -> ``practitioner-role``). A list or
    tuple repeats the parameter (FHIR: all of, AND), except a list of ids; a set
    is comma-joined (any of, OR); dates and datetimes are ISO-formatted. ``params`` passes raw names
    unchanged and replaces a keyword of the same name. ``None`` values are dropped.

    Examples
    --------
    >>> search_pairs({"date": ["ge2026-11-02", "lt2026-11-09"], "id": "a,b"})
    [('date', 'ge2026-11-02'), ('date', 'lt2026-11-09'), ('_id', 'a,b')]
    """
    raw = [(key, value) for key, value in (params or {}).items() if value is not None]
    named = {key for key, _ in raw}
    out: list[tuple[str, str]] = []
    for key, value in search.items():
        if value is None:
            continue
        name = _SEARCH_ALIASES.get(key, key if key.startswith("_") else key.replace("_", "-"))
        if name not in named:
            out.extend((name, v) for v in param_values(name, value))
    for key, value in raw:
        out.extend((key, v) for v in param_values(key, value))
    return out


def search_params(
    search: Mapping[str, Any], params: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Map Python keyword names to API query parameters, one value per name.

    The names and values of :func:`search_pairs`, as a dict. A list or tuple of
    two or more values repeats its parameter, which a dict cannot hold: use
    :func:`search_pairs` for those.

    Raises
    ------
    ConfigurationError
        A keyword given as a list or tuple of several values.

    Examples
    --------
    >>> search_params({"last_updated": "gt2026-01-01T00:00:00Z", "id": "a,b"})
    {'_lastUpdated': 'gt2026-01-01T00:00:00Z', '_id': 'a,b'}
    """
    out: dict[str, str] = {}
    for name, value in search_pairs(search, params):
        if name in out:
            msg = (
                f"{name} is given several values, which repeat the parameter (AND): "
                "use search_pairs(), which returns (name, value) pairs"
            )
            raise ConfigurationError(msg)
        out[name] = value
    return out


def list_query(
    resource_type: str, search: Mapping[str, Any], params: Params | None
) -> list[tuple[str, str]]:
    """The query of a list walk: search keywords checked, ``_count`` defaulted and bounded.

    ``params`` as ``(name, value)`` pairs may repeat a name; a name it gives replaces
    the keyword of that name.

    Raises
    ------
    UnknownName
        A search keyword the resource does not have (with the near miss).
    ConfigurationError
        ``count``/``_count`` outside 1..100.
    """
    # A misspelt keyword (dates= for date=) would be ignored by the server and return
    # every row: refuse it before any request. Raw names in params= pass unchecked.
    known = catalogue.search_keywords(resource_type)
    for key in search:
        if key not in known:
            raise unknown_name("search keyword", key, known, f" for {resource_type}")
    if params is None or isinstance(params, Mapping):
        pairs = search_pairs(search, params)
    else:
        raw = [
            (str(k), v)
            for k, value in params
            if value is not None
            for v in param_values(str(k), value)
        ]
        named = {k for k, _ in raw}
        pairs = [(k, v) for k, v in search_pairs(search) if k not in named] + raw
    counts = [v for k, v in pairs if k == "_count"] or [str(catalogue.MAX_PAGE_SIZE)]
    if not any(k == "_count" for k, _ in pairs):
        pairs.append(("_count", counts[0]))
    for value in counts:
        count = int(value) if value.isdigit() else 0
        if not 1 <= count <= catalogue.MAX_PAGE_SIZE:
            msg = f"count/_count must be 1..{catalogue.MAX_PAGE_SIZE}, got {value!r}"
            raise ConfigurationError(msg)
    return pairs


# ---------------------------------------------------------------------- option checks


def check_max_pages(max_pages: int | None) -> None:
    """Refuse a ``max_pages`` that is not a positive number of pages (``None`` passes)."""
    if max_pages is not None and (isinstance(max_pages, bool) or max_pages < 1):
        msg = f"max_pages must be a positive number of pages, got {max_pages!r}"
        raise ConfigurationError(msg)


def check_ignored_filters(ignored_filters: object) -> None:
    """Refuse an ``ignored_filters=`` that is neither ``"raise"`` nor ``"warn"``."""
    if ignored_filters not in IGNORED_FILTERS:
        msg = f"ignored_filters must be 'raise' or 'warn', got {ignored_filters!r}"
        raise ConfigurationError(msg)


def check_errors(errors: object) -> None:
    """Refuse a bad ``errors=`` before the walk, not after it."""
    if errors not in ("raise", "warn"):
        msg = f"errors= must be 'raise' or 'warn', got {errors!r}"
        raise ConfigurationError(msg)


def check_duration(duration: object) -> None:
    """Refuse a ``$find`` duration that is not a positive number of minutes."""
    if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
        msg = f"duration must be a positive number of minutes, got {duration!r}"
        raise ConfigurationError(msg)


def frame_table(
    resource_type: str, table: str | None, view: str | None, errors: object
) -> str | None:
    """The table ``frame()`` was asked for, its options checked before any request.

    Raises
    ------
    ConfigurationError
        ``table=`` and ``view=`` disagree, or ``errors=`` is not ``"raise"``/``"warn"``.
    UnknownName
        No such child table of ``resource_type``.
    """
    if table is not None and view is not None and table != view:
        msg = f"pass table= or view=, not both ({table!r} != {view!r})"
        raise ConfigurationError(msg)
    name = table if table is not None else view
    check_errors(errors)
    if name is not None and name != resource_type and name not in table_names(resource_type):
        raise unknown_name("table", name, table_names(resource_type), f" of {resource_type}")
    return name


# ---------------------------------------------------------------------- walks


def open_walk(
    pipeline: Pipeline,
    resource_type: str,
    path: str,
    query: Mapping[str, str] | Iterable[tuple[str, str]],
    *,
    summary: FetchSummary,
    max_pages: int | None,
    recover: bool = True,
    track_ids: bool = True,
    skipped: int = 0,
    on_ignored_filter: str = "raise",
) -> Walk:
    """A walk of ``path`` whose pages and ``next`` links go through ``pipeline``."""
    return Walk(
        resource_type,
        pipeline.url(path),
        list(query.items() if isinstance(query, Mapping) else query),
        fetch=pipeline.fetch_page,
        resolve=pipeline.resolve_link,
        summary=summary,
        max_pages=max_pages,
        recover=recover,
        track_ids=track_ids,
        skipped=skipped,
        now=local_now,
        on_ignored_filter=on_ignored_filter,
    )


def _interactive() -> bool:
    try:
        from rich.console import Console
    except ImportError:  # pragma: no cover - rich is a dependency
        return False
    console = Console(stderr=True)
    return bool(console.is_jupyter or console.is_terminal)


def _progress_bar(show: bool) -> AbstractContextManager[Any]:
    """A transient rich progress bar, or a context holding ``None`` when not shown."""
    if not show:
        return nullcontext(None)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    )


class _Meter:
    """What one walk cost so far (requests, retries, waits, time), written into its summary."""

    def __init__(self, summary: FetchSummary, pipeline: Pipeline) -> None:
        self.summary = summary
        self.pipeline = pipeline
        self.started = time.perf_counter()
        self.requests = pipeline.counters.requests
        self.retries = pipeline.counters.retries
        self.waited = pipeline.throttle.waited
        self.limited = pipeline.throttle.rate_limited

    def settle(self) -> None:
        summary, counters, throttle = self.summary, self.pipeline.counters, self.pipeline.throttle
        summary.requests = counters.requests - self.requests
        summary.retries = counters.retries - self.retries
        summary.waited_seconds = throttle.waited - self.waited
        summary.rate_limited = throttle.rate_limited - self.limited
        summary.elapsed_seconds = time.perf_counter() - self.started


def walked(walk: Walk, pipeline: Pipeline, *, progress: bool | None) -> Iterator[Page]:
    """The pages of ``walk``, with the progress bar and the request counts of the summary.

    ``progress=None`` shows the bar only when interactive (a terminal or Jupyter).
    """
    summary = walk.summary
    meter = _Meter(summary, pipeline)
    with _progress_bar(_interactive() if progress is None else progress) as bar:
        task = bar.add_task(summary.resource_type, total=None) if bar is not None else None
        try:
            for page in walk:
                if bar is not None and task is not None:
                    bar.update(task, total=summary.total, completed=summary.records)
                meter.settle()
                yield page
        finally:
            meter.settle()
    log.debug("%s", summary)


class ListWalk:
    """A list walk under way: iterate it (once) for its :class:`~toolkit.page.Page` objects.

    ``summary`` fills in as the pages arrive: ``started_at`` (the server's time at
    the start, the recovery's ``t0``) from the first page on, ``complete`` once
    the last page has been read. What :meth:`toolkit.Client.walk` returns.
    """

    def __init__(self, walk: Walk, pipeline: Pipeline, *, progress: bool | None) -> None:
        self._walk = walk
        self._pipeline = pipeline
        self._progress = progress

    @property
    def summary(self) -> FetchSummary:
        """The walk's :class:`~toolkit.paging.FetchSummary`, as it stands."""
        return self._walk.summary

    def __iter__(self) -> Iterator[Page]:
        try:
            yield from walked(self._walk, self._pipeline, progress=self._progress)
        finally:
            self._walk.close()


def record_of(resource_type: str, reply: Reply) -> dict[str, Any]:
    """The body of a read, refused unless it is a ``resource_type`` record."""
    data = reply.data
    if not isinstance(data, dict) or data.get("resourceType") != resource_type:
        kind = data.get("resourceType") if isinstance(data, dict) else type(data).__name__
        raise ApiError(
            reply.response.status_code,
            method="GET",
            url=str(reply.response.url),
            diagnostics=f"expected a {resource_type}, got {kind}",
        )
    return data


def exported_ids(resource_type: str, url: str, data: Any) -> set[str]:
    """The ids of an ``$export-ids`` answer: a Parameters resource, one id per parameter.

    The facts name the answer's type, not its parameters, so each parameter's
    ``valueId``, ``valueString`` or ``valueReference`` (its last path segment)
    is read. Anything else is refused: a partial list would make the store drop
    records that still exist.
    """
    params = data.get("parameter") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("resourceType") != "Parameters":
        msg = f"{resource_type}: {url} did not answer a Parameters resource"
        raise MalformedPage(msg, url=url)
    ids: set[str] = set()
    for i, param in enumerate(params if isinstance(params, list) else []):
        ref = param.get("valueReference") if isinstance(param, dict) else None
        value = (
            param.get("valueId") or param.get("valueString") or (ref or {}).get("reference")
            if isinstance(param, dict)
            else None
        )
        if not isinstance(value, str) or not value.strip("/"):
            msg = f"{resource_type}: {url}: parameter[{i}] holds no id"
            raise MalformedPage(msg, url=url)
        ids.add(value.rstrip("/").rsplit("/", 1)[-1])
    return ids


def newest_records(walk: Walk, pages: Iterable[Page]) -> Iterator[dict[str, Any]]:
    """Every record of ``walk``'s pages once, in its newest version, after the walk has ended."""
    records = [page.records for page in pages]
    keep = walk.winners()
    walk.close()
    for i, page_records in enumerate(records):
        positions = keep.get(i, set())
        yield from (r for pos, r in enumerate(page_records) if pos in positions)


# ---------------------------------------------------------------------- frames


def validated_frame(
    resource_type: str, pages: list[bytes], *, table: str | None, errors: Any
) -> pl.DataFrame:
    """``pages`` flattened by the declared view (or its child ``table``) and validated."""
    from toolkit.schemas import validate

    df = flatten(resource_type, pages, table=table)
    return validate(df, resource_type, table=table, errors=errors)


def validated_frames(resource_type: str, pages: list[bytes], *, errors: Any) -> dict[str, Any]:
    """The main table and every child table of ``pages``, each validated."""
    from toolkit.schemas import validate

    tables = flatten_tables(resource_type, pages)
    return {
        key: validate(df, resource_type, table=None if key == resource_type else key, errors=errors)
        for key, df in tables.items()
    }


def _last_segment(ref: Any) -> str | None:
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _proposal_row(r: dict[str, Any]) -> dict[str, Any]:
    """One proposed appointment as a flat row (ids ready for ``book``)."""
    actors = [
        ((p or {}).get("actor") or {}).get("reference")
        for p in r.get("participant") or []
        if ((p or {}).get("actor") or {}).get("type") == "PractitionerRole"
    ]
    services = [(s or {}).get("reference") for s in r.get("supportingInformation") or []]
    location = next(
        (
            e.get("valueCode")
            for e in r.get("extension") or []
            if isinstance(e, dict) and e.get("url") == "location-type"
        ),
        None,
    )
    return {
        "id": r.get("id"),
        "start": r.get("start"),
        "end": r.get("end"),
        "minutes_duration": r.get("minutesDuration"),
        "practitioner_role": _last_segment(actors[0]) if actors else None,
        "healthcare_service": _last_segment(services[0]) if services else None,
        "location_type": location,
    }


def proposed_frame(records: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """Proposed appointments as a typed frame, one row per proposal."""
    import polars as pl

    schema = {
        "id": pl.String,
        "start": pl.String,
        "end": pl.String,
        "minutes_duration": pl.Int64,
        "practitioner_role": pl.String,
        "healthcare_service": pl.String,
        "location_type": pl.String,
    }
    frame = pl.DataFrame([_proposal_row(r) for r in records], schema=schema)
    return frame.with_columns(pl.col("start", "end").str.to_datetime(time_zone="UTC"))
