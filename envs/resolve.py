"""Resolve the pip part of a conda environment file against the package index, without conda.

`python envs/resolve.py envs/shardscope.yaml` runs `pip install --dry-run --ignore-installed` on the
file's pip requirements and prints what pip would install; a requirement that cannot be met fails with
pip's own message. Conda's part of the file (python, pip) is not solved: conda is not available here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml


def pip_requirements(env_file: Path) -> list[str]:
    """The `pip:` entries of a conda environment file, in order."""
    doc = yaml.safe_load(env_file.read_text())
    for dependency in doc.get("dependencies", []):
        if isinstance(dependency, dict) and "pip" in dependency:
            return [str(r) for r in dependency["pip"]]
    return []


def main(argv: list[str]) -> int:
    """Resolve every file named on the command line; exit status 1 when pip cannot resolve one."""
    status = 0
    for name in argv or ["envs/shardscope.yaml"]:
        requirements = pip_requirements(Path(name))
        with tempfile.TemporaryDirectory() as tmp:
            listing = Path(tmp) / "requirements.txt"
            listing.write_text("\n".join(requirements) + "\n")
            command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                       "--report", "-", "-r", str(listing)]
            out = subprocess.run(command, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name}: pip cannot resolve the pip part:\n{out.stderr}", file=sys.stderr)
            status = 1
            continue
        chosen = sorted(f"{item['metadata']['name']}=={item['metadata']['version']}"
                        for item in json.loads(out.stdout)["install"])
        print(f"{name}: {len(requirements)} pip requirements resolve to {len(chosen)} packages")
        print("\n".join(f"  {pin}" for pin in chosen))
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
