"""Analysis logic shared by the notebooks, as Polars expressions over pmtk frames.

Every function takes eager :class:`polars.DataFrame` objects shaped like the flat
views of :mod:`toolkit.views` (``client.frame(...)`` / ``client.frames(...)``) and
returns a new frame; nothing here talks to a deployment, so each function can be
tested on a few hand-made rows.

The questions answered, by notebook:

* Referral utilisation -- :func:`referral_utilisation`, :func:`referral_recount`,
  :func:`referrals_needing_attention`, :func:`referring_practice`,
  :func:`referral_funder`, :func:`utilisation_summary`.
* Appointments and attendance -- :func:`appointment_visits`, :func:`weekly_volume`,
  :func:`attendance_rates`, :func:`lead_time_summary`, :func:`slot_utilisation`.
* Revenue -- :data:`PRICE_COMPONENT_SIGNS`, :func:`line_values`, :func:`revenue_by`,
  :func:`appointments_without_invoice_line`.
* Names for ids and invoice totals -- :func:`practitioner_names`,
  :func:`practitioner_display_names`, :func:`appointment_practitioners`,
  :func:`service_names`, :func:`appointments_per_practitioner_week`,
  :func:`referral_types`, :func:`fee_names`, :func:`invoice_reconciliation`
  (each checks its input columns first: :class:`~toolkit.errors.MissingColumnError`).
* Conformance -- :func:`report_checks`, :func:`report_summary`,
  :func:`report_observations`, :func:`compare_reports`.

Sign convention for invoice line price components (see :data:`PRICE_COMPONENT_SIGNS`):
``base``, ``surcharge`` and ``tax`` add to the billed value, ``deduction`` and
``discount`` reduce it, ``informational`` is not counted. The *magnitude* of the
amount is used, so a deployment that sends deductions as negative numbers and one
that sends them as positive numbers give the same net value.
"""

from __future__ import annotations

from toolkit.analysis.activity import (
    attendance_rates as attendance_rates,
)
from toolkit.analysis.activity import (
    lead_time_summary as lead_time_summary,
)
from toolkit.analysis.activity import (
    outcomes_by_slot as outcomes_by_slot,
)
from toolkit.analysis.activity import (
    slot_utilisation as slot_utilisation,
)
from toolkit.analysis.activity import (
    utilisation_summary as utilisation_summary,
)
from toolkit.analysis.activity import (
    weekly_volume as weekly_volume,
)
from toolkit.analysis.clock import (
    AU_STATE_ZONES as AU_STATE_ZONES,
)
from toolkit.analysis.clock import (
    COUNTRY_ZONES as COUNTRY_ZONES,
)
from toolkit.analysis.clock import (
    FINANCIAL_YEAR_STARTS as FINANCIAL_YEAR_STARTS,
)
from toolkit.analysis.clock import (
    PM_TIMEZONE as PM_TIMEZONE,
)
from toolkit.analysis.clock import (
    PracticeClock as PracticeClock,
)
from toolkit.analysis.clock import (
    check_zone as check_zone,
)
from toolkit.analysis.clock import (
    financial_year as financial_year,
)
from toolkit.analysis.clock import (
    financial_year_start as financial_year_start,
)
from toolkit.analysis.clock import (
    local_times as local_times,
)
from toolkit.analysis.clock import (
    organization_zones as organization_zones,
)
from toolkit.analysis.clock import (
    override_zone as override_zone,
)
from toolkit.analysis.clock import (
    practice_clock as practice_clock,
)
from toolkit.analysis.clock import (
    practice_country as practice_country,
)
from toolkit.analysis.clock import (
    practice_zone as practice_zone,
)
from toolkit.analysis.clock import (
    role_zones as role_zones,
)
from toolkit.analysis.clock import (
    zone_for_address as zone_for_address,
)
from toolkit.analysis.clock import (
    zone_label as zone_label,
)
from toolkit.analysis.joins import (
    appointment_practitioners as appointment_practitioners,
)
from toolkit.analysis.joins import (
    appointments_per_practitioner_week as appointments_per_practitioner_week,
)
from toolkit.analysis.joins import (
    fee_names as fee_names,
)
from toolkit.analysis.joins import (
    patient_display_names as patient_display_names,
)
from toolkit.analysis.joins import (
    practitioner_display_names as practitioner_display_names,
)
from toolkit.analysis.joins import (
    practitioner_names as practitioner_names,
)
from toolkit.analysis.joins import (
    referral_types as referral_types,
)
from toolkit.analysis.joins import (
    require_columns as require_columns,
)
from toolkit.analysis.joins import (
    service_names as service_names,
)
from toolkit.analysis.money import (
    currencies as currencies,
)
from toolkit.analysis.money import (
    money_share as money_share,
)
from toolkit.analysis.money import (
    quantity_share as quantity_share,
)
from toolkit.analysis.money import (
    single_currency as single_currency,
)
from toolkit.analysis.referrals import (
    appointment_visits as appointment_visits,
)
from toolkit.analysis.referrals import (
    referral_funder as referral_funder,
)
from toolkit.analysis.referrals import (
    referral_recount as referral_recount,
)
from toolkit.analysis.referrals import (
    referral_utilisation as referral_utilisation,
)
from toolkit.analysis.referrals import (
    referrals_needing_attention as referrals_needing_attention,
)
from toolkit.analysis.referrals import (
    referring_practice as referring_practice,
)
from toolkit.analysis.reports import (
    compare_reports as compare_reports,
)
from toolkit.analysis.reports import (
    report_checks as report_checks,
)
from toolkit.analysis.reports import (
    report_observations as report_observations,
)
from toolkit.analysis.reports import (
    report_summary as report_summary,
)
from toolkit.analysis.revenue import (
    appointments_without_invoice_line as appointments_without_invoice_line,
)
from toolkit.analysis.revenue import (
    invoice_reconciliation as invoice_reconciliation,
)
from toolkit.analysis.revenue import (
    line_values as line_values,
)
from toolkit.analysis.revenue import (
    revenue_by as revenue_by,
)
from toolkit.analysis.revenue import (
    revenue_total as revenue_total,
)
from toolkit.analysis.tables import (
    ATTENDANCE_OUTCOMES as ATTENDANCE_OUTCOMES,
)
from toolkit.analysis.tables import (
    PRICE_COMPONENT_SIGNS as PRICE_COMPONENT_SIGNS,
)
from toolkit.analysis.tables import (
    RecordReader as RecordReader,
)
from toolkit.analysis.tables import (
    data_as_of as data_as_of,
)
from toolkit.analysis.tables import (
    read_roles as read_roles,
)
from toolkit.analysis.tables import (
    reference_id as reference_id,
)
from toolkit.analysis.tables import (
    role_organizations as role_organizations,
)
from toolkit.analysis.tables import (
    roles_among as roles_among,
)
from toolkit.analysis.tables import (
    row_counts as row_counts,
)
from toolkit.analysis.tables import (
    shown_of as shown_of,
)
from toolkit.analysis.tables import (
    top_n as top_n,
)

__all__ = [
    "ATTENDANCE_OUTCOMES",
    "AU_STATE_ZONES",
    "COUNTRY_ZONES",
    "FINANCIAL_YEAR_STARTS",
    "PM_TIMEZONE",
    "PRICE_COMPONENT_SIGNS",
    "PracticeClock",
    "RecordReader",
    "appointment_practitioners",
    "appointment_visits",
    "appointments_per_practitioner_week",
    "appointments_without_invoice_line",
    "attendance_rates",
    "check_zone",
    "compare_reports",
    "currencies",
    "data_as_of",
    "fee_names",
    "financial_year",
    "financial_year_start",
    "invoice_reconciliation",
    "lead_time_summary",
    "line_values",
    "local_times",
    "money_share",
    "organization_zones",
    "outcomes_by_slot",
    "override_zone",
    "patient_display_names",
    "practice_clock",
    "practice_country",
    "practice_zone",
    "practitioner_display_names",
    "practitioner_names",
    "quantity_share",
    "read_roles",
    "reference_id",
    "referral_funder",
    "referral_recount",
    "referral_types",
    "referral_utilisation",
    "referrals_needing_attention",
    "referring_practice",
    "report_checks",
    "report_observations",
    "report_summary",
    "require_columns",
    "revenue_by",
    "revenue_total",
    "role_organizations",
    "role_zones",
    "roles_among",
    "row_counts",
    "service_names",
    "shown_of",
    "single_currency",
    "slot_utilisation",
    "top_n",
    "utilisation_summary",
    "weekly_volume",
    "zone_for_address",
    "zone_label",
]
