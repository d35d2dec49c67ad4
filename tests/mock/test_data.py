"""The synthetic practice: deterministic per seed, realistic and internally consistent."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache

import orjson

from toolkit import catalogue
from toolkit.mock.data import ANCHOR, PracticeData, generate
from toolkit.mock.store import Record


@cache
def small() -> PracticeData:
    return generate(0, "small")


def records(data: PracticeData, rtype: str) -> list[Record]:
    coll = data.store[rtype]
    return [coll.record(i) for i in range(len(coll))]


def test_same_seed_gives_byte_identical_data() -> None:
    again = generate(0, "small")
    for rtype in ("Appointment", "Referral", "InvoiceLine", "Patient"):
        a, b = small().store[rtype], again.store[rtype]
        assert [a.raw(i) for i in range(len(a))] == [b.raw(i) for i in range(len(b))]


def test_another_seed_gives_other_data() -> None:
    other = generate(1, "small")
    assert small().store["Patient"].raw(0) != other.store["Patient"].raw(0)


def test_small_scale_has_about_2000_appointments() -> None:
    assert 1700 <= len(small().store["Appointment"]) <= 2300


def test_ids_carry_the_catalogue_prefixes() -> None:
    prefixes = Counter(r["id"][:3] for r in records(small(), "Organization"))
    assert set(prefixes) == {"PG-", "CL-", "FD-", "OG-", "SP-"} and prefixes["PG-"] == 1
    assert {r["id"][:3] for r in records(small(), "Practitioner")} == {"PR-", "EP-"}


def test_clinics_are_part_of_the_practice_group() -> None:
    clinics = [r for r in records(small(), "Organization") if r["id"].startswith("CL-")]
    assert clinics and all(
        c["partOf"]["reference"] == "/main/Organization/PG-1000" for c in clinics
    )


def test_funders_include_medicare_dva_ndis_and_private_insurers() -> None:
    names = {r["name"] for r in records(small(), "Organization") if r["id"].startswith("FD-")}
    assert "Medicare" in names and "Bupa" in names
    assert any("DVA" in n for n in names) and any("NDIS" in n for n in names)


def test_patient_names_include_non_ascii() -> None:
    text = orjson.dumps(records(small(), "Patient")).decode()
    assert all(name in text for name in ("Zoë", "Nguyễn", "Søren", "José"))


def test_past_appointment_outcomes_have_plausible_rates() -> None:
    codes = Counter()
    for appt in records(small(), "Appointment"):
        if appt["start"] < "2026-11-01":
            patient = appt["participant"][1]
            codes[patient["modifierExtension"][0]["valueCoding"]["code"]] += 1
    total = sum(codes.values())
    assert 0.74 < codes["attended"] / total < 0.88
    assert 0.06 < codes["cancelled"] / total < 0.16
    assert 0.02 < codes["noshow"] / total < 0.09


def test_future_appointments_are_booked_or_confirmed() -> None:
    future = [a for a in records(small(), "Appointment") if a["start"] >= "2026-11-01"]
    codes = {a["participant"][1]["modifierExtension"][0]["valueCoding"]["code"] for a in future}
    assert future and codes <= {"booked", "confirmed", "cancelled"}
    assert max(a["start"] for a in future) < "2027-01-02"


def test_nothing_generated_is_updated_after_the_anchor() -> None:
    for rtype in ("Appointment", "Referral", "Coverage", "InvoiceLine"):
        assert max(small().store[rtype].updated) < ANCHOR


def test_referral_usage_never_exceeds_its_quantity_and_is_used() -> None:
    refs = records(small(), "Referral")
    for r in refs:
        q = r["limitQuantity"]
        # the live form (the default): a Quantity {"value": n} (facts)
        assert q["quantityUsed"] + q["quantityOffset"] <= q["quantity"]["value"]
    assert sum(r["limitQuantity"]["quantityUsed"] for r in refs) > 0


def test_referral_quantity_used_is_backed_by_matching_appointments() -> None:
    appts = records(small(), "Appointment")
    for r in records(small(), "Referral"):
        patient = r["subject"]["reference"]
        role = r["performer"]["reference"].replace("Practitioner", "PractitionerRole")
        matching = [
            a
            for a in appts
            if a["participant"][1]["actor"]["reference"] == patient
            and a["participant"][0]["actor"]["reference"] == role
            and r["period"]["start"] <= a["start"][:10] < "2026-11-01"
        ]
        assert r["limitQuantity"]["quantityUsed"] <= len(matching)


def test_money_referrals_spend_matches_their_patients_invoice_lines() -> None:
    lines = records(small(), "InvoiceLine")
    for r in records(small(), "Referral"):
        if "limitMoney" not in r:
            continue
        patient_total = sum(
            c["amount"]["value"]
            for line in lines
            if line["subject"] == r["subject"]
            for c in line["unitPriceComponent"]
        )
        assert 0 <= r["limitMoney"]["amountUsed"] <= patient_total + 1e-6
        if r["limitQuantity"]["quantityUsed"] == 0:
            assert r["limitMoney"]["amountUsed"] == 0


def test_invoice_lines_link_appointment_patient_practitioner_funder_and_invoice() -> None:
    lines = records(small(), "InvoiceLine")
    assert all(
        line["performer"]["reference"].startswith("/main/Practitioner/PR-") for line in lines
    )
    funded = [line for line in lines if "extension" in line]
    assert len(funded) > len(lines) / 2
    assert all(
        line["extension"][0]["valueReference"]["reference"].startswith("/main/Organization/FD-")
        for line in funded
    )


def test_every_reference_in_the_store_resolves() -> None:
    store = small().store
    text = b"".join(store[t].raw(i) for t in store.collections for i in range(len(store[t])))
    targets = set(re.findall(rb'"/main/([A-Za-z]+/[A-Za-z0-9.\-]+)"', text))
    assert targets
    assert all(store.resolves("/main/" + t.decode()) for t in targets)


def test_phones_countries_and_currencies_follow_the_formats() -> None:
    phone = re.compile(catalogue.format_pattern("phone"))
    for rtype in ("Organization", "Patient", "Practitioner"):
        for r in records(small(), rtype):
            for t in r.get("telecom", []):
                if t["system"] != "email":
                    assert phone.match(t["value"]), t
            for a in r.get("address", []):
                assert a["country"] in catalogue.country_codes()
    for line in records(small(), "InvoiceLine"):
        for c in line["unitPriceComponent"]:
            assert c["amount"]["currency"] in catalogue.currency_codes()


def test_some_optional_fields_are_absent_on_some_records() -> None:
    appts = records(small(), "Appointment")
    assert 0 < sum("description" in a for a in appts) < len(appts)
    patients = records(small(), "Patient")
    assert 0 < sum("address" in p for p in patients) < len(patients)
