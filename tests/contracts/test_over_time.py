"""The suite watches a deployment over the whole run (issue #38), over real loopback HTTP.

Each fault here departs from the spec over time rather than in one answer; ``pmtk check``
must fail it in its own category and only there (the cascade guard), and the faithful
mock must still pass (``clean_run`` in ``test_command.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contracts.session import TOKEN_ROOT_CAUSE, Exchange, Session
from contracts.suite import Recorder
from tests.contracts.checking import failed_checks as _failed
from tests.contracts.checking import run_check as _check
from toolkit.mock import serve
from toolkit.mock.faults import REVOKE_AFTER_USES


def test_a_token_revoked_early_fails_token_lifetime_and_nothing_else(tmp_path: Path) -> None:
    with serve(test_controls=True, fault="token-revoked-early") as dep:
        code, report, output = _check(dep, tmp_path, "--allow-writes")
    assert code == 1, output
    failed = _failed(report)
    assert set(failed.values()) == {"token-lifetime"}, failed
    assert "token-lifetime.observed" in failed
    root = next(c for c in report["checks"] if c["id"] == "token-lifetime.observed")
    # The figures: which token, what it claimed, when and after how many requests.
    assert f"s and {REVOKE_AFTER_USES} accepted requests, before" in root["message"]
    assert "expires_in 3600" in root["message"] and "JWT exp - iat 900" in root["message"]
    assert "stated lifetime of 900 s" in root["message"]
    assert root["evidence"] and root["evidence"][0]["response"]["status"] == 401
    observed = report["observations"]["token_lifetime"]["observed_over_run"]
    assert observed["stated"] == {"documented": 900, "expires_in": 3600, "jwt_exp_minus_iat": 900}
    assert observed["refused_early"] >= 2
    assert observed["observed_seconds"] is not None and observed["observed_seconds"] < 900
    refused = [t for t in observed["tokens"] if t["refused_at_request"] is not None]
    assert all(t["refused_at_request"] == REVOKE_AFTER_USES + 1 for t in refused)
    assert all(t["refused_code"] == "expired" for t in refused)
    # The run recovered: the writes that need a token were made (not refused).
    statuses = report["observations"]["status_codes"]
    assert statuses["POST /main/Organization"].get("201", 0) >= 1, statuses


def _spoiled_exchange(dep: Any, session: Session) -> Exchange:
    """Use the run's token past the fault's revocation; the refused 401 the session saw."""
    for _ in range(REVOKE_AFTER_USES + 1):
        ex = session.get("/Patient", params={"_count": 1})
        assert ex.status == 200  # recovered: a new token and the request once more
    refused = [ex for ex in session.log if ex.status == 401]
    assert len(refused) == 1
    return refused[0]


def test_a_finding_on_a_spoiled_exchange_is_grouped_under_its_root_cause() -> None:
    with serve(test_controls=True, fault="token-revoked-early") as dep:
        session = Session(dep.base_url, dep.client_id, dep.client_secret)
        try:
            refused = _spoiled_exchange(dep, session)
            fresh = session.get("/Patient", params={"_count": 1})
        finally:
            session.close()
    assert session.cascade.cause_of(refused) == TOKEN_ROOT_CAUSE
    rec = Recorder("rate-limit.headers", "rate-limit")
    rec.guard = session.cascade
    rec.fail("GET /main/Patient (401) has no x-ratelimit-limit", refused)
    assert rec.problems == []
    assert session.cascade.follow_ons[TOKEN_ROOT_CAUSE] == [
        {
            "check": "rate-limit.headers",
            "category": "rate-limit",
            "message": "GET /main/Patient (401) has no x-ratelimit-limit",
        }
    ]
    # A finding that rests on an unspoiled answer too still fails where it is.
    rec.fail("remaining did not fall", refused, fresh)
    assert rec.problems == ["remaining did not fall"]


def test_the_guard_groups_only_under_a_root_check_that_runs() -> None:
    with serve(test_controls=True, fault="token-revoked-early") as dep:
        session = Session(dep.base_url, dep.client_id, dep.client_secret)
        try:
            refused = _spoiled_exchange(dep, session)
        finally:
            session.close()
    session.cascade.active = {"rate-limit.headers"}  # --category rate-limit
    rec = Recorder("rate-limit.headers", "rate-limit")
    rec.guard = session.cascade
    rec.fail("GET /main/Patient (401) has no x-ratelimit-limit", refused)
    assert rec.problems == ["GET /main/Patient (401) has no x-ratelimit-limit"]
    assert session.cascade.follow_ons == {}


def test_a_limit_counted_per_token_fails_rate_limit_scope_and_nothing_else(
    tmp_path: Path,
) -> None:
    with serve(test_controls=True, fault="rate-limit-per-token") as dep:
        code, report, output = _check(dep, tmp_path, "--probe-rate-limit")
    assert code == 1, output
    assert _failed(report) == {"rate-limit.scope": "rate-limit"}
    scope = next(c for c in report["checks"] if c["id"] == "rate-limit.scope")
    assert "a new token answered 200" in scope["message"]
    assert "per token, not per client" in scope["message"]
    assert scope["evidence"][0]["response"]["status"] == 200
    # The burst itself was throttled as the spec says: only the scope is wrong.
    assert report["observations"]["rate_limit_probe"]["first_429_at"] == 501


def test_a_patch_reply_whose_id_the_reads_do_not_use_fails_write_read_back(
    tmp_path: Path,
) -> None:
    with serve(test_controls=True, fault="patch-reply-id-prefix") as dep:
        code, report, output = _check(dep, tmp_path, "--allow-writes", "--category", "write")
    assert code == 1, output
    assert _failed(report) == {"write.read-back": "write"}
    message = next(c for c in report["checks"] if c["id"] == "write.read-back")["message"]
    assert "the reply's id is 'RF-" in message and "a read of the record says '" in message
    assert "lastUpdated" not in message  # the stamp and the incremental search are right


def test_a_patch_stamped_before_its_previous_version_fails_write_read_back(
    tmp_path: Path,
) -> None:
    with serve(test_controls=True, fault="patch-stale-last-updated") as dep:
        code, report, output = _check(dep, tmp_path, "--allow-writes", "--category", "write")
    assert code == 1, output
    assert _failed(report) == {"write.read-back": "write"}
    message = next(c for c in report["checks"] if c["id"] == "write.read-back")["message"]
    assert "is not after the previous version's" in message
    assert "(before the write) does not find it" in message
    assert "the reply's id" not in message


def test_pmtk_client_recovers_from_tokens_revoked_early_with_one_replay_each() -> None:
    from toolkit.client import Client

    reads = REVOKE_AFTER_USES * 2 + 5
    with (
        serve(test_controls=True, fault="token-revoked-early") as dep,
        Client(dep.base_url, dep.client_id, dep.client_secret, progress=False) as client,
    ):
        records = [client.read("Organization", "PG-1000") for _ in range(reads)]
        auth = client.auth
    assert all(r["id"] == "PG-1000" for r in records)
    assert auth.replays == 2  # after the 30th and the 60th accepted request
    assert auth.token_requests == 3
