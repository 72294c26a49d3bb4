"""What the packaging claims is what was run: the catalog's conda flag, the license, the pinned deploy version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_the_catalog_claims_conda_only_where_conda_could_run() -> None:
    """No test runs `--sdm conda` (conda cannot be installed here), so the catalog must not offer it; a test that
    runs it is what may turn the flag on."""
    stack = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())["usage"]["software-stack-deployment"]
    assert stack["conda"] is False
    assert stack["apptainer"] is False and stack["apptainer+conda"] is False


def test_the_license_file_is_the_one_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_the_deploy_instructions_pin_this_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    readme = (REPO / "README.md").read_text()
    assert re.findall(r"--tag (\S+)", readme) == [f"v{version}"]
    assert f"shardscope@v{version}" in readme


def test_an_installed_package_carries_the_config_schema_and_fills_its_defaults(tmp_path: Path) -> None:
    """The planner fills the config's defaults from the schema, so a wheel (what `pip install` from a Git host
    installs) must hold it: built here, unpacked, and asked from outside the source tree."""
    import subprocess
    import sys
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("shardscope-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("shardscope/config.schema.yaml") == (REPO / "workflow/schemas/config.schema.yaml").read_bytes()
        zf.extractall(tmp_path / "site")
    probe = ("import shardscope.config as c, yaml; from pathlib import Path; "
             "assert Path(c.SCHEMA_PATH).is_relative_to(Path.cwd()), c.SCHEMA_PATH; "
             f"print(c.with_defaults(yaml.safe_load(open({str(REPO / 'config/config.yaml')!r})))['db'])")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path / "site", env={"PYTHONPATH": "."},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
