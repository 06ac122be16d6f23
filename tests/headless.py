"""Headless Chromium for the browser tests (the dashboard, the fleet view): the binary, or
a skip saying how to get one (a failure on CI, which must have it), and one run of it at
the window the pages are made to fit, 1280 x 1000."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("CI must have Chromium (.ci/run installs it)")
    pytest.skip("no Chromium on this machine (apt-get install chromium)")


def headless(binary: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu",
                           "--disable-dev-shm-usage", "--hide-scrollbars",
                           "--window-size=1280,1000", "--virtual-time-budget=6000", *args],
                          capture_output=True, text=True, timeout=120)
