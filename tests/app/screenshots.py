"""Screenshots of the pages issue 55 is about (Census, Interventions on a beta [0, 1] model, Circuit on the
Transformer, Checkpoints), from the dashboard of any checkout, at a laptop's window size: the before / after
pictures in docs/screenshots/ (docs/guide/dashboard.md shows the after ones, the README one of them).

    python3 tests/app/screenshots.py --root CHECKOUT --out docs/screenshots --suffix after

Runs that checkout's own server (its code, its checkpoints) on a private cache; needs Debian's chromium and
chromium-driver. Uses the browser tests' helpers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from test_app_browser import free_port, serving  # noqa: E402
from test_app_browser_switching import pick, settle  # noqa: E402

MAIN_HEIGHT = "return document.querySelector('[data-testid=\"stMain\"]').scrollHeight"
PAGES = {  # file name -> (path, checkpoint to pick or None)
    "census": ("census", None),
    "interventions": ("interventions", "s3-deltanet-pos-statement"),
    "circuit": ("circuit", "s3-transformer-statement"),
    "checkpoints": ("", None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the checkout whose dashboard to photograph")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--suffix", required=True, help="before | after: the file names' ending")
    parser.add_argument("--window", default="1280,900")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "DELTALENS_CACHE": cache}
        env.pop("DELTALENS_APP_CHECKPOINTS", None)
        server = subprocess.Popen(  # from the checkout's root: `-m deltalens` finds that checkout's package first
            [sys.executable, "-m", "deltalens.cli.main", "app", "--headless", "--port", str(port)],
            cwd=args.root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        options = Options()
        options.binary_location = shutil.which("chromium")
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={args.window}"):
            options.add_argument(flag)
        browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            if not serving(url):
                sys.exit("the server did not come up")
            for name, (path, checkpoint) in PAGES.items():
                browser.get(f"{url}/{path}")
                settle(browser)
                if checkpoint is not None:
                    pick(browser, "stSelectbox", "checkpoint", checkpoint)
                height = browser.execute_script(MAIN_HEIGHT)
                width = int(args.window.split(",")[0])
                browser.set_window_size(width, min(int(height) + 200, 6000))  # the whole page in one picture
                settle(browser)
                browser.save_screenshot(str(args.out / f"{name}_{args.suffix}.png"))
                browser.set_window_size(width, int(args.window.split(",")[1]))
                print(args.out / f"{name}_{args.suffix}.png")
        finally:
            browser.quit()
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
