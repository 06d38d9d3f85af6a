"""Server seconds of every dashboard page's first render and of each of its controls (issue 44, item 5).

Run: python3 benchmarks/dashboard_latency.py [--label before|after] [--pages heads,circuit]
Drives app/Home.py with Streamlit's AppTest (the server's script runs, no browser), as a user who
opens each page in turn on the shipped checkpoints (checkpoints/), in two fresh processes:
  cold: an empty $DELTALENS_CACHE (nothing computed yet on this machine), then
  warm: a new process on the cache the cold pass filled (a restarted server; models load again).
Each figure is the seconds one AppTest run took (a rerun of the page's script, as a click triggers),
its CPU seconds (one thread computes: about the seconds on an idle machine) and the 1-minute load
average (os.getloadavg) read right after it. A process first imports what the
pages need, as `deltalens app` does at server start (app/preload.py; `server_start_imports`); in a tree
without app/preload.py the first page pays those imports. `imports_s`: torch and the library alone.
Writes benchmarks/results/dashboard_latency.json under the key --label (other labels are kept) and
prints the same JSON. A few minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOME = str(REPO / "app" / "Home.py")
OUT = REPO / "benchmarks" / "results" / "dashboard_latency.json"
PAPER = "s3-deltanet-neg-statement"
PRODUCT = "s4-deltaproduct-n3-full"
S5 = "s5-deltanet-neg-statement"

# page -> [(action, widget kind, key, value)]; kind "tab" sets a tab's key, "button" clicks one (an action
# whose widget is not on the page is recorded as absent, not failed: pages change between labels)
ACTIONS = {
    "checkpoints": [("card of", "selectbox", "card", S5)],
    "trace_explorer": [
        ("seed", "number_input", f"trace-seed@{PAPER}", 7),
        ("checkpoint switch", "selectbox", "trace-ckpt", "s3-deltanet-pos-statement"),
    ],
    "heads": [
        ("head", "selectbox", f"heads-head@{PAPER}", (1, 0)),
        ("seed", "number_input", f"heads-seed@{PAPER}", 1),
        ("checkpoint switch", "selectbox", "heads-ckpt", PRODUCT),
        ("head (after the switch)", "selectbox", f"heads-head@{PRODUCT}", (1, 2)),
        ("open the linear-probes tab", "tab", "heads-tab", "linear probes"),
        ("fit the probes (button)", "button", f"heads-fit-probes@{PRODUCT}", None),
    ],
    "interventions": [
        ("heads", "multiselect", f"iv-heads@{PAPER}", [(1, 0)]),
        ("checkpoint switch", "selectbox", "iv-ckpt", PRODUCT),
        ("run the sweep (button)", "button", f"iv-run-sweep@{PRODUCT}", None),
    ],
    "circuit": [
        ("head", "selectbox", f"circuit-head@{PAPER}", "L1H0"),
        ("patched site", "radio", f"circuit-site@{PAPER}", "beta"),
        ("traces to cluster", "selectbox", f"circuit-traces@{PAPER}", 128),
        ("extract the automaton (button)", "button", f"circuit-automaton@{PAPER}", None),
        ("checkpoint switch", "selectbox", "circuit-ckpt", S5),
    ],
    "census": [
        ("statistic", "selectbox", f"census-statistic@{PAPER}", "effective_rank"),
        ("traces", "selectbox", f"census-traces@{PAPER}", 256),
        ("checkpoint switch", "selectbox", "census-ckpt", S5),
        ("traces (over the button's bar)", "selectbox", f"census-traces@{S5}", 1024),
        ("count the traces (button)", "button", f"census-run@{S5}", None),
    ],
    "beliefs": [("seed", "number_input", "belief-seed", 4)],
}


def timed(app, act) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of act(): one thread computes (OMP_NUM_THREADS=1), so
    the CPU seconds are about what the wall seconds would be on an idle machine."""
    started, cpu = time.perf_counter(), time.process_time()
    act()
    return round(time.perf_counter() - started, 2), round(time.process_time() - cpu, 2)


def figure(seconds: tuple[float, float], app) -> dict:
    out = {"s": seconds[0], "cpu_s": seconds[1], "load": round(os.getloadavg()[0], 2)}
    problems = [str(e.value) for e in app.exception] + [str(e.value) for e in app.error]
    if problems:
        out["errors"] = [p[:160] for p in problems]
    return out


def apply(app, kind: str, key: str, value):
    """The AppTest call that sets the widget, or None when the page has no such widget now."""
    if kind == "tab":
        return lambda: (app.session_state.__setitem__(key, value), app.run())
    widgets = [w for w in getattr(app, kind) if w.key == key]
    if not widgets:
        return None
    widget = widgets[0]
    if kind == "button":
        return lambda: widget.click().run()
    return lambda: (widget.select(value) if kind == "selectbox" else widget.set_value(value)).run()


def one_pass(pages: list[str]) -> dict:
    """Every page in turn in this process (one AppTest session: a user clicking through the pages)."""
    from streamlit.testing.v1 import AppTest

    report = {}
    try:  # what `deltalens app` does at server start, before a browser connects (app/serve.py)
        from deltalens.app.preload import preload

        cpu = time.process_time()
        report["server_start_imports"] = {
            "s": round(preload(), 2),
            "cpu_s": round(time.process_time() - cpu, 2),
            "load": round(os.getloadavg()[0], 2),
        }
    except ImportError:  # a tree from before the preload: the first page pays the imports
        pass
    app = AppTest.from_file(HOME, default_timeout=900)
    for number, page in enumerate(pages):
        if number == 0 and page != "checkpoints":
            app.run()  # untimed: Home opens on the Checkpoints page (its first run draws it)
        if number or page != "checkpoints":
            app.switch_page(f"views/{page}.py")
        entry = {"first_render": figure(timed(app, app.run), app), "actions": {}}
        for action, kind, key, value in ACTIONS[page]:
            act = apply(app, kind, key, value)
            if act is None:  # after a fragment rerun AppTest holds the fragment's elements only; a browser keeps all
                app.run()
                act = apply(app, kind, key, value)
            entry["actions"][action] = figure(timed(app, act), app) if act else {"absent": key}
        report[page] = entry
        print(page, json.dumps(entry), file=sys.stderr, flush=True)
    return report


def imports_seconds() -> dict:
    """torch and the library imported in a fresh process: what the first page of a new server pays."""
    code = "import time; t = time.perf_counter(); import deltalens.interp.capture; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {"s": round(float(done.stdout.split()[-1]), 2), "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="after")
    parser.add_argument("--pages", default=",".join(ACTIONS))
    parser.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    pages = args.pages.split(",")
    if args.one_pass:
        print(json.dumps(one_pass(pages)))
        return
    cache = tempfile.mkdtemp(prefix="dashboard-latency-")
    mine = Path(os.environ.get("DELTALENS_CACHE") or Path.home() / ".cache" / "deltalens")
    if (mine / "kernels").is_dir():  # the C kernels are compiled once per machine, not per page visit
        shutil.copytree(mine / "kernels", Path(cache) / "kernels")
    if (mine / "bf16_check.json").is_file():  # likewise the machine's bf16 check
        shutil.copy(mine / "bf16_check.json", cache)
    env = {**os.environ, "DELTALENS_CACHE": cache, "HF_HUB_OFFLINE": "1"}
    env.pop("DELTALENS_APP_CHECKPOINTS", None)
    result = {"cores": os.cpu_count(), "load_at_start": [round(x, 2) for x in os.getloadavg()]}
    result["imports_s"] = imports_seconds()
    for name in ("cold", "warm"):
        command = [sys.executable, __file__, "--one-pass", "--pages", args.pages]
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        result[name] = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(cache, ignore_errors=True)
    result["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    everything = json.loads(OUT.read_text()) if OUT.is_file() else {}
    everything[args.label] = result
    OUT.write_text(json.dumps(everything, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
