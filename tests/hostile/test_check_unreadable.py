"""``pmtk check`` against a deployment whose every answer is a broken gzip stream.

The token endpoint works (spec section 5); every other answer claims
``Content-Encoding: gzip`` and breaks off. The run must end with pmtk's own lines
(a verdict, findings saying the answer could not be read), no library traceback.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from typer.testing import CliRunner

from tests.hostile.conftest import SECRET
from tests.hostile.rawhttp import Seen, http_answer, raw_server
from toolkit.cli import app


def _broken_gzip(seen: Seen) -> bytes:
    packed = gzip.compress(b'{"resourceType": "Bundle", "type": "searchset", "entry": []}')
    return http_answer(200, packed[:10] + b"\xff" * 20 + packed[30:], {"Content-Encoding": "gzip"})


def test_pmtk_check_reports_an_unreadable_deployment_without_a_traceback(tmp_path: Path) -> None:
    with raw_server(_broken_gzip) as server:
        args = ["check", "--base-url", server.base_url, "--client-id", "hostile-client"]
        args += ["--request-budget", "40", "--report-dir", str(tmp_path / "reports")]
        result = CliRunner().invoke(app, args, env={"PM_CLIENT_SECRET": SECRET, "COLUMNS": "200"})
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    assert "DecodingError" in result.output or (tmp_path / "reports" / "report.json").is_file()
    for path in (tmp_path / "reports").glob("*"):
        assert "Traceback" not in path.read_text(encoding="utf-8", errors="replace"), path
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
