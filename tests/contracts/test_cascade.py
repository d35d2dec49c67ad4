"""One root cause, one finding: the cascade guard for every category (issue #38).

Each fault here spoils answers that checks of *other* categories then judge. Over real
loopback HTTP against the mock, ``pmtk check`` (every category) must fail the fault in
its own category and only there, with the follow-on failures grouped under the root
check (``observations.cascade`` and the root's message). Before the guard covered these
roots, each of these runs also failed elsewhere: a format fault failed write.read-back,
missing rate-limit headers failed schema.conformance, auth not enforced failed
token-lifetime.virtual-clock, a resource answering 5xx failed paging and write, a token
endpoint that stopped issuing failed token-lifetime.

The faithful mock with every opt-in stays free of any finding: ``clean_run`` in
``test_command.py``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from contracts.conftest import _group_follow_ons
from contracts.report import CheckRecord
from contracts.session import (
    DATA_ROOT_CAUSES,
    SERVER_ERROR_ROOT_CAUSE,
    TOKEN_ENDPOINT_ROOT_CAUSE,
    CascadeGuard,
)
from contracts.suite import Recorder
from tests.contracts.checking import failed_checks as _failed
from tests.contracts.checking import run_check as _check
from toolkit.mock import FAULT_PROFILES, serve
from toolkit.mock.faults import BOOK_REPLY_SHIFT_HOURS

WRITES = ("--allow-writes",)


def _only(*categories: str) -> tuple[str, ...]:
    return tuple(word for c in categories for word in ("--category", c))


# fault, options (the fault's category and those its follow-ons fell in before the guard,
# so that each run stays short), the root check, the category of its follow-ons
CASCADES = [
    (
        "referral-server-error",
        (*WRITES, *_only("schema", "paging", "write")),
        SERVER_ERROR_ROOT_CAUSE,
        "write",
    ),
    (
        "token-endpoint-fails-later",
        _only("auth", "token-lifetime"),
        TOKEN_ENDPOINT_ROOT_CAUSE,
        "token-lifetime",
    ),
    ("no-ratelimit-headers", _only("rate-limit", "schema"), "rate-limit.headers", "schema"),
    (
        "auth-not-enforced",
        _only("auth", "token-lifetime"),
        "auth.no-token-refused",
        "token-lifetime",
    ),
    ("bad-phone", (*WRITES, *_only("format", "write")), "format.values[Organization]", "write"),
]


@pytest.mark.parametrize(("fault", "extra", "root", "elsewhere"), CASCADES)
def test_a_root_cause_fails_its_own_category_only_with_its_follow_ons_grouped(
    fault: str, extra: tuple[str, ...], root: str, elsewhere: str, tmp_path: Path
) -> None:
    category = FAULT_PROFILES[fault].category
    with serve(test_controls=True, fault=fault) as dep:
        code, report, output = _check(dep, tmp_path, *extra)
    assert code == 1, output
    failed = _failed(report)
    assert set(failed.values()) == {category}, failed
    assert failed.get(root) == category, failed
    grouped = report["observations"]["cascade"]
    assert set(grouped) == {root}, grouped  # grouped under the right root, and only there
    assert elsewhere in {f["category"] for f in grouped[root]}, grouped[root]
    message = next(c["message"] for c in report["checks"] if c["id"] == root)
    assert f"{len(grouped[root])} follow-on failures in other checks, grouped here:" in message
    for item in grouped[root]:
        follow_on = next(c for c in report["checks"] if c["id"] == item["check"])
        assert follow_on["status"] != "failed"  # counted once: under its root


def test_429s_with_no_headers_to_pace_on_fail_rate_limit_only(tmp_path: Path) -> None:
    # A limit of 60 a minute and no x-ratelimit-* headers: the suite cannot pace, and the
    # paging walks (and writes) run into 429s. Before the guard they failed paging and
    # write; now rate-limit.paced owns the 429s and groups those failures.
    with serve(test_controls=True, fault="no-ratelimit-headers", rate_limit=60) as dep:
        code, report, output = _check(
            dep, tmp_path, *WRITES, *_only("rate-limit", "paging", "write")
        )
    assert code == 1, output
    failed = _failed(report)
    assert set(failed.values()) == {"rate-limit"}, failed
    assert "rate-limit.paced" in failed and "rate-limit.headers" in failed
    paced = next(c["message"] for c in report["checks"] if c["id"] == "rate-limit.paced")
    assert "answered 429 to a paced request" in paced
    assert "carried no x-ratelimit-remaining to pace on" in paced
    grouped = report["observations"]["cascade"]
    assert set(grouped) == {"rate-limit.paced"}, grouped
    assert {f["category"] for f in grouped["rate-limit.paced"]} & {"paging", "write"}


def test_a_book_reply_that_differs_from_the_stored_appointment_fails_only_write(
    tmp_path: Path,
) -> None:
    with serve(test_controls=True, fault="book-reply-local-times") as dep:
        code, report, output = _check(dep, tmp_path, *WRITES)
    assert code == 1, output
    assert _failed(report) == {"write.read-back": "write"}
    message = next(c for c in report["checks"] if c["id"] == "write.read-back")["message"]
    assert "POST Appointment/" in message
    assert "the reply's start is '" in message and "the reply's end is '" in message
    assert f"{BOOK_REPLY_SHIFT_HOURS}" in FAULT_PROFILES["book-reply-local-times"].description
    assert "the reply's id" not in message and "lastUpdated" not in message


def test_a_follow_on_whose_root_is_not_run_fails_its_own_check(tmp_path: Path) -> None:
    # --category write: schema.server-errors does not run, so nothing may be grouped
    # under it; the writes the 500s spoiled fail where they were found.
    with serve(test_controls=True, fault="referral-server-error") as dep:
        code, report, output = _check(dep, tmp_path, *WRITES, "--category", "write")
    assert code == 1, output
    failed = _failed(report)
    assert failed.get("write.referral-attachments") == "write", failed
    assert "cascade" not in report["observations"]


@pytest.mark.parametrize("slip", ["grouping dropped", "wrong root"])
def test_a_reviewers_slip_in_the_guard_shows_as_a_second_category(
    slip: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runs above require the fault's category alone: a guard that no longer groups,
    # or groups under a root that does not fail (a format finding filed under enum), lets
    # the follow-on fail write.read-back, and that requirement is what catches it.
    if slip == "grouping dropped":
        monkeypatch.setattr(CascadeGuard, "runs", lambda self, root: False)
        monkeypatch.setattr(CascadeGuard, "root_of", lambda self, exchanges: None)
    else:
        monkeypatch.setitem(DATA_ROOT_CAUSES, "format", "enum.values")
    with serve(test_controls=True, fault="bad-phone") as dep:
        code, report, output = _check(dep, tmp_path, *WRITES, *_only("format", "enum", "write"))
    assert code == 1, output
    failed = _failed(report)
    assert set(failed.values()) == {"format", "write"}, failed
    assert "write.read-back" in failed
    assert "cascade" not in report["observations"]


def _run(records: dict[str, str], guard: CascadeGuard) -> Any:
    return SimpleNamespace(
        records={
            rid: CheckRecord(id=rid, category=cat, status="passed") for rid, cat in records.items()
        },
        observations={},
        session=SimpleNamespace(cascade=guard, redact=lambda text: text),
    )


def test_a_follow_on_grouped_under_a_root_that_passed_is_given_back() -> None:
    # The slip a reviewer could make: grouping under the wrong root (one that reports
    # nothing). The finding must not vanish: it fails its own check at the end.
    guard = CascadeGuard()
    rec = Recorder("paging.walk[Referral]", "paging")
    rec.guard = guard
    rec.fail("Referral: following next to page 2 answered 500", cause=SERVER_ERROR_ROOT_CAUSE)
    assert rec.problems == []  # grouped for now
    run = _run({SERVER_ERROR_ROOT_CAUSE: "schema", "paging.walk[Referral]": "paging"}, guard)
    _group_follow_ons(run)
    paging = run.records["paging.walk[Referral]"]
    assert paging.status == "failed"
    assert paging.message == "Referral: following next to page 2 answered 500"
    assert run.records[SERVER_ERROR_ROOT_CAUSE].status == "passed"
    assert "cascade" not in run.observations


def test_a_follow_on_grouped_under_a_root_that_failed_stays_there() -> None:
    guard = CascadeGuard()
    rec = Recorder("paging.walk[Referral]", "paging")
    rec.guard = guard
    rec.fail("Referral: following next to page 2 answered 500", cause=SERVER_ERROR_ROOT_CAUSE)
    run = _run({SERVER_ERROR_ROOT_CAUSE: "schema", "paging.walk[Referral]": "paging"}, guard)
    run.records[SERVER_ERROR_ROOT_CAUSE].status = "failed"
    run.records[SERVER_ERROR_ROOT_CAUSE].message = "GET /main/Referral answered 500"
    _group_follow_ons(run)
    assert run.records["paging.walk[Referral]"].status == "passed"
    root = run.records[SERVER_ERROR_ROOT_CAUSE]
    assert root.message.splitlines()[1:] == [
        "1 follow-on failures in other checks, grouped here:",
        "  paging.walk[Referral] (paging): Referral: following next to page 2 answered 500",
    ]
    assert [f["check"] for f in run.observations["cascade"][SERVER_ERROR_ROOT_CAUSE]] == [
        "paging.walk[Referral]"
    ]


def test_a_named_cause_that_is_not_a_check_of_the_run_groups_nothing() -> None:
    guard = CascadeGuard()
    guard.active = {"paging.walk[Referral]"}  # --category paging
    rec = Recorder("paging.walk[Referral]", "paging")
    rec.guard = guard
    rec.fail("Referral: following next to page 2 answered 500", cause=SERVER_ERROR_ROOT_CAUSE)
    assert rec.problems == ["Referral: following next to page 2 answered 500"]
    assert guard.follow_ons == {}
