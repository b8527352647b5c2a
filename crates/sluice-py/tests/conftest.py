"""Fixtures of the sluicedb Python suite: a fresh database directory per
test, and databases opened with small write buffers so that a few
thousand pairs reach tables, compactions and value files."""

import os
import subprocess
import sys
from typing import Iterator

import pytest

import sluicedb

# Options that make a small test exercise the whole engine: memtables of
# 64 KiB flush after a few hundred pairs; one background thread.
SMALL = {"write_buffer_size_bytes": 64 << 10, "background_threads": 1}


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "db")


@pytest.fixture
def db(path) -> Iterator[sluicedb.DB]:
    d = sluicedb.DB(path, **SMALL)
    yield d
    d.close()


def run_python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    """Starts `code` in a child Python with this interpreter and package."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kwargs,
    )
