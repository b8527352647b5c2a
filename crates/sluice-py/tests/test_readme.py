"""The README's Python example runs as printed, type-checks under
mypy --strict, and the stubs match the compiled module (stubtest)."""

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "..", "..", "README.md")


def example() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Using it from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example())
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "5"
    assert os.path.isdir(tmp_path / "example-db")


def mypy_available() -> bool:
    try:
        import mypy  # noqa: F401
    except ImportError:
        return False
    return True


needs_mypy = pytest.mark.skipif(
    not mypy_available() and not os.environ.get("CI"),
    reason="mypy is not installed (CI installs it)",
)


@needs_mypy
def test_readme_example_type_checks(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example())
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@needs_mypy
def test_stubs_match_the_module(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "sluicedb"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
