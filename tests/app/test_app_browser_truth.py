"""What the dashboard shows at a glance, in a real browser at a laptop's window size (issue 55 item 6): the
Census colour range read from the plotly JSON, the Interventions sweep's kind, the Circuit page's floor warning,
the Checkpoints page's training curves, and the Beliefs legends inside their figures.

Uses test_app_browser's server (Debian's chromium and chromium-driver); the window is 1280 x 900, not the
other browser tests' tall one, since a legend cut off at the default size is one of the things checked.
"""

from __future__ import annotations

import re
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from test_app_browser import drawn, server, shots  # noqa: F401  (fixtures)
from test_app_browser_switching import pick, settle

WINDOW = "1280,900"


@pytest.fixture(scope="module")
def laptop():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "the browser test needs Debian's chromium and chromium-driver: bash scripts/setup.sh"
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={WINDOW}"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    yield chrome
    chrome.quit()


def plotly_figures(driver) -> list[dict]:
    """Every drawn plotly figure's data (type, zmin, zmax, colourbar title) and layout title, as the browser has it."""
    return driver.execute_script(
        """return Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({
            title: (el.layout && el.layout.title && (el.layout.title.text || el.layout.title)) || '',
            traces: (el.data || []).map(t => ({type: t.type, zmin: t.zmin, zmax: t.zmax, zmid: t.zmid,
                bar: (t.colorbar && t.colorbar.title && (t.colorbar.title.text || t.colorbar.title)) || ''}))}))"""
    )


def headers(driver) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h2')]


def main_text(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text


def test_census_shares_sit_on_a_fixed_0_to_1_scale(server, laptop, shots):  # noqa: F811
    laptop.get(f"{server}/census")
    settle(laptop)
    heatmaps = [t for fig in plotly_figures(laptop) for t in fig["traces"] if t["type"] == "heatmap"]
    assert heatmaps, "the Census page drew no heatmap"
    shares = [t for t in heatmaps if "share" in str(t["bar"])]
    assert shares and all((t["zmin"], t["zmax"]) == (0, 1) for t in shares)
    laptop.save_screenshot(str(shots / "truth_census.png"))


def test_interventions_sweep_is_the_chosen_kind(server, laptop, shots):  # noqa: F811
    laptop.get(f"{server}/interventions")
    settle(laptop)
    pick(laptop, "stSelectbox", "checkpoint", "s3-deltanet-pos-statement")  # beta in [0, 1]
    assert any(h.startswith("Zero ablation of the read-out z on each head in turn") for h in headers(laptop))
    pick(laptop, "stSelectbox", "checkpoint", "s3-deltanet-neg-statement")
    pick(laptop, "stSelectbox", "intervention", "transition clip")
    assert any(h.startswith("Transition beta clipped at 1, write kept on each head") for h in headers(laptop))
    laptop.save_screenshot(str(shots / "truth_interventions.png"))
    pick(laptop, "stSelectbox", "intervention", "beta clip")  # a kind the page gained from the intervention records
    assert any(h.startswith("Beta clipped at 1 on each head") for h in headers(laptop))
    laptop.save_screenshot(str(shots / "truth_interventions_beta_clip.png"))


def test_circuit_warns_where_clean_and_corrupt_barely_differ(server, laptop, shots):  # noqa: F811
    laptop.get(f"{server}/circuit")
    settle(laptop)
    pick(laptop, "stSelectbox", "checkpoint", "s3-transformer-statement")
    text = main_text(laptop)
    warned = "under the floor of 0.1" in text
    assert warned or "restores" in text  # one or the other, never a fraction of nothing
    if warned:
        assert "too little to restore" in text
    assert "top head" not in text or "stands out" in text or "no head stands out" in text
    laptop.save_screenshot(str(shots / "truth_circuit.png"))


def test_checkpoints_page_draws_the_paper_models_training_curve(server, laptop, shots):  # noqa: F811
    laptop.get(f"{server}/")
    settle(laptop)
    drawn(laptop)
    titles = [re.sub(r"<[^>]+>", "", str(fig["title"])) for fig in plotly_figures(laptop)]  # plain: no <b> tags
    assert any(title.startswith("Training curves") for title in titles), titles
    assert "none of these checkpoints keeps its training history" not in main_text(laptop)
    laptop.save_screenshot(str(shots / "truth_checkpoints.png"))


def test_beliefs_legends_are_inside_their_figures(server, laptop, shots):  # noqa: F811
    laptop.get(f"{server}/beliefs")
    settle(laptop)
    boxes = laptop.execute_script(
        """return Array.from(document.querySelectorAll('.js-plotly-plot')).filter(el => el.querySelector('.legend'))
            .map(el => { const f = el.getBoundingClientRect(), l = el.querySelector('.legend').getBoundingClientRect();
            return [f.left, f.top, f.right, f.bottom, l.left, l.top, l.right, l.bottom]; })"""
    )
    assert len(boxes) >= 2, "the Beliefs page drew no figure with a legend"
    for f_left, f_top, f_right, f_bottom, left, top, right, bottom in boxes:
        assert f_left - 1 <= left and right <= f_right + 1 and f_top - 1 <= top and bottom <= f_bottom + 1
    laptop.save_screenshot(str(shots / "truth_beliefs.png"))
