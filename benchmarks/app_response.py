"""How fast each dashboard page answers its main control, once its model is loaded (target < 3 s).

Run: python3 benchmarks/app_response.py   (Streamlit's AppTest, the shipped checkpoints; a minute or two;
  benchmarks/app_response_browser.py measures the same in Chromium on a fresh server)
Prints one JSON object: per page, the control changed, the first render (model loading and caches
included) and the median of three later changes of the control.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

HOME = str(Path(__file__).resolve().parents[1] / "app" / "Home.py")
PAPER = "s3-deltanet-neg-statement"  # controls after a checkpoint picker have a key per checkpoint (app/common.py)

# page -> (control, values to set in turn); each value set is one "control change"
CONTROLS = {
    "views/checkpoints.py": (
        "selectbox",
        "card",
        ["s5-deltanet-neg-statement", "s3-lstm-statement-prob", "s3-deltanet-pos-statement"],
    ),
    "views/trace_explorer.py": ("number_input", f"trace-seed@{PAPER}", [1, 2, 3]),
    "views/heads.py": ("selectbox", f"heads-head@{PAPER}", [(1, 0), (0, 1), (1, 2)]),
    "views/interventions.py": ("multiselect", f"iv-heads@{PAPER}", [[(1, 0)], [(0, 2)], [(0, 3), (1, 1)]]),
    "views/beliefs.py": ("number_input", "belief-seed", [4, 5, 6]),
}


def main() -> None:
    os.environ.setdefault("DELTALENS_CACHE", tempfile.mkdtemp())
    report = {}
    for page, (kind, key, values) in CONTROLS.items():
        app = AppTest.from_file(HOME, default_timeout=600)
        app.run()
        started = time.perf_counter()
        app.switch_page(page)
        app.run()
        first = time.perf_counter() - started
        times = []
        for value in values:
            widget = getattr(app, kind)(key=key)
            started = time.perf_counter()
            (widget.set_value(value) if kind != "selectbox" else widget.select(value)).run()
            times.append(time.perf_counter() - started)
            assert not app.exception, [e.value for e in app.exception]
        report[page] = {
            "control": key,
            "first_render_s": round(first, 2),
            "response_s_median": round(statistics.median(times), 2),
            "response_s": [round(t, 2) for t in times],
        }
    print(json.dumps({"benchmark": "app_response", "target_s": 3.0, "pages": report}))


if __name__ == "__main__":
    main()
