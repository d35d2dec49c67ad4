"""A web page in headless Chromium cannot make the receiver delete a stored record.

The page is served by a second loopback server (another origin) and posts a delete
notification to the receiver three ways: ``no-cors`` with a Blob body (no
Content-Type, no preflight), ``no-cors`` with a string (``text/plain``, no preflight),
and ``cors`` with ``application/json`` (a preflight first). The receiver runs with
``--no-auth`` on loopback, the weakest setting it allows: the first two are refused
with 415, the preflight gets 405 and no CORS header, so the third is never sent.
The Appointment stays in the store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.listen.conftest import notification
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import listen

BROWSERS = ("chromium-headless-shell", "chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # loopback only
    "--virtual-time-budget=10000",
)

PAGE = """<!doctype html>
<html><body><pre id="out">not run</pre>
<script>
const url = %(url)s;
const body = %(body)s;
async function go() {
  const tries = [
    ["blob", {method: "POST", mode: "no-cors", body: new Blob([body])}],
    ["text", {method: "POST", mode: "no-cors", body: body}],
    ["json", {method: "POST", mode: "cors", body: body,
              headers: {"Content-Type": "application/json"}}],
  ];
  const seen = [];
  for (const [name, init] of tries) {
    try {
      const answer = await fetch(url, init);
      seen.push(name + "=" + answer.type + ":" + answer.status);
    } catch (error) {
      seen.push(name + "=blocked");
    }
  }
  document.getElementById("out").textContent = seen.join(" ");
}
go();
</script></body></html>
"""


def _chromium() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = "headless Chromium is not installed: apt-get install -y chromium-headless-shell"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def _page_server(html: bytes) -> Iterator[str]:
    """Serve ``html`` at ``/page.html`` on its own loopback port (another origin)."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_cross_origin_page_cannot_delete_a_stored_record(
    dep: Any, store: Path, client: Client
) -> None:
    binary = _chromium()
    rid = str(load("Appointment", store)["id"][3])
    body = notification(("Appointment", rid), delete=True).decode()
    with listen(store, client=client, no_auth=True, catch_up=False) as receiver:
        html = PAGE % {
            "url": orjson.dumps(receiver.url).decode(),
            "body": orjson.dumps(body).decode(),
        }
        with (
            _page_server(html.encode()) as page,
            tempfile.TemporaryDirectory(prefix="pmtk-chromium-") as profile,
        ):
            done = subprocess.run(
                [binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        assert done.returncode == 0, done.stderr[-2000:]
        # the page ran: two opaque answers (their status hidden from it) and a blocked call
        assert "blob=opaque:0" in done.stdout, done.stdout[-2000:]
        assert "text=opaque:0" in done.stdout
        assert "json=blocked" in done.stdout
        assert receiver.wait_idle(10)
        assert receiver.stats.received == 0
        assert receiver.stats.refused == 3  # 415, 415 and the preflight's 405
        assert receiver.queue.count() == 0
    assert rid in load("Appointment", store)["id"].to_list()
