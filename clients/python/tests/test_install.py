"""`pip install ./clients/python` works offline, into a virtual environment."""

import subprocess
import sys
from pathlib import Path


def test_pip_installs_the_package(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    pkg = Path(__file__).resolve().parents[1]
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-index",
                    "--no-build-isolation", str(pkg)], check=True)
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import relay_client, inspect; print(relay_client.__version__, "
                          "inspect.getfile(relay_client))"],
                         check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.startswith("0.1.0 ") and str(venv) in out
