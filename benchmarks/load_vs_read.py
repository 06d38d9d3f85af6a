"""`dl.load` of the 1.3B DeltaNet config against reading every tensor of the same file with
safetensors alone, timed in one run (issue 42: the load should run near the disk's speed).

Prints ONE JSON object: per mode, the seconds of fresh processes (torch and transformer_lens imported
before timing, one thread, modes interleaved so both see the same machine and a warm page cache),
their peak RSS, and the ratio of the best load to the best plain read (target <= 2).

    nice -n 5 python3 benchmarks/load_vs_read.py --small                              # hidden 256: a quick check
    nice -n 5 python3 benchmarks/load_vs_read.py --mid --keep                         # a 0.6 GB folder
    nice -n 5 python3 benchmarks/load_vs_read.py --out benchmarks/results/load_vs_read.json

The folder (random weights, ~5.5 GB fp32 at the 1.3B config) is built once under --folder and removed
afterwards unless --keep is given; a folder already there is reused (to measure two versions of the
loader on the same bytes).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from pretrained import CONFIGS, SMALL  # noqa: E402  (the same shapes as the scale benchmark)

MODES = ("safetensors_read", "dl_load")
MID = dict(vocab_size=32000, hidden_size=1024, num_hidden_layers=12, num_heads=8, expand_k=1, expand_v=1)
TARGET_RATIO = 2.0


def child(mode: str, folder: str) -> dict:
    import torch
    import transformer_lens  # noqa: F401  (imported before timing: the load, not the import, is measured)

    torch.set_num_threads(1)
    started = time.perf_counter()
    if mode == "safetensors_read":
        from safetensors.torch import load_file

        # pread: every byte read into memory (the default mmap backend hands back pages not yet read)
        tensors = load_file(str(Path(folder) / "model.safetensors"), backend="pread")
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    else:
        import deltalens as dl

        model = dl.load(folder)
        nbytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": round(seconds, 3), "bytes": nbytes, "peak_rss_bytes": peak}


def run(*args: str) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"child {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def build_folder(folder: str, config: str) -> dict:
    import torch

    from deltalens import models

    torch.manual_seed(0)
    models.build("deltanet", **json.loads(config)).save_pretrained(folder)
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="hidden 256, 4 layers instead of the 1.3B config")
    parser.add_argument("--mid", action="store_true", help="hidden 1024, 12 layers: a 0.6 GB fp32 folder")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/deltalens-load-vs-read"))
    parser.add_argument("--keep", action="store_true", help="leave the folder in place for another run")
    parser.add_argument("--label", default="", help="a note stored with the result (e.g. 'before')")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, folder = args.child
        done = build_folder(folder, args.config) if mode == "build" else child(mode, folder)
        print(json.dumps(done))
        return
    config = MID if args.mid else (SMALL if args.small else CONFIGS)["deltanet"]
    folder = args.folder
    built = not (folder / "model.safetensors").is_file()
    if built:  # in a child: a parent holding the model would inflate every child's peak RSS and evict the cache
        run("--child", "build", str(folder), "--config", json.dumps(config))
    try:
        run("--child", MODES[0], str(folder))  # warm the page cache: both modes read the same cached bytes
        runs = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                runs[mode].append(run("--child", mode, str(folder)))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    best = {mode: min(r["seconds"] for r in rs) for mode, rs in runs.items()}
    ratio = round(best["dl_load"] / best["safetensors_read"], 2)
    out = {
        "mode": "0.6 GB" if args.mid else ("small" if args.small else "1.3B"),
        "label": args.label,
        "config": config,
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "file_bytes": runs["dl_load"][0]["bytes"],
        "seconds": {mode: [r["seconds"] for r in rs] for mode, rs in runs.items()},
        "peak_rss_bytes": {mode: max(r["peak_rss_bytes"] for r in rs) for mode, rs in runs.items()},
        "best_s": best,
        "load_over_read": ratio,
        "target_load_over_read": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
