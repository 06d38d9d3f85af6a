"""How fast each dashboard page answers, in headless Chromium on a fresh server (issue 24).

Run: python3 benchmarks/app_response_browser.py [--root DIR] [--label NAME] [--out FILE]
  --root: the repository to serve (default: this one; an exported older commit measures "before").
Starts `deltalens app` of that tree on a free port with a new, empty $DELTALENS_CACHE (the compiled
C kernels are copied in: they are built once per machine, not per page), then for every page: the
first visit (to the navigation and title, and until the script has finished), its main control,
and a checkpoint switch. A second fresh server on the now-filled cache gives the warm numbers.
Writes one JSON object (--out, default benchmarks/results/app_response_browser.json when --root is
this repository); needs Debian's chromium and chromium-driver and a few minutes.

A response time runs from the click to the moment the script stops running for good (the last time
it went idle, once it has stayed idle for a second): the server's work, what a user waits for. The
browser's drawing is timed apart (`draw_s`): from that moment until every plotly chart on the page
has its SVG. Each number carries the 1-minute load average read when it was taken.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import ElementClickInterceptedException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

REPO = Path(__file__).resolve().parents[1]
PRODUCT = "s4-deltaproduct-n3-full"
# page path -> the actions measured on it, in order: (what, widget kind, label, value)
ACTIONS = {
    "": [("card of", "stSelectbox", "card of", "s5-deltanet-neg-statement")],
    "trace_explorer": [
        ("seed", "stNumberInput", "seed", "7"),
        ("checkpoint switch", "stSelectbox", "checkpoint", "s3-deltanet-pos-statement"),
    ],
    "heads": [
        ("head", "stSelectbox", "head", "layer 1, head 0"),
        ("seed", "stNumberInput", "seed", "1"),
        ("checkpoint switch", "stSelectbox", "checkpoint", PRODUCT),
        ("head (after the switch)", "stSelectbox", "head", "layer 1, head 2"),
        ("open the linear-probes tab", "tab", "linear probes", None),
        ("fit the probes (button)", "stButton", "fit the linear probes", None),
    ],
    "interventions": [
        ("heads", "stMultiSelect", "heads", "L1 H0"),
        ("checkpoint switch", "stSelectbox", "checkpoint", PRODUCT),
    ],
    "circuit": [
        ("head", "stSelectbox", "head", "L1H0"),
        ("patched site", "stRadio", "patched site", "beta"),
        ("traces to cluster", "stSelectbox", "traces to cluster", "128"),
        ("extract the automaton (button)", "stButton", "extract the automaton", None),
        ("checkpoint switch", "stSelectbox", "checkpoint", "s5-deltanet-neg-statement"),
    ],
    "beliefs": [("seed", "stNumberInput", "seed", "4")],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(root: Path, cache: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "DELTALENS_CACHE": str(cache), "PYTHONPATH": str(root)}
    env.pop("DELTALENS_APP_CHECKPOINTS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "deltalens.cli.main", "app", "--headless", "--port", str(port)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return process, url
        except OSError:
            time.sleep(0.25)
    process.kill()
    raise SystemExit(f"the server of {root} did not come up")


def chromium() -> webdriver.Chrome:
    options = Options()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2400"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def busy(driver) -> bool:
    """Whether the script runs: Streamlit's own state attribute, its "Running" status widget, or a
    progress bar on the page (under load the attribute alone was seen idle mid-computation)."""
    apps = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')
    state = apps[0].get_attribute("data-test-script-state") if apps else None
    return (
        state != "notRunning"
        or bool(driver.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]'))
        or bool(driver.find_elements(By.CSS_SELECTOR, '[data-testid="stProgress"]'))
    )


TIMEOUT = 600  # seconds one response may take before the run gives up (--timeout)


def wait_done(driver, started: float, timeout: float | None = None, quiet: float = 1.5) -> tuple[float, list[str]]:
    """Seconds from `started` until the script went idle for the last time (idle `quiet` seconds
    since, and it had started: a rerun that has not begun yet is waited for up to 5 s), and the texts
    of the progress bars seen on the way."""
    timeout = timeout or TIMEOUT
    idle_since, seen, began, end = None, [], False, time.time() + timeout
    while time.time() < end:
        try:
            running = busy(driver)
            bars = [b.text.strip() for b in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stProgress"]')]
        except StaleElementReferenceException:
            continue
        seen += [text for text in bars if text and text not in seen]
        if running:
            began, idle_since = True, None
        elif idle_since is None:
            idle_since = time.perf_counter()
        waited = time.perf_counter() - started
        if idle_since is not None and time.perf_counter() - idle_since > quiet and (began or waited > 5):
            return idle_since - started, seen
        time.sleep(0.05)
    raise SystemExit(f"{driver.current_url} did not finish in {timeout:.0f} s")


def drawn(driver, timeout: float = 120) -> float:
    """Seconds until every plotly chart on the page has drawn its SVG (the browser's share of a response)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        try:
            charts = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stPlotlyChart"]')
            if all(c.find_elements(By.CSS_SELECTOR, ".main-svg") for c in charts):
                break
        except StaleElementReferenceException:
            pass
        time.sleep(0.02)
    return time.perf_counter() - started


def load() -> float:
    return round(os.getloadavg()[0], 2)


def first_visit(driver, url: str) -> dict:
    started = time.perf_counter()
    driver.get(url)
    shown = None
    while shown is None and time.perf_counter() - started < 600:
        nav = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"]')
        title = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h1')
        if nav and title and title[0].text.strip():
            shown = time.perf_counter() - started
        time.sleep(0.02)
    done, bars = wait_done(driver, started)
    return {
        "navigation_and_title_s": round(shown, 2),
        "complete_s": round(done, 2),
        "draw_s": round(drawn(driver), 2),
        "load": load(),
        "progress": bars,
    }


def find(driver, kind: str, label: str):
    for box in driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{kind}"]'):
        found = box.find_elements(By.CSS_SELECTOR, '[data-testid="stWidgetLabel"]')
        text = found[0].text.strip() if found else ""
        if text == label or text.startswith(label + " ("):  # a label with a note in brackets
            return box
    raise LookupError(f"no {kind} labelled {label!r}")


def act(driver, kind: str, label: str, value: str | None) -> float:
    """Do one action; returns the moment (perf_counter) the server was asked."""
    if kind == "tab":
        tabs = [t for t in driver.find_elements(By.CSS_SELECTOR, '[role="tab"]') if t.text.strip() == label]
        if not tabs:
            raise LookupError(f"no tab {label!r}")
        tab = tabs[0]
        started = time.perf_counter()
        tab.click()
        return started
    if kind == "stButton":  # a button whose text starts with the label (issue 44: long steps wait for one)
        buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stButton"] button')]
        buttons = [b for b in buttons if b.text.strip().startswith(label)]
        if not buttons:
            raise LookupError(f"no button {label!r}")
        started = time.perf_counter()
        buttons[0].click()
        return started
    if kind == "stRadio":
        box = find(driver, kind, label)
        choices = [o for o in box.find_elements(By.CSS_SELECTOR, "label") if o.text.strip() == value]
        if not choices:
            raise LookupError(f"{label!r} does not offer {value!r}")
        choice = choices[0]
        started = time.perf_counter()
        choice.click()
        return started
    field = find(driver, kind, label).find_element(By.CSS_SELECTOR, "input")
    if kind == "stNumberInput":
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(value)
        started = time.perf_counter()
        field.send_keys(Keys.ENTER)
        return started
    try:
        field.click()
    except ElementClickInterceptedException:  # a list or the header over it: bring it to the middle, then click
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", field)
        time.sleep(0.3)
        field.click()
    if kind == "stSelectbox":
        field.send_keys(Keys.CONTROL, "a")
    field.send_keys(value)
    time.sleep(0.5)
    options = [o for o in driver.find_elements(By.CSS_SELECTOR, '[role="option"]') if o.text.strip() == value]
    if not options:
        raise LookupError(f"{label!r} does not offer {value!r}")
    started = time.perf_counter()
    options[0].click()
    if kind == "stMultiSelect":  # close its list
        driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').click()
    return started


def measure_server(root: Path, cache: Path, shots: Path | None) -> dict:
    process, url = start_server(root, cache)
    driver = chromium()
    pages = {}
    try:
        for path, actions in ACTIONS.items():
            entry = {"first_visit": first_visit(driver, f"{url}/{path}"), "actions": {}}
            for what, kind, label, value in actions:
                try:
                    started = act(driver, kind, label, value)
                except LookupError as err:  # an older page without this control (the "before" tree)
                    entry["actions"][what] = {"s": None, "note": f"{err} on this page"}
                    continue
                try:
                    seconds, bars = wait_done(driver, started)
                except SystemExit as err:  # past --timeout: say so, and leave this page's later actions
                    entry["actions"][what] = {"s": None, "note": str(err), "load": load()}
                    break
                entry["actions"][what] = {
                    "s": round(seconds, 2),
                    "draw_s": round(drawn(driver), 2),
                    "load": load(),
                    "progress": bars,
                }
            if shots is not None:
                driver.save_screenshot(str(shots / f"{path or 'checkpoints'}.png"))
            pages[path or "checkpoints"] = entry
            print(path or "checkpoints", json.dumps(entry), file=sys.stderr, flush=True)
    finally:
        driver.quit()
        process.terminate()
        process.wait(timeout=30)
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--shots", type=Path, help="save a screenshot of each page here (the cold run)")
    parser.add_argument("--no-warm", action="store_true", help="measure the cold server only")
    parser.add_argument("--pages", nargs="+", help="measure only these pages (paths: checkpoints, circuit, ...)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds one response may take (default 600)")
    args = parser.parse_args()
    globals()["TIMEOUT"] = args.timeout
    if args.pages:
        for path in [path for path in ACTIONS if (path or "checkpoints") not in args.pages]:
            del ACTIONS[path]
    root = args.root.resolve()
    cache = Path(tempfile.mkdtemp(prefix="deltalens-bench-cache-"))
    kernels = Path(os.environ.get("DELTALENS_CACHE") or Path.home() / ".cache" / "deltalens") / "kernels"
    if kernels.is_dir():  # compiled once per machine: not what a page visit costs
        shutil.copytree(kernels, cache / "kernels")
    if args.shots:
        args.shots.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "app_response_browser",
        "label": args.label,
        "root": str(root),
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "cold": measure_server(root, cache, args.shots),  # fresh server, empty cache
        "warm": None if args.no_warm else measure_server(root, cache, None),  # the cache the cold run filled
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    shutil.rmtree(cache, ignore_errors=True)
    out = args.out or (REPO / "benchmarks" / "results" / "app_response_browser.json" if root == REPO else None)
    text = json.dumps(report, indent=1)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
