"""What importing the client costs: none of the heavy libraries, and no mock server.

``docs/architecture.md`` says ``import toolkit.client`` loads none of
``HEAVY_LIBRARIES`` (pandera 2-5 s, pyarrow and uvicorn 0.3-0.6 s): the embedded
mock's server loads when the client starts it, not when the client is imported.
A fresh interpreter checks it, since this test process has loaded them all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from layers import HEAVY_LIBRARIES  # noqa: E402

PROBE = """
import json, sys
import toolkit.client
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=ROOT,
    )
    return set(json.loads(done.stdout))


def test_importing_the_client_loads_no_heavy_library_and_no_mock_server() -> None:
    loaded = _modules_after(PROBE)
    heavy = sorted(lib for lib in HEAVY_LIBRARIES | {"starlette"} if lib in loaded)
    assert heavy == []
    assert "toolkit.mock.server" not in loaded
    assert "toolkit.mock.embedded" in loaded  # the probe did import what it meant to
