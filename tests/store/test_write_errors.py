"""A full disk, a read-only or a forbidden folder: one clear error, and the store unchanged.

Tests run as root, where ``chmod`` does not stop writes. So the failures are
injected where the operating system would report them -- the rename, the
fsync, the open, and Polars' own writer (which reports ``(os error 28)`` inside
a ``ComputeError``) -- at each step of a sync, and, where the machine allows it,
produced for real: writes into ``/dev/full``, and a small tmpfs that is full or
remounted read-only.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from toolkit.store import StoreWriteError, declared_schemas, load, read_manifest, sync, verify

RESOURCE = "Appointment"  # three tables: a failure can fall between two of them


class _Fault:
    """Make the ``nth`` call of a function whose arguments match ``when`` fail.

    ``make`` builds the exception, so that an OSError and Polars' wrapped form
    can both be produced.
    """

    def __init__(
        self, when: Callable[..., bool], nth: int, make: Callable[[], BaseException]
    ) -> None:
        self.when = when
        self.nth = nth
        self.make = make
        self.seen = 0
        self.fired = False

    def wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(*args: Any, **kwargs: Any) -> Any:
            if not self.fired and self.when(*args, **kwargs):
                self.seen += 1
                if self.seen == self.nth:
                    self.fired = True
                    raise self.make()
            return real(*args, **kwargs)

        return faulty


def _os_error(code: int) -> Callable[[], BaseException]:
    return lambda: OSError(code, os.strerror(code))


def _polars_error(code: int) -> Callable[[], BaseException]:
    # The exact form Polars raises on a write into /dev/full (checked on polars 1.x/2.x).
    text = f"parquet: File out of specification: underlying IO error: {os.strerror(code)}"
    return lambda: pl.exceptions.ComputeError(f"{text} (os error {code})")


def _errno_of(exc: BaseException) -> int:
    if isinstance(exc, OSError):
        assert exc.errno is not None
        return exc.errno
    return int(str(exc).rsplit("os error ", 1)[1].rstrip(")"))


def _named(test: Callable[[str], bool]) -> Callable[..., bool]:
    return lambda *args, **kwargs: test(Path(args[-1] if args else "").name)


# (target object, attribute, predicate, nth call, exception, the step in the message)
CASES: dict[str, tuple[Any, str, Callable[..., bool], int, Callable[[], BaseException], str]] = {
    "lock-file-read-only": (
        os,
        "open",  # the lock file is opened with O_NOFOLLOW, by os.open
        lambda path, *a, **k: Path(path).name == ".lock",
        1,
        _os_error(errno.EROFS),
        "lock file",
    ),
    "checkpoint-disk-full": (
        os,
        "replace",
        _named(lambda n: n == "state.json"),
        2,
        _os_error(errno.ENOSPC),
        "checkpoint",
    ),
    "staged-page-write-disk-full": (
        pl.DataFrame,
        "write_parquet",
        lambda *a, **k: True,
        2,
        _polars_error(errno.ENOSPC),
        "staging",
    ),
    "staged-page-rename-permission": (
        os,
        "replace",
        _named(lambda n: n.startswith("part-")),
        1,
        _os_error(errno.EACCES),
        "staging",
    ),
    "dedupe-sink-disk-full": (
        pl.LazyFrame,
        "sink_parquet",
        lambda self, path, *a, **k: Path(path).parent.name == "new",
        1,
        _polars_error(errno.ENOSPC),
        "merging the staged pages",
    ),
    "merge-sink-read-only": (
        pl.LazyFrame,
        "sink_parquet",
        lambda self, path, *a, **k: Path(path).parent.name == "merged",
        2,  # the second table's merged file
        _polars_error(errno.EROFS),
        "writing the merged",
    ),
    "fsync-io-error": (
        os,
        "fsync",
        lambda *a, **k: True,
        5,
        _os_error(errno.EIO),
        "",
    ),
    "commit-rename-of-second-table-read-only": (
        os,
        "replace",
        _named(lambda n: n.startswith("data-")),
        2,  # one table already moved in: the manifest must still name the old files
        _os_error(errno.EROFS),
        "committing",
    ),
    "manifest-write-disk-full": (
        os,
        "replace",
        _named(lambda n: n == "manifest.json"),
        1,
        _os_error(errno.ENOSPC),
        "writing the manifest",
    ),
}

REASONS = {
    errno.ENOSPC: "disk is full",
    errno.EROFS: "read-only",
    errno.EACCES: "permission denied",
    errno.EIO: "I/O error",
}


def _frames(store: Path) -> dict[str, pl.DataFrame]:
    out = {}
    for table in declared_schemas(RESOURCE):
        df = load(RESOURCE, store, table=table)
        assert isinstance(df, pl.DataFrame)
        out[table] = df
    return out


def _change_an_appointment(dep: Any, client: Any, store: Path, text: str) -> str:
    """Change one record on the server, so that the next sync has data to commit."""
    ids = load(RESOURCE, store)
    assert isinstance(ids, pl.DataFrame)
    target = str(ids["id"][3])
    dep.advance_clock(5)
    client.patch(RESOURCE, target, {"description": text})
    return target


def _no_leftovers(store: Path) -> None:
    assert not list(store.glob(".manifest.json.*.tmp"))
    for table in declared_schemas(RESOURCE):
        names = sorted(p.name for p in (store / table).iterdir())
        assert len(names) == 1 and names[0].startswith("data-"), (table, names)


@pytest.mark.parametrize("case", list(CASES))
def test_a_write_failure_at_each_step_is_one_clear_error_and_the_store_is_unchanged(
    case: str, synced: Any, tmp_path: Path, new_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    target_obj, attribute, when, nth, make, step = CASES[case]
    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    before = _frames(store)
    manifest_before = read_manifest(store)["resources"][RESOURCE]
    fault = _Fault(when, nth, make)
    with new_client(synced.dep) as client:
        changed = _change_an_appointment(synced.dep, client, store, f"moved ({case})")
        monkeypatch.setattr(target_obj, attribute, fault.wrap(getattr(target_obj, attribute)))
        with pytest.raises(StoreWriteError) as info:
            sync(client, store, resources=[RESOURCE], progress=False)
        monkeypatch.undo()
        assert fault.fired
        code = _errno_of(make())
        message = str(info.value)
        assert info.value.errno == code
        assert "\n" not in message and REASONS[code] in message, message
        assert step in message and "unchanged" in message, message

        # the data committed before is what a reader gets, and it verifies
        after = _frames(store)
        for table, frame in before.items():
            assert after[table].equals(frame), table
        assert verify(store).ok
        entry = read_manifest(store)["resources"][RESOURCE]
        assert entry["tables"] == manifest_before["tables"]

        # and once the disk is fixed, the same command finishes the job
        summary = sync(client, store, resources=[RESOURCE], progress=False)
    # "unchanged" when the failed run had got as far as its commit: this run rolled it forward
    assert summary[RESOURCE].status in ("updated", "unchanged")
    stored = load(RESOURCE, store)
    assert isinstance(stored, pl.DataFrame)
    assert stored.filter(pl.col("id") == changed)["description"].item() == f"moved ({case})"
    assert verify(store).ok
    _no_leftovers(store)


def test_pmtk_sync_on_a_full_disk_prints_one_line_and_exits_4(
    synced: Any, tmp_path: Path, new_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit.cli import app

    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    before = _frames(store)
    with new_client(synced.dep) as client:
        _change_an_appointment(synced.dep, client, store, "moved (cli)")
    fault = _Fault(_named(lambda n: n.startswith("data-")), 1, _os_error(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", fault.wrap(os.replace))
    dep = synced.dep
    args = ["sync", "--out", str(store), "-r", RESOURCE, "--quiet"]
    args += ["--base-url", dep.base_url, "--client-id", dep.client_id]
    result = CliRunner().invoke(
        app,
        args,
        env={"PM_CLIENT_SECRET": dep.client_secret, "COLUMNS": "80"},
    )
    monkeypatch.undo()
    assert result.exit_code == 4, result.output
    assert result.stderr.count("\n") == 1, result.stderr  # one line, even at 80 columns
    assert "disk is full" in result.stderr and "Traceback" not in result.output
    assert dep.client_secret not in result.output
    for table, frame in before.items():
        after = load(RESOURCE, store, table=table)
        assert isinstance(after, pl.DataFrame) and after.equals(frame)


def test_a_real_enospc_from_dev_full_while_writing_the_manifest(
    synced: Any, tmp_path: Path, new_client: Any
) -> None:
    """The kernel's own ENOSPC: the manifest's temporary file is a /dev/full device node.

    A link to /dev/full would not do: the store never writes through a link
    (``tests/store/test_links.py``). A character device of /dev/full's numbers
    (1, 7), made with mknod, is the same file to the kernel.
    """
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full is Linux-only")
    probe = tmp_path / "full-probe"
    try:  # mknod needs root, and a file system mounted without nodev
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(1, 7))
        os.close(os.open(probe, os.O_WRONLY))
    except OSError as exc:
        pytest.skip(f"cannot make and open a device node here ({exc.strerror})")
    probe.unlink()
    store = tmp_path / "store"
    shutil.copytree(synced.path, store)
    before = _frames(store)
    tmp = store / f".manifest.json.{os.getpid()}.tmp"

    def plant(event: Any) -> None:
        # after the sync has started (it clears stale temporary manifests at its start)
        if not tmp.exists():
            os.mknod(tmp, stat.S_IFCHR | 0o600, os.makedev(1, 7))

    with new_client(synced.dep) as client:
        _change_an_appointment(synced.dep, client, store, "moved (dev-full)")
        with pytest.raises(StoreWriteError, match="disk is full") as info:
            sync(client, store, resources=[RESOURCE], progress=plant)
    assert info.value.errno == errno.ENOSPC
    assert not tmp.exists()
    for table, frame in before.items():
        after = load(RESOURCE, store, table=table)
        assert isinstance(after, pl.DataFrame) and after.equals(frame)
    assert verify(store).ok


# --------------------------------------------------------------------------- a real small disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs mounted for the test (needs mount privileges; skipped without them)."""
    mount = shutil.which("mount")
    if mount is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) to create a small file system")
    point = tmp_path / "disk"
    point.mkdir()
    made = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def _remount(point: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(point)], check=True)


def test_a_real_read_only_and_a_real_full_file_system(
    small_disk: Path, synced: Any, new_client: Any
) -> None:
    store = small_disk / "store"
    with new_client(synced.dep) as client:
        sync(client, store, resources=[RESOURCE], progress=False)
        before = _frames(store)
        changed = _change_an_appointment(synced.dep, client, store, "moved (tmpfs)")

        _remount(small_disk, "ro")
        with pytest.raises(StoreWriteError, match="read-only") as info:
            sync(client, store, resources=[RESOURCE], progress=False)
        assert info.value.errno == errno.EROFS
        for table, frame in before.items():
            assert _frames(store)[table].equals(frame)
        assert verify(store).ok

        _remount(small_disk, "rw")
        ballast = small_disk / "ballast"
        with ballast.open("wb", buffering=0) as handle, pytest.raises(OSError) as full:
            while True:  # fill the disk to the last byte
                handle.write(b"\0" * 65536)
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(StoreWriteError, match="disk is full") as info:
            sync(client, store, resources=[RESOURCE], full=True, progress=False)
        assert info.value.errno == errno.ENOSPC
        for table, frame in before.items():
            assert _frames(store)[table].equals(frame)
        assert verify(store).ok

        ballast.unlink()
        summary = sync(client, store, resources=[RESOURCE], full=True, progress=False)
    assert summary[RESOURCE].status == "updated"
    stored = load(RESOURCE, store)
    assert isinstance(stored, pl.DataFrame)
    assert stored.filter(pl.col("id") == changed)["description"].item() == "moved (tmpfs)"
    assert verify(store).ok
    _no_leftovers(store)
