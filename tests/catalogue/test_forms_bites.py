"""The forms registry, every function: derived tables, converters, schemas (issue 36).

:mod:`toolkit.catalogue.forms` derives its tables when it is imported, from the
catalogue's declarations; these tests call the derivations again, on the catalogue
(the expectations written from the facts file's "Shapes seen on the live service")
and on scratch declarations that reach each branch (a nested field, an array field,
a ``reader_only`` form, an extension-encoded field), so that a mutant of a derivation
shows. The mock's converters and the schemas are checked on values written by hand:
a Quantity ``{"value": 10}`` for a count, a Reference with a ``display`` (and a
``reference`` to a record of that name) for a name. ``tools/mutation.py conform`` runs
them against mutants of ``toolkit/catalogue/forms.py`` (see docs/testing.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from toolkit import catalogue
from toolkit.catalogue import Alternative, Extension, Field, Resource, forms
from toolkit.errors import ConfigurationError, UnknownName

QUANTITY = forms.FORMS["quantity"]
REFERENCE = forms.FORMS["reference"]
ONE_OR_MANY = forms.FORMS["one-or-many"]
CODEABLE = forms.FORMS["codeable-concept"]

FACTS = {
    ("Organization", "type", (), "codeable-concept"),
    ("Practitioner", "name", (), "one-or-many"),
    ("Patient", "name", (), "one-or-many"),
    ("Coverage", "payor", (), "one-or-many"),
    ("Coverage", "identifier", (), "one-or-many"),
    ("Referral", "limitQuantity.quantity", ("limitQuantity",), "quantity"),
    ("Referral", "referralDefinition", (), "reference"),
    ("ReferralDefinition", "limitQuantity.quantity", ("limitQuantity",), "quantity"),
}
"""(resource, field path, parent path, form) of every declared form: the facts' live
shapes (a Practitioner's name array, a Referral's Quantity and Reference), FHIR R4's
forms pmtk reads too (one object for an array, a CodeableConcept for a Coding), and
Referral's Quantity read on ReferralDefinition's field of the same shape."""


# ------------------------------------------------------------------ the derivations


def test_every_declaration_is_found_with_its_path_field_and_form() -> None:
    declared = forms._declared()
    assert len(declared) == len(FACTS)
    assert {(res, path, parent, alt.form) for res, path, parent, _f, alt, _fm in declared} == FACTS
    for res, path, _parent, field, alt, form in declared:
        assert field is catalogue.field_at(res, path)
        assert alt in field.forms
        assert form is forms.FORMS[alt.form]


def _scratch(monkeypatch: pytest.MonkeyPatch, *fields: Field) -> None:
    monkeypatch.setattr(forms, "RESOURCES", {"X": Resource("X", fields)})


def test_a_nested_declaration_has_its_dotted_path_and_parent(monkeypatch) -> None:
    inner = Field("q", "number", forms=(Alternative("quantity"),))
    coded = Field("c", "code", extension=Extension("c", "valueCode"))  # no forms: fine
    _scratch(
        monkeypatch,
        Field("o", "object", fields=(Field("p", "object", fields=(inner, coded)),)),
        Field("r", "string", forms=(Alternative("reference", reader_only=True),)),
    )
    assert forms._declared() == [
        ("X", "o.p.q", ("o", "p"), inner, inner.forms[0], QUANTITY),
        (
            "X",
            "r",
            (),
            forms.RESOURCES["X"].fields[1],
            Alternative("reference", reader_only=True),
            REFERENCE,
        ),
    ]


def test_an_extension_encoded_field_cannot_declare_forms(monkeypatch) -> None:
    both = Field(
        "e", "code", extension=Extension("e", "valueCode"), forms=(Alternative("quantity"),)
    )
    _scratch(monkeypatch, Field("o", "object", fields=(both,)))
    with pytest.raises(ConfigurationError) as caught:
        forms._declared()
    assert str(caught.value) == "X.o.e: an extension-encoded field cannot declare forms"


def test_an_unknown_form_is_named_with_its_field(monkeypatch) -> None:
    _scratch(
        monkeypatch,
        Field("o", "object", fields=(Field("q", "number", forms=(Alternative("quantty"),)),)),
    )
    with pytest.raises(UnknownName) as caught:
        forms._declared()
    assert str(caught.value) == (
        "unknown alternative form 'quantty' on X.o.q: did you mean 'quantity'? "
        "(known: codeable-concept, one-or-many, quantity, reference)"
    )
    field = Field("name", "string", forms=(Alternative("refrence"),))
    for call in (forms.checked, lambda f: forms.readings(f, "x")):
        with pytest.raises(UnknownName) as caught:
            call(field)
        assert str(caught.value).startswith("unknown alternative form 'refrence' on name: ")


def test_the_readers_table_holds_each_forms_reader() -> None:
    single = Field("q", "number", forms=(Alternative("quantity"),))
    many = Field("t", "object", many=True, forms=(Alternative("codeable-concept"),))
    declared = [
        ("X", "q", (), single, single.forms[0], QUANTITY),
        ("X", "o.t", ("o",), many, many.forms[0], CODEABLE),
    ]
    assert forms._readers(declared) == {("X", "q"): QUANTITY.read, ("X", "o.t[]"): CODEABLE.read}
    assert forms._readers(forms._declared()) == forms.READERS


def _entry(res: str, path: str, field: Field, alt: Alternative) -> tuple[Any, ...]:
    parent = tuple(path.split(".")[:-1])
    return (res, path, parent, field, alt, forms.FORMS[alt.form])


ONE = Field("one", "object")
MANY = Field("many", "object", many=True)
SCRATCH_DECLARED = [
    _entry("A", "one", ONE, Alternative("one-or-many")),  # the live arrays' one case
    _entry("A", "ro", ONE, Alternative("one-or-many", reader_only=True)),
    _entry("A", "o.n", ONE, Alternative("one-or-many")),  # nested
    _entry("A", "many", MANY, Alternative("one-or-many")),  # already an array
    _entry("A", "q", ONE, Alternative("quantity")),  # converted, not an array form
    _entry("A", "qro", ONE, Alternative("quantity", reader_only=True)),
    _entry("A", "c", MANY, Alternative("codeable-concept")),  # no live form
    _entry("B", "x", ONE, Alternative("one-or-many")),
    _entry("B", "o.r", MANY, Alternative("reference", target="T")),
]


def test_the_live_arrays_are_the_top_level_single_values_a_checked_array_form_covers(
    monkeypatch,
) -> None:
    assert forms._live_arrays() == {"Practitioner": frozenset({"name"})}
    monkeypatch.setattr(forms, "_DECLARED", SCRATCH_DECLARED)
    assert forms._live_arrays() == {"A": frozenset({"one"}), "B": frozenset({"x"})}


def test_the_converted_fields_are_the_checked_forms_with_both_converters(monkeypatch) -> None:
    assert forms._converted() == forms.CONVERTED
    monkeypatch.setattr(forms, "_DECLARED", SCRATCH_DECLARED)
    assert forms._converted() == {
        "A": ((("q",), False, Alternative("quantity"), QUANTITY),),
        "B": ((("o", "r"), True, Alternative("reference", target="T"), REFERENCE),),
    }


# ------------------------------------------------------------------ names and converters


def test_names_by_id_and_the_first_id_of_each_name() -> None:
    names = forms.Names.of(
        {
            "ReferralDefinition": iter([("3", "GP"), ("4", "GP"), ("5", "Physio")]),
            "Practitioner": [("PR-1", "Dr A")],
            "Empty": [],
        }
    )
    assert names.by_id == {
        "ReferralDefinition": {"3": "GP", "4": "GP", "5": "Physio"},
        "Practitioner": {"PR-1": "Dr A"},
        "Empty": {},
    }
    assert names.by_name == {
        "ReferralDefinition": {"GP": "3", "Physio": "5"},
        "Practitioner": {"Dr A": "PR-1"},
        "Empty": {},
    }


NAMES = forms.Names.of({"ReferralDefinition": [("3", "GP"), ("7", "Physio"), ("RD-X", "Dental")]})
TARGETED = Alternative("reference", target="ReferralDefinition")


@pytest.mark.parametrize(
    ("value", "live"),
    [(6, {"value": 6}), (2.5, {"value": 2.5}), (0, {"value": 0}), (True, True), ("6", "6")],
)
def test_a_count_is_served_as_a_quantity(value: Any, live: Any) -> None:
    assert QUANTITY.live is not None
    assert QUANTITY.live(value, Alternative("quantity"), forms.NO_NAMES) == live


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ({"value": 6}, 6),
        ({"value": 6, "unit": "visits", "system": "http://unitsofmeasure.org", "code": "1"}, 6),
        ({"value": 6, "comparator": "<"}, {"value": 6, "comparator": "<"}),
        (6, 6),
        ("6", "6"),
    ],
)
def test_a_written_quantity_is_read_as_its_count(value: Any, canonical: Any) -> None:
    assert QUANTITY.canonical is not None
    assert QUANTITY.canonical(value, Alternative("quantity"), forms.NO_NAMES) == canonical


@pytest.mark.parametrize(
    ("alt", "names", "value", "live"),
    [
        (TARGETED, NAMES, "GP", {"reference": "/main/ReferralDefinition/3", "display": "GP"}),
        (
            TARGETED,
            NAMES,
            "Physio",
            {"reference": "/main/ReferralDefinition/7", "display": "Physio"},
        ),
        (TARGETED, NAMES, "Surgery", {"display": "Surgery"}),
        (TARGETED, forms.NO_NAMES, "GP", {"display": "GP"}),
        (Alternative("reference"), NAMES, "GP", {"display": "GP"}),
        (TARGETED, NAMES, {"display": "GP"}, {"display": "GP"}),
        (TARGETED, NAMES, 5, 5),
    ],
)
def test_a_name_is_served_as_a_reference_to_the_record_of_that_name(
    alt: Alternative, names: forms.Names, value: Any, live: Any
) -> None:
    assert REFERENCE.live is not None
    assert REFERENCE.live(value, alt, names) == live


@pytest.mark.parametrize(
    ("alt", "value", "canonical"),
    [
        (TARGETED, {"display": "GP", "reference": "/main/ReferralDefinition/7"}, "GP"),
        (TARGETED, {"display": 5, "reference": "/main/ReferralDefinition/7"}, "Physio"),
        (TARGETED, {"reference": "https://au-api.halaxy.com/main/ReferralDefinition/3"}, "GP"),
        (TARGETED, {"reference": "ReferralDefinition/3/"}, "GP"),
        (TARGETED, {"reference": "/main/Practitioner/3"}, {"reference": "/main/Practitioner/3"}),
        (
            TARGETED,
            {"reference": "/main/ReferralDefinition/9"},
            {"reference": "/main/ReferralDefinition/9"},
        ),
        (TARGETED, {"reference": 3}, {"reference": 3}),
        (TARGETED, {}, {}),
        # an id that ends in a letter the slash trim must not take
        (TARGETED, {"reference": "/main/ReferralDefinition/RD-X"}, "Dental"),
        (
            Alternative("reference"),
            {"reference": "/main/ReferralDefinition/3"},
            {"reference": "/main/ReferralDefinition/3"},
        ),
        (TARGETED, "GP", "GP"),
    ],
)
def test_a_written_reference_is_read_as_its_display_or_its_records_name(
    alt: Alternative, value: Any, canonical: Any
) -> None:
    assert REFERENCE.canonical is not None
    assert REFERENCE.canonical(value, alt, NAMES) == canonical


def test_a_reference_to_a_type_without_names_is_left_as_it_is() -> None:
    assert REFERENCE.canonical is not None
    value = {"reference": "/main/ReferralDefinition/3"}
    assert REFERENCE.canonical(value, TARGETED, forms.NO_NAMES) == value
    other = forms.Names.of({"Practitioner": [("3", "Dr A")]})
    assert REFERENCE.canonical(value, TARGETED, other) == value


def test_a_record_is_served_in_the_live_forms_and_read_back() -> None:
    names = forms.Names.of({"ReferralDefinition": [("3", "GP")]})
    canonical = {
        "resourceType": "Referral",
        "id": "r1",
        "limitQuantity": {"quantity": 6, "quantityUsed": 2},
        "referralDefinition": "GP",
        "note": {"text": "kept"},
    }
    live = forms.to_live("Referral", canonical, names)
    assert live == {
        **canonical,
        "limitQuantity": {"quantity": {"value": 6}, "quantityUsed": 2},
        "referralDefinition": {"reference": "/main/ReferralDefinition/3", "display": "GP"},
    }
    assert canonical["limitQuantity"] == {"quantity": 6, "quantityUsed": 2}  # not changed in place
    assert live["note"] is canonical["note"]  # what does not change is not copied
    assert forms.to_canonical("Referral", live, names) == canonical
    assert forms.to_canonical("Referral", live) == {**canonical, "referralDefinition": "GP"}
    # A written Reference without a display names the record it points at.
    written = {"referralDefinition": {"reference": "/main/ReferralDefinition/3"}}
    assert forms.to_canonical("Referral", written, names) == {"referralDefinition": "GP"}
    assert forms.to_canonical("Referral", written) == written


def test_a_many_field_is_converted_item_by_item(monkeypatch) -> None:
    alt = Alternative("quantity")
    monkeypatch.setattr(forms, "CONVERTED", {"X": ((("o", "q"), True, alt, QUANTITY),)})
    record = {"o": {"q": [1, {"value": 2}, "x"]}}
    assert forms.to_live("X", record) == {"o": {"q": [{"value": 1}, {"value": 2}, "x"]}}
    assert forms.to_canonical("X", {"o": {"q": [{"value": 1}, 2]}}) == {"o": {"q": [1, 2]}}
    assert forms.to_live("X", {"o": [{"q": [3]}, {"q": 4}]}) == {
        "o": [{"q": [{"value": 3}]}, {"q": {"value": 4}}]
    }


def test_what_no_form_converts_is_the_same_object() -> None:
    referral = {"resourceType": "Referral", "id": "r1", "limitQuantity": "odd"}
    assert forms.to_live("Referral", referral) is referral
    assert forms.to_canonical("Referral", referral) is referral
    patient = {"resourceType": "Patient", "name": [{"family": "F"}]}
    assert forms.to_live("Patient", patient) is patient
    quantity = {"limitQuantity": {"quantity": {"value": 6, "comparator": "<"}}}
    assert forms.to_canonical("Referral", quantity) is quantity


def test_a_change_reaches_each_item_of_an_array_on_its_path() -> None:
    written = {"limitQuantity": [{"quantity": {"value": 1}}, {"quantity": 2}, "odd"]}
    assert forms.to_canonical("Referral", written) == {
        "limitQuantity": [{"quantity": 1}, {"quantity": 2}, "odd"]
    }


def test_at_changes_each_item_of_a_many_field_or_the_value_itself() -> None:
    def change(value: Any) -> Any:
        return ("changed", value)

    record = {"a": {"b": [1, 2]}, "c": 3}
    assert forms._at(record, ("a", "b"), True, change) == {
        "a": {"b": [("changed", 1), ("changed", 2)]},
        "c": 3,
    }
    assert forms._at(record, ("a", "b"), False, change) == {"a": {"b": ("changed", [1, 2])}, "c": 3}
    assert forms._at({"a": {"b": 1}}, ("a", "b"), True, change) == {"a": {"b": ("changed", 1)}}
    assert forms._at([{"c": 1}, {"c": 2}], ("c",), False, change) == [
        {"c": ("changed", 1)},
        {"c": ("changed", 2)},
    ]
    assert forms._at([{"c": [1, 2]}], ("c",), True, change) == [
        {"c": [("changed", 1), ("changed", 2)]}
    ]
    assert forms._at({"a": "text"}, ("a", "b"), False, change) == {"a": "text"}
    assert forms._at(record, ("x",), False, change) is record
    assert record == {"a": {"b": [1, 2]}, "c": 3}


# ------------------------------------------------------------------ schemas


def test_the_one_or_many_schema_takes_one_value_or_an_array() -> None:
    assert ONE_OR_MANY.schema is not None
    obj = {"type": "object", "properties": {"family": {"type": "string"}}}
    assert ONE_OR_MANY.schema(obj) == {"anyOf": [obj, {"type": "array", "items": obj}]}
    ref = {"$ref": "#/components/schemas/HumanName"}
    assert ONE_OR_MANY.schema(ref) == {"anyOf": [ref, {"type": "array", "items": ref}]}
    array = {"type": "array", "items": obj}
    assert ONE_OR_MANY.schema(array) == {"anyOf": [obj, array]}


def test_the_quantity_and_reference_schemas() -> None:
    assert QUANTITY.schema is not None and REFERENCE.schema is not None
    assert QUANTITY.schema({"type": "integer"}) == {
        "anyOf": [
            {"type": "number"},
            {"type": "object", "properties": {"value": {"type": "number"}}},
        ]
    }
    assert REFERENCE.schema({"type": "string"}) == {
        "anyOf": [
            {"type": "string"},
            {
                "type": "object",
                "properties": {"reference": {"type": "string"}, "display": {"type": "string"}},
            },
        ]
    }


def test_the_response_schema_of_a_field_covers_its_checked_single_value_forms() -> None:
    single = {"type": "string"}
    definition = catalogue.field_at("Referral", "referralDefinition")
    assert forms.response_schema(definition, single) == REFERENCE.schema(single)  # type: ignore[misc]
    quantity = catalogue.field_at("Referral", "limitQuantity.quantity")
    assert forms.response_schema(quantity, {"type": "integer"}) == QUANTITY.schema({})  # type: ignore[misc]
    # An array form is array_schema's; a reader-only form is not the checker's.
    assert forms.response_schema(catalogue.field_at("Practitioner", "name"), single) is None
    assert forms.response_schema(catalogue.field_at("Coverage", "payor"), single) is None
    both = Field("x", "number", forms=(Alternative("one-or-many"), Alternative("quantity")))
    assert forms.response_schema(both, single) == QUANTITY.schema(single)  # type: ignore[misc]


def test_the_array_schema_widens_by_array_forms_only() -> None:
    single = {"type": "string"}
    definition = catalogue.field_at("Referral", "referralDefinition")
    assert forms.array_schema(definition, single) == single
    both = Field("x", "object", forms=(Alternative("quantity"), Alternative("one-or-many")))
    assert forms.array_schema(both, single) == {
        "anyOf": [single, {"type": "array", "items": single}]
    }


# ------------------------------------------------------------------ classifiers and readings


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ({"reference": 5}, None),
        ({"reference": "x", "display": 5}, None),
        ({"reference": "x", "type": "Organization"}, "Reference"),
        ({"type": "Organization"}, "Reference"),
    ],
)
def test_a_reference_is_told_by_its_text_keys(value: Any, name: str | None) -> None:
    assert REFERENCE.classify is not None
    assert REFERENCE.classify(value) == name


def test_readings_keep_a_value_a_form_reads_with_keys_to_spare() -> None:
    definition = catalogue.field_at("Referral", "referralDefinition")
    value = {"reference": "/main/ReferralDefinition/3", "display": "GP"}
    assert forms.readings(definition, value) == [value, "GP"]
    org_type = catalogue.field_at("Organization", "type")
    coded = [{"coding": [{"code": "a"}, {"code": "b"}], "text": "t"}]
    assert forms.readings(org_type, coded) == [coded, [{"code": "a"}]]


def test_readings_add_nothing_a_form_leaves_as_it_was() -> None:
    org_type = catalogue.field_at("Organization", "type")
    already = [{"code": "b"}]  # a Coding: the form gives an equal list, a new object
    assert forms.readings(org_type, already) == [already]


def test_readings_go_on_past_an_item_form_on_a_value_that_is_no_array() -> None:
    field = Field(
        "x", "object", many=True, forms=(Alternative("quantity"), Alternative("one-or-many"))
    )
    assert forms.readings(field, {"value": 3}) == [{"value": 3}, [{"value": 3}]]


@pytest.mark.parametrize("name", ["quantity", "reference"])
def test_a_value_form_read_below_is_refused_not_read_as_the_value(name: str) -> None:
    # a Quantity or Reference form is read as one primitive value: a column below it
    # would silently get the value itself
    path = forms.FORMS[name].fhirpath
    assert path is not None
    assert "limitQuantity.quantity" in path("limitQuantity.quantity", "", "integer")
    with pytest.raises(ConfigurationError) as caught:
        path("limitQuantity.quantity", "unit", "string")
    assert str(caught.value) == (
        f"limitQuantity.quantity.unit: a {name} form is read as one value; nothing is read below it"
    )


def test_the_codeable_concept_form_reads_below_the_item_and_the_value() -> None:
    path = forms.FORMS["codeable-concept"].fhirpath
    assert path is not None
    assert path("", "code", "string") == "(coding.first().code | code).first()"
    assert path("type", "code", "string") == "(type.coding.first().code | type.code).first()"
