"""``pmtk listen`` as a person and a program see it: a terminal, a pipe, and ``--output json``.

The real command runs as a child process against a small mock over loopback HTTP,
once on an 80-column pseudo-terminal (pexpect) and once with its output piped; a
notification written by hand from the facts file's form is posted to it, and what
it prints is read back:

* on the terminal, the banner's labels in colour, and the same words as on a pipe
  once the colour codes are taken out;
* on a pipe, and with ``NO_COLOR`` or ``TERM=dumb`` on a terminal, plain lines: no
  colour code, each log record and each ``--status`` line whole on one line however
  long (the terminal is 80 columns; some lines are longer);
* with ``--output json``, JSON Lines while running (``listening``, ``log``...,
  ``stopped``) and one document for ``--status``/``--retry-dead``;
* never the authentication header's value, in any of its escaped forms.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest

from tests.listen.conftest import SECRET_HEADER, notification
from toolkit.client import Client
from toolkit.store import load
from toolkit.webhooks import Change, Event, EventQueue, listen

PMTK = str(Path(sys.executable).parent / "pmtk")  # what `uv run pmtk` runs
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NAME, VALUE = SECRET_HEADER
HEADERS = {"Content-Type": "application/json", NAME: VALUE.encode()}  # sent as UTF-8
WAIT = 90.0


def _leaks(text: str) -> list[str]:
    """The forms of the secret found in ``text`` (raw, JSON-escaped, repr)."""
    forms = {VALUE, json.dumps(VALUE)[1:-1], json.dumps(VALUE, ensure_ascii=False)[1:-1]}
    forms.add(repr(VALUE)[1:-1])
    return [form for form in forms if form in text]


def _env(dep: Any, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PM_", "NO_COLOR")) and k not in ("TERM", "COLUMNS", "LINES")
    }
    env.update(
        PM_CLIENT_ID=dep.client_id,
        PM_CLIENT_SECRET=dep.client_secret,
        PM_USER_AGENT="pmtk tests (tests@example.org)",
        PM_WEBHOOK_AUTH=f"{NAME}:{VALUE}",
        PYTHONIOENCODING="utf-8",
        TERM="xterm-256color",
        COLUMNS="80",
        LINES="24",
    )
    env.update(extra)
    return env


def _args(dep: Any, store: Path, *more: str) -> list[str]:
    return ["listen", "--store", str(store), "--base-url", dep.base_url, *more]


def _known_patient(store: Path) -> str:
    ids = load("Patient", store)["id"].to_list()
    return str(ids[0])


def _post_events(url: str, patient: str) -> None:
    """A Patient the store holds, a type pmtk has no view of, an Invoice never synced."""
    body = notification(("Patient", patient), ("Encounter", "enc-5"), ("Invoice", "20000001"))
    answer = httpx.post(url, content=body, headers=HEADERS, timeout=30, trust_env=False)
    assert answer.status_code == 202, answer.text


class Piped:
    """A child process with its stdout and stderr read line by line on threads."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [PMTK, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=env,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._new: queue.Queue[None] = queue.Queue()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))
            self._new.put(None)

    def wait_for(self, lines: list[str], found: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for line in list(lines):
                if found(line):
                    return line
            if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                break
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=0.5)
        pytest.fail(f"not seen; stdout={self.out!r} stderr={self.err!r}")

    def interrupt(self) -> int:
        """Ctrl-C, then its exit code (killed after 60 s); the pipes are closed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code

    def __enter__(self) -> Piped:
        return self

    def __exit__(self, *exc: object) -> None:
        self.interrupt()  # always stopped, also when the test failed


class OnTerminal:
    """A child process on an 80x24 pseudo-terminal; ``shown`` is everything it drew."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.log = io.StringIO()
        self.child = pexpect.spawn(
            PMTK, args, env=env, dimensions=(24, 80),
            encoding="utf-8", timeout=WAIT,
        )  # fmt: skip
        self.child.logfile_read = self.log

    @property
    def shown(self) -> str:
        return self.log.getvalue().replace("\r\n", "\n")

    def expect(self, pattern: str) -> Any:
        self.child.expect(pattern)
        return self.child.match

    def finish(self, *, interrupt: bool = False) -> int:
        try:
            if interrupt:
                self.child.sendintr()
            self.child.expect(pexpect.EOF)
        finally:
            self.child.close(force=True)  # always stopped, also when the test failed
        assert self.child.exitstatus is not None, f"killed by {self.child.signalstatus}"
        return int(self.child.exitstatus)

    def __enter__(self) -> OnTerminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.child.isalive():
            self.child.close(force=True)


def _lines(text: str) -> list[str]:
    return [line for line in ANSI.sub("", text).replace("\r", "").split("\n") if line.strip()]


def _status_lines(report: list[str]) -> dict[str, str]:
    return {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in report}


@pytest.mark.parametrize("how", ["terminal", "pipe", "NO_COLOR", "TERM=dumb"])
def test_listen_shows_what_a_person_needs_on_a_terminal_and_on_a_pipe(
    dep: Any, store: Path, how: str
) -> None:
    dep.reset_rate_limit()
    extra = (
        {"NO_COLOR": "1"} if how == "NO_COLOR" else {"TERM": "dumb"} if how == "TERM=dumb" else {}
    )
    env = _env(dep, **extra)
    args = _args(dep, store, "--port", "0", "--no-catch-up")
    patient = _known_patient(store)
    applied = "pmtk listen: Patient: 1 written, 0 deleted, 0 already newer in the store"
    ignored = (
        "pmtk listen: accepted Encounter/enc-5 (change) but not applied: "
        "pmtk keeps no Encounter table"
    )
    if how == "pipe":
        with Piped(args, env) as run:
            url_line = run.wait_for(run.out, lambda line: line.startswith("webhook URL: "))
            run.wait_for(run.out, lambda line: line.startswith("auth header: "))
            url = url_line.split(": ", 1)[1]
            _post_events(url, patient)
            run.wait_for(run.err, lambda line: line == applied)
            port = url.split(":")[2].split("/")[0]
            status = subprocess.run(
                [PMTK, *_args(dep, store, "--status", "--port", port)],
                capture_output=True, text=True, encoding="utf-8", env=env, timeout=120,
                check=False,
            )  # fmt: skip
            assert status.returncode == 0, status.stderr
            code = run.interrupt()
        out, err = "\n".join(run.out), "\n".join(run.err)
        report = status.stdout
    else:
        with OnTerminal(args, env) as term:
            match = term.expect(
                r"webhook URL: (?:\x1b\[[0-9;]*m)*(http://127\.0\.0\.1:(\d+)/webhook)"
            )
            url, port = match.group(1), match.group(2)
            term.expect("auth header: .*hidden")
            _post_events(url, patient)
            term.expect(re.escape(applied.split(": ", 1)[1]))
            with OnTerminal(_args(dep, store, "--status", "--port", port), env) as on_tty:
                assert on_tty.finish() == 0, on_tty.shown
            report = on_tty.shown
            code = term.finish(interrupt=True)
        out, err = term.shown, ""
    assert code == 0, out + err
    text = out + err + report
    assert not _leaks(text), "the authentication header's value was printed"
    if how == "terminal":
        assert ANSI.search(out), "a terminal gets the labels in colour"
    else:
        assert not ANSI.search(text), "no colour or cursor codes off a terminal"
    shown = _lines(out + "\n" + err)
    resolved = str(store)
    assert f"webhook URL: {url}" in shown
    assert f"store:       {resolved}" in shown
    assert f"auth header: {NAME} (value hidden)" in shown
    assert applied in shown and ignored in shown  # each record whole, on one line
    assert any(line.endswith("stopping") for line in shown)  # "^Cstopping" on a terminal
    # --status: every line whole, the waiting one too (longer than the 80 columns)
    lines = _lines(report)
    fields = _status_lines(lines)
    assert fields["worker"] == "running" and fields["accepting"] == "yes (202)"
    assert fields["queued"].startswith("0 change(s), ")
    assert fields["dead letters"] == "0" and fields["last error"] == "-"
    waiting = (
        "waiting:      1 Invoice change(s) until a sync makes the table "
        "(pmtk sync --resource Invoice)"
    )
    assert waiting in lines and len(waiting) > 80


def test_listen_json_is_json_lines_on_stdout_from_listening_to_stopped(
    dep: Any, store: Path
) -> None:
    dep.reset_rate_limit()
    patient = _known_patient(store)
    with Piped(_args(dep, store, "--port", "0", "--output", "json"), _env(dep)) as run:
        first = json.loads(run.wait_for(run.out, lambda line: True))
        assert first["event"] == "listening"
        assert first["store"] == str(store.resolve()) and first["auth_header"] == NAME
        assert (first["no_auth"], first["catch_up"]) == (False, True)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/webhook", first["url"])
        _post_events(first["url"], patient)
        run.wait_for(
            run.out, lambda line: "Patient: 1 written" in line or "1 already newer" in line
        )
        run.wait_for(run.out, lambda line: "catch-up sync" in line)
        assert run.interrupt() == 0, run.err
    documents = [json.loads(line) for line in run.out]  # every line of stdout is JSON
    assert documents[0] == first
    logs = [d for d in documents if d["event"] == "log"]
    assert {"time", "level", "logger", "message"} <= set(logs[0])
    ignored = [d for d in logs if "Encounter/enc-5" in d["message"]]
    assert len(ignored) == 1 and ignored[0]["level"] == "warning"
    assert ignored[0]["logger"] == "pmtk.listen"
    last = documents[-1]
    assert last["event"] == "stopped" and [d["event"] for d in documents].count("stopped") == 1
    assert last["status"]["worker"] == "stopped"
    assert last["status"]["received"] == 1 and last["status"]["applied"] >= 1
    assert last["status"]["queue"]["waiting_for_sync"] == {"Invoice": 1}
    # a person's notices stay on stderr, never mixed into the JSON
    assert "listening until Ctrl-C" in run.err and "stopping" in run.err
    assert not _leaks("\n".join(run.out + run.err))


def test_status_and_retry_dead_json_is_one_document_live_or_from_the_folder(
    dep: Any, store: Path, client: Client
) -> None:
    env = _env(dep)
    with listen(store, client=client, auth_header=f"{NAME}:{VALUE}", catch_up=False) as live:
        run = subprocess.run(
            [PMTK, *_args(dep, store, "--status", "--port", str(live.port), "--output", "json")],
            capture_output=True, text=True, encoding="utf-8", env=env, timeout=120, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        served = httpx.get(
            f"http://127.0.0.1:{live.port}/status", headers=HEADERS, trust_env=False
        ).json()
    document = json.loads(run.stdout)  # the whole of stdout is one document
    assert set(document) == {"status"}
    assert document["status"]["worker"] == "running" and document["status"]["accepting"] is True
    assert set(document["status"]) == set(served)  # what GET /status answers
    assert not _leaks(run.stdout + run.stderr)
    # nobody listens now: the folder, one change queued and one dead letter
    queue_ = EventQueue(store)
    queue_.put([Event("Appointment", "10000001")], "2026-11-23T10:00:00Z")
    queue_.bury(Change(Event("Appointment", "10000002"), 0, attempts=12), "gave up: 500")
    args = _args(dep, store, "--retry-dead", "--status", "--port", "1", "--output", "json")
    with OnTerminal(args, env) as offline:  # JSON on a terminal too: no colour codes in it
        assert offline.finish() == 0, offline.shown
    body = offline.shown.strip()
    assert not ANSI.search(body)
    document = json.loads(body.splitlines()[-1])
    assert document["retry_dead"] == {
        "requeued": 1,
        "journal": str((store / ".webhooks" / "journal.sqlite3").resolve()),
    }
    status = document["status"]
    assert status["worker"] == "not running" and status["dead_letters"] == 0
    assert status["queue"]["events"] == 2  # the queued change and the requeued one


def test_an_unknown_output_is_a_one_line_usage_error(dep: Any, tmp_path: Path) -> None:
    run = subprocess.run(
        [PMTK, *_args(dep, tmp_path / "s", "--output", "yaml")],
        capture_output=True, text=True, encoding="utf-8", env=_env(dep), timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip() == (
        "pmtk listen: Invalid value for '--output': must be 'text' or 'json'; see 'pmtk listen -h'"
    )
    assert not (tmp_path / "s").exists()
