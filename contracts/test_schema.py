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
from schemathesis.core.failures import FailureGroup
from schemathesis.openapi.checks import MissingHeaders
from schemathesis.specs.openapi import checks as oas_checks

from contracts.openapi import load_openapi
from contracts.session import (
    DEFAULT_USER_AGENT,
    RATE_LIMIT_HEADERS_ROOT_CAUSE,
    SERVER_ERROR_ROOT_CAUSE,
)
from contracts.suite import FINAL_PHASE, Recorder, Run, current_run
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
    # Counted on the token's life; a 401 on a live token is token-lifetime's finding,
    # a 429 rate-limit.paced's.
    session.token_answered(token, ex)
    session.throttled(ex)
    try:
        case.validate_response(response, checks=CHECKS, headers=headers)
    except (AssertionError, FailureGroup) as exc:
        # Recorded, not raised: hypothesis would replay the failing example (more requests);
        # the plugin fails this check once every example has run.
        failures = exc.exceptions if isinstance(exc, FailureGroup) else (exc,)
        for failure in failures:
            text = session.redact(_failure_text(failure)).strip()[:3000]
            check.fail(f"{label}: {text}", ex, cause=_cause(failure))


def _failure_text(failure: BaseException) -> str:
    title = getattr(failure, "title", None)
    message = getattr(failure, "message", None)
    if isinstance(title, str) and isinstance(message, str):
        return f"{title}: {message}" if message else title
    return str(failure)


def _cause(failure: BaseException) -> str | None:
    """The root-cause check a schemathesis failure belongs to, if another check owns it.

    Missing ``x-ratelimit-*`` headers (the document requires them) are rate-limit.headers'
    finding; a 5xx is schema.server-errors' (its exchange is marked by the session).
    """
    if isinstance(failure, MissingHeaders):
        missing = {h.lower() for h in failure.missing_headers}
        if missing and missing <= set(cat.RATE_LIMIT_HEADERS):
            return RATE_LIMIT_HEADERS_ROOT_CAUSE
    return None


SHOWN = 5


@pytest.mark.pm_check(SERVER_ERROR_ROOT_CAUSE, "schema", phase=FINAL_PHASE)
def test_no_request_of_the_run_got_a_server_error(pm: Run, check: Recorder) -> None:
    """Every 5xx the run received (the spec documents none): one finding per answer.

    A list, read or write that failed on the server is this finding only; the paging,
    write and data checks that met it are its follow-ons (the cascade guard).
    """
    guard = pm.session.cascade
    errors = [ex for ex in pm.session.log if guard.cause_of(ex) == SERVER_ERROR_ROOT_CAUSE]
    for ex in errors[:SHOWN]:
        check.fail(f"{ex.operation} answered {ex.status} (a server error)", ex)
    if len(errors) > SHOWN:
        check.fail(f"... {len(errors)} answers of {len(pm.session.log)} were server errors")
    check.note(f"no server error in {len(pm.session.log)} exchanges")


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
