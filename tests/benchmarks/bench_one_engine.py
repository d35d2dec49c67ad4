"""Benchmark: the one view engine's candidate beside today's declared reader, in one run.

Run with ``uv run --group bench python tests/benchmarks/bench_one_engine.py`` (not
collected by pytest). Issue 36 asks for one view engine: the declared tables run as
ViewDefinitions by the ViewDefinition runner, with one tolerant read and one fast path,
at least as fast as today's reader. This script measures the candidate design on the
same synthetic Appointment pages as ``bench_frames.py`` (Bundles of 100, as bytes),
table by table (the main table and its two child tables), taking turns round by round:

* **the reader**: ``flatten(..., table=...)``, today's declared reader (its exact check,
  repair path and projection), the baseline every ratio is taken against;
* **the runner alone**: ``run_view`` of the table's exported ViewDefinition (``pmtk views
  export``), with the runner's own read (sampled schema, projected decode);
* **the runner over the reader's read**: the candidate. The reader's tolerant read of the
  table's fields (``read_entries``: the catalogue's read schema, the exact check on both
  reader threads, alternative forms brought to the catalogue's) and the runner's
  evaluation of the exported ViewDefinition over it.

It prints each method's best wall and CPU time (all threads) and its ratio to the
reader, and checks that the candidate gives the reader's rows (every column but
``extra`` and ``invalid``, which no FHIRPath gives). Options: ``--resources N`` (default
100000), ``--repeat N`` (best of N, default 3).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_frames import pages, speed_probe

from toolkit.viewdefs import load_view, run_view
from toolkit.viewdefs.declared import NOT_EXPORTED, declared_view_definitions
from toolkit.viewdefs.runner import evaluate
from toolkit.views import flatten
from toolkit.views.reader import compiled_table, read_entries

RESOURCE = "Appointment"


def methods(table: str, raw: list[bytes]) -> dict[str, Callable[[], pl.DataFrame]]:
    exported = declared_view_definitions(RESOURCE)[table]
    checked = load_view(exported)

    def reader() -> pl.DataFrame:
        return flatten(RESOURCE, raw, table=table)

    def runner_alone() -> pl.DataFrame:
        return run_view(exported, raw)

    def runner_over_reader() -> pl.DataFrame:
        entries = read_entries(compiled_table(RESOURCE, table), raw)
        return evaluate(checked, entries.select(pl.col("resource").alias("__c")))

    return {
        "the reader": reader,
        "the runner alone": runner_alone,
        "the runner over the reader's read": runner_over_reader,
    }


def comparable(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """The reader's table as the runner gives it: no extra/invalid, [] for no items."""
    frame = frame.drop([c for c in NOT_EXPORTED if c in frame.columns])
    return frame.with_columns(
        pl.col(c).fill_null(pl.lit([], dtype=frame.schema[c]))
        for c in frame.columns
        if isinstance(frame.schema[c], pl.List)
    ).to_dicts()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--resources", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    raw = pages(args.resources, 100)
    print(
        f"{args.resources} {RESOURCE}s in {len(raw)} pages of 100; best of {args.repeat}; "
        f"load average {os.getloadavg()[0]:.1f}; speed probe {speed_probe():.0f} ms"
    )
    warnings.simplefilter("ignore")  # the facts-rule notes of the reader are not the point
    for table in declared_view_definitions(RESOURCE):
        runs = methods(table, raw)
        best = {name: (float("inf"), float("inf")) for name in runs}
        rows = 0
        for _ in range(args.repeat):
            for name, run in runs.items():
                run()  # untimed: each timed run follows one of the same method
                t0, c0 = time.perf_counter(), time.process_time()
                rows = run().height
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
        want = comparable(runs["the reader"]())
        same = runs["the runner over the reader's read"]().to_dicts() == want
        base_wall, base_cpu = best["the reader"]
        print(f"\n{table} ({rows:,} rows); the candidate gives the reader's rows: {same}")
        print("| method | wall | CPU | of the reader (wall) | (CPU) |")
        print("|---|---|---|---|---|")
        for name, (wall, cpu) in best.items():
            ratios = f"{base_wall / wall:.2f} | {base_cpu / cpu:.2f}"
            print(f"| {name} | {wall:.3f} s | {cpu:.3f} s | {ratios} |")
    print(f"\nload average {os.getloadavg()[0]:.1f}; speed probe {speed_probe():.0f} ms")


if __name__ == "__main__":
    main()
