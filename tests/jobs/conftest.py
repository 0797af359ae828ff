"""Every jobs test names its store, or gets one in its own temporary data folder: none touches the real
``~/.local/share/vsr/jobs.db`` or the record of broker jobs beside it (a spawned ``vsr jobs run`` inherits the
environment set here)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.delenv("VSR_JOBS_STORE", raising=False)
    monkeypatch.delenv("VSR_JOBS", raising=False)
    monkeypatch.delenv("VSR_BROKER", raising=False)  # (it would send every command of a test to a broker)
