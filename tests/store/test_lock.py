"""The store's writer lock holds on every platform (filelock), not only where fcntl exists."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from toolkit.store import StoreError
from toolkit.store.layout import locked


def test_a_second_writer_is_refused_until_the_first_is_done(tmp_path: Path) -> None:
    root = tmp_path / "store"
    held = threading.Event()
    release = threading.Event()

    def writer() -> None:
        with locked(root):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert held.wait(10)
        with pytest.raises(StoreError, match="another pmtk sync is writing"), locked(root):
            pass
    finally:
        release.set()
        thread.join(10)
    with locked(root):  # free again once the first writer is done
        pass


def test_without_fcntl_the_store_is_still_locked(tmp_path: Path) -> None:
    # What Windows looks like to the store: no fcntl module. The old code skipped the
    # lock there ("single writer assumed"); filelock uses another mechanism instead.
    script = textwrap.dedent(
        f"""
        import sys, warnings
        sys.modules["fcntl"] = None
        warnings.simplefilter("ignore")
        from pathlib import Path
        from toolkit.store import StoreError
        from toolkit.store.layout import locked
        root = Path({str(tmp_path / "store")!r})
        with locked(root):
            try:
                with locked(root):
                    print("second writer admitted")
            except StoreError as exc:
                print("refused:", exc)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("refused: another pmtk sync is writing"), run.stdout
