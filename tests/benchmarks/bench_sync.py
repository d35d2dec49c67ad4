"""Benchmark of ``toolkit.store.sync`` against the mock (not collected by pytest).

Run::

    uv run python tests/benchmarks/bench_sync.py [--rate 500] [--scale medium]

Prints, beside their floors and baselines:

1. A full sync at MEDIUM scale: list requests, elapsed time and 429 answers,
   against the floor the rate limit sets. The mock *and* the client use
   ``--rate`` requests per minute, by default the API's real 500 (a medium
   sync then takes about two minutes; ``--rate 3000`` gives a quicker run).
   The API's limit is a 60-second sliding window, so N requests need at least
   ``ceil(N / rate) - 1`` full windows of waiting, after which the last
   (partial) window's requests still have to be served one after another:
   ``floor = (ceil(N / rate) - 1) * 60 s + (N - (ceil(N / rate) - 1) * rate) * t``,
   where ``t`` is the mock's time per list request, measured on the same
   deployment just before (and never less than ``N * t``, when the mock is
   slower than the limit). Nothing can finish sooner, whatever the client does.
2. A re-sync with nothing changed: requests per resource (target: one list
   request each, one ``$export-ids`` for Patient's deletions, at most one token).
3. Peak memory (``VmHWM`` of a fresh child process) of a full sync at SMALL,
   at MEDIUM (``--scale``) and at LARGE scale (about 500k Appointments; unthrottled,
   since pacing does not change what a sync holds; ``--no-large`` skips it), beside
   the size of the final frames and beside a naive baseline that flattens every page
   of a resource in memory at once (``flatten_tables(rt, list_of_all_pages)``).
   Target: the large sync peaks within 10 % of the medium one (memory bounded by
   the page batch and the validation batch, not by the data).

Each measured sync runs in its own child process, so that the mock (which runs
in this process) and earlier runs do not inflate the peak memory.

``--target lake`` measures the same into a lake (``toolkit.lake.sync``, Delta tables
written by delta-rs) instead of the Parquet store; ``--target both`` runs the store
then the lake in one run and prints them side by side (the issue's "full sync within
1.05x of the floor, peak memory flat as today" for the lake).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import catalogue

if TYPE_CHECKING:
    from toolkit.client import Client

USER_AGENT = "pmtk-bench (bench@example.invalid)"


def _peak_mb() -> float:
    """This process's peak RSS in MB.

    ``VmHWM`` where Linux has it: ``ru_maxrss`` survives ``exec`` and so starts at
    the RSS of the parent at ``fork`` (the mock, over 1 GB at large scale), while
    ``VmHWM`` belongs to the process image being measured.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def add_child_options(parser: argparse.ArgumentParser) -> None:
    """The hidden options a benchmark passes to the child process it measures."""
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--client-id", help=argparse.SUPPRESS)
    parser.add_argument("--client-secret", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


def child_client(args: argparse.Namespace, *, rate: int | None) -> Client:
    """The child's client of the parent's mock, paced at ``rate`` (``None``: unthrottled)."""
    from toolkit.client import Client

    return Client(
        base_url=args.base_url,
        client_id=args.client_id,
        client_secret=args.client_secret,
        requests_per_minute=rate,
        user_agent=USER_AGENT,
        progress=False,
    )


def run_child(script: str, dep: Any, kind: str, out: Path, *extra: str) -> dict[str, Any]:
    """Run ``script --child kind`` against ``dep`` in a fresh process; its JSON figures.

    A fresh process, so that the mock (which runs in this one) and earlier runs do not
    inflate the peak memory it reports.
    """
    cmd = [
        sys.executable,
        script,
        "--child",
        kind,
        "--base-url",
        dep.base_url,
        "--client-id",
        dep.client_id,
        "--client-secret",
        dep.client_secret,
        "--out",
        str(out),
        *extra,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        msg = f"child {kind} failed ({done.returncode})"
        raise SystemExit(msg)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _child(args: argparse.Namespace) -> None:
    """Run one measured operation and print its figures as JSON."""
    started = time.perf_counter()
    out: dict[str, Any] = {}
    with child_client(args, rate=args.rate) as client:
        if args.child == "sync" and args.lake:
            out.update(_lake_child(client, args))
        elif args.child == "sync":
            from toolkit.store import load, sync

            summary = sync(client, args.out, full=args.full, progress=False)
            # before load() below, which holds every final frame at once
            out["sync_rss_mb"] = _peak_mb()
            out["requests"] = summary.requests
            out["pages"] = summary.pages
            out["status"] = {r.resource: r.status for r in summary.resources}
            out["frames_mb"] = (
                sum(
                    load(rt, args.out, table=table).estimated_size()  # type: ignore[union-attr]
                    for rt in catalogue.LISTED_RESOURCES
                    for table in summary[rt].rows
                )
                / 2**20
            )
            out["rows"] = sum(sum(r.rows.values()) for r in summary.resources)
        else:  # naive: every page of a resource in memory, flattened at once
            from toolkit.views import flatten_tables

            rows = 0
            for rt in catalogue.LISTED_RESOURCES:
                pages = list(client.pages(rt))
                rows += sum(df.height for df in flatten_tables(rt, pages).values())
                del pages
            out["rows"] = rows
            out["requests"] = client.requests_sent
    out["elapsed"] = time.perf_counter() - started
    out["peak_rss_mb"] = _peak_mb()
    print(json.dumps(out))


def _lake_child(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    """A full sync into a lake: the figures the store's child reports."""
    from toolkit import lake

    summary = lake.sync(client, args.out, deployment="bench", full=args.full)
    out: dict[str, Any] = {"sync_rss_mb": _peak_mb(), "requests": summary.requests}
    out["pages"] = sum(r.pages for r in summary.resources.values())
    out["status"] = {rt: "ok" for rt in summary.resources}
    frames = [
        lake.load(rt, args.out, deployment="bench", table=table)
        for rt in catalogue.LISTED_RESOURCES
        for table in lake.lake_tables(rt)
    ]
    out["frames_mb"] = sum(f.estimated_size() for f in frames) / 2**20
    out["rows"] = sum(f.height for f in frames)
    return out


LAKE = False
"""Whether the measured syncs write a lake (``--target lake``) instead of a store."""


def _run_child(dep: Any, rate: int, kind: str, out: Path, *, full: bool = False) -> dict[str, Any]:
    extra = ["--rate", str(rate), *(["--full"] if full else []), *(["--lake"] if LAKE else [])]
    return run_child(__file__, dep, kind, out, *extra)


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    def diff(key: str) -> dict[str, int]:
        a, b = before.get(key, {}), after.get(key, {})
        return {k: int(b[k]) - int(a.get(k, 0)) for k in b if int(b[k]) - int(a.get(k, 0))}

    return {
        "requests": after["requests"] - before["requests"],
        "by_status": diff("responses_by_status"),
        "by_path": diff("requests_by_path"),
    }


def _page_time(dep: Any, samples: int = 40) -> float:
    """Median seconds per list request (a page of 100) on this mock, unthrottled."""
    times: list[float] = []
    with child_client(
        argparse.Namespace(
            base_url=dep.base_url, client_id=dep.client_id, client_secret=dep.client_secret
        ),
        rate=None,
    ) as client:
        client.request("GET", "Appointment", params={"_count": 100})  # token, warm-up
        for i in range(samples):
            t0 = time.perf_counter()
            client.request("GET", "Appointment", params={"_count": 100, "page": 1 + i % 10})
            times.append(time.perf_counter() - t0)
    dep.reset_rate_limit()
    return statistics.median(times)


def floor_seconds(requests: int, rate: int, page_time: float) -> float:
    """The least time ``requests`` list requests can take under ``rate`` per 60 s window."""
    if requests <= 0:
        return 0.0
    waits = math.ceil(requests / rate) - 1
    last_window = requests - waits * rate
    return max(waits * 60.0 + last_window * page_time, requests * page_time)


def _measure(scale: str, rate: int, work: Path, *, naive: bool) -> dict[str, Any]:
    from toolkit.mock import serve

    figures: dict[str, Any] = {}
    t0 = time.perf_counter()
    with serve(seed=0, scale=scale, rate_limit=rate, test_controls=True) as dep:
        figures["mock_start_s"] = time.perf_counter() - t0
        figures["page_time"] = _page_time(dep)
        store = work / f"{'lake' if LAKE else 'store'}-{scale}-{time.monotonic_ns()}"
        before = dep.stats()
        figures["full"] = _run_child(dep, rate, "sync", store)
        figures["full_server"] = _delta(before, dep.stats())
        dep.reset_rate_limit()
        before = dep.stats()
        figures["resync"] = _run_child(dep, rate, "sync", store)
        figures["resync_server"] = _delta(before, dep.stats())
        if naive:
            dep.reset_rate_limit()
            figures["naive"] = _run_child(dep, rate, "naive", work / "unused")
    return figures


def _measure_large(work: Path) -> dict[str, Any]:
    """A full sync at large scale, unthrottled (mock and client)."""
    from toolkit.mock import serve

    unlimited = 1_000_000
    t0 = time.perf_counter()
    with serve(seed=0, scale="large", rate_limit=unlimited) as dep:
        started = time.perf_counter() - t0
        figures = _run_child(dep, unlimited, "sync", work / "store-large")
    figures["mock_start_s"] = started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rate",
        type=int,
        default=catalogue.RATE_LIMIT_PER_MINUTE,
        help="requests/minute, mock and client (default: the API's 500)",
    )
    parser.add_argument("--scale", default="medium")
    parser.add_argument("--no-large", action="store_true", help="skip the large-scale sync")
    parser.add_argument("--child", choices=("sync", "naive"), help=argparse.SUPPRESS)
    add_child_options(parser)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", choices=("store", "lake", "both"), default="store")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    global LAKE
    for target in ("store", "lake") if args.target == "both" else (args.target,):
        LAKE = target == "lake"
        print(f"\n######## {target} ########", flush=True)
        _report(args)


def _report(args: argparse.Namespace) -> None:
    """Measure and print the three parts (see the module's docstring) for one target."""

    rate = args.rate
    n_resources = len(catalogue.LISTED_RESOURCES)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"pmtk sync benchmark: mock and client at {rate} requests/minute", flush=True)
        small = _measure("small", rate, work, naive=False)
        big = _measure(args.scale, rate, work, naive=True)
        large = None if args.no_large else _measure_large(work)

    full, server = big["full"], big["full_server"]
    tokens_full = server["by_path"].get("/main/oauth/token", 0)
    requests = server["requests"] - tokens_full  # token requests are not rate limited
    page_time = big["page_time"]
    floor = floor_seconds(requests, rate, page_time)
    waits = max(math.ceil(requests / rate) - 1, 0)
    too_many = server["by_status"].get("429", 0)
    print()
    print(f"1. Full sync, {args.scale} scale ({full['rows']:,} rows in every table)")
    print(
        f"   floor = (ceil({requests}/{rate}) - 1) x 60 s + {requests - waits * rate} requests "
        f"of the last window x {page_time * 1000:.1f} ms (the mock's time per page) "
        f"= {floor:.1f} s"
    )
    print(f"   {'':<28}{'measured':>12}{'floor/target':>16}")
    print(f"   {'list requests (server)':<28}{requests:>12,}{'':>16}")
    print(f"   {'token requests (server)':<28}{tokens_full:>12,}{'':>16}")
    print(f"   {'elapsed':<28}{full['elapsed']:>11.1f}s{floor:>15.1f}s")
    print(f"   {'elapsed / floor':<28}{full['elapsed'] / floor:>12.2f}{'<= 1.05':>16}")
    print(f"   {'429 answers':<28}{too_many:>12}{0:>16}")

    resync = big["resync_server"]
    exports = set(catalogue.EXPORT_IDS.values())
    lists = {
        p: n for p, n in resync["by_path"].items() if p != "/main/oauth/token" and p not in exports
    }
    export_requests = sum(resync["by_path"].get(p, 0) for p in exports)
    tokens = resync["by_path"].get("/main/oauth/token", 0)
    print()
    print("2. Re-sync with nothing changed")
    print(f"   {'':<28}{'measured':>12}{'target':>16}")
    print(f"   {'list requests':<28}{sum(lists.values()):>12}{n_resources:>16}")
    print(f"   {'$export-ids requests':<28}{export_requests:>12}{len(exports):>16}")
    print(f"   {'token requests':<28}{tokens:>12}{'<= 1':>16}")
    print(f"   {'max per resource':<28}{max(lists.values(), default=0):>12}{1:>16}")
    print(f"   {'elapsed':<28}{big['resync']['elapsed']:>11.2f}s{'':>16}")
    print(f"   statuses: {big['resync']['status']}")

    print()
    print("3. Peak memory (VmHWM of the syncing process)")
    print(f"   {'':<30}{'rows':>10}{'frames':>10}{'during sync':>13}{'peak RSS':>11}")
    rows_shown = [("sync, small", small["full"]), (f"sync, {args.scale}", full)]
    if large is not None:
        rows_shown.append(("sync, large (unthrottled)", large))
    rows_shown.append((f"naive in-memory, {args.scale}", big["naive"]))
    for label, fig in rows_shown:
        frames = f"{fig['frames_mb']:.0f} MB" if "frames_mb" in fig else "-"
        during = f"{fig['sync_rss_mb']:.0f} MB" if "sync_rss_mb" in fig else "-"
        print(
            f"   {label:<30}{fig['rows']:>10,}{frames:>10}{during:>13}{fig['peak_rss_mb']:>8.0f} MB"
        )
    growth = full["peak_rss_mb"] - small["full"]["peak_rss_mb"]
    during_growth = full["sync_rss_mb"] - small["full"]["sync_rss_mb"]
    print(
        f"   growth small -> {args.scale}: {during_growth:.0f} MB of RSS during the sync, "
        f"{growth:.0f} MB with the final frames loaded, for "
        f"{full['rows'] - small['full']['rows']:,} more rows "
        f"(final frames grew by {full['frames_mb'] - small['full']['frames_mb']:.0f} MB)"
    )
    if large is not None:
        ratio = large["sync_rss_mb"] / full["sync_rss_mb"]
        print(
            f"   large / {args.scale} during the sync: {ratio:.2f} (target <= 1.10) for "
            f"{large['rows'] / max(full['rows'], 1):.1f}x the rows; large sync took "
            f"{large['elapsed']:.0f} s ({large['pages']:,} pages) after a "
            f"{large['mock_start_s']:.0f} s mock start"
        )
    print(
        "   (peak RSS includes load() of every final table after the sync; 'during sync' is "
        "the peak just before it)"
    )


if __name__ == "__main__":
    main()
