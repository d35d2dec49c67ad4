"""Rule sources: only the spec's rules fail a frame; the others are observations."""

from __future__ import annotations

import warnings
from typing import Any

import polars as pl
import pytest

from toolkit.errors import DataValidationError
from toolkit.rule_sources import (
    catalogue_rules,
    frame_checks,
    frame_rule_rows,
    non_spec_model,
    rules_markdown,
)
from toolkit.rules import non_spec_rules as catalogue_non_spec_rules
from toolkit.schemas import PmtkDataWarning, validate
from toolkit.views import VIEWS, flatten


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "entry": [{"resource": r} for r in resources]}


def test_the_frames_rules_are_the_frame_view_of_the_one_rule_model() -> None:
    # The pinned list is the model's (tests/rules/test_rule_sources.py); this view is
    # every frame check of it, each once, in view order, as docs/views.md lists them.
    model_checks = [c for r in non_spec_model() for c in r.checks]
    assert frame_rule_rows() == frame_checks()
    assert sorted(frame_rule_rows()) == sorted(model_checks)
    assert len(set(model_checks)) == len(model_checks)
    assert rules_markdown().count("\n") == len(model_checks) + 2
    # Every date column's precision check is pmtk's reading (issue 24): an observation.
    precision = {(c.table, c.column) for c in model_checks if c.check == "full_precision"}
    assert precision == {
        (v.name, c.name)
        for views in VIEWS.values()
        for v in views
        for c in v.columns
        if c.role == "precision"
    }
    assert {c.source for c in model_checks if c.check == "full_precision"} == {"pmtk"}


def test_a_facts_enum_violation_warns_and_never_raises() -> None:
    # Coverage status values come from the facts; the spec says "not shown".
    coverages = [
        {"resourceType": "Coverage", "id": "C1", "status": "suspended"},
        {"resourceType": "Coverage", "id": "C2", "status": "active"},
    ]
    df = flatten("Coverage", [bundle(*coverages)])
    with pytest.warns(PmtkDataWarning, match="not the spec") as caught:
        assert validate(df, "Coverage", errors="raise") is df
    cases = caught[0].message.failure_cases  # type: ignore[union-attr]
    assert cases.select("id", "column", "failure_case").rows() == [("C1", "status", "suspended")]


def test_a_pmtk_enum_violation_warns_and_a_spec_one_raises_beside_it() -> None:
    line = {
        "resourceType": "InvoiceLine",
        "id": "L1",
        "resource": {"type": "bundle"},  # pmtk's own reading of a "not shown" item
        "status": "paid",  # the spec's enum
    }
    df = flatten("InvoiceLine", [bundle(line)])
    with (
        pytest.warns(PmtkDataWarning, match="resource_type"),
        pytest.raises(DataValidationError) as info,
    ):
        validate(df, "InvoiceLine")
    cases = info.value.failure_cases
    assert cases.select("id", "column", "failure_case").rows() == [("L1", "status", "paid")]


def test_a_wrong_json_type_in_a_facts_field_is_an_observation() -> None:
    patient = {"resourceType": "Patient", "id": "P1", "gender": 1}
    df = flatten("Patient", [bundle(patient)])
    assert df.get_column("gender").to_list() == [None]
    with pytest.warns(PmtkDataWarning) as caught:
        validate(df, "Patient")
    cases = caught[0].message.failure_cases  # type: ignore[union-attr]
    assert cases.select("id", "column", "check", "failure_case").rows() == [
        ("P1", "gender", "json_type: gender", "1")
    ]


def test_spec_valid_frames_give_no_warning() -> None:
    coverage = {"resourceType": "Coverage", "id": "C1", "status": "active"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate(flatten("Coverage", [bundle(coverage)]), "Coverage")
    assert isinstance(flatten("Coverage", []), pl.DataFrame)


def test_the_contract_view_is_the_catalogues_rules_and_only_precision_is_the_frames_own() -> None:
    model = non_spec_model()
    assert catalogue_rules() == catalogue_non_spec_rules()
    own = {(r.aspect, r.source) for r in model if not r.in_catalogue}
    assert own == {("precision", "pmtk")}
    # Each check hangs under the narrowest rule that covers it.
    under = {c: (r.path, r.aspect) for r in model for c in r.checks}
    by_column = {(c.table, c.column): where for c, where in under.items()}
    assert by_column[("practitioner_name", "use")] == ("name.use", "enum")
    assert by_column[("appointment_participant", "actor_id")] == ("participant.actor", "all")
    assert by_column[("Coverage", "payor_id")] == ("payor", "reference")
    assert by_column[("Patient", "gender")] == ("*", "all")
    assert by_column[("Referral", "last_updated_precision")] == ("meta", "all")
    assert by_column[("Referral", "created_precision")] == ("created", "precision")
