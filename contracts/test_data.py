"""prefix, enum, reference, format: the catalogue's rules over real records.

One sample (page 1 of every list at the maximum page size, plus a few reads; with
``--data all`` every page of every list) is walked once by
:func:`contracts.walker.walk_resource`; each check notes how many records it checked
of ``Bundle.total``; each check reports the
problems of its own category for one resource. A problem with a rule of the spec
fails the check; a problem with a rule that comes from the facts or from pmtk is an
observation-level finding of the check, once per field with a count. So are a
reference form other than the spec's (``reference.shape``) and a declared field
that no record of a non-empty list holds (``schema.fields``).
"""

from __future__ import annotations

import pytest

from contracts.suite import Recorder, Run, Sample
from contracts.walker import SPEC_REFERENCE_FORM
from toolkit import catalogue as cat

RESOURCES = list(cat.LISTED_RESOURCES)


def _report(pm: Run, check: Recorder, resource: str, category: str) -> None:
    sample = pm.sample()
    if resource in sample.errors:
        ex = sample.errors[resource]
        pytest.skip(f"GET /main/{resource} answered {ex.status}; nothing to check")
    checked = len(sample.bundles[resource].json.get("entry") or [])
    if checked == 0:
        check.note(f"no {resource} records to check")
    else:
        check.note(sample.coverage_note(resource))
    _problems(sample, check, resource, category)


def _problems(sample: Sample, check: Recorder, resource: str, category: str) -> None:
    for problem, ex in sample.problems.get(resource, []):
        if problem.category != category:
            continue
        if problem.source == "spec":
            check.fail(problem.text(), ex)
        else:
            check.observe(problem.field, problem.text(), rule=category, source=problem.source)


@pytest.mark.pm_check("prefix.ids", "prefix")
@pytest.mark.parametrize("resource", RESOURCES)
def test_ids_carry_an_allowed_prefix(pm: Run, check: Recorder, resource: str) -> None:
    _report(pm, check, resource, "prefix")


@pytest.mark.pm_check("enum.values", "enum")
@pytest.mark.parametrize("resource", RESOURCES)
def test_enum_fields_hold_allowed_values(pm: Run, check: Recorder, resource: str) -> None:
    _report(pm, check, resource, "enum")


@pytest.mark.pm_check("reference.shape", "reference")
@pytest.mark.parametrize("resource", RESOURCES)
def test_references_have_the_catalogue_shape(pm: Run, check: Recorder, resource: str) -> None:
    _report(pm, check, resource, "reference")
    for entry in pm.sample().seen.reference_forms():
        if not entry["field"].startswith(f"{resource}."):
            continue
        forms = ", ".join(
            f"{n} {form}" for form, n in entry["forms"].items() if form != SPEC_REFERENCE_FORM
        )
        message = (
            f"{entry['field']}: {forms} reference(s), not the spec's /main/<Type>/<id> "
            f"(e.g. {entry['example']})"
        )
        check.observe(
            entry["field"], message, rule="reference-form", source="facts", count=entry["other"]
        )


@pytest.mark.pm_check("format.values", "format")
@pytest.mark.parametrize("resource", RESOURCES)
def test_values_follow_their_format_and_required_fields_exist(
    pm: Run, check: Recorder, resource: str
) -> None:
    _report(pm, check, resource, "format")


@pytest.mark.pm_check("schema.fields", "schema")
@pytest.mark.parametrize("resource", RESOURCES)
def test_fields_have_the_catalogue_json_types(pm: Run, check: Recorder, resource: str) -> None:
    sample = pm.sample()
    if resource in sample.errors:
        ex = sample.errors[resource]
        check.fail(f"GET /main/{resource}?_count={cat.MAX_PAGE_SIZE} answered {ex.status}", ex)
        return
    _problems(sample, check, resource, "schema")
    for entry in sample.seen.missing_everywhere():
        if not entry["field"].startswith(f"{resource}."):
            continue
        message = (
            f"{entry['field']} ({entry['source']}) is absent from all {entry['walked']} "
            f"{entry['within']} walked"
        )
        for key, words in (
            ("unknown_extensions_beside", "unrecognised extension urls"),
            ("unknown_keys_beside", "unknown keys"),
        ):
            if entry[key]:
                message += f"; {words} beside it: " + ", ".join(entry[key][:5])
        check.observe(
            entry["field"],
            message,
            rule="missing-everywhere",
            source=entry["source"],
            count=entry["walked"],
        )
    read_source = cat.endpoint_source(resource, "read") or "pmtk"
    for read in sample.reads.get(resource, []):
        if read.status == 200:
            continue
        message = f"reading a listed {resource} answered {read.status}"
        if read_source == "spec":
            check.fail(message, read)
        else:  # a read the spec does not list (Patient's): its absence is an observation
            check.observe(resource, message, rule="outside-spec", source=read_source)
    for ex in [sample.bundles[resource], *sample.reads.get(resource, [])]:
        media = (ex.header("content-type") or "").split(";")[0].strip().lower()
        if media != cat.FHIR_JSON:
            check.fail(f"{ex.operation} is served as {media!r}, expected {cat.FHIR_JSON!r}", ex)
