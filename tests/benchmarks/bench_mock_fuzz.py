"""A long Hypothesis fuzz run against the mock, with its memory before and after.

Run with ``uv run python tests/benchmarks/bench_mock_fuzz.py [EXAMPLES]`` (default
3000; not collected by pytest). It drives the same property as
``tests/mock/test_fuzz.py`` (no 5xx, no traceback, OperationOutcome errors,
refused writes store nothing) and then sends 20,000 requests to unique
unauthenticated paths, the probe that once grew the statistics by gigabytes.
It prints the examples run, the server errors seen (must be 0), the number of
statistics keys and the process RSS (server thread and client share it) before
and after each phase.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings

from tests.conftest import USER_AGENT, api_client
from tests.mock.test_fuzz import STATS_KEY_BOUND, requests, run_property
from toolkit.mock import serve


def rss_mib() -> float:
    """Resident set size of this process now (Linux /proc), in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * 4096 / 2**20


def main(examples: int) -> int:
    seen: dict[str, Any] = {"examples": 0, "server_errors": 0, "failures": 0}
    with serve(seed=0, rate_limit=10**9, test_controls=True) as dep, api_client(dep) as client:
        client.get("Referral", params={"_count": 100})
        start_rss = rss_mib()
        began = time.monotonic()

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=requests())
        def fuzz(request: dict[str, Any]) -> None:
            seen["examples"] += 1
            try:
                run_property(client, request)
            except AssertionError:
                seen["failures"] += 1
                raise

        try:
            fuzz()
        except AssertionError as exc:
            print(f"property failed: {exc}")
        fuzz_seconds = time.monotonic() - began
        fuzz_rss = rss_mib()
        status = dep.stats()["responses_by_status"]
        seen["server_errors"] = sum(n for s, n in status.items() if s.startswith("5"))

        with httpx.Client(headers={"User-Agent": USER_AGENT}) as anon:
            for n in range(20_000):
                anon.get(f"{dep.base_url}/Patient/{n}-{'p' * 40}/{n}")
        keys = len(dep.stats()["requests_by_path"])
        end_rss = rss_mib()

    print(f"examples run:            {seen['examples']} (asked {examples}) in {fuzz_seconds:.1f} s")
    print(f"property failures:       {seen['failures']}")
    print(f"server errors (5xx):     {seen['server_errors']}  (baseline: must be 0)")
    print(f"statistics keys:         {keys}  (bound {STATS_KEY_BOUND})")
    print(f"RSS before fuzzing:      {start_rss:.1f} MiB")
    print(f"RSS after fuzzing:       {fuzz_rss:.1f} MiB")
    print(f"RSS after 20k paths:     {end_rss:.1f} MiB  (was +1.6 GB per 60k before the fix)")
    ok = seen["failures"] == 0 and seen["server_errors"] == 0 and keys <= STATS_KEY_BOUND
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
