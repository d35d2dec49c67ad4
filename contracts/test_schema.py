"""schema: schemathesis property-based requests over every GET operation of openapi.yaml.

Each generated request goes through the run's budget and pacing, is recorded as
evidence, and its response is validated against the generated OpenAPI document:
status code documented, content type ``application/fhir+json``, body and headers
conforming. Authorization is sent as a plain header on every call: no auth
provider is registered, so schemathesis has nothing to refresh and never replays
a request after a 401 (its default ``retry_on=[401]`` does not apply).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.specs.openapi import checks as oas_checks

from contracts.openapi import load_openapi
from contracts.session import DEFAULT_USER_AGENT
from contracts.suite import Recorder, Run, current_run
from toolkit import catalogue as cat

_RUN = current_run()
MAX_EXAMPLES = _RUN.options.schema_examples if _RUN is not None else 3
"""Examples hypothesis generates per operation (--schema-examples); a counter caps requests."""


@schemathesis.check
def fhir_json_content_type(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every JSON body is served as application/fhir+json."""
    if not response.content:
        return None
    values = response.headers.get("content-type") or [""]
    media = str(values[0]).split(";")[0].strip().lower()
    if media != cat.FHIR_JSON:
        msg = f"content type is {media!r}, expected {cat.FHIR_JSON!r}"
        raise AssertionError(msg)
    return None


CHECKS = [
    schemathesis.checks.not_a_server_error,
    oas_checks.status_code_conformance,
    oas_checks.content_type_conformance,
    oas_checks.response_schema_conformance,
    oas_checks.response_headers_conformance,
    fhir_json_content_type,
]

schema = schemathesis.openapi.from_dict(copy.deepcopy(load_openapi()))
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE],
    max_examples=MAX_EXAMPLES,
    no_shrink=True,
    deterministic=True,
    database="none",
)
schema.config.update(suppress_health_check=list(schemathesis.config.HealthCheck))


def _calls(pm: Run) -> dict[str, int]:
    """Requests sent so far per operation (hypothesis may generate more examples than that)."""
    counts: dict[str, int] = pm.observations.setdefault("schema_requests_per_operation", {})
    return counts


@pytest.mark.pm_check("schema.conformance", "schema")
@hypothesis.settings(max_examples=MAX_EXAMPLES, deadline=None, database=None)
@schema.include(method="GET").parametrize()
def test_get_operations_conform_to_openapi(
    case: schemathesis.Case, pm: Run, check: Recorder
) -> None:
    calls = _calls(pm)
    label = case.operation.label
    if calls.get(label, 0) >= pm.options.schema_examples:
        return
    calls[label] = calls.get(label, 0) + 1
    session = pm.session
    if session.remaining_budget <= 0:
        pytest.skip(f"request budget of {session.budget} exhausted")
    session.pace()
    session.used += 1
    token = session.token()
    headers = {
        "Authorization": f"Bearer {token.access_token}",
        "Accept": cat.FHIR_JSON,
        "User-Agent": session.user_agent or DEFAULT_USER_AGENT,
    }
    started = time.monotonic()
    response = case.call(base_url=session.origin, headers=headers, timeout=15)
    ex = session.record(
        case.method.upper(),
        response.request.url or "",
        {k: v if isinstance(v, str) else v.decode() for k, v in response.request.headers.items()},
        None,
        response.status_code,
        {k.lower(): ", ".join(v) for k, v in response.headers.items()},
        response.text,
        time.monotonic() - started,
        authenticated=True,
        operation=label,
    )
    # Counted on the token's life; a 401 on a live token is token-lifetime's finding.
    session.token_answered(token, ex)
    try:
        case.validate_response(response, checks=CHECKS, headers=headers)
    except AssertionError as exc:
        # Recorded, not raised: hypothesis would replay the failing example (more requests);
        # the plugin fails this check once every example has run.
        check.fail(f"{label}: {session.redact(str(exc)).strip()[:3000]}", ex)


@pytest.mark.pm_check("schema.capability", "schema")
def test_the_capability_statement_matches_the_catalogue(pm: Run, check: Recorder) -> None:
    """``GET /main/metadata`` (facts, not the spec): differences are observations only."""
    ex = pm.session.get(
        cat.METADATA_PATH.removeprefix(cat.API_PREFIX), operation=f"GET {cat.METADATA_PATH}"
    )
    check.attach(ex)
    if ex.status != 200 or not isinstance(ex.json, dict):
        check.observe(
            "metadata",
            f"GET {cat.METADATA_PATH} answered {ex.status}: the deployment publishes no "
            "CapabilityStatement, so nothing is compared with it; the other checks go on",
            rule="capability",
            source="facts",
        )
        pm.observations["capability_statement"] = {"served": False, "status": ex.status}
        return
    differences = cat.capability_differences(ex.json)
    for difference in differences:  # "<Type>: <what differs>", one observation each
        check.observe(f"metadata {difference}", difference, rule="capability", source="facts")
    pm.observations["capability_statement"] = {
        "served": True,
        "differences": len(differences),
        "first_differences": differences[:20],
    }
