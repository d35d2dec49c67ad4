"""The synchronous fetch client: a facade of verbs over the request pipeline.

:class:`Client` keeps the verbs (``pages``, ``records``, ``frame``, ``frames``,
``read``, ``find``, ``create``, ``patch``, ``book``, ``request``); each checks
its arguments and hands the work to the module that owns it:

* :mod:`toolkit.http`: the request pipeline, one layer per concern (origin
  guard, retries, error answers, pacing, auth, deadline and size cap), through
  which every HTTP exchange goes;
* :mod:`toolkit.listing` and :mod:`toolkit.paging`: search keywords, list walks
  (a page parsed once; a walk that refuses wrong frames and recovers when the
  collection changes while it is walked), progress and frames. A walk either
  returns everything the server announced, each record once, or raises;
* :mod:`toolkit.writes`: write bodies checked against the catalogue before
  anything is sent.

The embedded mock deployment starts only when :func:`connect` finds nothing configured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal, Self, Unpack

import httpx

from toolkit import catalogue, listing, writes
from toolkit.auth import ClientCredentialsAuth
from toolkit.config import configured, region_for_country, resolve_settings
from toolkit.errors import MethodNotAllowed, NotFound, ViewDefinitionError
from toolkit.http import Pipeline, Reply
from toolkit.include import Statement, include_query, included_frames, split_include
from toolkit.listing import search_params
from toolkit.mock import embedded
from toolkit.origin import Origin, safe_id
from toolkit.page import Page
from toolkit.paging import FetchSummary, Walk
from toolkit.throttle import RetryPolicy, Throttle
from toolkit.transport import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT
from toolkit.viewdefs import load_view, run_view

if TYPE_CHECKING:
    from types import TracebackType

    import polars as pl

__all__ = [
    "Client",
    "FetchSummary",
    "connect",
    "region_for_country",
    "search_params",
]

_FIND_PATH = next(e.path for e in catalogue.ENDPOINTS if e.kind == "find")


class Client:
    """A client of one practice-management deployment.

    Parameters
    ----------
    base_url
        Regional address including ``/main``; default ``PM_BASE_URL``, or ``region``.
    client_id, client_secret
        OAuth client credentials; default ``PM_CLIENT_ID`` / ``PM_CLIENT_SECRET``.
    user_agent
        ``"<vendor> (<email>)"``; default ``PM_USER_AGENT`` or ``"pmtk/0.1 (set PM_USER_AGENT)"``.
    region
        ``"au"`` or ``"eu"``: use the regional address of ``catalogue.REGIONS``.
    requests_per_minute
        Client-side pacing (sliding window); the API allows 500.
    timeout
        Seconds one request may take in all: connect, send, headers and the
        whole body (read under the client's own clock). An :class:`httpx.Timeout`
        sets the phases; the whole-request deadline is then its largest phase.
    max_response_bytes
        Cap on the decoded body of one response, enforced while reading
        (default 64 MiB): a compression bomb costs at most this much.
    max_pages
        Pages one pass of a list walk may take. Default: what ``Bundle.total``
        and the page size allow (+2), or 10,000 when there is no ``total``.
    transport
        An httpx transport (for example :class:`httpx.MockTransport` in tests).
    progress
        Show a progress bar on list walks; ``None`` shows it only when interactive.
    retry_policy
        Attempts and backoff (:class:`toolkit.throttle.RetryPolicy`).
    clock, sleep
        Monotonic clock and sleep used for pacing and token expiry (tests inject fakes).
    ignored_filters
        What a list walk does when the server ignored a search filter (its Bundle's
        ``self`` link leaves the filter out, FHIR's rule): ``"raise"`` (default)
        :class:`~toolkit.errors.IgnoredFilter` before any record is returned, or
        ``"warn"`` (:class:`~toolkit.errors.IgnoredFilterWarning`) and go on. A
        server that sends no ``self`` link cannot be checked
        (``last_summary.filters_checked`` is then False).

    Raises
    ------
    ConfigurationError
        When the address or a credential is missing.

    Examples
    --------
    >>> import toolkit
    >>> with toolkit.connect() as client:                       # doctest: +SKIP
    ...     referrals = client.frame("Referral", last_updated="gt2026-01-01T00:00:00Z")
    """

    def __init__(
        self,
        base_url: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        *,
        user_agent: str | None = None,
        region: str | None = None,
        requests_per_minute: int | None = catalogue.RATE_LIMIT_PER_MINUTE,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_pages: int | None = None,
        transport: httpx.BaseTransport | None = None,
        progress: bool | None = None,
        retry_policy: RetryPolicy | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        ignored_filters: Literal["raise", "warn"] = "raise",
    ) -> None:
        listing.check_ignored_filters(ignored_filters)
        settings = resolve_settings(
            base_url, client_id, client_secret, user_agent=user_agent, region=region
        )
        listing.check_max_pages(max_pages)
        self._pipeline = Pipeline(
            settings,
            requests_per_minute=requests_per_minute,
            timeout=timeout,
            max_response_bytes=max_response_bytes,
            transport=transport,
            retry_policy=retry_policy,
            clock=clock,
            sleep=sleep,
        )
        self.base_url = settings.base_url
        self.client_id = settings.client_id
        self.user_agent = settings.user_agent
        self.max_pages = max_pages
        self.progress = progress
        self.ignored_filters = ignored_filters
        self._statement = Statement(lambda: self.request("GET", catalogue.METADATA_PATH))
        self.last_summary: FetchSummary | None = None

    def __repr__(self) -> str:
        return (
            f"Client(base_url={self.base_url!r}, client_id={self.client_id!r}, "
            f"user_agent={self.user_agent!r})"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (and anything started for this client)."""
        self._pipeline.close()

    @property
    def requests_sent(self) -> int:
        """HTTP requests sent so far, token requests excluded."""
        return self._pipeline.counters.requests

    @property
    def origin(self) -> Origin:
        """The configured origin (scheme, host, port): credentials go nowhere else."""
        return self._pipeline.origin

    @property
    def auth(self) -> ClientCredentialsAuth:
        """The OAuth client-credentials auth (token cache, ``token_requests``, ``replays``)."""
        return self._pipeline.auth

    @property
    def throttle(self) -> Throttle:
        """The pacing of this client's requests (sliding window, 429 and rate-limit waits)."""
        return self._pipeline.throttle

    @throttle.setter
    def throttle(self, throttle: Throttle) -> None:
        self._pipeline.throttle = throttle

    @property
    def retry_policy(self) -> RetryPolicy:
        """Attempts and backoff (:class:`toolkit.throttle.RetryPolicy`)."""
        return self._pipeline.retry_policy

    @retry_policy.setter
    def retry_policy(self, policy: RetryPolicy) -> None:
        self._pipeline.retry_policy = policy

    # ------------------------------------------------------------------ the pipeline

    def _url(self, path: str) -> str:
        return self._pipeline.url(path)

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        json: Any = None,
        content_type: str = "application/json",
        decode: bool = True,
        retry: bool | None = None,
    ) -> Reply:
        return self._pipeline.call(
            method,
            path,
            params=params,
            json=json,
            content_type=content_type,
            decode=decode,
            retry=retry,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content_type: str = "application/json",
        retry: bool | None = None,
    ) -> httpx.Response:
        """Send one request through pacing, auth, retries and error mapping.

        Parameters
        ----------
        method, path
            HTTP method, and ``"Referral"``, ``"/main/Referral"`` or an absolute URL.
        params, json, content_type
            Raw query parameters; the body, serialized as JSON, and its content type.
        retry
            Whether a failure after sending may be retried; default: GET and PATCH yes,
            POST no (a POST failing after it was sent raises
            :class:`~toolkit.errors.OutcomeUnknown`).

        Returns
        -------
        httpx.Response
            A successful (2xx) response, body read.

        Raises
        ------
        ApiError
            The typed subclass for the status, with ``code`` and ``diagnostics``
            from the OperationOutcome.
        TransportError
            When the deployment could not be reached after the allowed retries.
        """
        # A list or tuple repeats its parameter (FHIR: AND), as a search keyword does.
        query = listing.search_pairs({}, params)
        return self._call(
            method,
            path,
            params=query or None,
            json=json,
            content_type=content_type,
            decode=False,
            retry=retry,
        ).response

    # ------------------------------------------------------------------ list walks

    def _new_walk(
        self,
        resource_type: str,
        path: str,
        query: Mapping[str, str] | Sequence[tuple[str, str]],
        *,
        max_pages: int | None = None,
        recover: bool = True,
        track_ids: bool = True,
        skipped: int = 0,
    ) -> Walk:
        listing.check_max_pages(max_pages)
        self.last_summary = summary = FetchSummary(resource_type)
        return listing.open_walk(
            self._pipeline,
            resource_type,
            path,
            query,
            summary=summary,
            max_pages=max_pages if max_pages is not None else self.max_pages,
            recover=recover,
            track_ids=track_ids,
            skipped=skipped,
            on_ignored_filter=self.ignored_filters,
        )

    def _walk(self, walk: Walk) -> Iterator[Page]:
        """The pages of ``walk``, with the progress bar and the request counts of the summary."""
        return listing.walked(walk, self._pipeline, progress=self.progress)

    def _list_walk(
        self,
        resource_type: str,
        params: listing.Params | None,
        max_pages: int | None,
        search: Mapping[str, Any],
        *,
        recover: bool = True,
        skipped: int = 0,
    ) -> Walk:
        """A list walk of ``resource_type``: type, keywords, includes and page size checked
        first; each ``include=`` name is sent as its own ``_include`` parameter."""
        pairs = include_query(resource_type, search, params, self._statement)
        return self._new_walk(
            resource_type,
            resource_type,
            pairs,
            max_pages=max_pages,
            recover=recover,
            skipped=skipped,
        )

    @staticmethod
    def _check_type(resource_type: str) -> None:
        catalogue.resource(resource_type)  # UnknownName, with the near miss

    def pages(
        self,
        resource_type: str,
        /,
        *,
        params: listing.Params | None = None,
        max_pages: int | None = None,
        recover: bool = True,
        **search: Any,
    ) -> Iterator[bytes]:
        """Raw Bundle pages of a list walk, as bytes (the fast path for ``flatten``).

        Parameters
        ----------
        resource_type, params
            ``"Referral"``, ...; raw query parameters, passed unchanged: a mapping, or
            ``(name, value)`` pairs when a name repeats (``[("date", "ge..."), ...]``).
        max_pages
            Pages one pass may take (default: the client's, else what ``Bundle.total``
            allows, else 10,000).
        recover
            Recover when records change during the walk (default); ``False`` raises
            :class:`~toolkit.errors.IncompleteResult` instead.
        **search
            Search parameters by Python name (:func:`search_params`), ``subject=...``.

        Yields
        ------
        bytes
            Each Bundle page's body, in order; then, when records changed during the
            walk, the recovery pages (``_lastUpdated=ge<start>``, and ``lt<start>`` if
            a record slid past a page boundary). A record may then appear twice: keep,
            per id, the greatest ``meta.lastUpdated`` (ties: the later page), as
            :meth:`frame`, :meth:`records` and the store's sync do
            (``client.last_summary.recovered`` tells whether that happened).

        Raises
        ------
        IncompleteResult, MalformedPage
            A walk short of ``Bundle.total`` that recovery cannot make whole (a
            ``PagingLoop`` for a loop); another type's entry, more records than
            ``total``, or too many pages (``PageLimitExceeded``).
        ForeignLink
            A ``next`` link off the configured origin; it is not requested.
        ApiError, TransportError
            When a page fails after the allowed retries; a walk never stops silently.
        """
        walk = self._list_walk(resource_type, params, max_pages, search, recover=recover)
        for page in self._walk(walk):
            yield page.raw

    def walk(
        self,
        resource_type: str,
        /,
        *,
        params: listing.Params | None = None,
        max_pages: int | None = None,
        skipped: int = 0,
        progress: bool | None = None,
        **search: Any,
    ) -> listing.ListWalk:
        """A list walk as :class:`~toolkit.page.Page` objects, each parsed once.

        What the store's sync uses (its :class:`~toolkit.store.PageSource`
        protocol): each page carries its raw bytes, its records, ``total`` and
        ``next``, and the returned walk's ``summary`` the server's time at its
        start. Same checks, recovery and errors as :meth:`pages`; nothing is
        requested until the walk is iterated.

        Parameters
        ----------
        skipped
            Records already held from the pages before the first one asked for
            (``params={"page": k}``): a resumed walk. They count toward
            ``Bundle.total``, and the walk does not recover (it never saw those
            pages): it is whole when its records and ``skipped`` reach ``total``.
        progress
            Show a progress bar (default: the client's ``progress``).
        """
        walk = self._list_walk(
            resource_type, params, max_pages, search, recover=not skipped, skipped=skipped
        )
        shown = self.progress if progress is None else progress
        return listing.ListWalk(walk, self._pipeline, progress=shown)

    def _clean_pages(
        self,
        resource_type: str,
        params: listing.Params | None,
        max_pages: int | None,
        search: Mapping[str, Any],
    ) -> list[bytes]:
        """Every page of a walk, superseded versions removed (each record once)."""
        walk = self._list_walk(resource_type, params, max_pages, search)
        return walk.clean([page.main_raw() for page in self._walk(walk)])

    def records(
        self,
        resource_type: str,
        /,
        *,
        params: listing.Params | None = None,
        max_pages: int | None = None,
        **search: Any,
    ) -> Iterator[dict[str, Any]]:
        """Every record of a list walk, as dicts, each id once in its newest version.

        Same checks as :meth:`pages`. The records come after the walk has ended
        (a record read early may be superseded by a version read later).
        """
        walk = self._list_walk(resource_type, params, max_pages, search)
        yield from listing.newest_records(walk, self._walk(walk))

    def frame(
        self,
        resource_type: str,
        /,
        *,
        table: str | None = None,
        view: Any = None,
        errors: Literal["raise", "warn"] = "raise",
        params: listing.Params | None = None,
        max_pages: int | None = None,
        **search: Any,
    ) -> pl.DataFrame:
        """A validated Polars frame of every record (flattened by the declared view).

        Parameters
        ----------
        resource_type
            The resource to list.
        table, view
            A child table of the view (for example ``"appointment_participant"``);
            ``view`` is a synonym of ``table``. Default: the main table.
            ``view`` may instead be a SQL-on-FHIR v2 ViewDefinition (a dict, a
            ``pathlib.Path`` to its JSON, a pydantic model or a loaded
            :class:`toolkit.viewdefs.View`): the frame then has the view's
            columns (:func:`toolkit.viewdefs.run_view`). The view is checked
            before any request; ``errors`` does not apply to it.
        errors
            ``"raise"`` raises :class:`~toolkit.errors.DataValidationError` on
            schema failures; ``"warn"`` warns and returns the frame.
        params, max_pages, **search
            As for :meth:`pages`. Each record appears once, in its newest version.
        """
        if view is not None and not isinstance(view, str):
            definition = load_view(view)
            if definition.resource != resource_type or table is not None:
                msg = (
                    f"the ViewDefinition is of {definition.resource}, asked for {resource_type}"
                    if table is None
                    else "pass table= or a ViewDefinition as view=, not both"
                )
                raise ViewDefinitionError(msg, path="resource")
            listing.check_errors(errors)
            return run_view(definition, self._clean_pages(resource_type, params, max_pages, search))
        name = listing.frame_table(resource_type, table, view, errors)
        pages = self._clean_pages(resource_type, params, max_pages, search)
        return listing.validated_frame(resource_type, pages, table=name, errors=errors)

    def frames(
        self,
        resource_type: str,
        /,
        *,
        errors: Literal["raise", "warn"] = "raise",
        params: listing.Params | None = None,
        max_pages: int | None = None,
        include: str | Sequence[str] | None = None,
        **search: Any,
    ) -> dict[str, pl.DataFrame]:
        """The main table and every child table of a list walk, each validated.

        Keys are the resource name for the main table and ``<resource>_<child>``
        (snake case) for child tables, as in :func:`toolkit.views.flatten_tables`.
        Each record (and its child rows) appears once, in its newest version.
        ``include=["Appointment:patient", ...]`` (``catalogue.INCLUDES``) adds, from
        the same walk, the tables of every type included (:mod:`toolkit.include`).
        """
        listing.check_errors(errors)
        search = {**search, "include": include}
        walk = self._list_walk(resource_type, params, max_pages, search)
        wanted = split_include(resource_type, search)[1]
        pages = self._walk(walk)
        return included_frames(resource_type, pages, wanted, clean=walk.clean, errors=errors)

    # ------------------------------------------------------------------ single records

    def read(self, resource_type: str, record_id: str) -> dict[str, Any]:
        """One record by id (``GET /main/<type>/<id>``).

        Raises
        ------
        NotFound
            When there is no such record (also a ``KeyError``).
        InvalidId
            When ``record_id`` cannot be one path segment (``..``, ``/``, ``%``,
            whitespace, ...); nothing is sent.
        """
        self._check_type(resource_type)
        reply = self._call("GET", f"{resource_type}/{safe_id(resource_type, record_id)}")
        return listing.record_of(resource_type, reply)

    def export_ids(self, resource_type: str = "Patient") -> set[str] | None:
        """Every id the deployment holds of ``resource_type``, in one request, or ``None``.

        ``GET /main/Patient/$export-ids`` (facts; the only type it exists for):
        what the store uses to drop deleted records. ``None`` when the type has
        no such operation or the deployment answers 404/405.
        """
        path = catalogue.EXPORT_IDS.get(resource_type)
        if path is None:
            return None
        try:
            reply = self._call("GET", path)
        except (NotFound, MethodNotAllowed):
            return None
        return listing.exported_ids(resource_type, str(reply.response.url), reply.data)

    def _send(self, write: writes.Write) -> dict[str, Any]:
        """Send a checked write once (retried only when ``write.retry``); the server's answer."""
        reply = self._call(
            write.method,
            write.path,
            json=write.body,
            content_type=write.content_type,
            retry=write.retry,
        )
        return reply.data if isinstance(reply.data, dict) else {}

    def create(self, resource_type: str, body: Any) -> dict[str, Any]:
        """Create a record (POST); the body is validated first and never retried blindly.

        Parameters
        ----------
        resource_type
            ``"Referral"``, ``"Coverage"``, ``"Organization"``, ``"Practitioner"`` or
            ``"Patient"`` (the keys of ``catalogue.CREATE_PATHS``).
        body
            A dict or a pydantic model using the API's field names.

        Returns
        -------
        dict
            The created record as the server returned it.

        Raises
        ------
        RequestValidationError
            When the body breaks a catalogue rule; nothing is sent.
        OutcomeUnknown
            When the request failed after it was sent (it may have landed).
        """
        return self._send(writes.create_write(resource_type, body))

    def patch(self, resource_type: str, record_id: str, changes: Any) -> dict[str, Any]:
        """Change fields of a record with a JSON merge patch.

        ``null`` removes a field. A patch appending ``attachments`` is not
        idempotent and is therefore not retried after it was sent.

        Raises
        ------
        RequestValidationError
            When a change breaks a catalogue rule, or the type does not accept
            PATCH (Practitioner, Organization: the API answers 405); nothing is sent.
        """
        return self._send(writes.patch_write(resource_type, record_id, changes))

    def book(
        self, parameters: Mapping[str, Any] | None = None, /, **booking: Unpack[writes.Booking]
    ) -> dict[str, Any]:
        """Book an appointment (``POST /main/Appointment/$book``); never retried blindly.

        Parameters
        ----------
        parameters
            A ready ``Parameters`` body; without it the body is built from ``booking``.
        **booking
            The keywords of :class:`~toolkit.writes.Booking`: ``start``, ``end``,
            ``practitioner_role`` and ``patient`` (required without ``parameters``),
            ``healthcare_service``, ``location_type`` (``"clinic"``), ``status``
            (``"booked"``) and ``description``. ``minutesDuration`` is computed from
            start and end.

        Returns
        -------
        dict
            The deployment's answer to the booking, decoded.

        Raises
        ------
        RequestValidationError
            When the booking breaks a rule; nothing is sent.
        Conflict
            When the slot is already taken (409).
        OutcomeUnknown
            When the request failed after it was sent.
        """
        return self._send(writes.book_write(parameters, **booking))

    def declared_search(self) -> dict[str, set[str]] | None:
        """The search parameters the deployment declares per resource type, or ``None``.

        Read once from its CapabilityStatement (``GET /main/metadata``, a live
        endpoint the spec does not list); ``None`` when it publishes none (404).
        """
        return self._statement.search()

    def declared_includes(self) -> dict[str, set[str]] | None:
        """The ``_include`` names the deployment declares per type (``searchInclude``), or
        ``None``; an ``include=`` it does not declare raises ``UndeclaredInclude``."""
        return self._statement.includes()

    def undeclared_search(self, resource_type: str, /, **search: Any) -> list[str]:
        """The API parameters of ``search`` that the deployment does not declare it supports.

        Keywords map as in :meth:`frame` (``last_updated`` -> ``_lastUpdated``);
        paging and result parameters (``_count``, ``page``, ``_sort``...) are not
        search parameters and never listed. Empty when the deployment publishes
        no CapabilityStatement: nothing can be checked then.
        """
        declared = self.declared_search()
        if declared is None:
            return []
        allowed = declared.get(resource_type, set()) | catalogue.RESULT_PARAMETERS
        names = dict.fromkeys(name for name, _ in listing.search_pairs(search))
        return [name for name in names if name.split(":")[0] not in allowed]

    def find(
        self,
        start: datetime | date | str,
        end: datetime | date | str,
        duration: int,
        **filters: Any,
    ) -> pl.DataFrame:
        """Proposed free appointments (``GET /main/Appointment/$find``) as a frame.

        Parameters
        ----------
        start, end
            The search range.
        duration
            Appointment length in minutes.
        **filters
            ``practitioner_role``, ``practitioner``, ``organization``, ``show``,
            ``emergency``, ``apply_buffer_time``, ``sort`` (``"start"``/``"-start"``).

        Returns
        -------
        polars.DataFrame
            One row per proposal: ``id``, ``start``, ``end`` (UTC datetimes),
            ``minutes_duration``, ``practitioner_role`` and ``healthcare_service``
            (ids, ready for :meth:`book`) and ``location_type``.

        Notes
        -----
        Not the Appointment view: it keeps participants in a child table keyed by
        id, and the live form of proposal ids (``proposed-<start>-<minutes>``) can
        repeat across practitioners, so the role could not be joined back
        unambiguously (the mock's ids name the role and are unique).
        """
        listing.check_duration(duration)
        query = listing.search_pairs({"start": start, "end": end, "duration": duration, **filters})
        walk = self._new_walk("Appointment", _FIND_PATH, query, track_ids=False)
        return listing.proposed_frame(r for page in self._walk(walk) for r in page.records)


# ---------------------------------------------------------------------- connect()


def connect(**kwargs: Any) -> Client:
    """A :class:`Client` for the configured deployment, or for the embedded mock.

    With ``PM_BASE_URL`` (or ``base_url=``/``region=``) set, this is
    ``Client(**kwargs)``. With nothing at all configured it starts the embedded
    mock deployment in a background thread (once per process, stopped at exit),
    says so in one line on stderr, and connects to it with the mock's demo
    credentials. Credentials without an address, or a near-miss ``PM_`` variable
    name, raise :class:`~toolkit.errors.ConfigurationError` instead: pmtk never
    quietly falls back to synthetic data (see :mod:`toolkit.config`).

    Examples
    --------
    >>> import toolkit
    >>> client = toolkit.connect()                              # doctest: +SKIP
    pmtk: nothing configured (no PM_BASE_URL); using the embedded mock deployment at ...
    """

    if configured(
        base_url=kwargs.get("base_url"),
        region=kwargs.get("region"),
        client_id=kwargs.get("client_id"),
        client_secret=kwargs.get("client_secret"),
    ):
        return Client(**kwargs)
    dep = embedded.start_for(kwargs)  # the embedded mock (toolkit.mock.embedded)
    return Client(base_url=dep.base_url, **kwargs)
