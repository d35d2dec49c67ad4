"""Benchmark: how fresh a store stays with webhooks, beside polling with sync (not collected).

Run::

    uv run python tests/benchmarks/bench_webhooks.py [--writes 200] [--poll-every 10]

One mock (pacing off) announces its writes to a :func:`toolkit.listen` receiver
over loopback. Two copies of the same synced store are kept current at the same
time, from the same writes:

* **webhooks**: the receiver (one GET per announced change, then
  :func:`toolkit.store.apply_changes`);
* **polling**: a thread running ``toolkit.store.sync(..., resources=["Appointment"])``
  every ``--poll-every`` seconds (the baseline).

``--writes`` PATCHes change the ``description`` of distinct Appointments, one
every ``--interval`` seconds. A watcher thread reads both stores with
``toolkit.load`` in a loop and notes when each new description first appears;
the latency of a change is that moment minus the moment the PATCH returned.
Requests are the client requests each path sent (tokens excluded) during the
writes; "idle" is what each path costs per hour when nothing changes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import polars as pl

from toolkit.client import Client
from toolkit.mock import serve
from toolkit.store import load, sync
from toolkit.webhooks import listen

USER_AGENT = "pmtk-bench (bench@example.invalid)"
HEADER = "Authorization: Bearer bench-webhook-secret"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _client(dep: Any) -> Client:
    return Client(
        base_url=dep.base_url,
        client_id=dep.client_id,
        client_secret=dep.client_secret,
        requests_per_minute=None,
        progress=False,
    )


def _api(dep: Any) -> httpx.Client:
    token = httpx.post(
        f"{dep.base_url}/oauth/token",
        json={
            "grant_type": "client_credentials",
            "client_id": dep.client_id,
            "client_secret": dep.client_secret,
        },
        headers={"User-Agent": USER_AGENT},
    ).json()["access_token"]
    return httpx.Client(
        base_url=dep.base_url + "/",
        headers={
            "Authorization": f"Bearer {token}",
            "User-Agent": USER_AGENT,
            "Content-Type": "application/merge-patch+json",
        },
        timeout=30,
    )


class Watcher(threading.Thread):
    """Reads each store with ``toolkit.load`` in a loop; notes when a description appears."""

    def __init__(self, stores: dict[str, Path]) -> None:
        super().__init__(daemon=True)
        self.stores = stores
        self.seen: dict[str, dict[str, float]] = {name: {} for name in stores}
        self.loads = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for name, store in self.stores.items():
                try:
                    frame = load("Appointment", store)
                except Exception:  # a file replaced between manifest read and open: next loop
                    continue
                now = time.time()
                self.loads += 1
                seen = self.seen[name]
                for text in frame.filter(pl.col("description").str.starts_with("bench-"))[
                    "description"
                ].to_list():
                    seen.setdefault(text, now)
            time.sleep(0.005)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", default="small")
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--poll-every", type=float, default=10.0)
    args = parser.parse_args()
    port = _free_port()
    with (
        serve(
            seed=0,
            scale=args.scale,
            rate_limit=1_000_000,
            test_controls=True,
            webhook=f"http://127.0.0.1:{port}/webhook",
            webhook_header=HEADER,
        ) as dep,
        _client(dep) as hook_client,
        _client(dep) as poll_client,
        _api(dep) as api,
        tempfile.TemporaryDirectory() as tmp,
    ):
        hook_store, poll_store = Path(tmp) / "webhooks", Path(tmp) / "polling"
        started = time.perf_counter()
        sync(poll_client, poll_store, resources=["Patient", "Appointment"], progress=False)
        print(f"initial sync: {time.perf_counter() - started:.1f} s ({args.scale} scale)")
        shutil.copytree(poll_store, hook_store)
        ids = load("Appointment", poll_store)["id"].to_list()[: args.writes]
        if len(ids) < args.writes:
            raise SystemExit(f"only {len(ids)} appointments at this scale")

        with listen(
            hook_store, client=hook_client, port=port, auth_header=HEADER, catch_up=False
        ) as receiver:
            stop_polling = threading.Event()
            poll_runs: list[float] = []

            def poll() -> None:
                while not stop_polling.wait(args.poll_every):
                    t0 = time.perf_counter()
                    sync(poll_client, poll_store, resources=["Appointment"], progress=False)
                    poll_runs.append(time.perf_counter() - t0)

            watcher = Watcher({"webhooks": hook_store, "polling": poll_store})
            poller = threading.Thread(target=poll, daemon=True)
            hook_before, poll_before = hook_client.requests_sent, poll_client.requests_sent
            watcher.start()
            poller.start()
            written: dict[str, float] = {}
            for n, rid in enumerate(ids):
                text = f"bench-{n}"
                response = api.patch(f"Appointment/{rid}", json={"description": text})
                response.raise_for_status()
                written[text] = time.time()
                time.sleep(args.interval)
            deadline = time.time() + args.poll_every * 2 + 30
            while time.time() < deadline and any(
                len(watcher.seen[name]) < len(written) for name in watcher.seen
            ):
                time.sleep(0.05)
            stop_polling.set()
            watcher.stop.set()
            watcher.join()
            poller.join()
            receiver.wait_idle(30)
            hook_requests = hook_client.requests_sent - hook_before
            poll_requests = poll_client.requests_sent - poll_before
            mock_stats = dep.webhook_stats()

    print(
        f"{args.writes} PATCHes, one every {args.interval * 1000:.0f} ms; "
        f"polling every {args.poll_every:g} s ({len(poll_runs)} syncs, "
        f"{statistics.median(poll_runs) if poll_runs else 0:.2f} s median each); "
        f"{watcher.loads} toolkit.load calls by the watcher; webhooks {mock_stats}"
    )
    print()
    header = (
        f"{'path':<10} {'seen':>9} {'median':>9} {'p99':>9} {'max':>9} "
        f"{'requests':>9} {'req/change':>11} {'idle req/h':>11}"
    )
    print(header)
    print("-" * len(header))
    rows = {"webhooks": hook_requests, "polling": poll_requests}
    for name, requests in rows.items():
        lat = [watcher.seen[name][t] - written[t] for t in written if t in watcher.seen[name]]
        idle = 0.0 if name == "webhooks" else 3600 / args.poll_every
        print(
            f"{name:<10} {len(lat):>5}/{len(written):<3} "
            f"{statistics.median(lat) if lat else float('nan'):>8.3f}s "
            f"{_pct(lat, 0.99) if lat else float('nan'):>8.3f}s "
            f"{max(lat) if lat else float('nan'):>8.3f}s "
            f"{requests:>9} {requests / len(written):>11.2f} {idle:>11.0f}"
        )
    print()
    print("target: webhooks p99 < 2 s and 1 request per change")


if __name__ == "__main__":
    main()
