"""Benchmark of the lake (``toolkit.lake``) beside the Parquet store (not collected by pytest).

Run::

    uv run python tests/benchmarks/bench_lake.py [--scale medium] [--deployments 10]

Prints, each beside its baseline measured in the same run:

1. **An incremental sync of 1 % changed Appointments** (``--scale``): time and bytes
   written by the lake's commit against the store's (which rewrites every table of
   the resource), and against the size of the changed rows themselves (every table's
   rows of the changed records, as zstd Parquet).
2. **``--deployments`` mock deployments synced at once into one lake**, each mock in
   its own process with its own rate budget (``--rate`` a minute, the API's 500 by
   default; ``pmtk sync`` paces itself at 500) at ``--deployment-scale``, each sync in
   its own process: the wall time against the slowest deployment synced alone, and rows
   lost, duplicated or mixed between deployments against each mock's own list.
3. **Reading**: ``toolkit.lake.load`` of the Appointment table against
   ``toolkit.store.load`` of the same rows (best of 3).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("PM_USER_AGENT", "pmtk-bench (bench@example.invalid)")

from toolkit import lake  # noqa: E402
from toolkit.client import Client  # noqa: E402
from toolkit.mock import serve  # noqa: E402
from toolkit.mock.state import CLIENT_ID, CLIENT_SECRET  # noqa: E402
from toolkit.store import load as store_load  # noqa: E402
from toolkit.store import sync as store_sync  # noqa: E402


def _bytes(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _written(before: dict[Path, int], after: dict[Path, int]) -> int:
    """Bytes of files that are new or changed size (Delta and the store never edit in place)."""
    return sum(size for path, size in after.items() if before.get(path) != size)


def _client(dep: Any) -> Client:
    return Client(
        base_url=dep.base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=None,
        progress=False,
    )


def incremental(scale: str) -> None:
    print(f"\n== 1. incremental sync of 1 % changed Appointments ({scale}) ==")
    with (
        serve(seed=0, scale=scale, test_controls=True, rate_limit=1_000_000) as dep,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store, where = Path(tmp) / "store", Path(tmp) / "lake"
        with _client(dep) as client:
            store_sync(client, store, resources=["Appointment"], progress=False)
            lake.sync(client, where, deployment="north", resources=["Appointment"])
        ids = sorted(store_load("Appointment", store)["id"].to_list())
        changed = ids[::100]
        for start in range(0, len(changed), 500):
            dep.touch("Appointment", changed[start : start + 500])
        rows = 0
        size = 0
        for table in lake.lake_tables("Appointment"):
            frame = lake.load("Appointment", where, table=table)
            key = "id" if table in ("Appointment", "_raw_Appointment") else "appointment_id"
            part = frame.filter(pl.col(key).is_in(changed))
            rows += part.height
            out = Path(tmp) / f"changed-{table}.parquet"
            part.write_parquet(out, compression="zstd")
            size += out.stat().st_size
        b_store, b_lake = _bytes(store), _bytes(where)
        with _client(dep) as client:
            t0 = time.perf_counter()
            store_sync(client, store, resources=["Appointment"], progress=False)
            t_store = time.perf_counter() - t0
            t0 = time.perf_counter()
            done = lake.sync(client, where, deployment="north", resources=["Appointment"])
            t_lake = time.perf_counter() - t0
        w_store = _written(b_store, _bytes(store))
        w_lake = _written(b_lake, _bytes(where))
        print(f"records: {len(ids):,}; changed: {len(changed):,} ({rows:,} rows in every table)")
        print(f"changed rows as zstd Parquet: {size / 1e6:8.2f} MB")
        print(f"store (whole-table rewrite):  {t_store:6.2f} s  {w_store / 1e6:8.2f} MB written")
        print(f"lake (MERGE by key):          {t_lake:6.2f} s  {w_lake / 1e6:8.2f} MB written")
        print(
            f"lake/changed bytes: {w_lake / size:.1f}x (target <= 3x); "
            f"store/lake time: {t_store / t_lake:.2f}x (target >= 5x); "
            f"upserted {done['Appointment'].upserted:,}"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_mock(seed: int, rate: int, scale: str) -> tuple[Any, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from toolkit.cli import app; app()",
            "mock",
            "--port",
            str(port),
            "--seed",
            str(seed),
            "--scale",
            scale,
            "--rate-limit",
            str(rate),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/main"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return proc, base
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _sync_proc(base: str, where: str, name: str, resources: list[str]) -> Any:
    env = {
        **os.environ,
        "PM_BASE_URL": base,
        "PM_CLIENT_ID": CLIENT_ID,
        "PM_CLIENT_SECRET": CLIENT_SECRET,
    }
    args = ["sync", "--out", where, "--deployment", name, "--quiet"]
    for r in resources:
        args += ["-r", r]
    return subprocess.Popen(
        [sys.executable, "-c", "from toolkit.cli import app; app()", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _truth(base: str, resource: str) -> set[tuple[str, str]]:
    token = httpx.post(
        f"{base}/oauth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
        },
    ).json()
    headers = {
        "Authorization": f"Bearer {token['access_token']}",
        "Accept": "application/fhir+json",
        "User-Agent": "pmtk-bench (b@example.invalid)",
    }
    out: set[tuple[str, str]] = set()
    url: str | None = f"{base}/{resource}?_count=100"
    while url:
        answer = httpx.get(url, headers=headers, timeout=30)
        if answer.status_code == 429:  # the mock's own budget: wait as it says, ask again
            time.sleep(float(answer.headers.get("retry-after") or 1))
            continue
        bundle = answer.raise_for_status().json()
        out |= {
            (e["resource"]["id"], e["resource"]["meta"]["lastUpdated"])
            for e in bundle.get("entry", [])
            if e["resource"]["resourceType"] == resource
        }
        url = next((x["url"] for x in bundle.get("link", []) if x["relation"] == "next"), None)
    return out


def concurrent(n: int, rate: int, resources: list[str], scale: str) -> None:
    print(
        f"\n== 2. {n} deployments at once into one lake ({', '.join(resources)}; "
        f"{rate} requests a minute each) =="
    )
    mocks = [_start_mock(seed, rate, scale) for seed in range(n)]
    try:
        alone = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, (_, base) in enumerate(mocks):
                t0 = time.perf_counter()
                proc = _sync_proc(base, f"{tmp}/alone-{i}", f"d{i}", resources)
                proc.communicate()
                alone.append(time.perf_counter() - t0)
                assert proc.returncode == 0
            time.sleep(61)  # every mock's rate window empties before the run at once
            where = f"{tmp}/lake"
            t0 = time.perf_counter()
            procs = [
                _sync_proc(base, where, f"d{i}", resources) for i, (_, base) in enumerate(mocks)
            ]
            codes = [p.communicate() and p.returncode for p in procs]
            together = time.perf_counter() - t0
            # each mock's own list, read over plain HTTP from all mocks at once (each
            # walk waits out its mock's rate window)
            with ThreadPoolExecutor(len(mocks)) as pool:
                truths = {
                    (i, resource): pool.submit(_truth, base, resource)
                    for i, (_, base) in enumerate(mocks)
                    for resource in resources
                }
            bad = 0
            for (i, resource), truth in truths.items():
                raw = pl.read_delta(f"{where}/tables/_raw_{resource}").filter(
                    pl.col("deployment") == f"d{i}"
                )
                got = set(zip(raw["id"], raw["last_updated"], strict=True))
                bad += len(got ^ truth.result()) + (raw.height - len(got))
        print(f"slowest alone: {max(alone):6.2f} s (median {sorted(alone)[n // 2]:.2f} s)")
        print(
            f"all at once:   {together:6.2f} s = {together / max(alone):.2f}x the slowest alone "
            f"(target <= 1.2x); exit codes {sorted(set(codes))}"
        )
        print(f"rows lost, duplicated or mixed: {bad}")
    finally:
        for proc, _ in mocks:
            proc.terminate()
            proc.wait(10)


def reading(scale: str) -> None:
    print(f"\n== 3. reading the Appointment table ({scale}) ==")
    with (
        serve(seed=0, scale=scale, rate_limit=1_000_000) as dep,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store, where = Path(tmp) / "store", Path(tmp) / "lake"
        with _client(dep) as client:
            store_sync(client, store, resources=["Appointment"], progress=False)
            lake.sync(client, where, deployment="north", resources=["Appointment"])
        for table in ("Appointment", "appointment_participant"):
            t_store = min(
                _timed(lambda t=table: store_load("Appointment", store, table=t)) for _ in range(3)
            )
            t_lake = min(
                _timed(lambda t=table: lake.load("Appointment", where, table=t)) for _ in range(3)
            )
            rows = lake.load("Appointment", where, table=table).height
            print(
                f"{table:26} {rows:>9,} rows  store {t_store:6.3f} s  lake {t_lake:6.3f} s  "
                f"lake/store {t_lake / t_store:.2f}x (target <= 1.2x)"
            )


def _timed(action: Any) -> float:
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", default="medium")
    parser.add_argument("--deployments", type=int, default=10)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--resources", default="Appointment,Organization,Referral")
    parser.add_argument(
        "--deployment-scale",
        default="medium",
        help="part 2's mocks (medium: over 500 list requests each, so that each sync "
        "waits on its own budget as against the API; small: CPU-bound on 2 cores)",
    )
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: 1,2,3")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    if "1" not in skip:
        incremental(args.scale)
    if "2" not in skip:
        concurrent(args.deployments, args.rate, args.resources.split(","), args.deployment_scale)
    if "3" not in skip:
        reading(args.scale)


if __name__ == "__main__":
    main()
