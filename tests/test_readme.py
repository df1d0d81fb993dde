"""The README's Python examples run as written (docs that match the code)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme() -> str:
    """The README of the source tree, or (tests run against a wheel) the installed one's."""
    path = ROOT / "README.md"
    if path.is_file() and (ROOT / "tiered").is_dir():
        return path.read_text()
    return importlib.metadata.metadata("tiered").get_payload() or ""  # type: ignore[attr-defined]


EXAMPLES = re.findall(r"```python\n(.*?)```", _readme(), re.S)


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_a_readme_example_runs(code: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "every example prints what it shows"
