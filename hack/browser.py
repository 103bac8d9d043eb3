"""Debian's headless Chromium, driven by Selenium, for the dashboard's tests and bench.

`hack/install-browser.sh` (run by `make test`) installs the chromium and chromium-driver
packages. The flags keep Chromium off the network: without the background-networking ones it
reaches out on its own, and the machines it runs on have no way out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # the certificate the dashboard made for itself
    "--ignore-certificate-errors",
    "--window-size=1280,1000",
)
MISSING = (
    "Debian's chromium and chromium-driver are not installed: `make test` installs them"
    " (hack/install-browser.sh, as root)"
)


def installed() -> bool:
    return CHROMIUM.exists() and CHROMEDRIVER.exists()


def start_chromium(profile: Path) -> Any:
    """A Selenium driver of headless Chromium with a fresh profile in `profile`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.binary_location = str(CHROMIUM)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
