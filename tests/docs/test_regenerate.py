"""``tools/regenerate.py``: every generated block is current, and the command says what is not.

The first test is the one that keeps the repository's generated blocks current (the
manuals' tables, ``contracts/openapi.yaml``, the pinned rule list): running the
command would change nothing. The pinned digests are the exception, for speed only:
``tests/mock/test_data_pinned.py`` compares that same block with the practices it
generates, which is what the command would write there.

The others run the command as a developer does, in a subprocess, on a scratch copy
of the files it writes: stale blocks are named and nothing is written under
``--check``, the plain run writes them back, and a missing or doubled marker is a
clear error that writes nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "regenerate.py"


regenerate = load_script(SCRIPT, "regenerate")
FAST = [b for b in regenerate.BLOCKS if b.name != "pinned-digests"]


@pytest.mark.parametrize("block", FAST, ids=[b.name for b in FAST])
def test_running_the_command_would_change_nothing(block: regenerate.Block) -> None:
    files = regenerate.plan(ROOT, [block])
    stale = [str(p.relative_to(ROOT)) for p, (now, new, _) in files.items() if new != now]
    assert stale == [], f"{stale} stale ({block.name}): run `uv run python tools/regenerate.py`"


def test_every_block_has_one_pair_of_markers_of_the_one_style() -> None:
    for block in regenerate.BLOCKS:
        if block.kind == "file":
            continue
        start, end = block.markers()
        for rel in block.paths:
            text = (ROOT / rel).read_text(encoding="utf-8")
            assert text.count(start) == 1 and text.count(end) == 1, (rel, block.name)
            assert text.index(start) < text.index(end), (rel, block.name)
            assert start.startswith(("<!-- generated: ", "# generated: ")), start
    # No block is left in an older style (the five styles before issue 26).
    for old in ("non-spec-rules:start", "<!-- end of ", "generated from toolkit/mock"):
        for doc in (ROOT / "docs").glob("*.md"):
            assert old not in doc.read_text(encoding="utf-8"), (doc.name, old)


def _scratch(tmp_path: Path, names: list[str]) -> Path:
    """A copy of the files of ``names``' blocks, in the repository's layout."""
    for block in regenerate.BLOCKS:
        if block.name in names:
            for rel in block.paths:
                (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ROOT / rel, tmp_path / rel)
    return tmp_path


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_check_names_the_stale_file_and_block_writes_nothing_and_a_run_repairs_it(
    tmp_path: Path,
) -> None:
    names = ["views-tables", "fault-table", "openapi"]
    root = _scratch(tmp_path, names)
    only = [a for n in names for a in ("--only", n)]
    assert _run(root, "--check", *only).returncode == 0
    # A hand edit inside a block of one of the two manuals that share the fault table,
    # and the OpenAPI document (a whole-file block) edited too.
    mock_md = root / "docs" / "mock.md"
    before = mock_md.read_text(encoding="utf-8")
    row = "| `flaky-503` | (client) |"
    assert row in before
    mock_md.write_text(before.replace(row, "| `flaky-503` | auth |"), encoding="utf-8")
    openapi = root / "contracts" / "openapi.yaml"
    openapi.write_text(openapi.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    interfaces = (root / "docs" / "interfaces.md").read_bytes()

    checked = _run(root, "--check", *only)
    assert checked.returncode == 1, checked.stderr
    assert "stale: docs/mock.md (fault-table)" in checked.stderr
    assert "stale: contracts/openapi.yaml (openapi)" in checked.stderr
    assert "interfaces.md" not in checked.stderr and "views.md" not in checked.stderr
    assert "auth |" in mock_md.read_text(encoding="utf-8")  # --check wrote nothing

    wrote = _run(root, *only)
    assert wrote.returncode == 0, wrote.stderr
    assert "wrote docs/mock.md (fault-table)" in wrote.stdout
    assert mock_md.read_text(encoding="utf-8") == before
    assert openapi.read_text(encoding="utf-8") == (ROOT / "contracts/openapi.yaml").read_text(
        encoding="utf-8"
    )
    assert (root / "docs" / "interfaces.md").read_bytes() == interfaces
    assert _run(root, "--check", *only).returncode == 0


def test_text_outside_the_markers_is_kept_byte_for_byte(tmp_path: Path) -> None:
    root = _scratch(tmp_path, ["frame-rules", "views-tables"])
    views = root / "docs" / "views.md"
    start, end = regenerate.BLOCKS[0].markers()
    text = views.read_text(encoding="utf-8")
    # Someone's section after the generated tables, and the tables emptied.
    head, rest = text.split(start)
    _, tail = rest.split(end)
    views.write_text(head + start + end + tail + "\n## Later section\n\ntext\n", encoding="utf-8")
    assert _run(root, "--only", "views-tables").returncode == 0
    assert views.read_text(encoding="utf-8") == text + "\n## Later section\n\ntext\n"


@pytest.mark.parametrize("damage", ["missing", "doubled", "reversed"])
def test_a_broken_marker_is_named_and_nothing_is_written(tmp_path: Path, damage: str) -> None:
    root = _scratch(tmp_path, ["fault-table"])
    block = next(b for b in regenerate.BLOCKS if b.name == "fault-table")
    start, end = block.markers()
    mock_md = root / "docs" / "mock.md"
    interfaces = root / "docs" / "interfaces.md"
    stale = interfaces.read_text(encoding="utf-8").replace("| `flaky-503` | (client)", "| x | y")
    interfaces.write_text(stale, encoding="utf-8")  # stale too: the error must stop the run
    text = mock_md.read_text(encoding="utf-8")
    broken = {
        "missing": text.replace(end, ""),
        "doubled": text + start,
        "reversed": text.replace(start, "@@").replace(end, start).replace("@@", end),
    }[damage]
    mock_md.write_text(broken, encoding="utf-8")
    run = _run(root, "--only", "fault-table")
    assert run.returncode == 2
    assert "docs/mock.md" in run.stderr and "generated: fault-table" in run.stderr
    assert "Traceback" not in run.stderr
    assert mock_md.read_text(encoding="utf-8") == broken
    assert interfaces.read_text(encoding="utf-8") == stale  # nothing written anywhere


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    run = _run(tmp_path, "--only", "catalogue-rules")
    assert run.returncode == 2
    assert "docs/contracts.md: missing (block 'catalogue-rules')" in run.stderr
