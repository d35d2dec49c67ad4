"""Names for the ids: practitioners, clinics, services, referral types and fees.

The frames name each other by id: an appointment's practitioner participant names a
PractitionerRole (``PR-``), the role names its Practitioner and its clinic, the
appointment's ``supportingInformation`` names HealthcareServices, a referral names
its ReferralDefinition by *name*, an invoice line its ChargeItemDefinition by a
canonical URL. These joins turn those ids into the names a practice reads.

Every function here keeps every row of the frame it describes: a role whose
practitioner is not in the practitioner frame keeps its row with a null name, an
appointment without a practitioner participant keeps its row with null ids. Each
checks the columns it needs first and raises
:class:`~toolkit.errors.MissingColumnError` naming the frame and the column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from toolkit.analysis.tables import reference_id
from toolkit.errors import MissingColumnError

_RANK = "_pmtk_rank"
_ORDER = "_pmtk_order"


def require_columns(
    frame: pl.DataFrame, columns: Iterable[str], *, frame_name: str, function: str
) -> None:
    """Raise :class:`~toolkit.errors.MissingColumnError` unless ``frame`` has ``columns``.

    Parameters
    ----------
    frame
        The frame handed to an analysis function.
    columns
        The columns the function reads.
    frame_name
        The argument's name, for the message (``"roles"``).
    function
        The function's name, for the message.

    Examples
    --------
    >>> require_columns(pl.DataFrame({"id": ["PR-1"]}), ["id"], frame_name="roles", function="f")
    >>> require_columns(pl.DataFrame({"id": ["PR-1"]}), ["id", "practitioner_id"],
    ...                 frame_name="roles", function="f")
    Traceback (most recent call last):
    ...
    toolkit.errors.MissingColumnError: f(): the roles frame has no column 'practitioner_id' ...
    """

    if not isinstance(frame, pl.DataFrame):
        msg = (
            f"{function}(): {frame_name} must be an eager polars DataFrame, "
            f"not {type(frame).__name__} (collect a LazyFrame first)"
        )
        raise TypeError(msg)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        names = ", ".join(repr(c) for c in missing)
        noun = "column" if len(missing) == 1 else "columns"
        msg = (
            f"{function}(): the {frame_name} frame has no {noun} {names} "
            f"(it has: {', '.join(frame.columns) or 'no columns'})"
        )
        raise MissingColumnError(msg, frame=frame_name, missing=missing, function=function)


def require_frames(function: str, *checks: tuple[pl.DataFrame, str, Sequence[str]]) -> None:
    """:func:`require_columns` for each ``(frame, frame_name, columns)``, in order."""
    for frame, frame_name, columns in checks:
        require_columns(frame, columns, frame_name=frame_name, function=function)


_SUPPORTING_COLUMNS = ("appointment_id", "supporting_information_id")
_APPOINTMENT_PRACTITIONER_COLUMNS = (
    "appointment_id",
    "role_id",
    "practitioner_id",
    "practitioner_name",
)


def _joined(frame: pl.DataFrame, column: str) -> pl.Expr:
    """``column`` as one string: a list of strings is joined with spaces."""
    if isinstance(frame.schema[column], pl.List):
        return pl.col(column).list.join(" ")
    return pl.col(column).cast(pl.String)


def _display(frame: pl.DataFrame, prefix: str, given: str, family: str) -> pl.Expr:
    """``"<prefix> <given> <family>"`` from whichever of the three columns exist; null if empty."""
    parts = [_joined(frame, c) for c in (prefix, given, family) if c in frame.columns]
    if not parts:
        return pl.lit(None, dtype=pl.String)
    name = pl.concat_str(parts, separator=" ", ignore_nulls=True).str.strip_chars()
    return pl.when(name.str.len_chars() > 0).then(name).otherwise(None)


def practitioner_display_names(practitioners: pl.DataFrame) -> pl.DataFrame:
    """One readable name per practitioner: ``"Dr Given Family"``.

    Accepts the ``Practitioner`` table (``id``, ``name_prefix``, ``name_given``,
    ``name_family``, ``name_use``: already the ``official`` name, else the first) or
    the ``practitioner_name`` child table (``practitioner_id``, ``index``, ``use``,
    ``prefix``, ``given``, ``family``: every name). Where one practitioner has
    several rows, the view's rule decides: the ``official`` name wins, else the
    first (lowest ``index``, else the first row).

    Parameters
    ----------
    practitioners
        Either table.

    Returns
    -------
    pl.DataFrame
        ``practitioner_id`` and ``practitioner_name`` (null when the practitioner
        has no name parts), one row per practitioner id, in order of appearance.

    Examples
    --------
    >>> df = pl.DataFrame({"id": ["PR-1"], "name_prefix": [["Dr"]],
    ...                    "name_given": [["Ana", "Li"]], "name_family": ["Kim"]})
    >>> practitioner_display_names(df).row(0)
    ('PR-1', 'Dr Ana Li Kim')
    """
    key, use, names = _name_columns(practitioners)
    cols = practitioners.columns
    rank = [pl.col(use).fill_null("") != "official"] if use in cols else []
    if key == "practitioner_id" and "index" in cols:
        rank.append(pl.col("index"))
    ranked = practitioners.with_row_index(_ORDER)
    return (
        ranked.sort([*rank, pl.col(_ORDER)], nulls_last=True)
        .unique(key, keep="first", maintain_order=True)
        .sort(_ORDER)
        .select(
            pl.col(key).cast(pl.String).alias("practitioner_id"),
            _display(ranked, *names).alias("practitioner_name"),
        )
        .filter(pl.col("practitioner_id").is_not_null())
    )


def _name_columns(practitioners: pl.DataFrame) -> tuple[str, str, tuple[str, str, str]]:
    """The id, ``use`` and name-part columns of whichever practitioner table this is."""
    cols = practitioners.columns if isinstance(practitioners, pl.DataFrame) else []
    if "id" in cols and ({"name_given", "name_family"} & set(cols)):
        return "id", "name_use", ("name_prefix", "name_given", "name_family")
    if "practitioner_id" in cols and ({"given", "family"} & set(cols)):
        return "practitioner_id", "use", ("prefix", "given", "family")
    # the message names the main table's columns: the shape users hand in most
    require_columns(
        practitioners,
        ["id", "name_given", "name_family"],
        frame_name="practitioners",
        function="practitioner_display_names",
    )
    raise AssertionError  # pragma: no cover - require_columns raised


def patient_display_names(patients: pl.DataFrame) -> pl.DataFrame:
    """One readable name per patient, ``"Given Family"``, to show beside the id.

    Parameters
    ----------
    patients
        The ``Patient`` table (``id``, ``name_given``, ``name_family``: the view's
        chosen name, ``official`` first).

    Returns
    -------
    pl.DataFrame
        ``patient_id`` and ``patient_name`` (null when the patient has no name
        parts), one row per patient id, in order of appearance.

    Raises
    ------
    toolkit.errors.MissingColumnError
        When ``id`` or both name columns are missing.

    Examples
    --------
    >>> df = pl.DataFrame({"id": ["PT-1", "PT-1"], "name_given": [["Mia", "Rose"], ["X"]],
    ...                    "name_family": ["Tran", "Y"]})
    >>> patient_display_names(df).rows()
    [('PT-1', 'Mia Rose Tran')]
    """
    function = "patient_display_names"
    require_columns(patients, ["id"], frame_name="patients", function=function)
    if not {"name_given", "name_family"} & set(patients.columns):
        require_columns(
            patients, ["name_given", "name_family"], frame_name="patients", function=function
        )
    return (
        patients.unique("id", keep="first", maintain_order=True)
        .select(
            pl.col("id").cast(pl.String).alias("patient_id"),
            _display(patients, "name_prefix", "name_given", "name_family").alias("patient_name"),
        )
        .filter(pl.col("patient_id").is_not_null())
    )


def _organization_names(organizations: pl.DataFrame, function: str) -> pl.DataFrame:
    require_columns(organizations, ["id", "name"], frame_name="organizations", function=function)
    return organizations.select(
        pl.col("id").alias("organization_id"), pl.col("name").alias("organization_name")
    ).unique("organization_id", keep="first", maintain_order=True)


def _with_organization_names(
    frame: pl.DataFrame, organizations: pl.DataFrame | None, function: str
) -> pl.DataFrame:
    """``frame`` plus ``organization_name`` when ``organizations`` is given, rows kept."""
    if organizations is None:
        return frame
    return frame.join(
        _organization_names(organizations, function),
        on="organization_id",
        how="left",
        maintain_order="left",
    )


def practitioner_names(
    roles: pl.DataFrame,
    practitioners: pl.DataFrame,
    organizations: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Each PractitionerRole with its practitioner's name and its clinic.

    A role (``PR-`` for the practice's own practitioners, ``EP-`` for external
    referrers) names one Practitioner and one Organization (a ``CL-`` clinic, or an
    ``SP-`` referring practice). Every role keeps its row: a practitioner missing
    from ``practitioners`` gives a null ``practitioner_name``. A role id that appears
    twice counts once (the first row), so joining the result never multiplies rows.

    Parameters
    ----------
    roles
        ``client.frame("PractitionerRole")`` (``id``, ``practitioner_id``,
        ``organization_id``), or :func:`read_roles`.
    practitioners
        The ``Practitioner`` table or its ``practitioner_name`` child table
        (:func:`practitioner_display_names`).
    organizations
        Optional ``Organization`` table (``id``, ``name``) for ``organization_name``.

    Returns
    -------
    pl.DataFrame
        ``role_id``, ``practitioner_id``, ``practitioner_name``, ``organization_id``
        and, with ``organizations``, ``organization_name``; one row per role id.

    Examples
    --------
    >>> roles = pl.DataFrame({"id": ["PR-1", "EP-9"], "practitioner_id": ["PR-1", "EP-9"],
    ...                       "organization_id": ["CL-1", "SP-2"]})
    >>> people = pl.DataFrame({"id": ["PR-1"], "name_prefix": [["Dr"]],
    ...                        "name_given": [["Ana"]], "name_family": ["Kim"]})
    >>> practitioner_names(roles, people).rows()
    [('PR-1', 'PR-1', 'Dr Ana Kim', 'CL-1'), ('EP-9', 'EP-9', None, 'SP-2')]
    """
    function = "practitioner_names"
    names = practitioner_display_names(practitioners)
    out = (
        _role_rows(roles, function)
        .join(names, on="practitioner_id", how="left", maintain_order="left")
        .select("role_id", "practitioner_id", "practitioner_name", "organization_id")
    )
    return _with_organization_names(out, organizations, function)


def _role_rows(roles: pl.DataFrame, function: str) -> pl.DataFrame:
    """``role_id``, ``practitioner_id``, ``organization_id``: one row per role id."""
    require_columns(
        roles, ["id", "practitioner_id", "organization_id"], frame_name="roles", function=function
    )
    return (
        roles.select(
            pl.col("id").alias("role_id"),
            reference_id("practitioner_id").alias("practitioner_id"),
            reference_id("organization_id").alias("organization_id"),
        )
        .filter(pl.col("role_id").is_not_null())
        .unique("role_id", keep="first", maintain_order=True)
    )


def appointment_practitioners(
    appointments: pl.DataFrame,
    participants: pl.DataFrame,
    roles: pl.DataFrame,
    practitioners: pl.DataFrame,
    organizations: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per appointment with its practitioner's name and clinic.

    appointment → practitioner participant (``actor_type`` ``PractitionerRole``, or
    ``Practitioner`` when a deployment names the person directly) → role →
    practitioner and clinic. An appointment with several practitioner participants
    takes the first (lowest ``index``); one without any, or whose role or
    practitioner is unknown, keeps its row with nulls.

    Parameters
    ----------
    appointments
        The ``Appointment`` table (``id``), or :func:`appointment_visits`.
    participants
        The ``appointment_participant`` child table (``appointment_id``,
        ``actor_id``, ``actor_type``, optionally ``index``).
    roles
        The ``PractitionerRole`` table (``id``, ``practitioner_id``, ``organization_id``).
    practitioners
        The ``Practitioner`` table or ``practitioner_name``.
    organizations
        Optional ``Organization`` table, for ``organization_name``.

    Returns
    -------
    pl.DataFrame
        ``appointment_id``, ``role_id``, ``practitioner_id``, ``practitioner_name``,
        ``organization_id`` (and ``organization_name``), in the order of ``appointments``.
    """
    function = "appointment_practitioners"
    require_columns(appointments, ["id"], frame_name="appointments", function=function)
    first = _first_practitioner(participants)
    by_role = _role_rows(roles, function)
    out = (
        _appointment_ids(appointments)
        .join(first, on="appointment_id", how="left", maintain_order="left")
        .join(by_role, on="role_id", how="left", maintain_order="left")
        .with_columns(pl.coalesce("practitioner_id", "_direct").alias("practitioner_id"))
        .drop("_direct")
        .join(practitioner_display_names(practitioners), on="practitioner_id", how="left")
    )
    columns = ["appointment_id", "role_id", "practitioner_id", "practitioner_name"]
    columns += ["organization_id", *(["organization_name"] if organizations is not None else [])]
    return _with_organization_names(out, organizations, function).select(columns)


def _appointment_ids(appointments: pl.DataFrame) -> pl.DataFrame:
    """``appointment_id``: one row per appointment id, in order."""
    return appointments.select(pl.col("id").alias("appointment_id")).unique(
        "appointment_id", keep="first", maintain_order=True
    )


def _first_practitioner(participants: pl.DataFrame) -> pl.DataFrame:
    """Per appointment, its first practitioner participant: ``role_id`` or ``_direct``."""
    require_columns(
        participants,
        ["appointment_id", "actor_id", "actor_type"],
        frame_name="participants",
        function="appointment_practitioners",
    )
    kind = pl.col("actor_type").fill_null("")
    order = [pl.col("index")] if "index" in participants.columns else []
    return (
        participants.with_row_index(_ORDER)
        .filter(kind.is_in(["PractitionerRole", "Practitioner"]))
        .sort([*order, pl.col(_ORDER)], nulls_last=True)
        .unique("appointment_id", keep="first", maintain_order=True)
        .select(
            pl.col("appointment_id"),
            pl.when(kind == "PractitionerRole")
            .then(reference_id("actor_id"))
            .otherwise(None)
            .alias("role_id"),
            pl.when(kind == "Practitioner")
            .then(reference_id("actor_id"))
            .otherwise(None)
            .alias("_direct"),
        )
    )


def service_names(
    appointments: pl.DataFrame,
    supporting_information: pl.DataFrame,
    services: pl.DataFrame,
) -> pl.DataFrame:
    """One row per appointment with the name of the HealthcareService it is for.

    An appointment's ``supportingInformation`` lists HealthcareService references; the
    first (lowest ``index``) is its service, as ``$book`` sets it, and
    ``service_count`` says how many it names, so a second one is not hidden. An
    appointment naming none, or a service missing from ``services``, keeps its row
    with a null name.

    Parameters
    ----------
    appointments, supporting_information, services
        The ``Appointment`` table (``id``), the ``appointment_supporting_information``
        child table (``appointment_id``, ``supporting_information_id``, optionally
        ``index``) and the ``HealthcareService`` table (``id``, ``name``).

    Returns
    -------
    pl.DataFrame
        ``appointment_id``, ``service_id``, ``service_name`` and ``service_count``.

    Examples
    --------
    >>> appts = pl.DataFrame({"id": ["A1", "A2"]})
    >>> info = pl.DataFrame({"appointment_id": ["A1"], "supporting_information_id": ["8001"]})
    >>> services = pl.DataFrame({"id": ["8001"], "name": ["Initial consultation"]})
    >>> service_names(appts, info, services).rows()
    [('A1', '8001', 'Initial consultation', 1), ('A2', None, None, 0)]
    """
    require_frames(
        "service_names",
        (appointments, "appointments", ["id"]),
        (supporting_information, "supporting_information", _SUPPORTING_COLUMNS),
        (services, "services", ["id", "name"]),
    )
    names = services.select(
        pl.col("id").alias("service_id"), pl.col("name").alias("service_name")
    ).unique("service_id", keep="first", maintain_order=True)
    first = _first_services(supporting_information)
    count = pl.col("service_count").fill_null(0).cast(pl.Int64)
    return (
        _appointment_ids(appointments)
        .join(first, on="appointment_id", how="left", maintain_order="left")
        .join(names, on="service_id", how="left", maintain_order="left")
        .select("appointment_id", "service_id", "service_name", count)
    )


def _first_services(supporting_information: pl.DataFrame) -> pl.DataFrame:
    """Per appointment, its first service reference (lowest ``index``) and how many it names."""
    order = [pl.col("index")] if "index" in supporting_information.columns else []
    return (
        supporting_information.with_row_index(_ORDER)
        .with_columns(reference_id("supporting_information_id").alias("service_id"))
        .filter(pl.col("service_id").is_not_null())
        .sort([*order, pl.col(_ORDER)], nulls_last=True)
        .group_by("appointment_id", maintain_order=True)
        .agg(pl.col("service_id").first(), pl.len().alias("service_count"))
    )


def appointments_per_practitioner_week(
    visits: pl.DataFrame,
    practitioners: pl.DataFrame,
    *,
    exclude_outcomes: Iterable[str] = ("cancelled",),
    fill_weeks: bool = False,
) -> pl.DataFrame:
    """Appointments per practitioner (by name) per week.

    A practitioner with roles at two clinics counts once: the count is per
    Practitioner, labelled with the name. Two practitioners who share a name keep
    apart (their ids are added to the label); an appointment with no known name is
    labelled with its practitioner or role id, else ``"(no practitioner)"``.

    Parameters
    ----------
    visits
        :func:`appointment_visits` (``id``, ``week``: the Monday of the local week,
        ``outcome``).
    practitioners
        :func:`appointment_practitioners` (``appointment_id``, ``role_id``,
        ``practitioner_id``, ``practitioner_name``).
    exclude_outcomes
        Outcomes left out (labels of :data:`ATTENDANCE_OUTCOMES`); cancelled
        appointments by default. Pass ``()`` to count every appointment.
    fill_weeks
        Add a row with 0 for every practitioner and every week between the first
        and the last week of the data, so a week without appointments shows.

    Returns
    -------
    pl.DataFrame
        ``practitioner`` (label), ``practitioner_id``, ``week`` (Date, Monday),
        ``iso_week`` (``"2026-W05"``) and ``appointments``, sorted by practitioner
        and week.
    """
    excluded = list(exclude_outcomes)
    require_frames(
        "appointments_per_practitioner_week",
        (visits, "visits", ["id", "week", *(["outcome"] if excluded else [])]),
        (practitioners, "practitioners", _APPOINTMENT_PRACTITIONER_COLUMNS),
    )
    base = _practitioner_visits(visits, practitioners, excluded)
    labels = _practitioner_labels(base)
    counts = base.group_by("practitioner_id", "week").agg(pl.len().alias("appointments"))
    if fill_weeks and counts.height:
        counts = _every_week(counts, labels)
    return _labelled_weeks(counts, labels)


def _practitioner_visits(
    visits: pl.DataFrame, practitioners: pl.DataFrame, excluded: list[str]
) -> pl.DataFrame:
    """``id``, ``week``, ``practitioner_id`` (else the role id), ``practitioner_name``."""
    who = practitioners.select(
        pl.col("appointment_id").alias("id"),
        pl.coalesce("practitioner_id", "role_id").alias("practitioner_id"),
        "practitioner_name",
    ).unique("id", keep="first", maintain_order=True)
    kept = visits if not excluded else visits.filter(~pl.col("outcome").is_in(excluded))
    return kept.select("id", "week").join(who, on="id", how="left")


def _labelled_weeks(counts: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """The weekly counts with their practitioner's label and ISO week, sorted."""
    return (
        counts.join(labels, on="practitioner_id", how="left", nulls_equal=True)
        .select(
            "practitioner",
            "practitioner_id",
            "week",
            pl.col("week").dt.strftime("%G-W%V").alias("iso_week"),
            pl.col("appointments").cast(pl.Int64),
        )
        .sort(["practitioner", "week"])
    )


def _practitioner_labels(base: pl.DataFrame) -> pl.DataFrame:
    """One label per practitioner id: its name, else its id; a shared name gets the id added."""
    return (
        base.group_by("practitioner_id")
        .agg(pl.col("practitioner_name").drop_nulls().first())
        .with_columns(
            pl.coalesce("practitioner_name", "practitioner_id", pl.lit("(no practitioner)")).alias(
                "practitioner"
            )
        )
        .with_columns(
            pl.when(pl.len().over("practitioner") > 1)
            .then(pl.format("{} ({})", "practitioner", "practitioner_id"))
            .otherwise(pl.col("practitioner"))
            .alias("practitioner")
        )
        .select("practitioner_id", "practitioner")
    )


def _every_week(counts: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """``counts`` with a 0 row for each practitioner and week between the first and last."""
    first, last = counts["week"].min(), counts["week"].max()
    weeks = pl.DataFrame(
        {"week": pl.date_range(first, last, interval="1w", eager=True)}  # type: ignore[arg-type]
    )
    grid = labels.select("practitioner_id").join(weeks, how="cross")
    return grid.join(
        counts, on=["practitioner_id", "week"], how="left", nulls_equal=True
    ).with_columns(pl.col("appointments").fill_null(0))


def referral_types(referrals: pl.DataFrame, definitions: pl.DataFrame) -> pl.DataFrame:
    """Each referral with its ReferralDefinition (the referral type), joined by name.

    ``Referral.referralDefinition`` is the type's *name* (the spec's string, or the
    ``display`` of the live service's Reference). It is matched to
    ``ReferralDefinition.name`` (surrounding spaces ignored); a value that is a
    reference with no display (``ReferralDefinition/501``) is matched by id. Where two
    definitions share a name, an active one wins, then the first. A referral whose
    type is unknown keeps its row with null ``definition_*`` columns.

    Parameters
    ----------
    referrals
        The ``Referral`` table (``id``, ``referral_definition``), or any frame built on it.
    definitions
        The ``ReferralDefinition`` table (``id``, ``name``; ``active``, ``funder_id``,
        ``limit_quantity``, ``limit_money_value``, ``limit_money_currency`` carried
        when present).

    Returns
    -------
    pl.DataFrame
        ``referrals`` plus ``definition_id`` and ``definition_<column>`` for each
        carried column, in the order of ``referrals``.

    Examples
    --------
    >>> refs = pl.DataFrame({"id": ["R1", "R2"], "referral_definition": ["NDIS", "Other"]})
    >>> defs = pl.DataFrame({"id": ["504"], "name": ["NDIS"], "limit_quantity": [20]})
    >>> referral_types(refs, defs).select("id", "definition_id", "definition_limit_quantity").rows()
    [('R1', '504', 20), ('R2', None, None)]
    """
    require_frames(
        "referral_types",
        (referrals, "referrals", ["id", "referral_definition"]),
        (definitions, "definitions", ["id", "name"]),
    )
    by_name, by_id = _definition_lookups(definitions)
    text = pl.col("referral_definition").cast(pl.String).str.strip_chars()
    keyed = referrals.with_columns(
        text.alias("_name"),
        pl.when(text.str.contains("/")).then(reference_id(text)).otherwise(None).alias("_ref"),
    )
    named = keyed.join(by_name, on="_name", how="left", maintain_order="left")
    return _matched_by_id(named, by_id)


def _matched_by_id(named: pl.DataFrame, by_id: pl.DataFrame) -> pl.DataFrame:
    """Fill the ``definition_*`` columns a name left null from the ``_ref`` id, if any."""
    added = by_id.columns
    fallback = named.join(
        by_id.rename({c: f"_byid_{c}" for c in added}),
        left_on="_ref",
        right_on="_byid_definition_id",
        how="left",
        maintain_order="left",
        coalesce=False,
    )
    return fallback.with_columns(pl.coalesce(c, f"_byid_{c}").alias(c) for c in added).drop(
        "_name", "_ref", *(f"_byid_{c}" for c in added)
    )


_CARRIED_DEFINITION_COLUMNS = (
    "active",
    "funder_id",
    "limit_quantity",
    "limit_money_value",
    "limit_money_currency",
)


def _definition_lookups(definitions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The definitions keyed by stripped ``_name`` (active first) and by ``definition_id``."""
    carried = [c for c in _CARRIED_DEFINITION_COLUMNS if c in definitions.columns]
    # an inactive definition ranks after an active one of the same name
    inactive = (
        ~pl.col("active").fill_null(False) if "active" in definitions.columns else pl.lit(False)
    )
    table = definitions.with_row_index(_ORDER).select(
        pl.col(_ORDER),
        inactive.alias(_RANK),
        pl.col("id").alias("definition_id"),
        *(pl.col(c).alias(f"definition_{c}") for c in carried),
        pl.col("name").str.strip_chars().alias("_name"),
    )
    by_name = (
        table.sort([_RANK, _ORDER])
        .unique("_name", keep="first", maintain_order=True)
        .drop(_ORDER, _RANK)
    )
    by_id = table.unique("definition_id", keep="first", maintain_order=True).drop(
        _ORDER, _RANK, "_name"
    )
    return by_name, by_id


def fee_names(invoice_lines: pl.DataFrame, charge_items: pl.DataFrame) -> pl.DataFrame:
    """Each invoice line with the fee it charges: its ChargeItemDefinition's title and code.

    ``InvoiceLine.definition`` is a canonical URL (``/main/ChargeItemDefinition/9001``,
    possibly with a ``|version``); its last path segment is the definition's id. A
    line whose definition is missing from ``charge_items`` keeps its row with nulls.

    Parameters
    ----------
    invoice_lines
        The ``InvoiceLine`` table (``id``, ``definition``).
    charge_items
        The ``ChargeItemDefinition`` table (``id``, ``title``; ``code`` when present).

    Returns
    -------
    pl.DataFrame
        ``invoice_line_id``, ``fee_id``, ``fee`` (the title) and ``fee_code``.

    Examples
    --------
    >>> lines = pl.DataFrame({"id": ["L1"], "definition": ["/main/ChargeItemDefinition/9001|2"]})
    >>> fees = pl.DataFrame({"id": ["9001"], "title": ["Initial consultation"], "code": ["10968"]})
    >>> fee_names(lines, fees).row(0)
    ('L1', '9001', 'Initial consultation', '10968')
    """
    function = "fee_names"
    require_columns(
        invoice_lines, ["id", "definition"], frame_name="invoice_lines", function=function
    )
    require_columns(charge_items, ["id", "title"], frame_name="charge_items", function=function)
    code = pl.col("code") if "code" in charge_items.columns else pl.lit(None, pl.String)
    fees = charge_items.select(
        pl.col("id").alias("fee_id"), pl.col("title").alias("fee"), code.alias("fee_code")
    ).unique("fee_id", keep="first", maintain_order=True)
    canonical = pl.col("definition").cast(pl.String).str.split("|").list.first()
    return invoice_lines.select(
        pl.col("id").alias("invoice_line_id"), reference_id(canonical).alias("fee_id")
    ).join(fees, on="fee_id", how="left", maintain_order="left")


__all__: Sequence[str] = (
    "appointment_practitioners",
    "appointments_per_practitioner_week",
    "fee_names",
    "practitioner_display_names",
    "practitioner_names",
    "referral_types",
    "require_columns",
    "service_names",
)
