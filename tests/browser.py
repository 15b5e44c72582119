"""Headless Chromium for the tests, driven by selenium: Debian's ``chromium`` and ``chromium-driver``
(``.ci/run`` installs them). Without them, or without selenium, a browser test skips and says why; the
driver is always the system's, so selenium never fetches one."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1300, 1100)


def _missing() -> str | None:
    """Why no browser test can run here (None: they can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if not any(shutil.which(name) for name in CHROMIUM_NAMES):
        return "no Chromium (apt-get install chromium chromium-driver, as .ci/run does)"
    if not shutil.which("chromedriver"):
        return "no chromedriver (apt-get install chromium-driver, as .ci/run does)"
    return None


def require_browser() -> None:
    """Skip the calling test, saying why, when there is no headless Chromium to drive."""
    why = _missing()
    if why:
        pytest.skip(f"browser test skipped: {why}")


@contextmanager
def chromium(width: int = WINDOW[0], height: int = WINDOW[1]) -> Iterator:
    """A headless Chromium (a selenium WebDriver), closed after the block."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={width},{height}")
    browser = next((shutil.which(name) for name in CHROMIUM_NAMES if shutil.which(name)), None)
    options.binary_location = browser
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def load_ms(driver) -> float:
    """The page's load time in the browser: navigation start to the end of its load event, in ms."""
    return float(driver.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd"))
