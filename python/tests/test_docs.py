"""docs/python.md's examples run as written, in order, against a real kvtierd whose Unix socket
is where scripts/run puts it (kvtier-data/kvtierd.sock, relative to the working directory)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import ROOT, Daemon


def test_the_examples_of_docs_python_md_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 6
    daemon = Daemon(tmp_path / "kvtier-data")
    try:
        monkeypatch.chdir(tmp_path)
        assert os.path.exists("kvtier-data/kvtierd.sock")
        scope: dict[str, object] = {}
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/python.md example {i + 1}", "exec"), scope)
    finally:
        daemon.close()
