"""Shared support of the Python package's tests (tests/python/).

The `headroom` binary the answers are compared with: $HEADROOM_CLI (CTest sets
it to the build's), else the one `pip install .` put beside the interpreter.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def _cli_path():
    given = os.environ.get("HEADROOM_CLI")
    if given:
        return given
    beside = pathlib.Path(sys.executable).with_name("headroom")
    if beside.exists():
        return str(beside)
    return shutil.which("headroom")


@pytest.fixture(scope="session")
def cli():
    path = _cli_path()
    if not path or not os.access(path, os.X_OK):
        pytest.fail("no headroom binary: set HEADROOM_CLI or pip install the package (it installs one)")

    def run(*arguments, expect=None):
        """Runs `headroom ARGUMENTS`; returns (exit status, stdout, stderr)."""
        done = subprocess.run([path, *map(str, arguments)], capture_output=True, text=True, timeout=600)
        if expect is not None:
            assert done.returncode == expect, done.stderr
        return done.returncode, done.stdout, done.stderr

    run.path = path
    return run


@pytest.fixture(scope="session")
def cli_json(cli):
    def run(*arguments):
        status, out, err = cli(*arguments, "--json", expect=0)
        return json.loads(out)

    return run
