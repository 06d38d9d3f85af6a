"""The dashboard end to end: the real server on localhost, driven by headless Chromium.

Every page loads with real data from the shipped checkpoints; a control changes what is shown;
a screenshot of each page goes into a folder this test prints ($DELTALENS_SCREENSHOTS, else a
temporary folder). Needs Debian's chromium and chromium-driver (scripts/setup.sh installs them).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

PAGES = {
    "": "Checkpoints",
    "trace_explorer": "Trace explorer",
    "heads": "Heads",
    "interventions": "Interventions",
    "census": "Census",
    "dictionaries": "Dictionaries",
    "beliefs": "Beliefs",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serving(url: str, tries: int = 120) -> bool:
    """Whether the Streamlit server at `url` answers its health check within about a minute."""
    for _ in range(tries):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return True
        except OSError:
            time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    env = {**os.environ, "DELTALENS_CACHE": str(tmp_path_factory.mktemp("cache"))}
    env.pop("DELTALENS_APP_CHECKPOINTS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "deltalens.cli.main", "app", "--headless", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    if not serving(url):
        process.kill()
        pytest.fail(f"the app server did not come up: {process.stderr.read()[-2000:]}")
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "the browser test needs Debian's chromium and chromium-driver: bash scripts/setup.sh"
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2400"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    yield chrome
    chrome.quit()


@pytest.fixture(scope="module")
def shots():
    folder = Path(os.environ.get("DELTALENS_SCREENSHOTS") or tempfile.mkdtemp(prefix="deltalens-screens-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {folder}")
    return folder


def settle(browser, timeout: float = 180) -> None:
    """Wait until the page has a title and Streamlit has stopped running the script."""
    end = time.time() + timeout
    time.sleep(1.0)
    while time.time() < end:
        title = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h1')
        running = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]')
        if title and not running:
            time.sleep(1.0)
            if not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]'):
                return
        time.sleep(0.5)
    raise AssertionError(f"{browser.current_url} did not finish rendering in {timeout:.0f} s")


def drawn(browser, timeout: float = 30) -> list:
    """The page's plotly figures, waiting for them: a figure's element appears after the script has finished."""
    end = time.time() + timeout
    while not (figures := browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) and time.time() < end:
        time.sleep(0.5)
    return figures


def set_number(browser, label: str, value: int) -> None:
    box = browser.find_element(By.CSS_SELECTOR, f'input[aria-label="{label}"]')
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.ENTER)


def shown_text(browser, selector: str) -> str:
    return "\n".join(e.text for e in browser.find_elements(By.CSS_SELECTOR, selector))


# the heads page measures only its open tab now (app/heads_data.py): seconds, so it is in the default run again
@pytest.mark.parametrize("path", PAGES)
def test_every_page_loads_in_a_real_browser(server, browser, shots, path):
    browser.get(f"{server}/{path}")
    settle(browser)
    assert browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').text == PAGES[path]
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')
    if path in ("", "heads", "interventions", "census", "beliefs"):  # their figures are drawn
        assert drawn(browser), "no plotly figure was drawn within 30 s of the script finishing"
    browser.save_screenshot(str(shots / f"{path or 'checkpoints'}.png"))


def test_a_control_changes_what_the_page_shows(server, browser, shots):
    browser.get(f"{server}/trace_explorer")
    settle(browser)
    before = shown_text(browser, '[data-testid="stMain"] pre')
    assert "print(" in before and "1.00" in before  # revealed values with their probabilities
    set_number(browser, "seed", 7)
    settle(browser)
    after = shown_text(browser, '[data-testid="stMain"] pre')
    assert after and after != before
    set_number(browser, "actions", 48)
    settle(browser)
    assert shown_text(browser, '[data-testid="stMain"] pre').count("print(") > after.count("print(")
    browser.save_screenshot(str(shots / "trace_explorer_changed.png"))


def test_report_figures_draw_offline(browser, shots):
    """The reproduce report's HTML figures carry plotly.js beside them: no network is needed."""
    figure = Path(__file__).resolve().parents[2] / "lab" / "results" / "figures" / "accuracy_vs_spacing.html"
    browser.get(figure.as_uri())
    end = time.time() + 30
    while time.time() < end and not browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg"):
        time.sleep(0.5)
    assert browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")
    browser.save_screenshot(str(shots / "report_figure_offline.png"))


def test_the_main_job_command_serves_without_asking_anything(tmp_path):
    """`deltalens app` as the README gives it (no --headless) on a machine where Streamlit has never
    run (a fresh HOME): it must serve, not stop to ask for an e-mail address."""
    port = free_port()
    env = {**os.environ, "HOME": str(tmp_path), "DELTALENS_CACHE": str(tmp_path / "cache")}
    process = subprocess.Popen(
        [sys.executable, "-m", "deltalens.cli.main", "app", "--port", str(port)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert serving(f"http://127.0.0.1:{port}"), "the app did not serve within a minute"
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert "Email" not in output
