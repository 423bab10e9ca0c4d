"""Debian's Chromium, headless, for tests that look at a page as a browser draws it.

``chromium(url, screenshot=None, window=(1400, 1000))`` returns the page's DOM after its scripts ran
(``--dump-dom``) and writes a PNG of the window when ``screenshot`` is given. A fresh profile each time and no
background traffic (this machine has no network): what the page shows comes from the page alone.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path


def chromium_exe() -> str:
    exe = shutil.which("chromium")
    if not exe:
        raise RuntimeError("Debian's chromium is not installed; include/infra/local/bootstrap.sh installs it as root")
    return exe


def chromium(url: str, screenshot: Path | None = None, budget_ms: int = 20000,
             window: tuple[int, int] = (1400, 1000)) -> str:
    """The page's DOM after scripts ran (within ``budget_ms`` of virtual time), and a screenshot of the
    window when asked (scroll bars hidden, so they take no width)."""
    shot = [f"--screenshot={screenshot}"] if screenshot else []
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [chromium_exe(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
             f"--window-size={window[0]},{window[1]}", "--dump-dom", *shot, url],
            capture_output=True, text=True, timeout=120)
    return out.stdout
