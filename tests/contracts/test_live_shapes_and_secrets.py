"""`pmtk check` against a live-shaped deployment, with hostile secrets and next links.

The deployment is the mock behind :mod:`tests.contracts.live_proxy`, which rewrites
every answer into the forms of ``public-docs-facts.md`` and swaps in a client secret
and access tokens full of awkward characters.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from typer.testing import CliRunner

from tests.contracts.live_proxy import LIVE_LACKS, live_proxy, recording_server
from toolkit.cli import app
from toolkit.mock import serve

# A leading dash, quotes, a backslash, non-ASCII and URL-reserved characters.
SECRET = '-cSECRET"q\\b\u00e9\u2603&=+%#?/x'
TOKEN = 'tok"en\\&=+%#?/-'
runner = CliRunner()


def _forms(secret: str) -> dict[str, str]:
    return {
        "raw": secret,
        "json": json.dumps(secret)[1:-1],
        "json-ascii": json.dumps(secret, ensure_ascii=True)[1:-1],
        "url": quote(secret, safe=""),
        "url-plus": quote_plus(secret),
        "html": html.escape(secret),
        "base64": base64.b64encode(secret.encode()).decode(),
    }


def _check(base_url: str, report_dir: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(
        app,
        ["check", "--report-dir", str(report_dir), "--schema-examples", "1", *extra],
        env={"PM_BASE_URL": base_url, "PM_CLIENT_ID": "pmtk-demo", "PM_CLIENT_SECRET": SECRET},
        catch_exceptions=False,
    )
    path = report_dir / "report.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    return result.exit_code, report, result.output


def test_live_shaped_deployment_with_a_hostile_secret_is_conformant_and_leaks_nothing(
    tmp_path: Path,
) -> None:
    with (
        serve(test_controls=True, shapes="spec") as dep,
        live_proxy(dep, secret=SECRET, token_text=TOKEN, metadata=False, missing=LIVE_LACKS) as url,
    ):
        code, report, output = _check(url, tmp_path)
    failed = [
        c["id"] + ": " + c["message"][:300] for c in report["checks"] if c["status"] == "failed"
    ]
    assert code == 0, failed or output
    assert report["summary"]["failed"] == 0
    # The endpoints outside the spec that it lacks: observations, never failures.
    outside = {
        (o["field"], o["example"].split(" answered ")[0])
        for c in report["checks"]
        for o in c["observed"]
        if o["rule"] == "outside-spec"
    }
    assert {
        ("ReferralDefinition", "GET /main/ReferralDefinition?_count=100"),
        ("ChargeItemDefinition", "GET /main/ChargeItemDefinition?_count=100"),
        ("Slot", "GET /main/Slot?_count=100"),
        ("Patient", "reading a listed Patient"),
        ("Invoice", "reading a listed Invoice"),
        ("HealthcareService", "reading a listed HealthcareService"),
    } <= outside, outside
    assert not {f for f, _ in outside} & {"PractitionerRole", "Referral", "Appointment"}
    # This deployment has no /main/metadata: said once, as an observation, and the run went on.
    assert report["observations"]["capability_statement"] == {"served": False, "status": 404}
    capability = [o for c in report["checks"] for o in c["observed"] if o["rule"] == "capability"]
    assert len(capability) == 1 and "publishes no CapabilityStatement" in capability[0]["example"]

    # Reference forms other than the spec's: one observed finding per field, with a count.
    observed = [o for c in report["checks"] for o in c["observed"]]
    forms = [o for o in observed if o["rule"] == "reference-form"]
    fields = [o["field"] for o in forms]
    assert "Referral.subject" in fields
    assert len(fields) == len(set(fields))
    subject = next(o for o in forms if o["field"] == "Referral.subject")
    referrals = report["observations"]["id_prefixes"]["Referral"]
    assert 1 < subject["count"] <= sum(referrals.values())
    # The live forms were met (so the proxy really served them) and none failed.
    seen = report["observations"]["forms"]
    status = "Appointment.participant.appointment-participant-status"
    assert seen[status]["url:full"] > 0
    assert {"value:valueCode", "value:valueCoding", "value:valueString"} <= set(
        seen["Appointment.location-type"]
    )
    assert seen["Referral.limitQuantity.quantity"]["value:Quantity"] > 0
    assert seen["Referral.referralDefinition"]["value:Reference"] > 0
    assert report["observations"]["practitioner_name_shape"]["seen"]["array"] > 0
    # Participant status was found under its full url: not reported missing everywhere.
    missing = {m["field"] for m in report["observations"]["missing_everywhere"]}
    assert status not in missing

    # No form of the secret or of any access token in any file written or on the console.
    texts = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.iterdir() if p.is_file()}
    assert {"report.json", "junit.xml", "report.html"} <= set(texts)
    texts["console"] = output
    for name, text in texts.items():
        for secret in (SECRET, TOKEN):
            for form, value in _forms(secret).items():
                assert value not in text, f"{form} form of a secret in {name}"
    assert "<redacted>" in texts["report.json"]


def test_next_link_to_another_origin_is_a_paging_finding_and_is_never_contacted(
    tmp_path: Path,
) -> None:
    with recording_server() as (foreign, contacted):
        next_links = {"Appointment": f"{foreign}/main/Appointment?page=2&_count=100"}
        with (
            serve(test_controls=True, shapes="spec") as dep,
            live_proxy(dep, secret=SECRET, token_text=TOKEN, foreign_next=next_links) as url,
        ):
            code, report, _ = _check(url, tmp_path)
    assert code == 1
    checks = {c["id"]: c for c in report["checks"]}
    walk = checks["paging.walk[Appointment]"]
    assert walk["status"] == "failed"
    assert "not on the configured origin" in walk["message"]
    assert contacted == []


def test_secret_with_a_leading_dash_in_a_flag_runs_the_suite(tmp_path: Path) -> None:
    with (
        serve(test_controls=True, shapes="spec") as dep,
        live_proxy(dep, secret=SECRET, token_text=TOKEN) as url,
    ):
        result = runner.invoke(
            app,
            [
                "check",
                f"--base-url={url}",
                "--client-id=pmtk-demo",
                f"--client-secret={SECRET}",
                f"--report-dir={tmp_path}",
                "--request-budget=60",
            ],
            env={},
            catch_exceptions=False,
        )
    assert "Config file" not in result.output
    assert (tmp_path / "report.json").is_file()
    for value in _forms(SECRET).values():
        assert value not in result.output
