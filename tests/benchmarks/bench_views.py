"""Benchmark: the ViewDefinition runner against the JavaScript reference (sof-js).

Run with ``uv run --group bench python tests/benchmarks/bench_views.py --sof-js DIR``
(not collected by pytest). On the same synthetic Appointment pages as
``bench_frames.py`` (catalogue-shaped: participants with their status and
invoice extensions, location type, supporting information; Bundles of 100, as
bytes), it times:

* pmtk: ``toolkit.run_view`` of the ViewDefinition ``pmtk views export`` writes
  for the declared Appointment table, then ``toolkit.schemas.validate`` of the
  frame against the declared schema (the runner's own checks included: the exact
  msgspec check of every page, the date-time parsing);
* for context, the declared reader (``flatten`` + ``validate``, what
  ``bench_frames.py`` times) on the same pages;
* the reference: sof-js (the JavaScript implementation in the FHIR/sql-on-fhir-v2
  repository, with ``fhirpath`` from npm) evaluating the same ViewDefinition over
  the same pages, ``JSON.parse`` of each page included, timed inside node.

sof-js is not published on npm: ``--sof-js`` (or ``PMTK_SOF_JS``) names its
``src`` folder in a checkout of that repository. Its dependencies (``fhirpath``
3.9.0 and ``ajv``, as its package.json pins them) are installed with npm into a
cache folder (``~/.cache/pmtk-bench/sof-js``) on the first run, never into the
repository. Without it, only pmtk's figures are printed.

It prints each pmtk path's least CPU time (all threads) beside its wall time:
on a loaded machine it moves less. To compare with another checkout (main's
reader, say), run the script again back to back with ``PYTHONPATH=<checkout>``
so that its ``toolkit`` is imported instead.

Options: ``--resources N`` (default 100000), ``--page-size N`` (100),
``--repeat N`` (best of N, default 3; the two take turns). The targets: at least
300k resources/s for pmtk, and at least 10x the reference, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import toolkit

# isort: split
import polars as pl

from toolkit.schemas import validate
from toolkit.viewdefs import load_view, run_view
from toolkit.viewdefs.declared import declared_view_definitions
from toolkit.views import flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_frames import pages, speed_probe

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pmtk-bench" / "sof-js"

NODE_SCRIPT = r"""
import { readFileSync } from 'node:fs'
import { evaluate } from './src/index.js'
const [viewPath, pagesPath, repeat] = process.argv.slice(2)
const view = JSON.parse(readFileSync(viewPath, 'utf8'))
const lines = readFileSync(pagesPath, 'utf8').split('\n').filter((l) => l.length)
let best = Infinity
let rows = 0
for (let i = 0; i < Number(repeat); i++) {
  const t0 = performance.now()
  const resources = []
  for (const line of lines) {
    for (const e of JSON.parse(line).entry || []) resources.push(e.resource)
  }
  rows = evaluate(view, resources).length
  best = Math.min(best, (performance.now() - t0) / 1000)
}
console.log(JSON.stringify({ seconds: best, rows }))
"""


def prepare_sof_js(src: Path) -> Path:
    """A folder with sof-js's sources and its npm dependencies (installed once, cached)."""
    for name in ("index.js", "path.js", "validate.js"):
        if not (src / name).is_file():
            msg = f"{src} is not sof-js's src folder (no {name})"
            raise SystemExit(msg)
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "src").mkdir(exist_ok=True)
    for name in ("index.js", "path.js", "validate.js"):
        shutil.copyfile(src / name, CACHE / "src" / name)
    package = {
        "name": "sof-bench",
        "private": True,
        "type": "module",
        "dependencies": {"fhirpath": "3.9.0", "ajv": "^8.12.0"},
    }
    (CACHE / "package.json").write_text(json.dumps(package, indent=2))
    (CACHE / "bench.mjs").write_text(NODE_SCRIPT)
    if not (CACHE / "node_modules" / "fhirpath").is_dir():
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=CACHE, check=True
        )
    return CACHE


def run_sof_js(
    folder: Path, view: dict[str, Any], raw: list[bytes], repeat: int
) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        view_path = Path(tmp) / "view.json"
        view_path.write_text(json.dumps(view))
        pages_path = Path(tmp) / "pages.ndjson"
        with pages_path.open("wb") as out:
            for page in raw:
                out.write(page.replace(b"\n", b" ") + b"\n")
        done = subprocess.run(
            [
                "node",
                "--max-old-space-size=8192",
                "bench.mjs",
                str(view_path),
                str(pages_path),
                str(repeat),
            ],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), int(result["rows"])


def run_pmtk(view: Any, raw: list[bytes]) -> tuple[float, int]:
    global cpu_pmtk
    c0, t0 = time.process_time(), time.perf_counter()
    frame = run_view(view, raw)
    # the declared schema also wants the reader's extra/invalid columns (not ViewDefinition values)
    full = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in ("extra", "invalid"))
    validate(full, "Appointment")
    cpu_pmtk = min(cpu_pmtk, time.process_time() - c0)
    return time.perf_counter() - t0, frame.height


def run_reader(raw: list[bytes]) -> tuple[float, int]:
    """The declared reader on the same pages: ``flatten`` + ``validate`` (bench_frames' pmtk)."""
    global cpu_reader
    c0, t0 = time.process_time(), time.perf_counter()
    frame = flatten("Appointment", raw)
    validate(frame, "Appointment")
    cpu_reader = min(cpu_reader, time.process_time() - c0)
    return time.perf_counter() - t0, frame.height


cpu_pmtk = cpu_reader = float("inf")
"""The least CPU time (all threads) of a run: on a loaded machine it moves less than wall time."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sof-js", type=Path, default=os.environ.get("PMTK_SOF_JS"))
    parser.add_argument(
        "--sof-js-resources",
        type=int,
        default=2_000,
        help="Resources (the first pages) sof-js evaluates: it parses each path per resource, "
        "some 30-300 resources/s, so the whole set would take hours; rates are compared.",
    )
    args = parser.parse_args()

    view_json = declared_view_definitions("Appointment")["Appointment"]
    view = load_view(view_json)
    raw = pages(args.resources, args.page_size)
    print(f"pmtk {toolkit.__version__}, polars {pl.__version__}; {args.resources:,} Appointments")
    print(
        f"{len(raw)} pages, {sum(map(len, raw)) / 1e6:.1f} MB; speed probe {speed_probe():.0f} ms"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    folder = None
    if args.sof_js is not None and shutil.which("node"):
        folder = prepare_sof_js(Path(args.sof_js))
    else:
        print("sof-js: not run (pass --sof-js DIR, its src folder, and have node on PATH)")
    run_pmtk(view, raw[:10])  # warm up
    best_pmtk, best_js, rows_js, best_reader = float("inf"), float("inf"), 0, float("inf")
    ratios = []
    for _ in range(args.repeat):
        seconds, rows = run_pmtk(view, raw)
        assert rows == args.resources
        best_pmtk = min(best_pmtk, seconds)
        best_reader = min(best_reader, run_reader(raw)[0])
        if folder is not None:
            js_pages = raw[: max(1, args.sof_js_resources // args.page_size)]
            js_seconds, rows_js = run_sof_js(folder, view_json, js_pages, 1)
            js_per_resource = js_seconds / rows_js
            best_js = min(best_js, js_per_resource)
            ratios.append(js_per_resource / (seconds / rows))
    rate = args.resources / best_pmtk
    print(
        f"pmtk run_view + validate : {best_pmtk:7.3f} s  {rate:>12,.0f} resources/s"
        f"  (CPU {cpu_pmtk:.3f} s)"
    )
    reader_rate = args.resources / best_reader
    print(
        f"declared reader (context): {best_reader:7.3f} s  {reader_rate:>12,.0f} resources/s"
        f"  (CPU {cpu_reader:.3f} s)"
    )
    if folder is not None:
        js_rate = 1 / best_js
        print(
            f"sof-js (reference)       : {best_js * rows_js:7.3f} s  {js_rate:>12,.0f} resources/s"
            f" (on the first {rows_js:,} of the same pages)"
        )
        ratios.sort()
        print(
            f"speed-up on sof-js (per resource): best {rate / js_rate:.1f}x, "
            f"median of rounds {ratios[len(ratios) // 2]:.1f}x"
        )
    print(f"speed probe after: {speed_probe():.0f} ms, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
