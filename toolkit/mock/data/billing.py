"""Invoices and invoice lines: what the past appointments were billed, built into records when read.

Every attended appointment gets an invoice with a consultation line (priced
from :data:`~toolkit.mock.data.services.SERVICES`, sometimes with a surcharge
or discount) and now and then a product line; half the no-shows get a
non-attendance fee. A line is funded by the coverage of the referral its
appointment drew on, else often by one of the patient's funders, else paid
privately. Like appointments, both are columns until read.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from toolkit import catalogue
from toolkit.mock.data.appointments import APPOINTMENT_BASE, ATTENDED, NOSHOW, Appointments
from toolkit.mock.data.base import (
    ANCHOR,
    CURRENCY,
    codes,
    extension,
    iso,
    iso_date,
    link,
    meta,
    mix,
)
from toolkit.mock.data.coverage import Cover
from toolkit.mock.data.services import CHARGE_ITEM_BASE, NOSHOW_FEE, PRODUCTS, SERVICES
from toolkit.mock.store import Record

__all__ = [
    "INVOICE_BASE",
    "LINE_BASE",
    "Billing",
    "InvoiceBuilder",
    "LineBuilder",
    "bill",
]

INVOICE_BASE = 20_000_001
"""Id of the first Invoice."""
LINE_BASE = 30_000_001
"""Id of the first InvoiceLine."""
ISSUED, ACTIVE, WRITTEN_OFF = codes("Invoice", "status", "issued", "active", "write-off")
LOCKED, VOIDED, LINE_WRITTEN_OFF = codes("InvoiceLine", "status", "locked", "voided", "write-off")
SERVICE, PRODUCT = codes("InvoiceLine", "resource.type", "service", "product")
BASE, SURCHARGE, DISCOUNT, TAX = codes(
    "InvoiceLine", "unitPriceComponent.type", "base", "surcharge", "discount", "tax"
)
FUNDER = extension("InvoiceLine", "invoice-line-funder")
FUNDER_LINK = link("InvoiceLine", "invoice-line-funder")
SUBJECT = link("InvoiceLine", "subject")
CONTEXT = link("InvoiceLine", "context")
PERFORMER = link("InvoiceLine", "performer")
INVOICE = link("InvoiceLine", "invoice")
INVOICE_SUBJECT = link("Invoice", "subject")
TO_PATIENT = link("Invoice", "recipient", "Patient")
TO_FUNDER = link("Invoice", "recipient", "Organization")
CONSULT, PRODUCT_0, PRODUCT_1, NOSHOW_LINE = range(4)
"""Kinds of invoice line."""


@dataclass(slots=True)
class Billing:
    """Invoices and lines as columns, linked to the appointments they bill."""

    seed: int
    appts: Appointments
    invoice_of: list[int]
    """Per appointment, its invoice index (-1 for none)."""
    invoice_appt: list[int] = field(default_factory=list)
    """Per invoice, its appointment index."""
    line_appt: list[int] = field(default_factory=list)
    """Per line, its appointment index."""
    kind: list[int] = field(default_factory=list)
    """Per line, its kind (:data:`CONSULT`, a product, :data:`NOSHOW_LINE`)."""
    lines_of: dict[int, list[int]] = field(default_factory=dict)
    """Per appointment index, its line indices."""

    def components(self, li: int) -> list[tuple[str, float]]:
        """The ``unitPriceComponent`` (type, amount) pairs of line ``li``."""
        kind = self.kind[li]
        if kind == CONSULT:
            price = SERVICES[self.appts.service[self.line_appt[li]]][3]
            comps = [(BASE, price)]
            h = mix(self.seed, li, 7) % 100
            if h < 12:
                comps.append((SURCHARGE, 15.0))
            elif h < 22:
                comps.append((DISCOUNT, -10.0))
            return comps
        if kind in (PRODUCT_0, PRODUCT_1):
            price = PRODUCTS[kind - 1][2]
            return [(BASE, price), (TAX, round(price * 0.1, 2))]
        return [(BASE, NOSHOW_FEE[2])]

    def invoice_day(self, k: int) -> int:
        """Midnight (UTC) of the day invoice ``k`` is dated: its appointment's end, on
        the clinic's calendar."""
        i = self.invoice_appt[k]
        end = self.appts.start[i] + self.appts.minutes[i] * 60
        return self.appts.local_day(i, end)

    def entered(self, li: int) -> int:
        """When line ``li`` was entered: five minutes after its appointment ended."""
        i = self.line_appt[li]
        return self.appts.start[i] + self.appts.minutes[i] * 60 + 300


def _kinds(rand: random.Random, status: int) -> list[int]:
    """The lines an appointment of ``status`` is billed."""
    if status == ATTENDED:
        kinds = [CONSULT]
        if rand.random() < 0.12:
            kinds.append(PRODUCT_0 if rand.random() < 0.6 else PRODUCT_1)
        return kinds
    if status == NOSHOW and rand.random() < 0.5:
        return [NOSHOW_LINE]
    return []


def bill(rng: random.Random, seed: int, appts: Appointments) -> Billing:
    """Invoice every appointment that is billed (in appointment order)."""
    out = Billing(seed, appts, [-1] * len(appts.start))
    for i, status in enumerate(appts.status):
        kinds = _kinds(rng, status)
        if kinds:
            out.invoice_of[i] = len(out.invoice_appt)
            out.invoice_appt.append(i)
            for k in kinds:
                out.line_appt.append(i)
                out.kind.append(k)
    for li, ai in enumerate(out.line_appt):
        out.lines_of.setdefault(ai, []).append(li)
    return out


@dataclass(frozen=True, slots=True)
class InvoiceBuilder:
    """Builds invoice ``k``'s record (the collection's lazy builder).

    Its totals are the sums of its lines' price components; its recipient is the
    funder of its first line, else the patient (who pays privately).
    """

    billing: Billing
    patient_ids: list[str]
    funder_of: Callable[[int], str | None]
    """The funder of invoice line ``li`` (:meth:`LineBuilder.funder`)."""

    def __call__(self, k: int) -> Record:
        b = self.billing
        i = b.invoice_appt[k]
        lines = b.lines_of.get(i, [])
        total = round(sum(v for li in lines for _t, v in b.components(li)), 2)
        h = mix(b.seed, k, 2) % 100
        status = ISSUED if h < 85 else ACTIVE if h < 97 else WRITTEN_OFF
        paid = total if status == ISSUED and h < 75 else 0.0
        patient = self.patient_ids[b.appts.patient[i]]
        funder = self.funder_of(lines[0]) if lines else None
        return {
            "resourceType": "Invoice",
            "id": str(INVOICE_BASE + k),
            "meta": meta(b.appts.updated(i)),
            "status": status,
            "subject": INVOICE_SUBJECT(patient),
            "recipient": TO_FUNDER(funder) if funder else TO_PATIENT(patient),
            "date": iso_date(b.invoice_day(k)),
            "totalNet": {"value": total, "currency": CURRENCY},
            "totalGross": {"value": total, "currency": CURRENCY},
            "totalBalance": {"value": round(total - paid, 2), "currency": CURRENCY},
            "totalPaid": {"value": paid, "currency": CURRENCY},
        }


@dataclass(frozen=True, slots=True)
class LineBuilder:
    """Builds invoice line ``li``'s record (the collection's lazy builder)."""

    billing: Billing
    patient_ids: list[str]
    roles: list[str]
    referral_of: list[int]
    """Per appointment, the index of the referral it drew on (-1 for none)."""
    referral_records: list[Record]
    patient_cover: list[list[Cover]]
    funder_ids: list[str]

    def funder(self, li: int) -> str | None:
        """The funder a line is linked to; None when the patient pays privately."""
        i = self.billing.line_appt[li]
        k = self.referral_of[i]
        covers = self.patient_cover[self.billing.appts.patient[i]]
        if k >= 0:
            cov_id = self.referral_records[k]["coverage"]["reference"].rsplit("/", 1)[1]
            for c, f in covers:
                if c == cov_id:
                    return self.funder_ids[f]
        h = mix(self.billing.seed, li, 3) % 10
        private = [f for _c, f in covers if f >= 3]
        if private and h < 6:
            return self.funder_ids[private[0]]
        if h < 7:
            return self.funder_ids[covers[0][1]]
        return None  # paid privately by the patient

    def _item(self, li: int) -> tuple[str, str, str, str]:
        """The line's name, fee code, ChargeItemDefinition id and resource type."""
        kind = self.billing.kind[li]
        if kind == CONSULT:
            service = self.billing.appts.service[self.billing.line_appt[li]]
            name, _m, code, _price = SERVICES[service]
            return name, code, str(CHARGE_ITEM_BASE + service), SERVICE
        if kind in (PRODUCT_0, PRODUCT_1):
            name, code, _price = PRODUCTS[kind - 1]
            return name, code, str(CHARGE_ITEM_BASE + len(SERVICES) + kind - 1), PRODUCT
        name, code, _price = NOSHOW_FEE
        return name, code, str(CHARGE_ITEM_BASE + len(SERVICES) + len(PRODUCTS)), SERVICE

    def __call__(self, li: int) -> Record:
        b = self.billing
        i = b.line_appt[li]
        name, code, definition, res_type = self._item(li)
        h = mix(b.seed, li, 4) % 100
        status = None if h < 88 else LOCKED if h < 95 else VOIDED if h < 98 else LINE_WRITTEN_OFF
        entered = b.entered(li)
        rec: Record = {
            "resourceType": "InvoiceLine",
            "id": str(LINE_BASE + li),
            "meta": meta(min(entered + 600, ANCHOR - 60)),
            "resource": {"type": res_type, "display": name},
            "description": name,
            "definition": f"{catalogue.API_PREFIX}/ChargeItemDefinition/{definition}",
            "status": status,
            "code": code,
            "subject": SUBJECT(self.patient_ids[b.appts.patient[i]]),
            "context": CONTEXT(str(APPOINTMENT_BASE + i)),
            "enteredDate": iso(entered),
            "performer": PERFORMER(self.roles[b.appts.role[i]]),
            "invoice": INVOICE(str(INVOICE_BASE + b.invoice_of[i])),
            "quantity": 1,
            "unitPriceComponent": [
                {"type": t, "amount": {"value": v, "currency": CURRENCY}}
                for t, v in b.components(li)
            ],
        }
        funder = self.funder(li)
        if funder is not None:
            rec["extension"] = [{"url": FUNDER[0], FUNDER[1]: FUNDER_LINK(funder)}]
        if h % 7 == 3:
            del rec["resource"]
        return rec
