"""`pmtk check` takes its target through the one settings path: no false pass on a typo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PMTK = str(Path(sys.executable).parent / "pmtk")


def _check(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PMTK, "check", "--report-dir", str(tmp_path / "report"), *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PM_BASEURL": "https://au-api.halaxy.com/main"}, "did you mean PM_BASE_URL"),
        ({"PM_CLIENT_ID": "id", "PM_CLIENT_SECRET": "sec-ret-1"}, "no deployment address"),
        (
            {
                "PM_BASE_URL": "https://au-api.halaxy.com",
                "PM_CLIENT_ID": "id",
                "PM_CLIENT_SECRET": "sec-ret-1",
            },
            "must end with /main",
        ),
    ],
    ids=["misspelt-variable", "credentials-without-address", "base-url-without-main"],
)
def test_a_misconfiguration_is_refused_before_any_check(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    run = _check(tmp_path, env)
    assert run.returncode == 2, run.stdout + run.stderr
    assert expected in " ".join(run.stderr.split())
    assert "conformant" not in run.stdout
    assert "sec-ret-1" not in run.stdout + run.stderr
    assert not (tmp_path / "report").exists()  # nothing ran, nothing written


def test_a_misspelt_variable_in_dotenv_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("PM_BASE_ULR=https://au-api.halaxy.com/main\n")
    run = _check(tmp_path, {})
    assert run.returncode == 2
    assert "did you mean PM_BASE_URL" in " ".join(run.stderr.split())
