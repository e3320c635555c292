"""The rules as rendered for the tests' pace pass promtool (needs the binary: the integration tier).

promtool comes from Debian's prometheus package, which infra/scripts/install_test_servers.sh installs
(``make test`` runs it); a missing promtool fails, it does not skip. The rendering itself is tested
without it in tests/unit/test_monitoring_rules.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stream_pipelines.observability.monitoring_rules import write_rules


def test_written_rules_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: run infra/scripts/install_test_servers.sh (make test does)")
    paths = write_rules(tmp_path, for_duration="5s", interval="1s")
    result = subprocess.run(
        [promtool, "check", "rules", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
