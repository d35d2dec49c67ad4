"""The throttle's arithmetic, pinned so that a flipped comparison or a dropped cap fails.

Facts from the spec (section 8 and the status table): a sliding window of 500
requests per minute; a 429 carries ``retry-after`` (seconds, or an HTTP date as
RFC 9110 allows); every answer carries ``x-ratelimit-remaining``. These tests
run on a fake clock, so they cost no time; ``tools/mutation.py throttle`` runs
them against mutants of ``toolkit/throttle.py`` (see docs/testing.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from toolkit.throttle import (
    MAX_RETRY_AFTER,
    PACING,
    RATE_LIMITED,
    RETRY_STATUSES,
    WINDOW_SPENT,
    RetryPolicy,
    Throttle,
    parse_retry_after,
)


class FakeClock:
    """A monotonic clock that moves only when someone sleeps or the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _throttle(clock: FakeClock, limit: int | None = None) -> Throttle:
    return Throttle(limit, clock=clock, sleep=clock.sleep)


def test_http_date_without_zone_is_read_as_utc():
    # RFC 9110 IMF-fixdate ends in GMT; asctime dates carry no zone and mean UTC too.
    now = datetime(1994, 11, 6, 8, 49, 0, tzinfo=UTC)
    assert parse_retry_after("Sun Nov  6 08:49:37 1994", now=now) == 37.0
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=now) == 37.0


def test_retry_after_is_capped_and_never_negative():
    assert parse_retry_after(" 7 ") == 7.0
    assert parse_retry_after(str(MAX_RETRY_AFTER + 1)) == MAX_RETRY_AFTER
    assert parse_retry_after("nan") is None
    assert parse_retry_after("") is None
    assert parse_retry_after("   ") is None


def test_zero_requests_per_minute_disables_pacing_instead_of_raising(clock):
    throttle = _throttle(clock, 0)
    assert throttle.requests_per_minute is None
    for _ in range(1000):
        assert throttle.acquire() == 0.0
    assert clock.sleeps == []


def test_a_negative_limit_is_refused_with_its_value():
    with pytest.raises(ValueError, match=r"requests_per_minute.*-1"):
        Throttle(-1)


def test_a_fresh_throttle_does_not_wait_or_count(clock):
    throttle = _throttle(clock, 1)
    assert throttle.rate_limited == 0
    assert throttle.waited == 0.0
    # A clock that starts near zero (time.monotonic after boot) must not wait either.
    clock.now = 0.5
    assert throttle.acquire() == 0.0


def test_a_request_exactly_one_window_old_has_left_the_window(clock):
    throttle = _throttle(clock, 1)
    throttle.acquire()
    clock.now += 60.0
    assert throttle.acquire() == 0.0
    assert clock.sleeps == []


def test_a_sub_second_wait_is_still_waited(clock):
    throttle = _throttle(clock, 1)
    throttle.acquire()
    clock.now += 59.5
    assert throttle.acquire() == pytest.approx(0.5)
    assert clock.sleeps == [pytest.approx(0.5)]


def test_an_idle_client_still_counts_the_margin_of_a_request_a_window_ago(clock):
    # Sent at t, stamped by the server up to 0.5 s later: at t + 60.2 it is still
    # in the server's window, so a limit-1 client must wait 0.3 s more.
    throttle = _throttle(clock, 1)
    throttle.acquire()
    throttle.note_round_trip(0.5)
    clock.now += 60.2
    assert throttle.acquire() == pytest.approx(0.3)


def test_a_hold_arriving_during_a_wait_adds_to_the_seconds_waited(clock):
    # Another thread's 429 lands while this request sleeps out an earlier hold.
    throttle = Throttle(None, clock=clock, sleep=lambda seconds: extend(seconds))
    holds = [5.0]

    def extend(seconds: float) -> None:
        clock.sleep(seconds)
        if holds:
            throttle.hold(holds.pop(), RATE_LIMITED)

    throttle.hold(3.0, RATE_LIMITED)
    assert throttle.acquire() == pytest.approx(8.0)
    assert throttle.waited == pytest.approx(8.0)


def test_waited_accumulates_over_requests(clock):
    throttle = _throttle(clock, 1)
    throttle.acquire()
    assert throttle.acquire() == pytest.approx(60.0)
    assert throttle.acquire() == pytest.approx(60.0)
    assert throttle.waited == pytest.approx(120.0)


def test_listeners_hear_seconds_and_reason_and_can_leave(clock):
    throttle = _throttle(clock, 1)
    heard: list[tuple[float, str]] = []
    stop = throttle.subscribe(lambda seconds, reason: heard.append((seconds, reason)))
    throttle.acquire()
    throttle.acquire()
    assert heard == [(pytest.approx(60.0), PACING)]
    stop()
    stop()  # a second unsubscribe is harmless
    throttle.acquire()
    assert len(heard) == 1


def test_a_failing_listener_does_not_stop_the_request(clock):
    throttle = _throttle(clock)
    heard: list[str] = []

    def broken(seconds: float, reason: str) -> None:
        raise RuntimeError("display gone")

    throttle.subscribe(broken)
    throttle.subscribe(lambda seconds, reason: heard.append(reason))
    throttle.hold(3.0, RATE_LIMITED)
    assert throttle.acquire() == pytest.approx(3.0)
    assert heard == [RATE_LIMITED]


def test_the_longer_constraint_names_the_wait(clock):
    throttle = _throttle(clock, 1)
    heard: list[tuple[float, str]] = []
    throttle.subscribe(lambda seconds, reason: heard.append((seconds, reason)))
    throttle.acquire()
    throttle.hold(60.0, RATE_LIMITED)  # as long as the pacing wait: the hold keeps its name
    throttle.acquire()
    assert heard == [(pytest.approx(60.0), RATE_LIMITED)]


def test_a_later_hold_of_the_same_end_takes_the_new_reason(clock):
    throttle = _throttle(clock)
    heard: list[str] = []
    throttle.subscribe(lambda seconds, reason: heard.append(reason))
    throttle.hold(5.0, RATE_LIMITED)
    throttle.hold(5.0, WINDOW_SPENT)
    throttle.hold(1.0, RATE_LIMITED)  # shorter: changes nothing
    throttle.acquire()
    assert heard == [WINDOW_SPENT]


def test_429_without_retry_after_doubles_up_to_sixty_seconds(clock):
    # With 12 waits allowed, an uncapped doubling would reach 2 * 2**11 = 4096 s.
    throttle = _throttle(clock)
    policy = RetryPolicy()
    pauses = [throttle.on_rate_limited({}, policy) for _ in range(policy.rate_limit_waits)]
    assert pauses[:6] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    assert max(pauses) == 60.0
    assert throttle.rate_limited == 12


def test_429_holds_every_request_for_retry_after(clock):
    throttle = _throttle(clock)
    heard: list[tuple[float, str]] = []
    throttle.subscribe(lambda seconds, reason: heard.append((seconds, reason)))
    assert throttle.on_rate_limited({"retry-after": "7"}, RetryPolicy()) == 7.0
    assert throttle.rate_limited == 1
    assert throttle.acquire() == pytest.approx(7.0)
    assert heard == [(pytest.approx(7.0), RATE_LIMITED)]


def test_a_retry_after_resets_the_growing_pause(clock):
    throttle = _throttle(clock)
    policy = RetryPolicy()
    assert throttle.on_rate_limited({}, policy) == 2.0
    assert throttle.on_rate_limited({}, policy) == 4.0
    throttle.on_rate_limited({"retry-after": "1"}, policy)
    assert throttle.on_rate_limited({}, policy) == 2.0


def test_an_ordinary_answer_resets_the_growing_pause(clock):
    throttle = _throttle(clock)
    policy = RetryPolicy()
    throttle.on_rate_limited({}, policy)
    throttle.on_rate_limited({}, policy)
    throttle.observe(200, {"x-ratelimit-remaining": "10"})
    assert throttle.on_rate_limited({}, policy) == 2.0


def test_a_429_seen_by_observe_does_not_reset_the_growing_pause(clock):
    throttle = _throttle(clock)
    policy = RetryPolicy()
    throttle.on_rate_limited({}, policy)
    throttle.observe(429, {"x-ratelimit-remaining": "0"})
    assert throttle.on_rate_limited({}, policy) == 4.0
    # observe(429) adds no hold of its own: the only wait is on_rate_limited's.
    heard: list[str] = []
    throttle.subscribe(lambda seconds, reason: heard.append(reason))
    throttle.acquire()
    assert heard == [RATE_LIMITED]


def test_one_request_left_is_not_a_spent_window(clock):
    throttle = _throttle(clock)
    throttle.observe(200, {"x-ratelimit-remaining": "1", "retry-after": "9"})
    assert throttle.acquire() == 0.0


def test_spent_window_wait_is_announced_as_such(clock):
    throttle = _throttle(clock)
    heard: list[tuple[float, str]] = []
    throttle.subscribe(lambda seconds, reason: heard.append((seconds, reason)))
    throttle.observe(200, {"x-ratelimit-remaining": " 0 ", "retry-after": "4"})
    assert throttle.acquire() == pytest.approx(4.0)
    assert heard == [(pytest.approx(4.0), WINDOW_SPENT)]


def test_unreadable_remaining_is_ignored(clock):
    throttle = _throttle(clock)
    throttle.observe(200, {"x-ratelimit-remaining": "lots"})
    throttle.observe(200, {})
    assert throttle.acquire() == 0.0


def test_spent_window_without_any_own_request_waits_one_second(clock):
    throttle = _throttle(clock)
    throttle.observe(200, {"x-ratelimit-remaining": "0"})
    assert throttle.acquire() == pytest.approx(1.0)


def test_spent_window_waits_at_least_one_second(clock):
    throttle = _throttle(clock, 500)
    throttle.acquire()
    clock.now += 59.8
    throttle.observe(200, {"x-ratelimit-remaining": "0"})
    assert throttle.acquire() == pytest.approx(1.0)


def test_spent_window_guess_adds_the_round_trip_margin(clock):
    throttle = _throttle(clock, 500)
    throttle.acquire()
    throttle.note_round_trip(0.5)
    clock.now += 20.0
    throttle.observe(200, {"x-ratelimit-remaining": "0"})
    assert throttle.acquire() == pytest.approx(40.5)


def test_spent_window_forgets_a_request_exactly_one_window_old(clock):
    throttle = _throttle(clock, 500)
    throttle.acquire()
    clock.now += 60.0
    throttle.observe(200, {"x-ratelimit-remaining": "0"})
    assert throttle.acquire() == pytest.approx(1.0)


def test_gateway_errors_are_retried_and_429_is_not_among_them():
    # 502/503/504 are transient gateway answers (RFC 9110 15.6); 429 is paced instead.
    assert {502, 503, 504} <= RETRY_STATUSES
    assert 429 not in RETRY_STATUSES
    assert 500 not in RETRY_STATUSES
