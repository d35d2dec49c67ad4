"""Every example in README.md and docs/*.md runs, against the embedded mock.

A new user copies these blocks first, so each one is executed as written:

* ``python`` blocks of one file run in order, in one namespace, in a fresh
  interpreter whose environment has no ``PM_`` settings (so ``toolkit.connect()``
  reaches the embedded mock, exactly as for a new user);
* ``bash``/``sh`` blocks and the ``$ `` lines of ``console`` blocks run in bash
  (``set -euo pipefail``) in an empty folder, with ``uv run X`` meaning the
  project's ``X`` and the port ``8765`` replaced by a free one.

A block that cannot run here (it needs a real deployment, opens JupyterLab, or is
the command running these tests) is marked on the line before its fence with
``<!-- example: skip (reason) -->``; a marker without a reason is itself an error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([a-z]*)[^\n]*\n(.*?)^```", re.M | re.S)
SKIP = re.compile(r"<!--\s*example:\s*skip\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*$")
SHELLS = ("bash", "sh", "shell", "console")
TIMEOUT = 240


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for match in FENCE.finditer(text):
        lang = match.group(1)
        if lang not in ("python", *SHELLS):
            continue
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = SKIP.search(before)
        skip = None
        if marker:
            skip = (marker.group("reason") or "").strip()
            if not skip:
                pytest.fail(f"{path.name}:{line}: an example skip marker needs a (reason)")
        out.append(Block(path, line, lang, match.group(2), skip))
    return out


ALL = [b for p in DOCS for b in _blocks(p)]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_document_has_examples_that_are_collected() -> None:
    # A fence typo (```pyhton) would silently drop a block from these tests.
    names = {b.path.name for b in ALL}
    assert "README.md" in names
    for path in DOCS:
        for lang in re.findall(r"^```([A-Za-z]+)", path.read_text(encoding="utf-8"), re.M):
            known = ("python", "text", "json", "yaml", "toml", "nginx", *SHELLS)
            assert lang in known, (path, lang)


PY_FILES = sorted({b.path for b in ALL if b.lang == "python" and not b.skip})


@pytest.mark.parametrize("path", PY_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_examples_run(path: Path, tmp_path: Path) -> None:
    blocks = [b for b in ALL if b.path == path and b.lang == "python" and not b.skip]
    parts = ["import sys", "ns = {'__name__': '__main__'}"]
    for b in blocks:
        parts.append(f"print({b.where!r}, file=sys.stderr)")
        parts.append(f"exec(compile({b.code!r}, {b.where!r}, 'exec'), ns)")
    script = tmp_path / "examples.py"
    script.write_text("\n".join(parts) + "\n")
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert run.returncode == 0, f"an example of {path.name} failed:\n{run.stderr[-4000:]}"


def _shell_script(block: Block, port: int) -> str:
    code = block.code
    if block.lang == "console":
        lines, keep = [], False
        for line in code.splitlines():
            if line.startswith("$ "):
                lines.append(line[2:])
                keep = line.endswith("\\")
            elif keep:
                lines.append(line)
                keep = line.endswith("\\")
        code = "\n".join(lines)
    code = code.replace("8765", str(port))
    return (
        textwrap.dedent(
            """\
        set -euo pipefail
        uv() {
          [ "$1" = run ] || { echo "only 'uv run' is simulated" >&2; return 2; }
          shift
          while [ "${1:-}" != "${1#-}" ]; do
            case "$1" in --group|--extra|--with) shift 2 ;; *) shift ;; esac
          done
          # In a background job (a subshell) become the program, so `kill %1` stops it.
          if [ "$BASHPID" != "$$" ]; then exec "$@"; else "$@"; fi
        }
        """
        )
        + code
    )


SHELL_BLOCKS = [b for b in ALL if b.lang in SHELLS]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.where)
def test_shell_examples_run(block: Block, tmp_path: Path) -> None:
    if block.skip:
        pytest.skip(block.skip)
    # Its own process group: a server the example starts in the background (and its
    # children) is stopped with the group, whatever the example's shell did.
    proc = subprocess.Popen(
        ["bash", "-c", _shell_script(block, _free_port())],
        cwd=tmp_path,
        env=_clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert run.returncode == 0, (
        f"{block.where} failed (exit {run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    )
