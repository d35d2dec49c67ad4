"""Benchmark: notebook 03 run twice on one store, the first run beside the rerun.

Run::

    uv run python tests/benchmarks/bench_notebook_rerun.py [--scale medium] [--notebook 03]

A mock of the chosen scale runs in this process (unthrottled); the notebook runs
in a Jupyter kernel, as ``pmtk notebooks`` runs it, against that mock
(``PM_BASE_URL`` and friends) with its own store (``PM_NOTEBOOK_STORE``, a
temporary folder). The client paces itself at the API's 500 requests a minute,
as a notebook does against a real deployment.

1. *First run*: an empty store, so a full sync, then every cell.
2. *Rerun*: right after, on the same store (fresh: an incremental sync asks
   about one page per resource, and the free slots of ``$find`` are read from
   the store while they are fresh).

For each run: wall-clock time of the whole execution (kernel start included),
the kernel's CPU time (user and system, which a busy machine does not inflate as
it does the wall clock), its peak RSS (``VmHWM``; both read by a cell appended to
the notebook),
and the requests the mock answered, by path (``$find``, lists, token).

The kernel keeps compiled bytecode as Python does by default:
``PYTHONDONTWRITEBYTECODE`` is removed from its environment (a sandbox that sets
it recompiles every imported module on every kernel start, some 7 s more for
notebook 03's imports); ``--keep-environment`` leaves it as it is.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script too

from tests.benchmarks.bench_sync import USER_AGENT

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

# Appended to the notebook copy: the kernel's own peak memory and CPU time, on one line.
PEAK_CELL = (
    "import os as _os; _t = _os.times(); "
    "print('PEAK_RSS_KB', next(l.split()[1] for l in open('/proc/self/status') "
    "if l.startswith('VmHWM:')), _t.user + _t.system)"
)


def _kernel_figures(nb: Any) -> tuple[int, float]:
    """The kernel's peak RSS (kB) and CPU seconds, as the appended cell printed them."""
    for output in nb.cells[-1].get("outputs", []):
        for line in output.get("text", "").splitlines():
            if line.startswith("PEAK_RSS_KB"):
                _, kb, cpu = line.split()
                return int(kb), float(cpu)
    return 0, 0.0


def _requests(dep: Any) -> Counter[str]:
    """The mock's requests so far, grouped as ``$find``, token and lists/reads."""
    grouped: Counter[str] = Counter()
    for path, count in dep.stats()["requests_by_path"].items():
        kind = "$find" if "$find" in path else "token" if "token" in path else "lists"
        grouped[kind] += count
    return grouped


def run_once(dep: Any, notebook: Path) -> dict[str, Any]:
    """Execute ``notebook`` once (a copy with the peak-memory cell); its figures."""
    import nbformat

    from toolkit.notebooks import execute_notebook

    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PEAK_CELL))
    with tempfile.TemporaryDirectory(prefix="pmtk-bench-nb-") as work:
        copy = Path(work) / notebook.name
        for extra in notebook.parent.glob("*.json"):  # a baseline beside notebook 05
            (Path(work) / extra.name).write_bytes(extra.read_bytes())
        nbformat.write(nb, copy)
        dep.reset_stats()
        began = time.perf_counter()
        executed, error = execute_notebook(copy, timeout=900)
        seconds = time.perf_counter() - began
    if error:
        raise SystemExit(f"{notebook.name} failed:\n{error[-3000:]}")
    kb, cpu = _kernel_figures(executed)
    return {"seconds": seconds, "cpu": cpu, "peak_mb": kb / 1024, "requests": _requests(dep)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scale", default="medium", choices=["small", "medium", "large"])
    parser.add_argument("--notebook", default="03", help="the notebook's number")
    parser.add_argument(
        "--keep-environment",
        action="store_true",
        help="leave PYTHONDONTWRITEBYTECODE to the kernel when it is set",
    )
    args = parser.parse_args()
    if not args.keep_environment:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

    from toolkit.mock import serve
    from toolkit.notebooks import notebook_paths

    (notebook,) = notebook_paths(NOTEBOOKS, [args.notebook])
    with (
        serve(seed=0, scale=args.scale, rate_limit=1_000_000, test_controls=True) as dep,
        tempfile.TemporaryDirectory(prefix="pmtk-bench-store-") as store,
    ):
        os.environ.update(
            PM_BASE_URL=dep.base_url,
            PM_CLIENT_ID=dep.client_id,
            PM_CLIENT_SECRET=dep.client_secret,
            PM_USER_AGENT=USER_AGENT,
            PM_NOTEBOOK_STORE=str(Path(store) / "store"),
        )
        runs = {"first run (empty store)": run_once(dep, notebook)}
        runs["rerun (fresh store)"] = run_once(dep, notebook)
    bytecode = "not kept" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "kept"
    print(f"\n{notebook.name} at {args.scale} scale, run twice on one store (bytecode {bytecode})")
    head = f"{'run':26} {'seconds':>8} {'kernel CPU s':>12} {'peak MB':>8} {'requests':>9}"
    print(f"{head} {'$find':>6} {'lists':>6}")
    for name, r in runs.items():
        req = r["requests"]
        print(
            f"{name:26} {r['seconds']:8.1f} {r['cpu']:12.1f} {r['peak_mb']:8.0f} "
            f"{sum(req.values()):9,} {req['$find']:6,} {req['lists']:6,}"
        )


if __name__ == "__main__":
    main()
