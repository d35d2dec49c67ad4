"""What the manuals tell a user to type installs pmtk and runs, as written.

* Every install command in README.md and docs/ names a target that is ours: a local
  folder (a clone), a ``git+`` URL, or the distribution name of ``pyproject.toml``,
  which is not ``pmtk`` (on the package index that is an unrelated project).
* Every ``uv run [--group G] X ...`` finds ``X`` in the environment that very command
  uses: the project's own scripts, or a console script of a package that ``uv.lock``
  installs for the runtime dependencies, the default groups and the named ones.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
NAME = PYPROJECT["project"]["name"]

INSTALL = re.compile(
    r"(?:\bpip install|\buv add|\buv pip install|\bpipx install)\s+(?:-[-\w]+\s+)*"
    r"(?P<target>\"[^\"]+\"|'[^']+'|[^\s`]+)"
)
UV_RUN = re.compile(r"\buv run\s+(?P<rest>[^`\n#|;&]+)")
TOOLS = {"uv"}  # installing the package manager itself is fine


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _install_targets(text: str) -> list[str]:
    return [m.group("target").strip("\"'") for m in INSTALL.finditer(text)]


def _ours(target: str) -> bool:
    if target.startswith((".", "/", "git+", "file:")):
        return True
    bare = re.split(r"[\[<>=!~;@ ]", target, maxsplit=1)[0]
    return _norm(bare) == _norm(NAME) or bare in TOOLS


def test_the_distribution_name_is_not_the_index_s_other_pmtk() -> None:
    assert _norm(NAME) != "pmtk"
    assert PYPROJECT["project"]["scripts"] == {"pmtk": "toolkit.cli:app"}
    assert PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"][0] == "toolkit"
    assert metadata.version(NAME)  # the installed distribution answers to that name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"**`{NAME}`**" in readme  # the README says which name is ours


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_install_command_names_our_distribution(doc: Path) -> None:
    targets = _install_targets(doc.read_text(encoding="utf-8"))
    strangers = [t for t in targets if not _ours(t)]
    assert not strangers, f"{doc.name} installs {strangers}, which is not {NAME}"


def test_the_install_check_refuses_a_stranger() -> None:
    assert _install_targets('pip install "pmtk[pandas]" and uv add pmtk') == [
        "pmtk[pandas]",
        "pmtk",
    ]
    assert not _ours("pmtk[pandas]")
    assert not _ours("pmtk")
    assert _ours("./pmtk[pandas]")
    assert _ours(f"{NAME}[pandas]")
    assert _ours("git+https://example.org/pmtk.git")


# -- `uv run` commands -------------------------------------------------------------


def _packages() -> dict[str, dict[str, object]]:
    return {_norm(p["name"]): p for p in LOCK["package"]}


def _closure(roots: list[str]) -> set[str]:
    packages = _packages()
    seen: set[str] = set()
    todo = [_norm(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name not in packages:
            continue
        seen.add(name)
        deps = packages[name].get("dependencies", [])
        assert isinstance(deps, list)
        todo.extend(_norm(d["name"]) for d in deps)
    return seen


def _environment(groups: list[str]) -> set[str]:
    """The distributions ``uv run`` installs with these ``--group`` options."""
    root = _packages()[_norm(NAME)]
    dev = root.get("dev-dependencies", {})
    assert isinstance(dev, dict)
    chosen = list(PYPROJECT["tool"]["uv"].get("default-groups", [])) + groups
    roots = [NAME]
    for group in chosen:
        roots.extend(d["name"] for d in dev[group])
    return _closure(roots)


# Executables the manuals run from groups that the README's `uv run pytest` does not
# install (dev, notebooks): which distribution ships each. The check must not depend on
# whether an earlier command (`.ci/run`'s lint step, say) happened to install them, so
# these are known here rather than read from the environment; every name must be in
# uv.lock and, where the distribution is installed, agree with its metadata.
PROVIDERS = {
    "ruff": "ruff",
    "mypy": "mypy",
    "jupyter-lab": "jupyterlab",
    "mutmut": "mutmut",
}


def _scripts() -> dict[str, str]:
    """Console script name -> distribution: PROVIDERS, then what is installed here."""
    return {**PROVIDERS, **_installed_scripts()}


def _installed_scripts() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = _norm(dist.metadata["Name"])
        for ep in dist.entry_points:
            if ep.group == "console_scripts":
                out[ep.name] = name
        for file in dist.files or ():  # binaries such as ruff ship as data scripts
            if len(file.parts) > 1 and file.parts[-2] in ("bin", "Scripts"):
                out.setdefault(file.stem, name)
    return out


def test_the_known_providers_are_locked_and_agree_with_what_is_installed() -> None:
    locked = _packages()
    installed = _installed_scripts()
    for script, dist in PROVIDERS.items():
        assert _norm(dist) in locked, f"{script}: {dist} is not in uv.lock"
        if script in installed:
            assert installed[script] == _norm(dist), (script, installed[script], dist)


def _uv_runs() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for m in UV_RUN.finditer(doc.read_text(encoding="utf-8")):
            found.append((doc.name, m.group("rest").strip()))
    return found


def _resolves(command: str, scripts: dict[str, str]) -> str | None:
    """Why ``uv run <command>`` would fail, or None when its executable is there."""
    words = command.split()
    groups: list[str] = []
    while words and words[0].startswith("--"):
        if words[0] == "--group":
            groups.append(words[1])
            words = words[2:]
        else:
            words = words[1:]
    exe, args = words[0], words[1:]
    env = _environment(groups)
    if exe == "python":
        return None
    if exe in PYPROJECT["project"]["scripts"]:
        if exe == "pmtk" and args and not args[0].startswith("-"):
            from toolkit.cli import app

            names = {c.name for c in app.registered_commands}
            names |= {g.name for g in app.registered_groups}  # sub-apps: `pmtk views ...`
            return None if args[0] in names else f"pmtk has no command {args[0]!r}"
        return None
    needed = [exe]
    if exe == "jupyter" and args:  # `jupyter lab` runs the `jupyter-lab` script
        needed.append(f"jupyter-{args[0]}")
    for script in needed:
        dist = scripts.get(script)
        if dist is None:
            return f"no installed package provides {script!r}"
        if dist not in env:
            return f"{script!r} comes from {dist}, which `uv run` {groups or ''} does not install"
    return None


def test_every_uv_run_command_finds_its_executable() -> None:
    scripts = _scripts()
    runs = _uv_runs()
    assert any("jupyter lab notebooks/" in cmd for _, cmd in runs)  # the notebooks' way in
    problems = [
        f"{doc}: uv run {cmd}: {why}" for doc, cmd in runs if (why := _resolves(cmd, scripts))
    ]
    assert not problems, "\n".join(problems)


def test_the_command_check_fails_for_a_tool_outside_the_default_groups() -> None:
    scripts = _scripts()
    assert _resolves("ruff check", scripts) is not None  # ruff is in the dev group only
    assert _resolves("--group dev ruff check", scripts) is None
    assert _resolves("pmtk nonsense", scripts) is not None
    # JupyterLab stays out of the default groups (a lean `uv run pmtk check`): the
    # README's way in names its group.
    assert _resolves("jupyter lab notebooks/", scripts) is not None
    assert _resolves("--group notebooks jupyter lab notebooks/", scripts) is None
