"""Benchmark of the mock deployment, side by side with a minimal Starlette baseline.

Run with ``uv run python tests/benchmarks/bench_mock.py`` (not collected by pytest).
Prints single-resource reads per second and 100-entry Bundle pages per second
for the mock, next to a minimal Starlette/uvicorn endpoint returning a fixed
small JSON document measured in the same run over the same kind of httpx
client, and the start-up time of the large scale.

Both servers run in their own process (``--serve mock|baseline``), as with
``pmtk mock``: a server thread inside the measuring process would share its GIL
with the client and measure the contention instead of the server.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from toolkit.mock import serve

USER_AGENT = "pmtk-bench (bench@example.invalid)"
SECONDS = 3.0


@contextmanager
def baseline_server() -> Iterator[str]:
    body = b'{"resourceType":"Patient","id":"1"}'

    async def fixed(request: Request) -> Response:
        return Response(body, media_type="application/fhir+json")

    app = Starlette(routes=[Route("/fixed", fixed)])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


@contextmanager
def in_subprocess(kind: str) -> Iterator[str]:
    """Start ``--serve kind`` in a child process; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def serve_forever(kind: str) -> None:
    if kind == "baseline":
        with baseline_server() as url:
            print(url, flush=True)
            threading.Event().wait()
    with serve(seed=0, scale="small", rate_limit=10**9) as dep:
        print(dep.base_url, flush=True)
        threading.Event().wait()


def rate(client: httpx.Client, urls: list[str]) -> float:
    """Requests per second over about SECONDS, cycling through ``urls``."""
    for url in urls[:20]:
        client.get(url).raise_for_status()
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        client.get(urls[done % len(urls)]).raise_for_status()
        done += 1
    return done / (time.perf_counter() - start)


def main() -> None:
    with (
        in_subprocess("baseline") as base,
        httpx.Client(headers={"User-Agent": USER_AGENT}) as client,
    ):
        baseline = rate(client, [f"{base}/fixed"])
    with in_subprocess("mock") as base_url:
        token = httpx.post(
            f"{base_url}/oauth/token",
            json={
                "grant_type": "client_credentials",
                "client_id": "pmtk-demo",
                "client_secret": "pmtk-demo-secret",
            },
            headers={"User-Agent": USER_AGENT},
        ).json()["access_token"]
        headers = {"User-Agent": USER_AGENT, "Authorization": f"Bearer {token}"}
        with httpx.Client(headers=headers) as client:
            reads = rate(client, [f"{base_url}/Appointment/{10_000_001 + i}" for i in range(1500)])
            pages = rate(
                client, [f"{base_url}/Appointment?_count=100&page={p}" for p in range(1, 20)]
            )
    start = time.perf_counter()
    with serve(seed=0, scale="large"):
        large_start = time.perf_counter() - start

    print(f"{'measure':<38}{'mock':>12}{'baseline':>12}")
    print(f"{'single-resource reads / s':<38}{reads:>12.0f}{baseline:>12.0f}")
    print(f"{'100-entry Bundle pages / s':<38}{pages:>12.0f}{baseline:>12.0f}")
    print(f"{'large scale start (s)':<38}{large_start:>12.1f}{'':>12}")
    print("targets: reads >= 1000/s, pages >= 200/s, large start < 60 s")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve_forever(sys.argv[2])
    else:
        main()
