"""Benchmark: a notebook's data load from the synced store, beside listing from the API.

Run::

    uv run python tests/benchmarks/bench_notebook_data.py [--scale large] [--rate 500]

Notebook 03 (appointments and attendance) needs Appointment (with its child
tables), Practitioner, Organization, PractitionerRole and HealthcareService.
Each figure comes from a fresh child process (peak memory is its ``VmHWM``),
against one mock serving the chosen scale:

1. *Today's way* (the baseline): ``client.frames``/``client.frame`` of every
   table, a whole list walk per resource on every run.
2. The first run on the store: ``notebook_data`` (a full sync), then the tables.
3. Every later run: ``notebook_data`` (an incremental sync) and the tables read
   with ``toolkit.load``: the figure the notebooks now pay.
4. ``toolkit.load`` of the same tables alone (no sync): the floor for 3.

The mock and client run unthrottled, so the time is the work; beside each run
is the least time its requests take at ``--rate`` per minute (the API's 500 by
default), from ``bench_sync.floor_seconds`` with this mock's time per page.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script too

from tests.benchmarks.bench_sync import (
    _page_time,
    _peak_mb,
    add_child_options,
    child_client,
    floor_seconds,
    run_child,
)

RESOURCES = ["Appointment", "Practitioner", "Organization", "PractitionerRole", "HealthcareService"]


def _child(args: argparse.Namespace) -> None:
    # Imports first, so the clock measures the data load, not the interpreter warming up.
    import polars  # noqa: F401

    import toolkit.client
    import toolkit.notebook_data
    import toolkit.schemas
    import toolkit.store
    import toolkit.views  # noqa: F401

    started = time.perf_counter()
    out: dict[str, Any] = {}
    with child_client(args, rate=None) as client:
        rows = 0
        if args.child == "api":
            for resource in RESOURCES:
                rows += sum(f.height for f in client.frames(resource).values())
            out["requests"] = client.requests_sent
        elif args.child == "load":
            from toolkit.notebook_data import NotebookData

            data = NotebookData(Path(args.out))
            for resource in RESOURCES:
                rows += sum(f.height for f in data.tables(resource).values())
            out["requests"] = client.requests_sent
        else:
            from toolkit.notebook_data import notebook_data

            data = notebook_data(client, RESOURCES, store=args.out, quiet=True)
            out["sync_s"] = data.seconds
            out["modes"] = sorted(set(data.modes.values()))
            for resource in RESOURCES:
                rows += sum(f.height for f in data.tables(resource).values())
            out["requests"] = data.requests
    out["rows"] = rows
    out["elapsed"] = time.perf_counter() - started
    out["peak_rss_mb"] = _peak_mb()
    print(json.dumps(out))


def _run(dep: Any, kind: str, out: Path) -> dict[str, Any]:
    return run_child(__file__, dep, kind, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scale", default="large", choices=["small", "medium", "large"])
    parser.add_argument("--rate", type=int, default=500, help="requests/minute for the floor")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_child_options(parser)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    from toolkit.mock import serve

    t0 = time.perf_counter()
    with (
        serve(seed=0, scale=args.scale, rate_limit=1_000_000, test_controls=True) as dep,
        tempfile.TemporaryDirectory(prefix="pmtk-bench-nb-") as work,
    ):
        print(f"mock ({args.scale}) started in {time.perf_counter() - t0:.1f} s")
        page = _page_time(dep)
        store = Path(work) / "store"
        runs = {
            "today: list every table from the API": _run(dep, "api", store),
            "first run: full sync, then load": _run(dep, "sync", store),
            "later run: incremental sync, then load": _run(dep, "sync", store),
            "toolkit.load alone (no sync)": _run(dep, "load", store),
        }
    print(f"\nnotebook 03's tables ({', '.join(RESOURCES)}) at {args.scale} scale")
    print(
        f"{'run':42} {'requests':>8} {'seconds':>8} {f'at {args.rate}/min':>12} {'peak MB':>8} rows"
    )
    for name, r in runs.items():
        floor = floor_seconds(r["requests"], args.rate, page)
        print(
            f"{name:42} {r['requests']:8,} {r['elapsed']:8.2f} {floor:11.1f}s "
            f"{r['peak_rss_mb']:8.0f} {r['rows']:,}"
        )


if __name__ == "__main__":
    main()
