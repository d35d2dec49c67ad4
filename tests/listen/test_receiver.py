"""The receiver's front door over real loopback HTTP: auth header, bodies, sizes, types.

Every refused call must answer a clear OperationOutcome and change nothing: no
queue file, no store write (the manifest's bytes are compared).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.listen.conftest import SECRET_HEADER, notification
from toolkit.errors import ConfigurationError
from toolkit.webhooks import AuthHeader, Listener, NotificationError, listen, parse_notification

NAME, VALUE = SECRET_HEADER
RAW = VALUE.encode()  # sent as UTF-8 bytes, as any HTTP sender does
HOOK_HEADERS: dict[str, str | bytes] = {"Content-Type": "application/fhir+json", NAME: RAW}


@pytest.fixture
def receiver(store: Path, client: Any) -> Iterator[Listener]:
    """A receiver that checks the secret header; no catch-up (the store is fresh)."""
    with listen(
        store,
        client=client,
        auth_header=AuthHeader(NAME, VALUE),
        catch_up=False,
        max_body_bytes=4096,
    ) as listener:
        yield listener


def _unchanged(listener: Listener, manifest_before: bytes) -> None:
    assert listener.queue.count() == 0
    assert (listener.store / "manifest.json").read_bytes() == manifest_before
    assert listener.stats.applied == 0


def _issue(response: httpx.Response) -> str:
    body = response.json()
    assert body["resourceType"] == "OperationOutcome"
    text: str = body["issue"][0]["diagnostics"]
    return text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {NAME: "wrong"},
        {NAME: RAW[:-1] + b"3"},  # same length, last byte differs
        {NAME: RAW + b"x"},
        {"Authorization": b"Bearer " + RAW},  # the right value under another name
    ],
    ids=["missing", "wrong", "same-length", "longer", "other-name"],
)
def test_a_wrong_or_missing_auth_header_is_refused_with_401_and_nothing_changes(
    receiver: Listener, headers: dict[str, str | bytes]
) -> None:
    before = (receiver.store / "manifest.json").read_bytes()
    response = httpx.post(
        receiver.url,
        content=notification(("Appointment", "10000001")),
        headers={"Content-Type": "application/fhir+json", **headers},
    )
    assert response.status_code == 401
    assert NAME in _issue(response)
    assert receiver.stats.refused == 1 and receiver.stats.received == 0
    _unchanged(receiver, before)


def test_a_repeated_auth_header_is_refused_even_if_one_copy_is_right(receiver: Listener) -> None:
    before = (receiver.store / "manifest.json").read_bytes()
    response = httpx.post(
        receiver.url,
        content=notification(("Appointment", "10000001")),
        headers=[(NAME, "wrong"), (NAME, RAW), ("Content-Type", "application/json")],
    )
    assert response.status_code == 401
    _unchanged(receiver, before)


def test_the_right_header_is_accepted_with_202(receiver: Listener) -> None:
    response = httpx.post(
        receiver.url, content=notification(("Appointment", "10000001")), headers=HOOK_HEADERS
    )
    assert response.status_code == 202
    assert response.json()["issue"][0]["severity"] == "information"
    assert receiver.wait_idle(30)
    assert receiver.stats.applied == 1


def test_the_secret_never_appears_in_repr_logs_or_answers(
    receiver: Listener, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers = [
        httpx.post(receiver.url, content=b"{}", headers={NAME: "wrong"}).text,
        httpx.post(receiver.url, content=b"[]", headers=HOOK_HEADERS).text,
        httpx.post(receiver.url, content=notification(("Invoice", "1")), headers=HOOK_HEADERS).text,
    ]
    shown = "\n".join([*answers, caplog.text, repr(receiver), repr(receiver.auth_header)])
    for form in (
        VALUE,
        orjson.dumps(VALUE).decode()[1:-1],
        VALUE.encode("unicode_escape").decode(),
    ):
        assert form not in shown
    assert "hidden" in repr(receiver.auth_header)


BAD_BODIES = {
    "not-json": (b"{not json", "body: not valid JSON"),
    "array": (b"[]", "body: must be a JSON object"),
    "searchset": (
        orjson.dumps({"resourceType": "Bundle", "type": "searchset", "entry": []}),
        "type: must be 'history'",
    ),
    "not-a-bundle": (orjson.dumps({"resourceType": "Patient", "id": "1"}), "resourceType"),
    "no-entries": (orjson.dumps({"resourceType": "Bundle", "type": "history"}), "entry"),
    "first-entry-not-status": (
        orjson.dumps(
            {
                "resourceType": "Bundle",
                "type": "history",
                "entry": [{"resource": {"resourceType": "Patient", "id": "1"}}],
            }
        ),
        "entry[0].resource.resourceType",
    ),
    "focus-missing": (
        orjson.dumps(
            {
                "resourceType": "Bundle",
                "type": "history",
                "entry": [
                    {
                        "resource": {
                            "resourceType": "SubscriptionStatus",
                            "notificationEvent": [{"eventNumber": "1"}],
                        }
                    }
                ],
            }
        ),
        "notificationEvent[0].focus",
    ),
    "reference-without-id": (
        notification(("Appointment", "x"), reference="Appointment"),
        "focus.reference",
    ),
    "path-traversal-id": (
        notification(("Appointment", "x"), reference="/main/Appointment/..%2F..%2Foauth"),
        "focus.reference",
    ),
    "type-mismatch": (
        orjson.dumps(
            {
                "resourceType": "Bundle",
                "type": "history",
                "entry": [
                    {
                        "resource": {
                            "resourceType": "SubscriptionStatus",
                            "notificationEvent": [
                                {"focus": {"reference": "Patient/1", "type": "Appointment"}}
                            ],
                        }
                    }
                ],
            }
        ),
        "focus.type",
    ),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_a_body_that_is_not_a_history_bundle_gets_400_naming_the_problem(
    receiver: Listener, name: str
) -> None:
    body, where = BAD_BODIES[name]
    before = (receiver.store / "manifest.json").read_bytes()
    response = httpx.post(receiver.url, content=body, headers=HOOK_HEADERS)
    assert response.status_code == 400
    assert where in _issue(response)
    _unchanged(receiver, before)


def test_an_oversized_body_gets_413_whether_announced_or_streamed(receiver: Listener) -> None:
    before = (receiver.store / "manifest.json").read_bytes()
    big = notification(*[("Appointment", str(10_000_000 + n)) for n in range(200)])
    assert len(big) > receiver.max_body_bytes
    announced = httpx.post(receiver.url, content=big, headers=HOOK_HEADERS)
    assert announced.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    streamed = httpx.post(receiver.url, content=chunks(), headers=HOOK_HEADERS)
    assert streamed.status_code == 413
    assert "exceeds" in _issue(streamed)
    _unchanged(receiver, before)


def test_a_type_without_a_view_is_accepted_and_logged_and_one_never_synced_waits(
    receiver: Listener, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pmtk.listen")
    before = (receiver.store / "manifest.json").read_bytes()
    ignored = httpx.post(
        receiver.url, content=notification(("Subscription", "77")), headers=HOOK_HEADERS
    )
    assert ignored.status_code == 202 and "not applied" in _issue(ignored)
    assert receiver.stats.ignored == 1
    assert "Subscription/77" in caplog.text and "not applied" in caplog.text
    # Invoice has a view but this store was never synced with it: the change waits
    kept = httpx.post(receiver.url, content=notification(("Invoice", "77")), headers=HOOK_HEADERS)
    assert kept.status_code == 202
    assert receiver.wait_idle(30)
    assert receiver.queue.waiting() == {"Invoice": 1}
    assert receiver.status()["queue"]["waiting_for_sync"] == {"Invoice": 1}
    _unchanged(receiver, before)


def test_other_methods_and_media_types_are_refused(receiver: Listener) -> None:
    assert httpx.get(receiver.url, headers=HOOK_HEADERS).status_code == 405
    preflight = httpx.options(
        receiver.url,
        headers={
            "Origin": "http://127.0.0.1:9",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert preflight.status_code == 405
    assert not [h for h in preflight.headers if h.lower().startswith("access-control-")]
    for media in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        headers: dict[str, str | bytes] = {NAME: RAW}
        if media is not None:
            headers["Content-Type"] = media
        body = notification(("Appointment", "10000001"))
        refused = httpx.post(receiver.url, content=body, headers=headers)
        assert refused.status_code == 415, media
        assert not [h for h in refused.headers if h.lower().startswith("access-control-")]
    response = httpx.post(
        receiver.url,
        content=notification(("Appointment", "10000001")),
        headers={NAME: RAW, "Content-Type": "text/plain"},
    )
    assert response.status_code == 415
    assert receiver.queue.count() == 0


def test_heartbeats_and_handshakes_are_accepted_without_events(receiver: Listener) -> None:
    body = orjson.dumps(
        {
            "resourceType": "Bundle",
            "type": "history",
            "entry": [{"resource": {"resourceType": "SubscriptionStatus", "type": "heartbeat"}}],
        }
    )
    response = httpx.post(receiver.url, content=body, headers=HOOK_HEADERS)
    assert response.status_code == 202
    assert receiver.queue.count() == 0 and receiver.stats.events_queued == 0


@pytest.mark.parametrize(
    "reference",
    [
        "https://au-api.halaxy.com/main/Appointment/123",
        "/main/Appointment/123",
        "Appointment/123",
        "https://eu-api.halaxy.com/main/Appointment/123/_history/4",
    ],
)
def test_every_reference_form_names_the_same_record(reference: str) -> None:
    events = parse_notification(notification(("Appointment", "123"), reference=reference))
    assert [(e.resource_type, e.id) for e in events] == [("Appointment", "123")]


def test_a_delete_is_recognised_from_the_history_entry_or_the_topic() -> None:
    by_entry = parse_notification(notification(("Appointment", "5"), delete=True))
    by_topic = parse_notification(
        notification(
            ("Appointment", "5"), topic="https://x.example/SubscriptionTopic/appointment-delete"
        )
    )
    plain = parse_notification(notification(("Appointment", "5")))
    assert [e.action for e in (*by_entry, *by_topic, *plain)] == ["delete", "delete", None]


def test_parse_errors_say_where() -> None:
    with pytest.raises(NotificationError) as info:
        parse_notification(b'{"resourceType": "Bundle", "type": "history", "entry": [{}]}')
    assert info.value.where == "entry[0].resource.resourceType"


@pytest.mark.parametrize("text", ["no-colon", "Bad Name: v", "Authorization:   "])
def test_a_malformed_auth_header_setting_is_a_configuration_error(text: str) -> None:
    with pytest.raises(ConfigurationError):
        AuthHeader.parse(text)
