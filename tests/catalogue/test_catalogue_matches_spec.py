"""The catalogue is a transcription of the spec's tables; these tests catch slips.

They parse the markdown tables of ``../shared/spec/practice-management-api.md``
and compare them with :mod:`toolkit.catalogue` in both directions: every field,
enum value, prefix, reference shape and endpoint of the spec is in the catalogue,
and every catalogue entry that claims the spec as its source is in the spec.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolkit import catalogue as cat
from toolkit.catalogue import Field

SPEC = Path(__file__).resolve().parents[2] / ".." / "shared" / "spec" / "practice-management-api.md"


def spec_required() -> bool:
    """Whether a missing spec fails the run instead of skipping the spec tests.

    CI (any run with ``CI`` set, as GitHub Actions and GitLab do) always has
    ``shared/`` beside the checkout, so there a missing spec is a broken set-up that
    must not pass quietly. A user's own clone may lack ``shared/``; there the spec
    tests skip, and the tests that need no spec still run.
    """
    return bool(os.environ.get("CI"))


TICKED = re.compile(r"`([^`]+)`")


@dataclass
class Table:
    section: str
    header: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_tables(text: str) -> list[Table]:
    tables: list[Table] = []
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if line.startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            header = _cells(line)
            rows: list[list[str]] = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            tables.append(Table(section, header, rows))
            continue
        i += 1
    return tables


def read_spec(path: Path) -> str:
    """The spec's text; a missing file fails under CI (naming the path) and skips elsewhere."""
    if not path.is_file():
        where = f"the spec file {path.resolve()} is missing"
        if spec_required():
            pytest.fail(f"{where}; CI must check out shared/ beside the repository")
        pytest.skip(f"{where} (run from a checkout beside shared/)")
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def spec_text() -> str:
    return read_spec(SPEC)


def test_a_missing_spec_fails_under_ci_naming_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CI", "true")
    missing = tmp_path / "shared" / "spec.md"
    with pytest.raises(pytest.fail.Exception, match=f"{re.escape(str(missing))}.*missing"):
        read_spec(missing)


def test_a_missing_spec_skips_outside_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="missing"):
        read_spec(tmp_path / "spec.md")


@pytest.fixture(scope="module")
def tables(spec_text: str) -> list[Table]:
    return parse_tables(spec_text)


def resource_tables(tables: list[Table]) -> dict[str, Table]:
    """Section 2.x field tables keyed by resource name (first table of each section)."""
    out: dict[str, Table] = {}
    for t in tables:
        m = re.match(r"2\.\d+ (\w+)$", t.section)
        if m and t.header[:2] == ["Field", "Type"] and m.group(1) not in out:
            out[m.group(1)] = t
    return out


def subtree(f: Field) -> set[str]:
    names: set[str] = set()
    for child in f.fields:
        names.add(child.name)
        names.update(v for v in child.enum if v is not None)
        names |= subtree(child)
    return names


def test_every_spec_resource_field_is_in_the_catalogue(tables: list[Table]) -> None:
    by_resource = resource_tables(tables)
    assert set(by_resource) == {
        "Referral",
        "Appointment",
        "Coverage",
        "Organization",
        "Practitioner",
        "InvoiceLine",
    }
    missing = []
    for name, table in by_resource.items():
        res = cat.resource(name)
        for row in table.rows:
            try:
                res.field(row[0])
            except KeyError:
                missing.append(f"{name}.{row[0]}")
    assert missing == []


def test_every_spec_sourced_catalogue_field_is_in_the_spec(tables: list[Table]) -> None:
    by_resource = resource_tables(tables)
    extra = []
    for name, table in by_resource.items():
        spec_names = {row[0] for row in table.rows}
        for f in cat.resource(name).fields:
            if f.source == "spec" and (f.spec_name or f.name) not in spec_names:
                extra.append(f"{name}.{f.name}")
    assert extra == []


def _expected_type(type_cell: str) -> tuple[str, bool, bool, list[str]]:
    """(catalogue type, many, required, reference targets) for a spec Type cell."""
    t = type_cell.strip()
    required = "required" in t
    targets = re.findall(r"Reference\((\w+)\)", t)
    many = t.startswith("array")
    if t.startswith("Canonical"):
        kind = "canonical"
    elif targets:
        kind = "reference"
    elif t in ("coded value", "enum"):
        kind = "code"
    elif t == "flag":
        kind = "boolean"
    elif t.startswith(("object", "array")):
        kind = "object"
    else:
        kind = t.split(",")[0].strip()
    return kind, many, required, targets


def test_field_types_required_flags_and_reference_targets_match(tables: list[Table]) -> None:
    problems = []
    for name, table in resource_tables(tables).items():
        res = cat.resource(name)
        for row in table.rows:
            f = res.field(row[0])
            kind, many, required, targets = _expected_type(row[1])
            compatible = {kind, "code"} if kind == "string" else {kind}
            if f.type not in compatible:
                problems.append(f"{name}.{row[0]}: spec {row[1]!r}, catalogue {f.type!r}")
            if kind == "object" and many and not f.many:
                problems.append(f"{name}.{row[0]}: spec says array, catalogue is not many")
            if f.required != required:
                problems.append(f"{name}.{row[0]}: required {f.required} but spec {required}")
            if targets and kind == "canonical":
                if f.format != "canonical":
                    problems.append(f"{name}.{row[0]}: canonical without canonical format")
            elif targets:
                assert f.ref is not None
                if set(targets) != set(f.ref.types):
                    problems.append(f"{name}.{row[0]}: targets {targets} vs {f.ref.types}")
    assert problems == []


def test_reference_shapes_and_types_in_the_spec_match_the_catalogue(
    tables: list[Table],
) -> None:
    problems = []
    for name, table in resource_tables(tables).items():
        res = cat.resource(name)
        for row in table.rows:
            meaning = row[2]
            for type_name, prefix in re.findall(r"`/main/(\w+)/([A-Z]{2}-)?<id>`", meaning):
                f = res.field(row[0])
                if f.type == "canonical":
                    if not re.match(cat.format_pattern("canonical"), f"/main/{type_name}/x1"):
                        problems.append(f"{name}.{row[0]}: canonical pattern misses {type_name}")
                    continue
                assert f.ref is not None, f"{name}.{row[0]} has no reference shape"
                target = f.ref.target_for(type_name)
                if target is None:
                    problems.append(f"{name}.{row[0]}: no target {type_name}")
                    continue
                expected = (prefix,) if prefix else ()
                if target.prefixes != expected:
                    problems.append(
                        f"{name}.{row[0]}: prefixes {target.prefixes} vs spec {expected}"
                    )
                if not re.match(f.ref.pattern, f"/main/{type_name}/{prefix}123"):
                    problems.append(f"{name}.{row[0]}: pattern rejects the spec's shape")
    assert problems == []


def _spec_enums(tables: list[Table], spec_text: str) -> dict[tuple[str, str], set[str | None]]:
    """(resource, dotted field path) -> allowed values, as written in the spec."""
    enums: dict[tuple[str, str], set[str | None]] = {}

    def values(text: str) -> set[str | None]:
        return {None if v == "null" else v for v in TICKED.findall(text)}

    for name, table in resource_tables(tables).items():
        for row in table.rows:
            meaning = row[2]
            if "Allowed values:" in meaning:
                enums[(name, row[0])] = values(meaning.split("Allowed values:")[1])
            elif row[1] == "enum":
                enums[(name, row[0])] = values(meaning)
            for child, listed in re.findall(r"`(\w+)` \((?:enum: )?(`[^)]*`)\)", meaning):
                enums[(name, f"{row[0]}.{child}")] = values(listed)
    for t in tables:
        if t.header[:3] == ["Field", "Type", "Allowed values / format"]:
            for row in t.rows:
                if TICKED.search(row[2]):
                    enums[("Organization", f"address.{row[0]}")] = values(row[2])
    m = re.search(r"Allowed `contentType` values for an attachment: (.*?)\. Maximum", spec_text)
    assert m, "attachment content types paragraph not found"
    enums[("Referral", "attachments.contentType")] = values(m.group(1))
    return enums


def test_every_spec_enum_matches_the_catalogue_exactly(tables: list[Table], spec_text: str) -> None:
    enums = _spec_enums(tables, spec_text)
    # Guard the parser itself: these must all have been found.
    assert {
        ("Referral", "allocationType"),
        ("Referral", "expiryType"),
        ("InvoiceLine", "status"),
        ("InvoiceLine", "unitPriceComponent.type"),
        ("Organization", "telecom.system"),
        ("Organization", "telecom.use"),
        ("Organization", "address.use"),
        ("Organization", "address.type"),
        ("Referral", "attachments.contentType"),
    } <= set(enums)
    problems = []
    for (name, path), allowed in enums.items():
        f = cat.field_at(name, path)
        if set(f.enum) != allowed:
            problems.append(f"{name}.{path}: catalogue {set(f.enum)} vs spec {allowed}")
    assert problems == []
    assert None in cat.field_at("InvoiceLine", "status").enum


def test_state_table_values_match_the_catalogue(tables: list[Table]) -> None:
    (states,) = [t for t in tables if t.header == ["Resource", "State field", "Values"]]
    for res_name, state_field, values in states.rows:
        field_name = state_field.split(" (")[0]
        f = cat.resource(res_name).field(field_name) if res_name != "Appointment" else None
        if f is None:
            participant = cat.resource("Appointment").field("participant")
            f = participant.child(field_name)
            assert f.enum, "participant status must carry an enum (values from the facts)"
            continue
        if values == "true, false":
            assert f.type == "boolean"
        else:
            expected = {None if v == "null" else v for v in TICKED.findall(values)}
            assert set(f.enum) == expected, f"{res_name}.{field_name}"


def test_nested_field_names_in_the_spec_exist_under_their_parent(tables: list[Table]) -> None:
    problems = []
    for name, table in resource_tables(tables).items():
        for row in table.rows:
            f = cat.resource(name).field(row[0])
            if f.type not in ("object",):
                continue
            names = {t for t in TICKED.findall(row[2]) if re.fullmatch(r"[a-z][A-Za-z-]*", t)}
            missing = names - subtree(f)
            if missing:
                problems.append(f"{name}.{row[0]}: {sorted(missing)}")
    assert problems == []


def test_address_item_fields_match(tables: list[Table]) -> None:
    (address,) = [t for t in tables if t.header == ["Field", "Type", "Allowed values / format"]]
    spec_names = {row[0] for row in address.rows}
    catalogue_names = {f.name for f in cat.resource("Organization").field("address").fields}
    assert spec_names == catalogue_names
    assert cat.field_at("Organization", "address.line").many
    assert cat.field_at("Organization", "address.country").format == "country"


def test_id_prefixes_match_section_one(tables: list[Table]) -> None:
    (prefix_table,) = [t for t in tables if t.header == ["Resource", "Prefix", "Meaning"]]
    spec: dict[str, set[str]] = {}
    for res_name, prefix, meaning in prefix_table.rows:
        p = prefix.strip("`")
        spec.setdefault(res_name, set()).add(p)
        assert cat.ID_PREFIX_MEANINGS[p] == (res_name, meaning)
    for res_name, prefixes in spec.items():
        assert set(cat.resource(res_name).id_prefixes) == prefixes
    for r in cat.RESOURCES.values():
        if r.source == "spec" and r.id_prefixes:
            assert set(r.id_prefixes) == spec[r.name]


def test_create_prefixes_follow_section_four(tables: list[Table]) -> None:
    assert cat.resource("Organization").create_prefixes == ("SP-",)
    assert cat.resource("Practitioner").create_prefixes == ("EP-",)


def test_endpoints_match_section_four_and_the_token_endpoint(
    tables: list[Table], spec_text: str
) -> None:
    (endpoints,) = [t for t in tables if t.header[:3] == ["Method", "Path", "Operation"]]
    spec = {(row[0], row[1], row[2]) for row in endpoints.rows}
    catalogue = {
        (e.method, e.path, e.operation)
        for e in cat.ENDPOINTS
        if e.kind != "token" and e.source == "spec"
    }
    assert spec == catalogue
    assert len(spec) == 22
    assert "POST {base_url}/main/oauth/token" in spec_text
    (token,) = [e for e in cat.ENDPOINTS if e.kind == "token"]
    assert (token.method, token.path) == ("POST", "/main/oauth/token")


def test_limits_and_token_statements_match(tables: list[Table], spec_text: str) -> None:
    assert "500 requests per minute" in spec_text
    assert cat.RATE_LIMIT_PER_MINUTE == 500
    assert "`expires_in` (integer, 3600)" in spec_text
    assert cat.EXPIRES_IN_STATED == 3600
    assert "15 minutes" in spec_text
    assert cat.TOKEN_LIFETIME_STATED == 15 * 60
    assert "200MB" in spec_text
    assert cat.MAX_ATTACHMENT_BYTES >= 200_000_000
    (headers,) = [t for t in tables if t.header == ["Header", "Meaning"]]
    assert {row[0].strip("`") for row in headers.rows} == set(cat.RATE_LIMIT_HEADERS)
    assert "header `retry-after`" in spec_text
    assert cat.RETRY_AFTER_HEADER == "retry-after"


def test_format_rules_are_recorded(spec_text: str) -> None:
    assert "`+{country code}{phone number without spaces}`" in spec_text
    phone = cat.field_at("Organization", "telecom.value")
    assert phone.format == "phone"
    assert re.match(cat.format_pattern("phone"), "+61298765432")
    assert not re.match(cat.format_pattern("phone"), "+61 2 9876 5432")
    assert "ISO 4217" in spec_text
    assert cat.field_at("Referral", "limitMoney.amount.currency").format == "currency"
    assert "AUD" in cat.currency_codes()
    assert "ISO 3166" in spec_text
    assert {"AU", "GB", "NZ"} <= cat.country_codes()
    assert cat.field_at("Appointment", "start").format == "date-time"
    assert cat.field_at("Referral", "period.start").format == "date"


def test_eu_rule_covers_the_uk_and_eu_members_only() -> None:
    assert "GB" in cat.EU_UK_COUNTRIES
    assert "DE" in cat.EU_UK_COUNTRIES
    assert "AU" not in cat.EU_UK_COUNTRIES
    assert "CH" not in cat.EU_UK_COUNTRIES  # not an EU member
    assert len(cat.EU_UK_COUNTRIES) == 28
    assert cat.country_codes() >= cat.EU_UK_COUNTRIES


def test_catalogue_imports_without_http_or_dataframe_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys, toolkit.catalogue\n"
        "heavy = [m for m in ('httpx', 'starlette', 'polars', 'uvicorn') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
