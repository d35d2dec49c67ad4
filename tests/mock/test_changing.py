"""Changing collections: the touch control, the default list order and the Date header."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import httpx

from tests.conftest import USER_AGENT
from toolkit.mock import Deployment

H = {"User-Agent": USER_AGENT}
PAGE = 50


def _ids(bundle: dict[str, Any]) -> list[str]:
    return [e["resource"]["id"] for e in bundle["entry"]]


def _walk(client: httpx.Client, rtype: str) -> list[str]:
    seen: list[str] = []
    url: str | None = f"{rtype}?_count={PAGE}"
    while url:
        bundle = client.get(url).json()
        seen += _ids(bundle)
        url = next((x["url"] for x in bundle["link"] if x["relation"] == "next"), None)
    return seen


def test_a_touch_during_a_walk_gives_a_duplicate_and_a_gap(
    fresh_mock: Deployment, fresh_api: httpx.Client
) -> None:
    everything = set(_walk(fresh_api, "Referral"))
    first_page = _ids(fresh_api.get("Referral", params={"_count": PAGE}).json())
    touched = first_page[3]
    start = fresh_api.get("Referral", params={"_count": 1})
    walk_start = email.utils.parsedate_to_datetime(start.headers["date"])
    # the touch fires right after the 2nd list page of Referral from now on
    armed = httpx.post(
        f"{fresh_mock.base_url}/_test/touch",
        json={"type": "Referral", "ids": [touched], "after_list_requests": 2},
        headers=H,
    )
    assert armed.status_code == 200 and armed.json()["armed"][0]["seen"] == 0
    seen = _walk(fresh_api, "Referral")
    duplicates = {i for i in seen if seen.count(i) > 1}
    missing = everything - set(seen)
    assert duplicates == {touched}  # moved to the end: seen on page 1 and on the last page
    assert len(missing) == 1  # everything after it shifted one place: the page-2/3 seam
    assert len(seen) == len(everything)
    # recovery: everything written since the walk began, by the server's own clock
    since = walk_start.strftime("%Y-%m-%dT%H:%M:%SZ")
    changed = fresh_api.get("Referral", params={"_lastUpdated": f"ge{since}"}).json()
    assert _ids(changed) == [touched]
    assert changed["entry"][0]["resource"]["meta"]["lastUpdated"] >= since
    assert httpx.get(f"{fresh_mock.base_url}/_test/touch", headers=H).json() == {"armed": []}


def test_touch_now_moves_the_record_last_and_updates_it(
    fresh_mock: Deployment, fresh_api: httpx.Client
) -> None:
    target = _ids(fresh_api.get("Appointment", params={"_count": 5}).json())[0]
    result = fresh_mock.touch("Appointment", [target])
    total = fresh_api.get("Appointment", params={"_summary": "count"}).json()["total"]
    last_page = fresh_api.get("Appointment", params={"_count": 1, "page": total}).json()
    assert _ids(last_page) == [target]
    record = fresh_api.get(f"Appointment/{target}").json()
    assert record["meta"]["lastUpdated"] == result["lastUpdated"]


def test_a_patch_also_moves_the_record_in_the_default_order(fresh_api: httpx.Client) -> None:
    target = _ids(fresh_api.get("Referral", params={"_count": 2}).json())[0]
    fresh_api.patch(f"Referral/{target}", json={"comment": "changed"})
    assert _ids(fresh_api.get("Referral", params={"_count": 2}).json())[0] != target
    assert _ids(
        fresh_api.get("Referral", params={"_sort": "-_lastUpdated", "_count": 1}).json()
    ) == [target]


def test_bad_touch_requests_get_400_and_arm_nothing(fresh_mock: Deployment) -> None:
    url = f"{fresh_mock.base_url}/_test/touch"
    for body in (
        {"type": "Referral", "ids": ["nope"]},
        {"type": "Location", "ids": ["1"]},
        {"type": "Referral", "ids": "300001"},
        {"type": "Referral", "ids": ["300001"], "after_list_requests": 0},
        {"type": "Referral", "ids": []},
    ):
        response = httpx.post(url, json=body, headers=H)
        assert response.status_code == 400, body
        assert response.json()["resourceType"] == "OperationOutcome"
    assert httpx.get(url, headers=H).json() == {"armed": []}
    fresh_mock.touch_after("Referral", ["300001"], 5)
    assert httpx.delete(url, headers=H).json() == {"armed": []}


def test_every_response_has_a_date_header_on_the_virtual_clock(
    fresh_mock: Deployment, fresh_api: httpx.Client
) -> None:
    before = email.utils.parsedate_to_datetime(fresh_api.get("Referral/300001").headers["date"])
    assert abs(before.timestamp() - time.time()) < 60
    fresh_mock.advance_clock(7200)
    response = fresh_api.get("Nothing/here")
    assert response.status_code in (401, 404)  # an error still carries the server time
    after = email.utils.parsedate_to_datetime(response.headers["date"])
    assert after.timestamp() - before.timestamp() >= 7200 - 5
    no_agent = httpx.get(f"{fresh_mock.base_url}/Referral", headers={"User-Agent": ""})
    assert no_agent.status_code == 403 and "date" in no_agent.headers
