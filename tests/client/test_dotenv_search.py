"""The ``.env`` is found from a subfolder of the project, and never above the project.

From ``docs/`` of a project whose ``.env`` holds real settings, ``pmtk sync`` used
to find no ``.env``, say one stderr line and sync the embedded mock with exit 0: a
CI job could sync fake data. The search now goes up to the project root (the first
folder with ``.git`` or ``pyproject.toml``) and no further.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import USER_AGENT
from toolkit.config import configured, find_dotenv, resolve_settings

PMTK = Path(sys.executable).parent / "pmtk"


@pytest.fixture(autouse=True)
def _no_pm_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PM_"):
            monkeypatch.delenv(name)


def _project(root: Path, marker: str = "pyproject.toml") -> Path:
    (root / "docs" / "deep").mkdir(parents=True)
    if marker == ".git":
        (root / ".git").mkdir()
    else:
        (root / marker).write_text("[project]\nname = 'practice-reports'\n")
    return root


def test_a_subfolder_reads_the_projects_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path / "reports", ".git")
    (project / ".env").write_text(
        "PM_BASE_URL=https://au-api.halaxy.com/main\nPM_CLIENT_ID=cid\nPM_CLIENT_SECRET=s3cret\n"
    )
    monkeypatch.chdir(project / "docs" / "deep")
    assert find_dotenv() == project / ".env"
    settings = resolve_settings(warn=False)
    assert (settings.base_url, settings.client_id) == ("https://au-api.halaxy.com/main", "cid")


def test_the_nearest_env_wins_and_none_above_the_project_root_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("PM_BASE_URL=https://outside.example/main\n")
    project = _project(tmp_path / "reports")
    monkeypatch.chdir(project / "docs")
    assert find_dotenv() is None  # tmp_path/.env is above the project root: not read
    assert not configured()
    (project / "docs" / ".env").write_text("PM_REGION=eu\n")
    (project / ".env").write_text("PM_REGION=au\n")
    assert find_dotenv() == project / "docs" / ".env"


def test_outside_any_project_only_the_working_folder_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("PM_BASE_URL=https://outside.example/main\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert find_dotenv() is None
    monkeypatch.chdir(tmp_path)
    assert find_dotenv() == tmp_path / ".env"


def test_pmtk_sync_from_a_subfolder_syncs_the_deployment_in_the_projects_env(
    tmp_path: Path,
) -> None:
    from toolkit.mock import serve

    project = _project(tmp_path / "reports")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PM_")}
    with serve(seed=0, scale="small") as dep:
        (project / ".env").write_text(
            f"PM_BASE_URL={dep.base_url}\nPM_CLIENT_ID={dep.client_id}\n"
            f"PM_CLIENT_SECRET={dep.client_secret}\nPM_USER_AGENT={USER_AGENT}\n"
        )
        done = subprocess.run(
            [str(PMTK), "sync", "--out", "store", "-r", "Organization"],
            cwd=project / "docs", env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "embedded mock" not in done.stderr
    manifest = json.loads((project / "docs" / "store" / "manifest.json").read_text())
    assert dep.base_url in json.dumps(manifest)
