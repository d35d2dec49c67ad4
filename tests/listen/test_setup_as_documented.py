"""The webhook set-up of ``docs/mock.md``, run literally, delivers a change into the store.

The commands are read from the doc's console block (only the ports are changed to
free ones): ``export PM_WEBHOOK_AUTH=...``, ``pmtk mock --webhook ...`` and ``pmtk
listen ...``, each a real process. Before, the mock read ``PM_WEBHOOK_AUTH_HEADER``
only, sent no header, and the receiver refused every delivery (401) in silence.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import httpx
import polars as pl
import pytest

from tests.conftest import USER_AGENT
from tests.listen.conftest import free_port
from toolkit.store import load
from toolkit.webhooks.setting import auth_setting

DOC = Path(__file__).parents[2] / "docs" / "mock.md"
OLD = "PM_WEBHOOK_AUTH_HEADER"
PMTK = str(Path(__file__).parents[2] / ".venv" / "bin" / "pmtk")


def _documented() -> tuple[dict[str, str], list[str], list[str]]:
    """``(exported variables, mock argv, listen argv)`` from the doc's console block."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"```console\n(\$ export PM_WEBHOOK_AUTH.*?)```", text, re.S)
    assert block is not None, "the set-up block is gone from docs/mock.md"
    lines = block.group(1).replace("\\\n", " ").splitlines()
    exported: dict[str, str] = {}
    mock: list[str] = []
    listen: list[str] = []
    for line in lines:
        words = shlex.split(line.lstrip("$ "), comments=True)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            exported[name] = value
            continue
        env = [w for w in words if re.fullmatch(r"[A-Z_]+=.*", w)]
        exported.update(dict(w.split("=", 1) for w in env))
        words = [w for w in words if w not in env and w != "&"]
        assert words[:2] == ["uv", "run"], line
        (mock if words[3] == "mock" else listen).extend(words[3:])
    return exported, mock, listen


def _ported(argv: list[str], ports: dict[str, str]) -> list[str]:
    out = []
    for word in argv:
        for old, new in ports.items():
            word = word.replace(old, new)
        out.append(word)
    return out


def test_the_documented_set_up_delivers_a_change_into_the_store(tmp_path: Path) -> None:
    exported, mock_argv, listen_argv = _documented()
    assert "PM_WEBHOOK_AUTH" in exported and "PM_WEBHOOK_AUTH_HEADER" not in exported
    ports = {"8000": str(free_port()), "8090": str(free_port())}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    env.update(exported, PM_USER_AGENT=USER_AGENT, PYTHONIOENCODING="utf-8")
    mock = subprocess.Popen(
        [PMTK, *_ported(mock_argv, ports)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path, text=True,
    )  # fmt: skip
    listener = None
    try:
        assert mock.stdout is not None
        base = mock.stdout.readline().split(": ", 1)[1].strip()  # "base URL: ..."
        listener = subprocess.Popen(
            [PMTK, *_ported(listen_argv, ports)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path, text=True,
        )  # fmt: skip
        store = tmp_path / "pmtk-store"
        name, _, value = exported["PM_WEBHOOK_AUTH"].partition(":")
        status_url = f"http://127.0.0.1:{ports['8090']}/status"
        deadline = time.monotonic() + 90
        while True:  # the catch-up sync has made the tables
            assert time.monotonic() < deadline, "the receiver never caught up"
            assert listener.poll() is None, listener.communicate()
            try:
                report = httpx.get(status_url, headers={name: value.strip()}).json()
                if report.get("catch_up", "").startswith("ok"):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        rid = str(load("Appointment", store)["id"][0])
        token = httpx.post(
            f"{base}/oauth/token",
            json={"grant_type": "client_credentials", "client_id": env["PM_CLIENT_ID"],
                  "client_secret": env["PM_CLIENT_SECRET"]},
            headers={"User-Agent": USER_AGENT, "Accept": "application/fhir+json"},
        ).json()["access_token"]  # fmt: skip
        patched = httpx.patch(
            f"{base}/Appointment/{rid}",
            json={"description": "set up as documented"},
            headers={
                "Accept": "application/fhir+json",
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/merge-patch+json",
                "User-Agent": USER_AGENT,
            },
        )
        assert patched.status_code == 200, patched.text
        while True:
            rows = load("Appointment", store).filter(pl.col("id") == rid)
            if rows["description"].item() == "set up as documented":
                break
            assert time.monotonic() < deadline, "the change never reached the store"
            time.sleep(0.2)
    finally:
        for proc in (listener, mock):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        outputs = [p.communicate(timeout=30) for p in (listener, mock) if p is not None]
    assert all("deprecated" not in err for _out, err in outputs)


@pytest.mark.parametrize(
    ("option", "old_option", "environ", "expected", "notice"),
    [
        ("A: new", None, {"PM_WEBHOOK_AUTH": "B: env"}, "A: new", None),
        (None, "C: old", {"PM_WEBHOOK_AUTH": "B: env"}, "C: old", "--webhook-header"),
        (None, None, {"PM_WEBHOOK_AUTH": "B: env", OLD: "D: x"}, "B: env", None),
        (None, None, {OLD: "D: old env"}, "D: old env", OLD),
        (None, None, {}, None, None),
    ],
)  # fmt: skip
def test_one_name_for_the_auth_header_and_a_notice_for_the_old_ones(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str | None,
    old_option: str | None,
    environ: dict[str, str],
    expected: str | None,
    notice: str | None,
) -> None:
    for name in ("PM_WEBHOOK_AUTH", "PM_WEBHOOK_AUTH_HEADER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert auth_setting(option, command="pmtk mock", old_option=old_option) == expected
    err = capsys.readouterr().err
    if notice is None:
        assert err == ""
    else:
        assert f"pmtk mock: {notice} is deprecated" in err
        assert (expected or "").split(":")[1].strip() not in err  # the value is a secret


def test_the_mock_reports_each_refused_delivery_with_its_status(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from tests.conftest import toolkit_client
    from toolkit.mock import serve
    from toolkit.webhooks import listen

    port = free_port()
    with (
        serve(scale="small", test_controls=True, webhook=f"http://127.0.0.1:{port}/webhook",
              webhook_header="X-Hook: wrong-value") as mock,
        toolkit_client(mock) as client,
        listen(tmp_path / "s", client=client, port=port, auth_header="X-Hook: right-value",
               catch_up=False),
    ):  # fmt: skip
        caplog.set_level("WARNING", logger="pmtk.mock.webhooks")
        mock.touch("Patient", ["100001"])
        assert mock.webhooks_sent(30)
        assert mock.webhook_stats()["refused"] == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "pmtk.mock.webhooks"]
    assert any("answered 401; retrying" in line for line in lines), lines
    assert any("answered 401, 3 times; not sent again" in line for line in lines), lines
    assert not any("wrong-value" in line for line in lines)
