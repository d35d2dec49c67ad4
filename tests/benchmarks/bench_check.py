"""Benchmark: a clean ``pmtk check`` with every opt-in, against the mock (not collected).

Run::

    uv run python tests/benchmarks/bench_check.py [--repeat 3]

Target: the whole contract suite with every opt-in (``--allow-writes
--probe-rate-limit``, ``--schema-examples 1``) checks a fresh mock in under 90 s,
from the mock's start to the written report. This was a wall-clock assert in
``tests/contracts/test_suite_against_mock.py``; the conformance half of it is now a
test (``tests/contracts/test_command.py``), the 90 s half is this script.

Each round, in turns, prints beside the figure two baselines measured in the same run
on the same machine:

1. the same ``pmtk check`` with the default options (no writes, no rate-limit probe):
   what the opt-ins add;
2. the floor of the opt-in run: its requests (the mock's own count) times the mock's
   time per request, measured on a fresh deployment just before with single reads
   (what serving alone costs, however fast the suite were).

The check runs as the user runs it, the ``pmtk`` console script in a child process
(start-up included); the mock runs in this process, started for each run (its start
is part of the figure, as it was in the test).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from toolkit.mock import serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script too
from tests.conftest import api_client

USER_AGENT = "pmtk-bench (bench@example.invalid)"
PMTK = Path(sys.executable).parent / "pmtk"
TARGET = 90.0
OPT_INS = ("--allow-writes", "--probe-rate-limit")


def _check(extra: tuple[str, ...]) -> tuple[float, int, int]:
    """Seconds from the mock's start to the report, the exit code and the requests served."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env["PM_USER_AGENT"] = USER_AGENT
    started = time.perf_counter()
    with serve(test_controls=True) as dep, tempfile.TemporaryDirectory() as reports:
        env.update(PM_CLIENT_ID=dep.client_id, PM_CLIENT_SECRET=dep.client_secret)
        args = [str(PMTK), "check", "--base-url", dep.base_url, "--test-controls"]
        args += ["--report-dir", reports, "--schema-examples", "1", *extra]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
        requests = int(dep.stats()["requests"])
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    return elapsed, proc.returncode, requests


def _seconds_per_request(reads: int = 200) -> float:
    """The mock's median time for one single-resource read over loopback HTTP."""
    with serve(test_controls=True) as dep, api_client(dep) as api:
        first = api.get("Organization", params={"_count": 1}).json()["entry"][0]["resource"]
        times = []
        for _ in range(reads):
            began = time.perf_counter()
            api.get(f"Organization/{first['id']}").raise_for_status()
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    opted: list[float] = []
    plain: list[float] = []
    floors: list[float] = []
    for round_ in range(1, args.repeat + 1):
        per_request = _seconds_per_request()
        seconds, code, requests = _check(OPT_INS)
        base, base_code, base_requests = _check(())
        opted.append(seconds)
        plain.append(base)
        floors.append(requests * per_request)
        print(
            f"round {round_}: every opt-in {seconds:6.1f} s (exit {code}, {requests} requests) | "
            f"default options {base:6.1f} s (exit {base_code}, {base_requests} requests) | "
            f"floor {requests * per_request:5.1f} s ({per_request * 1e3:.1f} ms per request)"
        )
    best, median = min(opted), statistics.median(opted)
    base, floor = statistics.median(plain), statistics.median(floors)
    print(
        f"every opt-in: best {best:.1f} s, median {median:.1f} s; "
        f"default options: median {base:.1f} s ({median / base:.2f}x); floor median {floor:.1f} s"
    )
    verdict = "met" if median < TARGET else "NOT met"
    print(f"target: every opt-in under {TARGET:.0f} s (median): {verdict}")


if __name__ == "__main__":
    main()
