"""Checkpoint load time with and without the random initialisation that loading skips
(models/init_skipped.py), at the 1.3B DeltaNet config of benchmarks/pretrained.py (random weights).

Prints ONE JSON object: per mode, the load times of fresh processes (one thread each, modes
interleaved so both see the same machine), best and all; and the ratio of the best times.

    nice -n 10 python3 benchmarks/load.py --small                              # hidden 256: a quick check
    nice -n 10 python3 benchmarks/load.py --out benchmarks/results/load.json   # the 1.3B config
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pretrained import CONFIGS, SMALL  # noqa: E402  (the same shapes as the scale benchmark)

MODES = ("with_random_init", "init_skipped")


def child(mode: str, folder: str) -> dict:
    import torch

    torch.set_num_threads(1)
    import deltalens.models.init_skipped as init_skipped

    if mode == "with_random_init":  # what loading did before: build draws every weight, then the file overwrites it
        init_skipped.random_init_skipped = contextlib.nullcontext
    from deltalens import models

    started = time.perf_counter()
    models.load(folder)
    return {"load_s": round(time.perf_counter() - started, 2)}


def run(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"child {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="hidden 256, 4 layers instead of the 1.3B config")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    config = (SMALL if args.small else CONFIGS)["deltanet"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(Path(tmp) / "deltanet")
        from deltalens import models

        models.build("deltanet", **config).save_pretrained(folder)
        times = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                times[mode].append(run("--child", mode, folder)["load_s"])
    best = {mode: min(t) for mode, t in times.items()}
    out = {
        "mode": "small" if args.small else "1.3B",
        "config": config,
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "load_s": times,
        "best_s": best,
        "speedup": round(best["with_random_init"] / best["init_skipped"], 2),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
