"""The ``jaxreplay`` command line."""

import importlib.metadata
import subprocess
import sys

import pytest

import jaxreplay
from jaxreplay import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"jaxreplay {jaxreplay.__version__}"
    assert jaxreplay.__version__ == importlib.metadata.version("jaxreplay")


def test_info_lists_versions_and_devices(capsys):
    assert cli.main(["info"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["jax"] == importlib.metadata.version("jax")
    assert lines["gymnax"] == "1.0.1"
    import jax

    assert lines["backend"] == jax.default_backend()
    assert jax.devices()[0].platform in lines["device"]


def test_console_entry_point_runs():
    out = subprocess.run(
        [sys.executable, "-m", "jaxreplay", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"jaxreplay {jaxreplay.__version__}"


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().out
