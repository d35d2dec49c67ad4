"""rate-limit: headers on every authenticated response (passive), and an opt-in burst probe."""

from __future__ import annotations

import email.utils
import time

import pytest

from contracts.session import THROTTLED_ROOT_CAUSE, Exchange
from contracts.suite import FINAL_PHASE, PROBE_PHASE, Recorder, Run
from toolkit import catalogue as cat

LIMIT_HEADER, REMAINING_HEADER = cat.RATE_LIMIT_HEADERS
PROBE_EXTRA = 10
MAX_WALL_CLOCK_WAIT = 120.0
LIMIT = cat.RATE_LIMIT_PER_MINUTE


def _authenticated(pm: Run) -> list[Exchange]:
    # The headers are read from the run's own answers. In a whole run the data checks
    # made them already (the sample is kept); a run of this category alone
    # (``--category rate-limit``) makes them here, or it would have nothing to inspect.
    # An exchange another check's root cause spoiled (a 401 on a token revoked early) is
    # that cause's finding (the cascade guard), not a response to judge here.
    pm.sample()
    guard = pm.session.cascade
    judged = (None, THROTTLED_ROOT_CAUSE)  # a 429 still carries the headers
    return [
        ex
        for ex in pm.session.log
        if ex.authenticated and ex.status is not None and guard.cause_of(ex) in judged
    ]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@pytest.mark.pm_check("rate-limit.headers", "rate-limit")
def test_every_authenticated_response_carries_rate_limit_headers(pm: Run, check: Recorder) -> None:
    exchanges = _authenticated(pm)
    if not exchanges:
        pytest.skip("no authenticated responses to inspect")
    missing = bad_limit = bad_remaining = 0
    for ex in exchanges:
        limit, remaining = _int(ex.header(LIMIT_HEADER)), _int(ex.header(REMAINING_HEADER))
        if ex.header(LIMIT_HEADER) is None or ex.header(REMAINING_HEADER) is None:
            missing += 1
            if missing <= 3:
                check.fail(
                    f"{ex.operation} ({ex.status}) has no {LIMIT_HEADER}/{REMAINING_HEADER}", ex
                )
            continue
        if limit != cat.RATE_LIMIT_PER_MINUTE:
            bad_limit += 1
            if bad_limit <= 3:
                check.fail(
                    f"{LIMIT_HEADER} is {ex.header(LIMIT_HEADER)!r}, not {LIMIT}",
                    ex,
                )
        if remaining is None or not 0 <= remaining <= (limit or cat.RATE_LIMIT_PER_MINUTE):
            bad_remaining += 1
            if bad_remaining <= 3:
                check.fail(
                    f"{REMAINING_HEADER} is {ex.header(REMAINING_HEADER)!r}, expected 0..limit", ex
                )
    if missing > 3:
        check.fail(f"{missing} of {len(exchanges)} authenticated responses lack rate-limit headers")
    check.note(f"{len(exchanges)} authenticated responses inspected")


@pytest.mark.pm_check("rate-limit.remaining-falls", "rate-limit")
def test_remaining_falls_as_requests_go_out(pm: Run, check: Recorder) -> None:
    pairs = falls = 0
    previous: Exchange | None = None
    for ex in _authenticated(pm):
        if previous is not None and previous.epoch == ex.epoch:
            a, b = _int(previous.header(REMAINING_HEADER)), _int(ex.header(REMAINING_HEADER))
            if a is not None and b is not None:
                pairs += 1
                falls += b < a
        previous = ex
    if pairs < 5:
        pytest.skip(f"only {pairs} consecutive responses with {REMAINING_HEADER} to compare")
    pm.observations["rate_limit_remaining"] = {"consecutive_pairs": pairs, "falls": falls}
    if falls == 0:
        check.fail(f"{REMAINING_HEADER} never fell over {pairs} consecutive requests")


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _burst(pm: Run, ceiling: int) -> tuple[int, Exchange | None, Exchange | None]:
    """Send up to ``ceiling`` probe requests; (requests sent, the first 429, the last answer)."""
    ex: Exchange | None = None
    for sent in range(1, ceiling + 1):
        ex = pm.session.get(
            "/Patient", params={"_count": 1}, exempt=True, operation="GET /main/Patient"
        )
        if ex.status == 429:
            return sent, ex, ex
    return ceiling, None, ex


def _judge_429(check: Recorder, first: Exchange, result: dict[str, object]) -> float | None:
    """Record what is wrong with the 429 itself; return its retry-after in seconds."""
    check.attach(first)
    wait = _retry_after(first.header(cat.RETRY_AFTER_HEADER))
    result["retry_after"] = first.header(cat.RETRY_AFTER_HEADER)
    if wait is None:
        check.fail(f"the 429 has no parseable {cat.RETRY_AFTER_HEADER} header", first)
    body = first.json if isinstance(first.json, dict) else {}
    if body.get("resourceType") != "OperationOutcome" or not body.get("issue"):
        check.fail("the 429 body is not an OperationOutcome with an issue", first)
    return wait


def _wait_out(pm: Run, check: Recorder, first: Exchange, delay: float) -> bool:
    """Let ``delay`` seconds pass (the mock's clock, or the wall clock); False if too long."""
    if pm.session.test_controls:
        pm.session.advance_clock(delay + 1)
    elif delay <= MAX_WALL_CLOCK_WAIT:
        time.sleep(delay + 1)
    else:
        check.fail(
            f"retry-after {delay:.0f} s exceeds the {cat.RATE_LIMIT_WINDOW_SECONDS} s window",
            first,
        )
        return False
    return True


@pytest.mark.pm_check("rate-limit.probe", "rate-limit", phase=PROBE_PHASE)
def test_burst_is_limited_and_retry_after_restores_service(pm: Run, check: Recorder) -> None:
    if not pm.options.probe_rate_limit:
        pytest.skip("opt-in: --probe-rate-limit (spends the key's whole minute)")
    session = pm.session
    if session.test_controls:
        session.reset_rate_limit()
    ceiling = cat.RATE_LIMIT_PER_MINUTE + PROBE_EXTRA
    try:
        sent, first, last = _burst(pm, ceiling)
        result: dict[str, object] = {"requests_sent": sent, "first_429_at": sent if first else None}
        pm.observations["rate_limit_probe"] = result
        if first is None:
            check.fail(
                f"no 429 after {ceiling} burst requests (limit {cat.RATE_LIMIT_PER_MINUTE}/min)",
                last,
            )
            return
        wait = _judge_429(check, first, result)
        _new_token_after_429(pm, result)
        delay = wait if wait is not None else float(cat.RATE_LIMIT_WINDOW_SECONDS)
        if not _wait_out(pm, check, first, delay):
            return
        after = session.get(
            "/Patient", params={"_count": 1}, exempt=True, operation="GET /main/Patient"
        )
        result["after_wait_status"] = after.status
        if wait is not None and after.status != 200:
            check.fail(
                f"after waiting retry-after ({wait:.0f} s) a request answered {after.status}",
                after,
            )
    finally:
        if session.test_controls:
            session.reset_rate_limit()


def _new_token_after_429(pm: Run, result: dict[str, object]) -> None:
    """Right after the burst's 429: a new token, and one request with it (for rate-limit.scope)."""
    ex, token = pm.session.request_token(remember=False, exempt=True)
    if token is None:
        result["new_token"] = {"token_status": ex.status}
        return
    probe = pm.session.get(
        "/Patient",
        params={"_count": 1},
        auth=token.access_token,
        exempt=True,
        operation="GET /main/Patient",
    )
    result["new_token"] = {"status": probe.status, "seq": probe.seq}


@pytest.mark.pm_check("rate-limit.scope", "rate-limit", phase=PROBE_PHASE)
def test_the_limit_belongs_to_the_client_not_the_token(pm: Run, check: Recorder) -> None:
    """After the probe's 429, a request with a brand-new token must still be throttled.

    The spec's limit is the client's (500 per minute per OAuth client): a deployment that
    counts it per token lets any client multiply its limit by taking tokens.
    """
    if not pm.options.probe_rate_limit:
        pytest.skip("opt-in: --probe-rate-limit (judged from the burst probe's 429)")
    probe = pm.observations.get("rate_limit_probe")
    seen = probe.get("new_token") if isinstance(probe, dict) else None
    if not isinstance(seen, dict) or "status" not in seen:
        pytest.skip("the burst probe reached no 429, or no new token was issued after it")
    by_seq = {ex.seq: ex for ex in pm.session.log}
    ex = by_seq.get(int(str(seen["seq"])))
    if seen["status"] != 429:
        check.fail(
            f"right after a 429, a request with a new token answered {seen['status']}: "
            "the limit is counted per token, not per client",
            ex,
        )
    else:
        check.note("a new token taken after the 429 was still throttled (per-client limit)")


SHOWN = 3


@pytest.mark.pm_check(THROTTLED_ROOT_CAUSE, "rate-limit", phase=FINAL_PHASE)
def test_no_paced_request_was_throttled(pm: Run, check: Recorder) -> None:
    """No request outside the burst probe got a 429.

    The suite paces on ``x-ratelimit-remaining`` (it waits with 10 requests in hand), so a
    429 means the headers gave it nothing, or too much, to pace on. That is this one
    finding; the checks whose requests were refused (a write, a paging walk) are its
    follow-ons (the cascade guard), not findings of their own.
    """
    session = pm.session
    throttled = [ex for ex in session.log if session.cascade.cause_of(ex) == THROTTLED_ROOT_CAUSE]
    for ex in throttled[:SHOWN]:
        said = session.throttled_after.get(ex.seq)
        before = (
            f"the answer before said {REMAINING_HEADER}: {said}"
            if said is not None
            else f"the answer before carried no {REMAINING_HEADER} to pace on"
        )
        check.fail(f"{ex.operation} answered 429 to a paced request ({before})", ex)
    if len(throttled) > SHOWN:
        check.fail(f"{len(throttled)} paced requests were answered 429")
    check.note(f"no 429 outside the burst probe in {len(session.log)} exchanges")
