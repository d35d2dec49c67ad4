"""The FHIRPath compiler (``toolkit/viewdefs/compile.py``) on empty, absent and repeated input.

Each case runs one column over three hand-built Patients (one with repeated names,
codings, references and extensions; one with an empty name array; one with nothing
but its id) and compares every row's value *and its Python type* (``3`` is not
``3.0``, ``True`` is not ``1``) with what the FHIRPath specification (N1, the
subset SQL-on-FHIR v2 requires) and the SQL-on-FHIR v2 function definitions give,
worked out by hand, never read back from pmtk:

- navigation takes the children of every item, flattening arrays and skipping
  absent values; a missing element is the empty collection;
- ``where(c)`` keeps the items for which ``c`` is ``true``; ``exists()`` is false
  (not empty) for an empty or absent collection; ``count()`` is 0 there;
  ``join()`` of nothing is ``''`` (the official suite's "string join" case);
- ``=``, ``<`` and the arithmetic operators give the empty collection when a side
  is empty; ``=`` of collections compares item by item in order;
- ``and``, ``or``, ``xor``, ``implies`` follow the spec's three-valued tables;
- ``|`` is the union without duplicates, integers and decimals merged;
- ``x[i]`` is the item at 0-based ``i``, empty beyond the end;
- ``lowBoundary()``/``highBoundary()`` follow the spec's examples (``1.587`` gives
  ``1.5865``/``1.5875``, ``@T10:30`` gives ``10:30:00.000``/``10:30:59.999``); a
  date-time without a time zone takes ``+14:00`` at its low and ``-12:00`` at its
  high boundary, as the official suite's ``fn_boundary`` cases say.

Each case is a few milliseconds: the whole file runs in about a second.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pytest

from toolkit.errors import ViewDefinitionError
from toolkit.viewdefs import fhirpath as fp
from toolkit.viewdefs import run_view
from toolkit.viewdefs.compile import Scope, Val, compile_path

A: dict[str, Any] = {
    "resourceType": "Patient",
    "id": "a",
    "active": True,
    "gender": "female",
    "birthDate": "1970-02",
    "multipleBirthInteger": 2,
    "name": [
        {"use": "official", "family": "F1", "given": ["g1", "g2"]},
        {"family": "F2"},
        {"given": ["g3"]},
    ],
    "maritalStatus": {"text": "M", "coding": [{"code": "S"}, {"code": "M"}]},
    "generalPractitioner": [
        {"reference": "Practitioner/p1"},
        {"reference": "Organization/o1/_history/2"},
        {"display": "no reference"},
    ],
    "extension": [{"url": "u1", "valueString": "s1"}, {"url": "u2", "valueString": "s2"}],
}
B: dict[str, Any] = {
    "resourceType": "Patient",
    "id": "b",
    "active": False,
    "gender": "male",
    "birthDate": "2016-02",
    "name": [],
}
C: dict[str, Any] = {"resourceType": "Patient", "id": "c"}
PATIENTS = [A, B, C]


def _values(
    path: str,
    records: list[dict[str, Any]] | None = None,
    resource: str = "Patient",
    **view: Any,
) -> list[Any]:
    """The column ``path`` of each record, in record order."""
    select = [{"column": [{"name": "v", "path": path}]}]
    frame = run_view({"resource": resource, "select": select, **view}, records or PATIENTS)
    return [row[0] for row in frame.rows()]


def _typed(values: Any) -> list[tuple[str, Any]]:
    return [(type(v).__name__, v) for v in values]


def _check(path: str, expected: tuple[Any, ...], **view: Any) -> None:
    got = _values(path, **view)
    assert _typed(got) == _typed(expected), f"{path}: {got} != {list(expected)}"


def _fails(path: str, message: str, records: list[dict[str, Any]] | None = None, **kw: Any) -> str:
    with pytest.raises(ViewDefinitionError) as caught:
        _values(path, records, **kw)
    text = str(caught.value)
    assert message in text, text
    return text


# ---------------------------------------------------------------- navigation

NAVIGATION = [
    ("name.family.join(',')", ("F1,F2", "", "")),
    ("name.given.join(',')", ("g1,g2,g3", "", "")),
    ("name.given.count()", (3, 0, 0)),
    ("name.count()", (3, 0, 0)),
    ("name.family.exists()", (True, False, False)),
    ("maritalStatus.text", ("M", None, None)),
    ("maritalStatus.coding.code.join(',')", ("S,M", "", "")),
    ("maritalStatus.coding.count()", (2, 0, 0)),
    ("name.period.start.count()", (0, 0, 0)),
    ("deceasedBoolean", (None, None, None)),
    ("$this.id", ("a", "b", "c")),
    ("getResourceKey()", ("a", "b", "c")),
]


@pytest.mark.parametrize(("path", "expected"), NAVIGATION)
def test_navigation_flattens_skips_absent_and_is_empty_for_a_missing_element(
    path: str, expected: tuple[Any, ...]
) -> None:
    _check(path, expected)


def test_null_items_of_an_array_are_not_items() -> None:
    records = [
        {"resourceType": "Patient", "id": "x", "name": [{"given": ["g1", None, "g2"]}, None]},
    ]
    assert _values("name.given.count()", records) == [2]
    assert _values("name.count()", records) == [1]
    assert _values("name.given.join(',')", records) == ["g1,g2"]


# ---------------------------------------------------------------- choice elements

Q = {"value": 1.5, "unit": "mg"}


def _obs(ident: str, **fields: Any) -> dict[str, Any]:
    return {"resourceType": "Observation", "id": ident, "status": "final", **fields}


def test_a_choice_read_by_its_one_type_in_the_data() -> None:
    records = [_obs("o1", valueString="hi"), _obs("o2")]
    assert _values("value", records, "Observation") == ["hi", None]
    assert _values("value.ofType(string)", records, "Observation") == ["hi", None]
    assert _values("value.ofType(Quantity).exists()", records, "Observation") == [False, False]
    # a field whose name only starts with the element's is not one of its types
    # a complex type alone is read as well
    quantities = [_obs("o1", valueQuantity=Q), _obs("o2")]
    assert _values("value.unit", quantities, "Observation") == ["mg", None]
    other = [_obs("o1", valueset="vs")]
    assert _values("value.exists()", other, "Observation") == [False]


def test_a_choice_of_several_text_types_is_their_common_value() -> None:
    records = [
        _obs("o1", effectiveDateTime="2020-01-01"),
        _obs("o2", effectiveInstant="2020-01-02T00:00:00Z"),
        _obs("o3"),
    ]
    got = _values("effective", records, "Observation")
    assert got == ["2020-01-01", "2020-01-02T00:00:00Z", None]
    got = _values("effective.startsWith('2020-01-02')", records, "Observation")
    assert got == [False, True, None]
    got = _values("effective.ofType(instant)", records, "Observation")
    assert got == [None, "2020-01-02T00:00:00Z", None]


def test_a_choice_of_several_types_must_be_named() -> None:
    records = [_obs("o1", valueQuantity=Q), _obs("o2", valueString="hi")]
    text = _fails("value", "'value' is a choice of types", records, resource="Observation")
    listed = re.search(r"choice of types \((.*)\): say which with value\.ofType\(T\),", text)
    assert listed is not None, text
    assert sorted(listed.group(1).split(", ")) == ["valueQuantity", "valueString"]
    # two primitive types are two types too
    two = [_obs("o1", valueInteger=1), _obs("o2", valueString="hi")]
    _fails("value", "is a choice of types", two, resource="Observation")
    # two complex types of one shape are still two types
    same_shape = [_obs("o1", valueQuantity=Q), _obs("o2", valueAge=Q)]
    _fails("value", "is a choice of types", same_shape, resource="Observation")
    # the named type reads its own field
    got = _values("value.ofType(Quantity).value", records, "Observation")
    assert got == [1.5, None]
    assert _values("value.ofType(Age).unit", same_shape, "Observation") == [None, "mg"]


# ---------------------------------------------------------------- ofType and is

TYPES = [
    ("gender.is(string)", (True, True, False)),
    ("gender.is(code)", (True, True, False)),
    ("gender.is(boolean)", (False, False, False)),
    ("gender.is(CodeableConcept)", (False, False, False)),
    ("active.is(boolean)", (True, True, False)),
    ("active.is(string)", (False, False, False)),
    ("multipleBirthInteger.is(integer)", (True, False, False)),
    ("multipleBirthInteger.is(string)", (False, False, False)),
    ("maritalStatus.is(CodeableConcept)", (True, False, False)),
    ("1.5.is(decimal)", (True, True, True)),
    ("'x'.is(integer)", (False, False, False)),
    ("true.is(integer)", (False, False, False)),
    ("{}.is(string)", (False, False, False)),
    ("gender.ofType(string)", ("female", "male", None)),
    ("gender.ofType(FHIR.string)", ("female", "male", None)),
    ("gender.ofType(integer)", (None, None, None)),
    ("gender.ofType(CodeableConcept)", (None, None, None)),
    ("active.ofType(boolean)", (True, False, None)),
    ("active.ofType(string)", (None, None, None)),
    ("maritalStatus.ofType(CodeableConcept).text", ("M", None, None)),
    ("multipleBirth.ofType(integer)", (2, None, None)),
    ("multipleBirth.ofType(boolean)", (None, None, None)),
    ("extension.value.ofType(string).join(',')", ("s1,s2", "", "")),
    ("extension.ofType(Extension).count()", (2, 0, 0)),
    ("name.given.first().ofType(string)", ("g1", None, None)),
    ("{}.ofType(string).count()", (0, 0, 0)),
    ("%resource.ofType(Patient).id", ("a", "b", "c")),
    ("$this.ofType(Observation).id", (None, None, None)),
    ("$this.is(Patient)", (True, True, True)),
]


@pytest.mark.parametrize(("path", "expected"), TYPES)
def test_of_type_and_is_keep_only_values_of_the_type(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected)


def test_of_type_of_a_resource_type_reads_resource_type() -> None:
    records = [
        {
            "resourceType": "Patient",
            "id": "x",
            "contained": [
                {"resourceType": "Practitioner", "id": "p1"},
                {"resourceType": "Organization", "id": "o1"},
                {"resourceType": "Practitioner", "id": "p2"},
            ],
        },
        {"resourceType": "Patient", "id": "y"},
    ]
    assert _values("contained.ofType(Practitioner).id.join(',')", records) == ["p1,p2", ""]
    assert _values("contained.ofType(Organization).id.join(',')", records) == ["o1", ""]
    assert _values("contained.ofType(Patient).exists()", records) == [False, False]


# ---------------------------------------------------------------- where, exists

FILTERS = [
    ("gender.where($this = 'female')", ("female", None, None)),
    ("gender.where(true)", ("female", "male", None)),
    ("gender.where(false)", (None, None, None)),
    ("gender.where({})", (None, None, None)),
    ("name.where(use = 'official').family.join(',')", ("F1", "", "")),
    ("name.where(family.exists()).count()", (2, 0, 0)),
    ("name.where(given.exists()).given.join(',')", ("g1,g2,g3", "", "")),
    ("{}.where(true).count()", (0, 0, 0)),
    ("name.exists()", (True, False, False)),
    ("name.empty()", (False, True, True)),
    ("gender.exists()", (True, True, False)),
    ("gender.empty()", (False, False, True)),
    ("{}.exists()", (False, False, False)),
    ("{}.empty()", (True, True, True)),
    ("name.exists(use = 'official')", (True, False, False)),
    ("name.exists(use = 'nickname')", (False, False, False)),
    ("gender.exists($this = 'male')", (False, True, False)),
    ("birthDate.hasValue()", (True, True, False)),
    ("birthDate.hasValue().not()", (False, False, True)),
    ("gender.is(string).not()", (False, False, True)),
    ("active.not()", (False, True, None)),
    ("(true | true).not()", (False, False, False)),
    ("{}.not()", (None, None, None)),
]


@pytest.mark.parametrize(("path", "expected"), FILTERS)
def test_where_keeps_the_items_that_hold_and_exists_is_never_empty(
    path: str, expected: tuple[Any, ...]
) -> None:
    _check(path, expected)


# ---------------------------------------------------------------- indexes, first, last, count

ITEMS = [
    ("name[0].family", ("F1", None, None)),
    ("name[1].family", ("F2", None, None)),
    ("name[2].given.join(',')", ("g3", "", "")),
    ("name[3].family", (None, None, None)),
    ("name[1 - 1].use", ("official", None, None)),
    ("gender[0].startsWith('f')", (True, False, None)),
    ("name[0].family.startsWith('F')", (True, None, None)),
    ("{}[0].count()", (0, 0, 0)),
    ("{}.first().count()", (0, 0, 0)),
    ("gender[0]", ("female", "male", None)),
    ("gender[1]", (None, None, None)),
    ("name.given.first()", ("g1", None, None)),
    ("name.given.last()", ("g3", None, None)),
    ("gender.first()", ("female", "male", None)),
    ("gender.last()", ("female", "male", None)),
    ("gender.count()", (1, 1, 0)),
    ("{}.count()", (0, 0, 0)),
    ("{}.count() + 1", (1, 1, 1)),
    ("gender.count() + 1", (2, 2, 1)),
    ("name.count() + 1", (4, 1, 1)),
]


@pytest.mark.parametrize(("path", "expected"), ITEMS)
def test_index_first_last_and_count(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected)


# ---------------------------------------------------------------- comparison

COMPARISONS = [
    ("gender = 'female'", (True, False, None)),
    ("gender != 'female'", (False, True, None)),
    ("name.family = ('F1' | 'F2')", (True, None, None)),
    ("('F1' | 'F2') = name.family", (True, None, None)),
    ("name.family = ('F2' | 'F1')", (False, None, None)),
    ("name.family = 'F1'", (False, None, None)),
    ("name.family != 'F1'", (True, None, None)),
    ("name.family != ('F1' | 'F2')", (False, None, None)),
    ("1 = 1.0", (True, True, True)),
    ("1 != 1.0", (False, False, False)),
    ("1 < 1", (False, False, False)),
    ("1 <= 1", (True, True, True)),
    ("1 > 1", (False, False, False)),
    ("1 >= 1", (True, True, True)),
    ("1 < 2", (True, True, True)),
    ("2 <= 1", (False, False, False)),
    ("2 > 1.5", (True, True, True)),
    ("1 >= 2", (False, False, False)),
    ("birthDate < '2000'", (True, False, None)),
    ("multipleBirthInteger > 1", (True, None, None)),
    ("name.where(use = 'official').family < 'G'", (True, None, None)),
    ("name.where(use = 'official').family >= 'G'", (False, None, None)),
    ("1 < {}", (None, None, None)),
    ("{} = 1", (None, None, None)),
    ("{} != {}", (None, None, None)),
    ("name = {}", (None, None, None)),
    ("{} = name", (None, None, None)),
    ("(1 < {}).not()", (None, None, None)),
    ("1 = 'a'", (False, False, False)),
    ("'a' != 1", (True, True, True)),
    ("true = 'a'", (False, False, False)),
]


@pytest.mark.parametrize(("path", "expected"), COMPARISONS)
def test_comparisons_are_empty_when_a_side_is(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected)


# ---------------------------------------------------------------- arithmetic

ARITHMETIC = [
    ("1 + 2", (3, 3, 3)),
    ("1 + 2.5", (3.5, 3.5, 3.5)),
    ("7 - 2", (5, 5, 5)),
    ("2 * 3", (6, 6, 6)),
    ("2.5 * 2", (5.0, 5.0, 5.0)),
    ("7 / 2", (3.5, 3.5, 3.5)),
    ("6 / 2", (3.0, 3.0, 3.0)),
    ("7 div 2", (3, 3, 3)),
    ("7.5 div 2", (3, 3, 3)),
    ("7 mod 2", (1, 1, 1)),
    ("7.5 mod 2", (1.5, 1.5, 1.5)),
    ("multipleBirthInteger + 1", (3, None, None)),
    ("1 + {}", (None, None, None)),
    ("{} * 2", (None, None, None)),
    ("'a' + 'b'", ("ab", "ab", "ab")),
    ("gender + '!'", ("female!", "male!", None)),
    ("gender & '-' & id", ("female-a", "male-b", "-c")),
    ("id & gender", ("afemale", "bmale", "c")),
    ("('a' & 'b').startsWith('a')", (True, True, True)),
    ("('a' + 'b').startsWith('a')", (True, True, True)),
    ("(1 + 2.5).is(integer)", (False, False, False)),
    ("(2.5 + 1).is(integer)", (False, False, False)),
    ("(1 + 2).is(integer)", (True, True, True)),
    ("(6 / 2).is(integer)", (False, False, False)),
    ("(7 / 2) * 2", (7.0, 7.0, 7.0)),
    ("(7 div 2) * 2", (6, 6, 6)),
    ("(-{}).count()", (0, 0, 0)),
    ("{}.toString()", (None, None, None)),
    ("{} & {}", ("", "", "")),
    ("multipleBirthInteger & ''", ("2", "", "")),
    ("-(1 + 2)", (-3, -3, -3)),
    ("+(1 + 2)", (3, 3, 3)),
    ("-multipleBirthInteger", (-2, None, None)),
    ("(-multipleBirthInteger) * 2", (-4, None, None)),
    ("(-(1 | 2)).join(',')", ("-1,-2", "-1,-2", "-1,-2")),
    ("multipleBirthInteger.toString()", ("2", None, None)),
    ("active.toString()", ("true", "false", None)),
    ("active.toString().startsWith('t')", (True, False, None)),
]


@pytest.mark.parametrize(("path", "expected"), ARITHMETIC)
def test_arithmetic_keeps_integers_integers(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected)


# ---------------------------------------------------------------- boolean logic

T, F, E = "true", "false", "{}"
# FHIRPath N1, 6.5 Boolean logic: the tables of and, or, xor and implies
LOGIC = {
    "and": {(T, T): True, (T, F): False, (T, E): None, (F, T): False, (F, F): False,
            (F, E): False, (E, T): None, (E, F): False, (E, E): None},
    "or": {(T, T): True, (T, F): True, (T, E): True, (F, T): True, (F, F): False,
           (F, E): None, (E, T): True, (E, F): None, (E, E): None},
    "xor": {(T, T): False, (T, F): True, (T, E): None, (F, T): True, (F, F): False,
            (F, E): None, (E, T): None, (E, F): None, (E, E): None},
    "implies": {(T, T): True, (T, F): False, (T, E): None, (F, T): True, (F, F): True,
                (F, E): True, (E, T): True, (E, F): None, (E, E): None},
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(LOGIC))
def test_boolean_operators_follow_the_three_valued_tables(op: str) -> None:
    for (left, right), want in LOGIC[op].items():
        got = _values(f"{left} {op} {right}", [C])
        assert _typed(got) == _typed([want]), f"{left} {op} {right}"
    # the same on values read from the data: a's active is true, b's false, c has none
    got = _values(f"active {op} (gender = 'male')")
    assert got == [LOGIC[op][(T, F)], LOGIC[op][(F, T)], LOGIC[op][(E, E)]]


# ---------------------------------------------------------------- union

UNIONS = [
    ("(name.family | name.given).join(',')", ("F1,F2,g1,g2,g3", "", "")),
    ("(name.family | name.family).join(',')", ("F1,F2", "", "")),
    ("('x' | 'x').count()", (1, 1, 1)),
    ("(gender | name.family).join(',')", ("female,F1,F2", "male", "")),
    ("({} | gender)", ("female", "male", None)),
    ("(gender | {})", ("female", "male", None)),
    ("(1 | 2.5).count()", (2, 2, 2)),
    ("(1 | 1.0).count()", (1, 1, 1)),
    ("(1 | 2.5).first()", (1.0, 1.0, 1.0)),
    ("(2.5 | 1).last()", (1.0, 1.0, 1.0)),
    ("(1 | 2).join('+')", ("1+2", "1+2", "1+2")),
    ("(name.given | name.family).first()", ("g1", None, None)),
    ("(name.family | gender).first()", ("F1", "male", None)),
    ("(gender | id).first()", ("female", "male", "c")),
    ("(gender | {} | id).first()", ("female", "male", "c")),
    ("(maritalStatus.text | gender | id).first()", ("M", "male", "c")),
    ("({} | id).first()", ("a", "b", "c")),
    ("(name.given.first() | name.family.first()).first()", ("g1", None, None)),
]


@pytest.mark.parametrize(("path", "expected"), UNIONS)
def test_union_removes_duplicates_and_keeps_order(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected)


def test_a_union_with_an_absent_collection_keeps_the_other_side() -> None:
    # d has no name at all (a null list, not an empty one) but a gender
    records = [A, {"resourceType": "Patient", "id": "d", "gender": "other"}]
    assert _values("(name.family | gender).join(',')", records) == ["F1,F2,female", "other"]
    assert _values("(gender | name.family).count()", records) == [3, 1]


# ---------------------------------------------------------------- join, extension, keys

FUNCTIONS = [
    ("name.given.join()", ("g1g2g3", "", "")),
    ("gender.join(',')", ("female", "male", "")),
    ("{}.join(',')", ("", "", "")),
    ("{}.join(',').startsWith('a')", (False, False, False)),
    ("name.given.join(',').startsWith('g')", (True, False, False)),
    ("gender.first().startsWith('f')", (True, False, None)),
    ("(gender | id).first().startsWith('f')", (True, False, False)),
    ("gender.endsWith('male').not()", (False, False, None)),
    ("name.given.join(%sep)", ("g1; g2; g3", "", "")),
    ("extension('u1').value.ofType(string)", ("s1", None, None)),
    ("extension(%url).value.ofType(string)", ("s2", None, None)),
    ("extension('u3').exists()", (False, False, False)),
    ("generalPractitioner.getReferenceKey().join(',')", ("p1,o1", "", "")),
    ("generalPractitioner.getReferenceKey(Practitioner).join(',')", ("p1", "", "")),
    ("generalPractitioner.getReferenceKey(Organization).join(',')", ("o1", "", "")),
    ("generalPractitioner.getReferenceKey(FHIR.Organization).join(',')", ("o1", "", "")),
    ("generalPractitioner.getReferenceKey(Patient).count()", (0, 0, 0)),
    ("managingOrganization.getReferenceKey().count()", (0, 0, 0)),
]
CONSTANTS = [{"name": "sep", "valueString": "; "}, {"name": "url", "valueUri": "u2"}]


@pytest.mark.parametrize(("path", "expected"), FUNCTIONS)
def test_join_extension_and_reference_keys(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected, constant=CONSTANTS)


def test_extensions_and_references_absent_from_every_record_are_empty() -> None:
    assert _values("extension('u1').exists()", [B, C]) == [False, False]
    records = [{"resourceType": "Patient", "id": "x", "generalPractitioner": [{"display": "d"}]}]
    assert _values("generalPractitioner.getReferenceKey().count()", records) == [0]


def test_a_reference_key_is_a_fhir_id_of_at_most_64_characters() -> None:
    long_id = "x" * 65
    refs = [{"reference": f"Patient/{'y' * 64}"}, {"reference": f"Patient/{long_id}"}]
    records = [{"resourceType": "Patient", "id": "x", "link": [{"other": r} for r in refs]}]
    assert _values("link.other.getReferenceKey().join(',')", records) == ["y" * 64]


# ---------------------------------------------------------------- strings

STRINGS = [
    ("gender.startsWith('fe')", (True, False, None)),
    ("gender.endsWith('male')", (True, True, None)),
    ("gender.matches('^m')", (False, True, None)),
    ("gender.matches('^.{4}$')", (False, True, None)),
    ("gender.matches('^(.{4}|.{6})$')", (True, True, None)),
    ("gender.replaceMatches('(f)(e)', '$2$1')", ("efmale", "male", None)),
    ("gender.replaceMatches('(f)emale', '$1x')", ("fx", "male", None)),
    ("gender.replaceMatches('^.*$', 'X')", ("X", "X", None)),
    ("{}.startsWith('a')", (None, None, None)),
    ("gender.where($this = 'female').startsWith('f')", (True, None, None)),
    ("gender.where($this != 'female').endsWith('male')", (None, True, None)),
    ("gender.where($this = 'female').replaceMatches('^.*$', 'X')", ("X", None, None)),
    ("gender.where($this = 'male').matches('^m')", (None, True, None)),
    ("name.where(use = 'official').family.startsWith('F')", (True, None, None)),
    ("{}.where(true).startsWith('a')", (None, None, None)),
]


@pytest.mark.parametrize(("path", "expected"), STRINGS)
def test_string_functions_map_each_value(path: str, expected: tuple[Any, ...]) -> None:
    _check(path, expected)


# ---------------------------------------------------------------- boundaries

BOUNDARIES = [
    ("birthDate.lowBoundary()", ("1970-02-01", "2016-02-01", None)),
    ("birthDate.highBoundary()", ("1970-02-28", "2016-02-29", None)),
    ("multipleBirthInteger.lowBoundary()", (1.5, None, None)),
    ("multipleBirthInteger.highBoundary()", (2.5, None, None)),
    ("1.587.lowBoundary()", (1.5865, 1.5865, 1.5865)),
    ("1.587.highBoundary()", (1.5875, 1.5875, 1.5875)),
    ("'1970'.lowBoundary()", ("1970-01-01",) * 3),
    ("'1970'.highBoundary()", ("1970-12-31",) * 3),
    ("'1970-02-15'.lowBoundary()", ("1970-02-15",) * 3),
    ("'1970-02-15'.highBoundary()", ("1970-02-15",) * 3),
    ("'10:30'.lowBoundary()", ("10:30:00.000",) * 3),
    ("'10:30'.highBoundary()", ("10:30:59.999",) * 3),
    ("'12:34:56.789'.highBoundary()", ("12:34:56.789",) * 3),
    # a time's step is a millisecond (FHIRPath N1 2.1.x Time): the missing digits of a
    # fraction take their bound, and digits beyond the millisecond are dropped
    ("'12:34:56.7'.lowBoundary()", ("12:34:56.700",) * 3),
    ("'12:34:56.7'.highBoundary()", ("12:34:56.799",) * 3),
    ("'12:34:56.7891'.lowBoundary()", ("12:34:56.789",) * 3),
    ("'12:34:56.7891'.highBoundary()", ("12:34:56.789",) * 3),
    ("'2014-01-01T08:30:00.12345Z'.lowBoundary()", ("2014-01-01T08:30:00.123Z",) * 3),
    ("birthDate.lowBoundary().startsWith('1970')", (True, False, None)),
    ("multipleBirthInteger.lowBoundary() * 2", (3.0, None, None)),
    ("'2014-01-01T08:30:00Z'.lowBoundary()", ("2014-01-01T08:30:00.000Z",) * 3),
    ("'2014-01-01T08:30:00Z'.highBoundary()", ("2014-01-01T08:30:00.999Z",) * 3),
    ("'2014-01-01T08:30:00.123+02:00'.lowBoundary()", ("2014-01-01T08:30:00.123+02:00",) * 3),
    ("'2014-01-01T08:30:00-05:00'.highBoundary()", ("2014-01-01T08:30:00.999-05:00",) * 3),
    ("'2014-01-01T08:30:00'.lowBoundary()", ("2014-01-01T08:30:00.000+14:00",) * 3),
    ("'2014-01-01T08:30:00'.highBoundary()", ("2014-01-01T08:30:00.999-12:00",) * 3),
    ("{}.lowBoundary()", (None, None, None)),
]


@pytest.mark.parametrize(("path", "expected"), BOUNDARIES)
def test_boundaries_of_numbers_dates_date_times_and_times(
    path: str, expected: tuple[Any, ...]
) -> None:
    _check(path, expected)


def test_a_date_time_of_a_date_alone_takes_the_whole_day_and_the_extreme_zones() -> None:
    records = [
        _obs("o1", valueDateTime="2010"),
        _obs("o2", valueDateTime="2010-02"),
        _obs("o3", valueDateTime="2010-10-10"),
        _obs("o4"),
    ]
    low = _values("value.ofType(dateTime).lowBoundary()", records, "Observation")
    high = _values("value.ofType(dateTime).highBoundary()", records, "Observation")
    assert low == [
        "2010-01-01T00:00:00.000+14:00",
        "2010-02-01T00:00:00.000+14:00",
        "2010-10-10T00:00:00.000+14:00",
        None,
    ]
    assert high == [
        "2010-12-31T23:59:59.999-12:00",
        "2010-02-28T23:59:59.999-12:00",
        "2010-10-10T23:59:59.999-12:00",
        None,
    ]


# ---------------------------------------------------------------- constants, %rowIndex

CONTEXT = [
    ("%rowIndex", (0, 0, 0)),
    ("%resource.id", ("a", "b", "c")),
    ("%rootResource.id", ("a", "b", "c")),
    ("%context.id", ("a", "b", "c")),
    ("gender.where(%rowIndex = 0)", ("female", "male", None)),
    ("%n + 1", (3, 3, 3)),
    ("%big * 2", (20, 20, 20)),
    ("%pos * 2", (6, 6, 6)),
    ("%i64 * 2", (10, 10, 10)),
    ("%whole", (2.0, 2.0, 2.0)),
    ("%d / 2", (1.25, 1.25, 1.25)),
    ("%flag and true", (True, True, True)),
    ("%none.exists()", (False, False, False)),
    ("name[%n].given.join(',')", ("g3", "", "")),
]
TYPED_CONSTANTS = [
    {"name": "n", "valueInteger": 2},
    {"name": "big", "valueUnsignedInt": 10},
    {"name": "pos", "valuePositiveInt": 3},
    {"name": "i64", "valueInteger64": "5"},
    {"name": "whole", "valueDecimal": 2},
    {"name": "d", "valueDecimal": 2.5},
    {"name": "flag", "valueBoolean": True},
    {"name": "none", "valueString": None},
]


@pytest.mark.parametrize(("path", "expected"), CONTEXT)
def test_constants_and_row_index_at_the_resource(path: str, expected: tuple[Any, ...]) -> None:
    try:
        _check(path, expected, constant=TYPED_CONSTANTS)
    except ViewDefinitionError as exc:
        pytest.fail(str(exc))


# ---------------------------------------------------------------- refusals

REFUSALS = [
    ("name = name", "cannot compare a complex element with a complex element by '='"),
    ("gender < name", "cannot compare a string with a complex element by '<'"),
    ("'a' - 'b'", "'-' is not defined for strings"),
    ("1 + 'a'", "'+' needs numbers, not an integer and a string"),
    ("true * 2", "'*' needs numbers, not a boolean and an integer"),
    ("gender | active", "'|' of a string and a boolean"),
    ("1 | 'a'", "'|' of an integer and a string"),
    ("'a' | 1.5", "'|' of a string and a decimal"),
    ("gender and true", "the left side of 'and' must be a boolean, but it is a string"),
    ("true or gender", "the right side of 'or' must be a boolean, but it is a string"),
    ("name.where(family)", "the argument of where() must be a boolean, but it is a string"),
    ("name.exists(family)", "the argument of exists() must be a boolean, but it is a string"),
    ("gender.not()", "the input of not() must be a boolean, but it is a string"),
    ("multipleBirthInteger.not()", "the input of not() must be a boolean, but it is an integer"),
    ("(1.5).not()", "the input of not() must be a boolean, but it is a decimal"),
    ("name.not()", "the input of not() must be a boolean, but it is a complex element"),
    ("name['x']", "an index must be an integer"),
    ("name[(0 | 1)]", "an index must be an integer"),
    ("active.lowBoundary()", "lowBoundary()/highBoundary() of a boolean"),
    (
        "name.where(%rowIndex = 0)",
        "%rowIndex cannot be read inside where() or exists() of a collection",
    ),
    ("name.given.join(gender)", "join() needs a string separator"),
    ("name.given.join(1)", "join() needs a string separator"),
    ("id.startsWith(name)", "a literal or a view constant is needed here"),
    (
        "name.where(%resource.id = 'a')",
        "%resource is only supported where the focus is the resource itself",
    ),
    (
        "gender.where(%resource.id = 'a')",
        "%resource is only supported where the focus is the resource itself",
    ),
    ("id.startsWith(gender)", "a literal or a view constant is needed here"),
    ("active.startsWith('t')", "startsWith() needs a string input, not a boolean"),
    ("gender.startsWith(1)", "startsWith() needs string arguments"),
    ("gender.replaceMatches('a', 1)", "replaceMatches() needs string arguments"),
    ("'a' in ('a' | 'b')", "the operator 'in' is not supported"),
]


@pytest.mark.parametrize(("path", "message"), REFUSALS)
def test_a_path_that_cannot_mean_anything_is_refused_naming_it(path: str, message: str) -> None:
    text = _fails(path, message)
    assert text == f"select[0].column[0].path: {message}, in {path!r}"


def test_the_resource_constants_are_refused_below_the_resource() -> None:
    for name in ("resource", "rootResource", "context"):
        view = {"select": [{"forEach": "name", "column": [{"name": "v", "path": f"%{name}.id"}]}]}
        with pytest.raises(ViewDefinitionError) as caught:
            run_view({"resource": "Patient", **view}, PATIENTS)
        message = f"%{name} is only supported where the focus is the resource itself"
        assert message in str(caught.value)


# ---------------------------------------------------------------- fixes (each failed before)

SPEC_ARITHMETIC = [
    # FHIRPath N1 6.6: "If the right operand is 0, the result is empty" (/, div, mod);
    # before: inf for /, a Polars error for div, NaN for a decimal mod
    ("5 / 0", None),
    ("5 / 0.0", None),
    ("5 div 0", None),
    ("5.5 div 0", None),
    ("5 mod 0", None),
    ("5.5 mod 0", None),
    # mod is "the remainder of the truncated division": the sign of the left operand
    # (before: Polars' floored remainder, the sign of the right one)
    ("-5 mod 2", -1),
    ("5 mod -2", 1),
    ("-5 mod -2", -1),
    ("-7.5 mod 2", -1.5),
    ("-4 mod 2", 0),
    ("0.5 mod -2", 0.5),
    ("0 mod -2", 0),
    ("5 mod 2", 1),
    ("5.5 div 0.7", 7),
    ("-5 div 2", -2),
]


@pytest.mark.parametrize(("path", "want"), SPEC_ARITHMETIC)
def test_division_by_zero_is_empty_and_mod_truncates(path: str, want: Any) -> None:
    assert _typed(_values(path, [C])) == _typed([want])


def test_a_negative_index_is_outside_the_collection() -> None:
    # FHIRPath N1 6.3 indexer: "If the index lies outside the boundaries of the input
    # collection, an empty collection is returned"; before: Polars counted from the end
    assert _values("name[-1].family") == [None, None, None]
    assert _values("name[0 - 2].family") == [None, None, None]
    assert _values("gender[-1]") == [None, None, None]


def test_collections_of_numbers_and_of_other_types_are_unequal() -> None:
    # items of different types are not equal; before: the other side was cast to
    # decimals, a Polars error for any text that is not a number
    assert _values("(1 | 2) = ('a' | 'b')", [C]) == [False]
    assert _values("(1 | 2) = true", [C]) == [False]
    assert _values("(1 | 2) != ('a' | 'b')", [C]) == [True]
    assert _values("(1 | 2) = (1.0 | 2.0)", [C]) == [True]


# ---------------------------------------------------------------- the compiler called alone

# The view's checks (toolkit.viewdefs.definition) refuse these paths before the compiler
# sees them; the compiler refuses them too when it is given the tree directly.
PATIENT_TYPE = pl.Struct({"id": pl.String, "gender": pl.String, "active": pl.Boolean})


def _compile_alone(node: fp.Node, constants: dict[str, tuple[object, str]] | None = None) -> str:
    this = Val(pl.col("__c"), PATIENT_TYPE, False)
    scope = Scope(this, constants or {}, "here", "the text", root=True)
    with pytest.raises(ViewDefinitionError) as caught:
        compile_path(node, scope)
    assert caught.value.path == "here"
    prefix, suffix = "here: ", ", in 'the text'"
    text = str(caught.value)
    assert text.startswith(prefix) and text.endswith(suffix), text
    return text[len(prefix) : -len(suffix)]


def test_what_the_view_checks_refuse_first_the_compiler_refuses_too() -> None:
    ident, gender = fp.Member(fp.This(), "id"), fp.Member(fp.This(), "gender")
    no_type = fp.Call(gender, "ofType", (fp.Literal(1, "integer"),), (None,))
    assert _compile_alone(no_type) == "a type name is needed"
    is_nothing = fp.Call(gender, "is", (fp.Literal(1, "integer"),), (None,))
    assert _compile_alone(is_nothing) == "a type name is needed"
    unknown = fp.Call(ident, "soundex")
    assert _compile_alone(unknown) == "the function soundex() is not supported"
    member_of = fp.Binary("in", gender, ident)
    assert _compile_alone(member_of) == "the operator 'in' is not supported"
    assert _compile_alone(fp.Node()) == "cannot compile Node"
    assert _compile_alone(fp.Constant("nope")) == "unknown constant %nope"
    bad = fp.Call(gender, "matches", (fp.Literal("(", "string"),), (None,))
    assert _compile_alone(bad).startswith("matches() has a bad regular expression '(': ")


def test_odd_json_is_named_by_its_type_when_refused() -> None:
    # arrays of arrays and integers beyond 64 bits are not FHIR, but they can be read
    records = [{"resourceType": "Patient", "id": "x", "odd": [[1, 2], [3]], "big": 2**64 - 1}]
    text = _fails("odd.not()", "", records)
    assert "the input of not() must be a boolean, but it is a collection," in text
    # Polars' name of the type it read (Int128, or UInt64 in some versions)
    text = _fails("big.not()", "", records)
    assert re.search(r"the input of not\(\) must be a boolean, but it is U?Int(128|64),", text)


def test_a_reference_key_reads_the_reference_element_itself() -> None:
    records = [
        {
            "resourceType": "Patient",
            "id": "x",
            "managingOrganization": {"reference": "Organization/o1"},
        }
    ]
    got = _values("managingOrganization.getReferenceKey().startsWith('o')", records)
    assert got == [True]
    # a Reference whose "reference" is a choice of types in the data: say which
    odd = [
        {
            "resourceType": "Patient",
            "id": "x",
            "link": [{"referenceString": "x", "referenceInteger": 1}],
        }
    ]
    _fails("link.getReferenceKey()", "'reference' is a choice of types", odd)


def test_a_function_argument_that_is_a_path_is_not_a_constant_of_its_name() -> None:
    # a view constant called "name" does not make the path `name` a constant
    constant = [{"name": "name", "valueString": "a"}]
    text = _fails(
        "id.startsWith(name)", "a literal or a view constant is needed here", constant=constant
    )
    assert text.endswith(", in 'id.startsWith(name)'")
    assert _values("id.startsWith(%name)", constant=constant) == [True, False, False]


@pytest.mark.parametrize(
    ("path", "dtype"),
    [
        ("{}.count()", pl.Int64),
        ("name.count()", pl.Int64),
        ("gender.count()", pl.Int64),
        ("%rowIndex", pl.Int64),
        ("1 + 2", pl.Int64),
        ("2", pl.Int64),
        ("2.5", pl.Float64),
        ("7 / 2", pl.Float64),
        ("7 div 2", pl.Int64),
        ("{}.join(',')", pl.String),
        ("gender.exists()", pl.Boolean),
        ("1 < {}", pl.Boolean),
        ("gender = {}", pl.Boolean),
    ],
)
def test_integers_are_int64_columns(path: str, dtype: type[pl.DataType]) -> None:
    # docs/views.md: FHIR integer -> Int64, decimal -> Float64, a column without a type
    # takes the type of its data
    frame = run_view(
        {"resource": "Patient", "select": [{"column": [{"name": "v", "path": path}]}]}, PATIENTS
    )
    assert frame.schema["v"] == dtype


def test_extensions_without_urls_or_under_another_name_are_not_extensions() -> None:
    no_url = [{"resourceType": "Patient", "id": "x", "extension": [{"valueString": "v"}]}]
    assert _values("extension('u').exists()", no_url) == [False]
    # no "extension" element, but two elements whose names start with it
    odd = [{"resourceType": "Patient", "id": "x", "extensionA": "a", "extensionB": 1}]
    _fails("extension('u')", "'extension' is a choice of types", odd)


def test_the_resource_key_of_odd_data_is_refused_not_a_crash() -> None:
    odd = [{"resourceType": "Patient", "idA": "a", "idB": 1}]
    _fails("getResourceKey()", "'id' is a choice of types (idA, idB)", odd)
