"""Benchmark: what verifying checksums on load, and fsync on commit, cost (not collected).

Run::

    uv run python tests/benchmarks/bench_store_verify.py [--scale medium]

Syncs every listed resource from the mock (pacing off) into a fresh store, then
prints, per run and as the median of ``--repeat`` runs:

1. ``load()`` of every table of every resource with ``verify=False`` (the
   baseline) and with ``verify=True`` (sha256 of each file first), and the
   store's size, so that the hashing cost reads as MB/s;
2. ``verify()`` of the whole store alone;
3. a full sync of the store with the durable writes (fsync of every file and
   folder) beside the same sync with ``os.fsync`` replaced by a no-op.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from toolkit import catalogue
from toolkit.client import Client
from toolkit.mock import serve
from toolkit.store import declared_schemas, load, sync, verify


def _load_all(store: Path, *, check: bool) -> float:
    started = time.perf_counter()
    for rt in catalogue.LISTED_RESOURCES:
        for table in declared_schemas(rt):
            load(rt, store, table=table, verify=check)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", default="medium")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with (
        serve(seed=0, scale=args.scale, rate_limit=1_000_000) as dep,
        Client(
            base_url=dep.base_url,
            client_id=dep.client_id,
            client_secret=dep.client_secret,
            requests_per_minute=None,
            progress=False,
        ) as client,
        tempfile.TemporaryDirectory() as tmp,
    ):
        store = Path(tmp) / "store"
        sync(client, store, progress=False)
        size = verify(store).bytes
        files = len(verify(store).files)
        _load_all(store, check=True)  # warm the page cache and Polars
        plain = [_load_all(store, check=False) for _ in range(args.repeat)]
        checked = [_load_all(store, check=True) for _ in range(args.repeat)]
        alone = [verify(store).elapsed for _ in range(args.repeat)]
        print(f"store at {args.scale} scale: {files} files, {size / 1e6:.1f} MB")
        print(f"load every table, verify=False : {statistics.median(plain) * 1e3:8.1f} ms")
        print(f"load every table, verify=True  : {statistics.median(checked) * 1e3:8.1f} ms")
        extra = statistics.median(checked) - statistics.median(plain)
        print(f"  cost of verification         : {extra * 1e3:8.1f} ms")
        print(
            f"verify() alone                 : {statistics.median(alone) * 1e3:8.1f} ms "
            f"({size / 1e6 / statistics.median(alone):.0f} MB/s)"
        )

        durable: list[float] = []
        loose: list[float] = []
        real_fsync = os.fsync
        for _ in range(max(1, args.repeat // 2)):
            started = time.perf_counter()
            sync(client, store, full=True, progress=False)
            durable.append(time.perf_counter() - started)
            os.fsync = lambda fd: None
            try:
                started = time.perf_counter()
                sync(client, store, full=True, progress=False)
                loose.append(time.perf_counter() - started)
            finally:
                os.fsync = real_fsync
        print(f"full sync, fsync on            : {statistics.median(durable):8.2f} s")
        print(f"full sync, fsync a no-op       : {statistics.median(loose):8.2f} s")


if __name__ == "__main__":
    main()
