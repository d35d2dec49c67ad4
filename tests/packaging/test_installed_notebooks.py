"""``pmtk notebooks`` from a project that installed pmtk, not from the repository.

The wheel is built (``uv build``) and installed into a throwaway venv; the run
happens in ``docs/`` of a separate project. Before: ``no numbered notebooks in
.../notebooks`` with no hint, an empty ``build/notebooks/`` left behind, and with
``--source`` a traceback ``No module named 'nbformat'``.

The throwaway venv gets the wheel without its dependencies and sees this
environment's packages through a ``.pth`` line (no index is reachable here), so
the ``toolkit`` it imports is the wheel's, its notebooks the shipped copy.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").iterdir())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is needed to build the wheel (.ci/run installs it)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--wheel", "--offline", "-q", "-o", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    uv = shutil.which("uv")
    assert uv is not None
    home = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run(
        [uv, "venv", "-q", "--offline", "--python", sys.executable, str(home)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    env = {**os.environ, "VIRTUAL_ENV": str(home)}
    subprocess.run(
        [uv, "pip", "install", "-q", "--offline", "--no-deps", str(wheel)],
        check=True, capture_output=True, timeout=120, env=env,
    )  # fmt: skip
    (site,) = home.glob("lib/python*/site-packages")
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield home


def test_the_wheel_ships_the_notebooks_and_the_notebooks_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for path in NOTEBOOKS:
            assert archive.read(f"toolkit/_notebooks/{path.name}") == path.read_bytes()
        (meta_name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(archive.read(meta_name).decode())
    assert "notebooks" in meta.get_all("Provides-Extra")
    extra = [r for r in meta.get_all("Requires-Dist") if "extra == 'notebooks'" in r]
    for module in ("nbformat", "nbclient", "nbconvert", "ipykernel", "jupyter-client"):
        assert any(r.startswith(module) for r in extra), (module, extra)


def test_an_installed_pmtk_runs_its_shipped_notebooks_into_the_projects_build(
    venv: Path, tmp_path: Path
) -> None:
    project = tmp_path / "practice-reports"
    (project / "docs").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'practice-reports'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PM_", "VIRTUAL_ENV"))}
    # nbconvert's templates are data files of this environment (share/jupyter).
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    done = subprocess.run(
        [str(venv / "bin" / "pmtk"), "notebooks", "--report", "--only", "01"],
        cwd=project / "docs", env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    page = project / "build" / "notebooks" / "01_quickstart.html"
    assert page.is_file() and str(page) in done.stdout
    assert not (project / "docs" / "build").exists()  # not beside where it was run


def test_missing_notebook_modules_name_the_extra_and_leave_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from toolkit.cli import app

    real = importlib.util.find_spec

    def without_nbformat(name: str, *args: object, **kwargs: object) -> object:
        return None if name == "nbformat" else real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_nbformat)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    result = CliRunner().invoke(app, ["notebooks", "--report"])
    assert result.exit_code == 2
    message = result.stderr
    assert 'pip install "pmtk-practice[notebooks]"' in message and "nbformat" in message
    assert len(message.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]  # no build/


def test_a_folder_without_notebooks_hints_at_source_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["notebooks", "--source", "empty"])
    assert result.exit_code == 2
    assert "no numbered notebooks in empty" in result.stderr
    assert "--source DIR" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
