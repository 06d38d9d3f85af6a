"""A checkpoint switch in a real browser (issue 24, item 1): the browser keeps its own copy of every
widget's value, so this is where a box could show one head while the page computed another.

Uses test_app_browser's server and Chromium (Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import re
import time

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from test_app_browser import browser, server, set_number, shots  # noqa: F401  (fixtures)


def settle(driver, timeout: float = 240) -> None:
    """Wait until Streamlit has not been running the script for a second (its own state attribute)."""
    end, quiet_since = time.time() + timeout, None
    while time.time() < end:
        apps = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')
        idle = bool(apps) and apps[0].get_attribute("data-test-script-state") == "notRunning"
        quiet_since = (quiet_since or time.time()) if idle else None
        if quiet_since is not None and time.time() - quiet_since > 1.0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{driver.current_url} did not finish rendering in {timeout:.0f} s")


def widget(driver, kind: str, label: str):
    for box in driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{kind}"]'):
        found = box.find_elements(By.CSS_SELECTOR, '[data-testid="stWidgetLabel"]')
        if found and found[0].text.strip() == label:
            return box
    raise AssertionError(f"no {kind} labelled {label!r}")


def pick(driver, kind: str, label: str, option: str, tries: int = 3) -> None:
    try:
        choose(driver, kind, label, option)
    except StaleElementReferenceException:  # the page redrew the widget under the click: once more
        if tries == 1:
            raise
        settle(driver)
        pick(driver, kind, label, option, tries - 1)
    settle(driver)


def choose(driver, kind: str, label: str, option: str) -> None:
    field = widget(driver, kind, label).find_element(By.CSS_SELECTOR, "input")
    field.click()
    if kind == "stSelectbox":
        field.send_keys(Keys.CONTROL, "a")
    field.send_keys(option)
    time.sleep(0.5)
    exact = [o for o in driver.find_elements(By.CSS_SELECTOR, '[role="option"]') if o.text.strip() == option]
    assert exact, f"{option!r} is not offered by {label!r}"
    exact[0].click()
    if kind == "stMultiSelect":  # close its list (the box itself may be redrawn by now)
        driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').click()


def heads_shown(driver) -> set[str]:
    box = widget(driver, "stMultiSelect", "heads")
    return {tag.text.strip().replace(" ", "") for tag in box.find_elements(By.CSS_SELECTOR, "span[title]")}


def heads_computed(driver) -> set[str]:
    labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]')]
    label = next(text for text in labels if text.startswith("with "))
    return {f"L{layer}H{head}" for layer, head in re.findall(r"L(\d+) ?H(\d+)", label)}


def test_interventions_show_what_they_compute_across_a_checkpoint_switch(server, browser, shots):  # noqa: F811
    browser.get(f"{server}/interventions")
    settle(browser)
    pick(browser, "stMultiSelect", "heads", "L1 H0")
    assert heads_shown(browser) == heads_computed(browser) == {"L0H3", "L1H0"}
    pick(browser, "stSelectbox", "checkpoint", "s4-deltaproduct-n3-full")
    assert heads_shown(browser) == heads_computed(browser)  # whatever it shows, it computes
    before = heads_computed(browser)
    set_number(browser, "new hi", 1.5)
    settle(browser)
    set_number(browser, "new hi", 1)
    settle(browser)
    assert heads_shown(browser) == heads_computed(browser) == before
    browser.save_screenshot(str(shots / "interventions_switched.png"))
