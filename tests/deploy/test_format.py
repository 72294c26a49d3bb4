"""The workflow is snakefmt clean: `snakefmt --check` (config in pyproject.toml) over every Snakefile and rule file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE_FILES = ["Snakefile", "workflow/Snakefile", "workflow/rules"]


def snakefmt() -> list[str]:
    """snakefmt next to this interpreter (the project's `test` extra installs it), else on PATH."""
    local = Path(sys.executable).with_name("snakefmt")
    found = str(local) if local.exists() else shutil.which("snakefmt")
    if found is None:
        pytest.fail("snakefmt is not installed; install the test extra: pip install -e '.[test]'")
    return [found]


def test_snakefmt_uses_the_project_line_length():
    # 114 characters: kept on one line under pyproject's line_length = 120, wrapped under snakefmt's default 88.
    line = "X = [" + ", ".join(f'"item{i}"' for i in range(12)) + "]\n"
    out = subprocess.run([*snakefmt(), "-"], input=line, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == line


def test_snakefiles_and_rules_are_snakefmt_clean():
    out = subprocess.run([*snakefmt(), "--check", *SNAKEMAKE_FILES], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
