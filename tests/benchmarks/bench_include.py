"""Benchmark: ``_include`` in one walk against separate ``_id`` reads (not collected by pytest).

Run::

    uv run --group bench python tests/benchmarks/bench_include.py [--scale medium] [--days 14]

Against the embedded mock over real loopback HTTP, "the next 14 days of
appointments with their patients and practitioner roles", two ways, in the same
run, taking turns (best of ``--repeat``):

(a) ``client.frames("Appointment", include=["Appointment:patient",
    "Appointment:actor:PractitionerRole"], params=<the window>)``: one walk;
(b) the plain way: ``client.frames("Appointment", params=<the window>)``, then the
    referenced Patients and PractitionerRoles with ``client.frames(type, id=batch)``
    in ``_id`` batches of 100 (the largest page, and a URL far below any limit).

It prints the requests (token requests excluded; the CapabilityStatement, read once
per client before the first include walk, on its own line) and wall times side by
side, and their ratio, and asserts that both ways give the same tables (each
table sorted, same columns). Target: at least 2x fewer requests with ``_include``.
"""

from __future__ import annotations

import argparse
import email.utils
import statistics
import time
from datetime import timedelta
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

from toolkit.client import Client
from toolkit.mock import serve

NAMES = ["Appointment:patient", "Appointment:actor:PractitionerRole"]
BATCH = 100
TARGET = 2.0


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    plain = [c for c, t in df.schema.items() if not isinstance(t, pl.List | pl.Struct)]
    return df.sort(plain, nulls_last=True)


def with_include(client: Client, window: list[tuple[str, str]]) -> dict[str, pl.DataFrame]:
    return client.frames("Appointment", include=NAMES, params=window)


def plain_way(client: Client, window: list[tuple[str, str]]) -> dict[str, pl.DataFrame]:
    tables = client.frames("Appointment", params=window)
    actors = tables["appointment_participant"]
    for kind in ("Patient", "PractitionerRole"):
        ids = actors.filter(pl.col("actor_type") == kind).get_column("actor_id").unique().sort()
        parts = [
            client.frames(kind, id=ids[i : i + BATCH].to_list()) for i in range(0, len(ids), BATCH)
        ]
        for key in parts[0]:
            tables[key] = pl.concat([p[key] for p in parts])
    return tables


def _window(client: Client, days: int) -> list[tuple[str, str]]:
    """``date`` from the server's today to ``days`` days later (its ``Date`` header)."""
    answer = client.request("GET", "Appointment", params={"_summary": "count"})
    today = email.utils.parsedate_to_datetime(answer.headers["date"]).date()
    return [("date", f"ge{today}"), ("date", f"lt{today + timedelta(days=days)}")]


def _measure(client: Client, run: Any, window: list[tuple[str, str]]) -> tuple[float, int, Any]:
    sent = client.requests_sent
    started = time.perf_counter()
    tables = run(client, window)
    return time.perf_counter() - started, client.requests_sent - sent, tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="medium", choices=("small", "medium", "large"))
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with serve(scale=args.scale, rate_limit=1_000_000) as dep:
        kw: dict[str, Any] = {
            "requests_per_minute": None,
            "progress": False,
            "user_agent": "pmtk-bench (bench@example.invalid)",
        }
        with (
            Client(dep.base_url, dep.client_id, dep.client_secret, **kw) as a,
            Client(dep.base_url, dep.client_id, dep.client_secret, **kw) as b,
        ):
            window = _window(a, args.days)
            sent = a.requests_sent
            a.declared_includes()
            statement = a.requests_sent - sent
            times: dict[str, list[float]] = {"include": [], "plain": []}
            requests: dict[str, int] = {}
            results: dict[str, dict[str, pl.DataFrame]] = {}
            for _ in range(args.repeat + 1):  # the first round warms both up, untimed
                for name, client, run in (("include", a, with_include), ("plain", b, plain_way)):
                    elapsed, count, tables = _measure(client, run, window)
                    times[name].append(elapsed)
                    requests[name] = count
                    results[name] = tables
    inc, plain = results["include"], results["plain"]
    assert set(inc) == set(plain), (sorted(inc), sorted(plain))
    for key in plain:
        assert inc[key].columns == plain[key].columns, key
        assert_frame_equal(_sorted(inc[key]), _sorted(plain[key]))
    best = {k: min(v[1:]) for k, v in times.items()}
    median = {k: statistics.median(v[1:]) for k, v in times.items()}
    ratio = requests["plain"] / requests["include"]
    appointments = inc["Appointment"].height
    print(
        f"{args.scale} mock, {args.days} days from the server's today: {appointments} "
        f"Appointments, {inc['Patient'].height} Patients, "
        f"{inc['PractitionerRole'].height} PractitionerRoles (tables equal both ways)"
    )
    print(f"{'way':<34}{'requests':>9}{'best s':>9}{'median s':>10}")
    print(
        f"{'(a) _include, one walk':<34}{requests['include']:>9}"
        f"{best['include']:>9.3f}{median['include']:>10.3f}"
    )
    print(
        f"{'(b) appointments, then _id reads':<34}{requests['plain']:>9}"
        f"{best['plain']:>9.3f}{median['plain']:>10.3f}"
    )
    print(f"CapabilityStatement read once per client before (a)'s first walk: {statement} request")
    print(
        f"ratio: {ratio:.2f}x fewer requests with _include (target >= {TARGET}x: "
        f"{'met' if ratio >= TARGET else 'NOT met'}); {ratio_with(statement, requests):.2f}x "
        f"counting the statement; wall time {best['plain'] / best['include']:.2f}x"
    )


def ratio_with(statement: int, requests: dict[str, int]) -> float:
    return requests["plain"] / (requests["include"] + statement)


if __name__ == "__main__":
    main()
