"""Benchmark: ViewDefinitions beside the declared reader, fhir4ds and sof-js, in one run.

Run with ``uv run --group bench python tests/benchmarks/bench_views.py --sof-js DIR``
(not collected by pytest). On the same synthetic Appointment pages as
``bench_frames.py`` (catalogue-shaped: participants with their status and
invoice extensions, location type, supporting information; Bundles of 100, as
bytes), it times side by side, round after round:

* the declared reader (``flatten`` + ``validate``, what ``bench_frames.py`` times):
  the yardstick each view's ratio is taken against;
* pmtk ``toolkit.run_view`` of the ViewDefinition ``pmtk views export`` writes for
  the declared Appointment table (then ``validate`` of the frame against the
  declared schema), and of seven views an analyst writes (:data:`VIEWS`):
  participants by ``forEach``, invoices by ``forEachOrNull``, references by
  ``unionAll``, a ``where`` on a participant status, a ``repeat``, reference keys
  and an extension by url;
* fhir4ds (PyPI, DuckDB): each view's query (SQL generation, DuckDB's run and the
  rows fetched), its load of the resources into DuckDB timed apart, once. Skipped
  with a line saying so when it is not installed (the ``bench`` group installs it);
* sof-js, the JavaScript reference implementation (the FHIR/sql-on-fhir-v2
  repository's ``sof-js``, with ``fhirpath`` 3.9.0 from npm), on the first
  ``--sof-js-resources`` of the same pages (``JSON.parse`` included, timed inside
  node), compared per resource: it evaluates each path from its text per resource.

sof-js is not published on npm: ``--sof-js`` (or ``PMTK_SOF_JS``) names its
``src`` folder in a checkout of that repository. Its dependencies are installed with
npm into a cache folder (``~/.cache/pmtk-bench/sof-js``) on the first run, never into
the repository. Without it (or without node) it is skipped with a line saying so.

Each pmtk figure is the best wall time of ``--repeat`` rounds (the methods take
turns within a round, so each sees the same machine load) with the least CPU time
(all threads) beside it. Targets: every view at least 0.5 of the declared reader's
speed (the exported view at least 0.8), at least 10x fhir4ds's query and at least
100x sof-js, each ratio printed from this one run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import toolkit

# isort: split
import orjson
import polars as pl

from toolkit.schemas import validate
from toolkit.viewdefs import load_view, run_view
from toolkit.viewdefs.declared import declared_view_definitions
from toolkit.views import flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_frames import pages, speed_probe

EXT = "https://terminology.halaxy.com/StructureDefinition/"
_STATUS = (
    f"modifierExtension.where(url = '{EXT}appointment-participant-status')"
    ".value.ofType(Coding).code"
)


def _view(select: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {
        "resourceType": "ViewDefinition",
        "resource": "Appointment",
        "status": "active",
        **more,
        "select": select,
    }


def _col(name: str, path: str, kind: str = "string") -> dict[str, str]:
    return {"name": name, "path": path, "type": kind}


_ID = {"column": [_col("id", "id", "id")]}
VIEWS: dict[str, dict[str, Any]] = {
    "forEach participants": _view(
        [
            {"column": [_col("id", "id", "id"), _col("start", "start", "dateTime")]},
            {
                "forEach": "participant",
                "column": [
                    _col("actor", "actor.reference"),
                    _col("actor_type", "actor.type", "code"),
                    _col("role", "type.coding.code.first()", "code"),
                    _col("status", _STATUS + ".first()", "code"),
                ],
            },
        ]
    ),
    "forEachOrNull invoice": _view(
        [
            _ID,
            {
                "forEachOrNull": "participant.extension.where(url = "
                f"'{EXT}appointment-participant-invoice')",
                "column": [_col("invoice", "value.ofType(Reference).reference")],
            },
        ]
    ),
    "unionAll references": _view(
        [
            {
                **_ID,
                "unionAll": [
                    {
                        "forEach": "participant.actor",
                        "column": [_col("ref", "reference"), _col("kind", "type", "code")],
                    },
                    {
                        "forEach": "supportingInformation",
                        "column": [_col("ref", "reference"), _col("kind", "type", "code")],
                    },
                ],
            }
        ]
    ),
    "where status": _view(
        [
            {
                "column": [
                    _col("id", "id", "id"),
                    _col("start", "start", "dateTime"),
                    _col("minutes", "minutesDuration", "integer"),
                ]
            }
        ],
        where=[{"path": f"participant.{_STATUS}.where($this = 'attended').exists()"}],
    ),
    "repeat extension": _view(
        [
            _ID,
            {
                "repeat": ["extension"],
                "column": [_col("url", "url", "uri"), _col("code", "value.ofType(code)", "code")],
            },
        ]
    ),
    "reference key": _view(
        [
            {
                "column": [
                    _col("key", "getResourceKey()"),
                    _col(
                        "patient",
                        "participant.actor.where(type = 'Patient')"
                        ".getReferenceKey(Patient).first()",
                    ),
                    _col(
                        "practitioner",
                        "participant.actor.getReferenceKey(PractitionerRole).first()",
                    ),
                ]
            }
        ]
    ),
    "extension by url": _view(
        [
            {
                "column": [
                    _col("id", "id", "id"),
                    _col(
                        "location_type",
                        f"extension('{EXT}location-type').value.ofType(code).first()",
                        "code",
                    ),
                ]
            }
        ]
    ),
}
"""Views an analyst writes over Appointments, each beside the exported one."""

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


@dataclass
class Figures:
    """One method's best wall time and least CPU time over the rounds, and its rows."""

    wall: float = float("inf")
    cpu: float = float("inf")
    rows: int = 0

    def add(self, run: Callable[[], int]) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        self.rows = run()
        self.wall = min(self.wall, time.perf_counter() - t0)
        self.cpu = min(self.cpu, time.process_time() - c0)


def run_exported(view: Any, raw: list[bytes]) -> int:
    frame = run_view(view, raw)
    # the declared schema also wants the reader's extra/invalid columns (not ViewDefinition values)
    full = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in ("extra", "invalid"))
    validate(full, "Appointment")
    return frame.height


def run_reader(raw: list[bytes]) -> int:
    """The declared reader on the same pages: ``flatten`` + ``validate`` (bench_frames' pmtk)."""
    return validate(flatten("Appointment", raw), "Appointment").height


class _NoInstall:
    """A DuckDB connection on which fhir4ds's ``INSTALL json`` is skipped: the extension
    is built into the Python wheel, and installing it would download (no network here)."""

    def __init__(self, con: Any) -> None:
        self._con = con

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.strip().startswith("INSTALL json"):
            return self._con
        return self._con.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def fhir4ds_runner(raw: list[bytes]) -> tuple[Any, float] | str:
    """fhir4ds's view runner over the resources loaded into DuckDB (and the load's time)."""
    try:
        import duckdb
        from fhir4ds.datastore import FHIRDataStore
        from fhir4ds.dialects import DuckDBDialect
        from fhir4ds.view_runner import ViewRunner
    except ImportError as exc:
        return f"not installed ({exc.name}): uv run --group bench"
    logging.getLogger("fhir4ds").setLevel(logging.CRITICAL)
    store = FHIRDataStore(dialect=DuckDBDialect(connection=_NoInstall(duckdb.connect())))
    resources = [e["resource"] for page in raw for e in orjson.loads(page).get("entry", [])]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "resources.json"
        path.write_bytes(orjson.dumps(resources))
        t0 = time.perf_counter()
        store.load_from_json_file(str(path))
        loaded = time.perf_counter() - t0
    return ViewRunner(store), loaded


def run_fhir4ds(runner: Any, view: dict[str, Any]) -> int:
    return len(runner.execute_view_definition(view).fetchall())


def _fhir4ds_figures(runner: Any, views: dict[str, Any], repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, view in views.items():
        figures = Figures()
        try:
            for _ in range(repeat):
                figures.add(lambda v=view: run_fhir4ds(runner, v))
        except Exception as exc:  # its failure is a figure of the comparison
            out[name] = f"fails: {type(exc).__name__}: {str(exc).splitlines()[0][:60]}"
            continue
        out[name] = figures
    return out


def _sof_js_figures(
    folder: Path, views: dict[str, Any], raw: list[bytes], n: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, view in views.items():
        try:
            seconds, rows = run_sof_js(folder, view, raw, 1)
        except subprocess.CalledProcessError as exc:
            out[name] = f"fails: {(exc.stderr or '').strip().splitlines()[-1:]}"
            continue
        out[name] = (seconds / n, rows)
    return out


def _pmtk_rounds(views: dict[str, Any], raw: list[bytes], repeat: int) -> dict[str, Figures]:
    figures = {name: Figures() for name in ["declared reader", *views]}
    checked = {name: load_view(v) for name, v in views.items()}
    for view in checked.values():  # warm up (compiled paths, thread pools)
        run_view(view, raw[:10])
    for _ in range(repeat):
        figures["declared reader"].add(lambda: run_reader(raw))
        for name, view in checked.items():
            if name == "exported":
                figures[name].add(lambda v=view: run_exported(v, raw))
            else:
                figures[name].add(lambda v=view: run_view(v, raw).height)
    return figures


def _print_table(
    n: int, pmtk: dict[str, Figures], f4: dict[str, Any] | str, js: dict[str, Any] | str
) -> None:
    reader = pmtk["declared reader"]
    print(
        f"declared reader (flatten + validate): {reader.wall:.3f} s (CPU {reader.cpu:.3f} s)"
        f", {n / reader.wall:,.0f} resources/s"
    )
    print(
        f"{'view':24} {'pmtk s':>7} {'CPU s':>6} {'rows':>7} {'of reader':>9} {'(CPU)':>6}"
        f"  {'fhir4ds':>28}  {'sof-js (per resource)':>30}"
    )
    for name, fig in pmtk.items():
        if name == "declared reader":
            continue
        target = 0.8 if name == "exported" else 0.5
        ratio = reader.wall / fig.wall
        mark = "" if ratio >= target else " NOT MET"
        line = (
            f"{name:24} {fig.wall:7.3f} {fig.cpu:6.3f} {fig.rows:7,} {ratio:8.2f}x"
            f" {reader.cpu / fig.cpu:5.2f}x{mark:8}"
        )
        line += "  " + _versus(f4, name, fig, lambda g: g.wall, 10, n)
        line += "  " + _versus(js, name, fig, lambda g: g[0] * n, 100, n)
        print(line)


def _versus(
    other: dict[str, Any] | str,
    name: str,
    fig: Figures,
    seconds: Callable[[Any], float],
    target: float,
    n: int,
) -> str:
    if isinstance(other, str):
        return f"{'-':>28}"
    got = other[name]
    if isinstance(got, str):
        return f"{got[:28]:>28}"
    speedup = seconds(got) / fig.wall
    rows = got.rows if isinstance(got, Figures) else got[1]
    same = "" if isinstance(got, tuple) or rows == fig.rows else f" rows {rows:,}"
    mark = "" if speedup >= target else " NOT MET"
    return f"{seconds(got):8.3f} s {speedup:8.1f}x{mark}{same}".rjust(28)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sof-js", type=Path, default=os.environ.get("PMTK_SOF_JS"))
    parser.add_argument(
        "--sof-js-resources",
        type=int,
        default=1_000,
        help="Resources (the first pages) sof-js evaluates: it parses each path per resource, "
        "some 30-300 resources/s, so the whole set would take hours; rates are compared.",
    )
    args = parser.parse_args()
    views = {"exported": declared_view_definitions("Appointment")["Appointment"], **VIEWS}
    raw = pages(args.resources, args.page_size)
    print(f"pmtk {toolkit.__version__}, polars {pl.__version__}; {args.resources:,} Appointments")
    print(
        f"{len(raw)} pages, {sum(map(len, raw)) / 1e6:.1f} MB; speed probe {speed_probe():.0f} ms"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    pmtk = _pmtk_rounds(views, raw, args.repeat)
    f4: dict[str, Any] | str
    found = fhir4ds_runner(raw)
    if isinstance(found, str):
        f4 = found
        print(f"fhir4ds: not run, {found}")
    else:
        print(f"fhir4ds: its load of the resources into DuckDB took {found[1]:.2f} s (apart)")
        f4 = _fhir4ds_figures(found[0], views, args.repeat)
    js: dict[str, Any] | str = "not run"
    if args.sof_js is not None and shutil.which("node"):
        folder = prepare_sof_js(Path(args.sof_js))
        js_pages = raw[: max(1, args.sof_js_resources // args.page_size)]
        js = _sof_js_figures(
            folder, views, js_pages, sum(1 for p in js_pages for _ in orjson.loads(p)["entry"])
        )
    else:
        print("sof-js: not run (pass --sof-js DIR, its src folder, and have node on PATH)")
    _print_table(args.resources, pmtk, f4, js)
    print(f"speed probe after: {speed_probe():.0f} ms, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
