"""The first-GPU check: one command, a few minutes, one JSON object out.

    python3 scripts/device_check.py --json              # on a machine with a CUDA GPU (about 6 minutes)
    python3 scripts/device_check.py --dry-run --json    # what it would run and skip (automatic without CUDA)
    python3 scripts/device_check.py --json --wheels .whl  # where fla / transformer_lens are missing: installs
                                                          # first the wheels scripts/gpu_wheels.py downloaded

What it runs, each part under its own time limit so the whole stays under `--budget` seconds (360):

1. tests    `pytest -m cuda tests/models/test_cuda.py`: counts of passed / failed / skipped and the
            failures' names and first lines.
2. parity   the CUDA model against the CPU model for DeltaNet (plain and renormalised), Gated
            DeltaNet and DeltaProduct: logits, captured states and loss gradients, fp32 and bf16
            (autocast), as RMS error ratios; which kernel paths ran; whether a capture's logits are
            the plain forward's bit for bit. Then every shipped checkpoint: logit error ratio and the
            fraction of held-out reveal predictions that agree with the CPU.
3. bench    tokens/s of forward + backward, capture (run_with_cache of hook_state) and one AdamW step,
            with fla's kernels and with the torch kernels, in fp32 and bf16 autocast, at one moderate
            shape (batch 8, 512 tokens, hidden 256, 4 layers, 4 heads).
4. gpu      benchmarks/gpu.py in its own process (issue 56: machine TFLOP/s and GB/s, fla's DeltaNet and
            transformers' Qwen3.5 against deltalens on the same folders, capture at reveal positions, the
            shipped recipe's training time), under its share of the budget; its JSON under "gpu".

Every part reports its own error instead of stopping the others. `--wheels DIR` comes before them all: it
installs DIR/*.whl (no index, no dependencies) into a temporary folder put first on sys.path and on the parts'
PYTHONPATH, before anything imports fla or transformer_lens; the JSON's "wheels" says which, how long it took,
and which requirement of theirs the machine does not meet. No wheel there, or pip failing, stops the check
with one line on stderr and the JSON's "wheels" error (exit code 2).
"""

# ruff: noqa: B023 (the closures in loops are called inside the iteration that defines them)

from __future__ import annotations

import argparse
import atexit
import copy
import importlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `deltalens` is the repository root (its rooms are symlinked under deltalens/)
sys.path.insert(0, str(ROOT / "benchmarks"))  # timing.py: the parts' timer and budget, shared with gpu.py
from timing import Budget, print_report, timed  # noqa: E402

FAMILY = {
    "deltanet": dict(arch="deltanet", hidden_size=64, num_heads=2, allow_neg_eigval=True),
    "deltanet-renorm": dict(arch="deltanet", hidden_size=64, num_heads=2, allow_neg_eigval=True, state_norm_every=8),
    "gated_deltanet": dict(arch="gated_deltanet", hidden_size=64, num_heads=2, head_dim=32, allow_neg_eigval=True),
    "deltaproduct": dict(
        arch="deltaproduct", hidden_size=64, num_heads=2, head_dim=32, num_householder=2, use_forget_gate=True
    ),
}
BENCH = dict(batch=8, tokens=512, hidden_size=256, num_hidden_layers=4, num_heads=4, vocab_size=64)
PLAN = {
    "tests": "pytest -m cuda tests/models/test_cuda.py (issue 30's list: parity, gradients, renorm, capture, "
    "edits, ranges, autocast, train loop, baselines, shipped checkpoints)",
    "parity": f"CUDA vs CPU, fp32 and bf16, for {', '.join(FAMILY)} and every shipped checkpoint",
    "bench": f"fwd+bwd / capture / train step tokens/s, fla vs torch kernels, fp32 and bf16, at {BENCH}",
    "gpu": "benchmarks/gpu.py --json (issue 56; its plan: benchmarks/gpu.py --dry-run)",
}
DISTRIBUTIONS = {  # module -> its distribution: the facts give each one's version and folder
    "triton": "triton", "fla": "flash-linear-attention", "transformer_lens": "transformer-lens",
    "transformers": "transformers",
}  # fmt: skip
GPU_SHARE = 0.4  # of the budget, for benchmarks/gpu.py (its first calls compile and autotune fla's kernels)


def err_ratio(ref, got) -> float:
    ref, got = ref.detach().float().cpu(), got.detach().float().cpu()
    return float((ref - got).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-12))


# ---- 0. carried wheels: fla and transformer_lens on a machine whose image lacks them -----------------


def wheel_plan(folder: Path) -> dict:
    """The wheels in `folder` by name and version (from their file names), or the reason there are none."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        why = "no such folder" if not folder.is_dir() else "no .whl file in it"
        return {"folder": str(folder), "error": f"--wheels {folder}: {why} (python3 scripts/gpu_wheels.py makes them)"}
    rows = [dict(zip(("name", "version"), w.name.split("-")[:2]), file=w.name) for w in wheels]
    names = [row["name"].lower().replace("_", "-") for row in rows]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # pip stops on two versions of one package; say which
        return {"folder": str(folder), "error": f"--wheels {folder}: two versions of {', '.join(twice)}"}
    return {"folder": str(folder), "wheels": rows}


def unmet_requirements(site: Path) -> list[str]:
    """Each requirement of a carried package that this machine does not meet (absent, or another version):
    the wheels go in without their dependencies, so this is where a missing one shows."""
    from packaging.requirements import Requirement

    unmet = []
    for dist in importlib.metadata.distributions(path=[str(site)]):
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                have = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                unmet.append(f"{dist.name} needs {req}: absent")
                continue
            if not req.specifier.contains(have, prereleases=True):
                unmet.append(f"{dist.name} needs {req}: {have} here")
    return sorted(set(unmet))


def install_wheels(folder: Path, dry_run: bool) -> dict:
    """pip-install folder/*.whl into a fresh folder first on sys.path and PYTHONPATH (the subprocesses')."""
    plan = wheel_plan(folder)
    if "error" in plan:
        return plan
    site = Path("<a temporary folder>") if dry_run else Path(tempfile.mkdtemp(prefix="deltalens-wheels-"))
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    command += ["--no-cache-dir", "--upgrade", "--target", str(site)]
    command += [str(folder / w["file"]) for w in plan["wheels"]]
    plan["command"] = " ".join(command[2:])
    if dry_run:
        return {**plan, "installed": False, "would_install": [f"{w['name']}=={w['version']}" for w in plan["wheels"]]}
    atexit.register(shutil.rmtree, site, True)  # after the parts' subprocesses, which import from it, are done
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    plan["install_s"] = round(time.perf_counter() - started, 1)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**plan, "error": f"pip could not install the wheels of {folder} (exit {done.returncode}): {last}"}
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    importlib.invalidate_caches()
    return {**plan, "installed": True, "site": str(site), "unmet_requirements": unmet_requirements(site)}


# ---- 1. the cuda tests ------------------------------------------------------------------------------


def run_tests(limit_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "cuda.xml"
        command = [sys.executable, "-m", "pytest", "tests/models/test_cuda.py", "-o", "addopts=", "-m", "cuda", "-q"]
        command.append(f"--junitxml={xml}")
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit_s)
        except subprocess.TimeoutExpired:
            return {"error": f"the cuda tests ran past {limit_s:.0f} s", "command": " ".join(command[2:])}
        if not xml.is_file():
            return {"error": "pytest wrote no report", "tail": done.stdout[-2000:] + done.stderr[-2000:]}
        counts, failures = {"passed": 0, "failed": 0, "skipped": 0}, []
        for case in ET.parse(xml).getroot().iter("testcase"):
            problem = case.find("failure") if case.find("failure") is not None else case.find("error")
            if problem is not None:
                counts["failed"] += 1
                message = (problem.get("message") or problem.text or "").strip().splitlines()
                failures.append({"test": case.get("name"), "message": message[0][:300] if message else ""})
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
        return {"exit_code": done.returncode, **counts, "failures": failures}


# ---- 2. parity ----------------------------------------------------------------------------------------


def _pair(name):
    import torch

    from deltalens import models

    config = dict(FAMILY[name])
    arch = config.pop("arch")
    torch.manual_seed(0)
    cpu = models.build(arch, vocab_size=40, num_hidden_layers=2, **config).eval()
    return cpu, copy.deepcopy(cpu).cuda().eval()


def _paths(model) -> list[str]:
    return sorted({m.last_kernel.path for m in model.modules() if getattr(m, "last_kernel", None) is not None})


def family_parity(name: str) -> dict:
    import torch

    cpu, gpu = _pair(name)
    toks = torch.randint(0, 40, (2, 200), generator=torch.Generator().manual_seed(0))
    names = lambda n: n.endswith("hook_state")  # noqa: E731
    key = "blocks.1.attn.hook_state"
    out = {}
    with torch.no_grad():
        ref, ref_cache = cpu.run_with_cache(toks, names_filter=names)
        plain = gpu(toks.cuda())
        paths = _paths(gpu)
        logits, cache = gpu.run_with_cache(toks.cuda(), names_filter=names)
    out["fp32"] = {
        "logits_err": err_ratio(ref, plain),
        "state_err": err_ratio(ref_cache[key], cache[key]),
        "capture_logits_equal_plain": bool(torch.equal(logits, plain)),
        "paths": paths,
    }
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with torch.no_grad():
            plain = gpu(toks.cuda())
            paths = _paths(gpu)
            logits, cache = gpu.run_with_cache(toks.cuda(), names_filter=names)
    out["bf16"] = {
        "logits_err": err_ratio(ref, plain),
        "state_err": err_ratio(ref_cache[key], cache[key]),
        "capture_logits_equal_plain": bool(torch.equal(logits, plain)),
        "paths": paths,
    }
    short = toks[:, :100]
    cpu.train()(short, return_type="loss").backward()
    gpu.train()(short.cuda(), return_type="loss").backward()
    ratios = [err_ratio(p.grad, q.grad) for p, q in zip(cpu.parameters(), gpu.parameters()) if p.grad is not None]
    out["fp32"]["grad_err_max"] = max(ratios)
    return out


def shipped_parity() -> dict:
    import torch

    import deltalens as dl

    rows = {}
    for name in dl.list_checkpoints()["name"]:
        try:
            cpu, gpu = dl.load(name), dl.load(name, device="cuda")
            batch = cpu.checkpoint.batch(32)
            toks, reveal = batch["tokens"], batch["reveal_mask"][:, 1:]
            with torch.no_grad():
                ref, got = cpu(toks), gpu(toks.cuda()).float().cpu()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    low = gpu(toks.cuda()).float().cpu()
            agree = lambda x: float((ref[:, :-1].argmax(-1) == x[:, :-1].argmax(-1))[reveal].float().mean())  # noqa: E731
            rows[name] = {
                "fp32_logits_err": err_ratio(ref, got),
                "fp32_reveal_agreement": agree(got),
                "bf16_logits_err": err_ratio(ref, low),
                "bf16_reveal_agreement": agree(low),
                "paths": _paths(gpu),
            }
        except Exception as err:
            rows[name] = {"error": f"{type(err).__name__}: {err}"}
    return rows


def run_parity() -> dict:
    result = {name: timed(lambda name=name: family_parity(name)) for name in FAMILY}
    result["shipped"] = timed(shipped_parity)
    return result


# ---- 3. benchmark ---------------------------------------------------------------------------------------


def _time(fn, repeats=3) -> float:
    import torch

    fn()  # warm-up: Triton compiles here
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / repeats


def run_bench(limit_s: float) -> dict:
    import contextlib

    import torch

    from deltalens import models

    started, rows = time.perf_counter(), []
    B, T = BENCH["batch"], BENCH["tokens"]
    config = {k: v for k, v in BENCH.items() if k not in ("batch", "tokens")}
    toks = torch.randint(0, BENCH["vocab_size"], (B, T), device="cuda")
    for arch in ("deltanet", "gated_deltanet"):
        extra = {"head_dim": 64} if arch == "gated_deltanet" else {}
        torch.manual_seed(0)
        model = models.build(arch, **config, **extra).cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for kernel in ("fla", "torch"):
            model.set_kernel(use_fla=kernel == "fla")
            for precision in ("fp32", "bf16"):
                if time.perf_counter() - started > limit_s:
                    rows.append({"arch": arch, "kernel": kernel, "precision": precision, "skipped": "time budget"})
                    continue
                cast = (
                    (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
                    if precision == "bf16"
                    else contextlib.nullcontext
                )

                def fwd_bwd():
                    with cast():
                        loss = model(toks, return_type="loss")
                    loss.backward()
                    model.zero_grad(set_to_none=True)

                def capture():
                    with cast(), torch.no_grad():
                        model.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_state"))

                def step():
                    with cast():
                        loss = model(toks, return_type="loss")
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()

                row = {"arch": arch, "kernel": kernel, "precision": precision}
                try:
                    model.train()
                    for what, fn in (("fwd_bwd", fwd_bwd), ("capture", capture), ("train_step", step)):
                        row[f"{what}_tokens_per_s"] = round(B * T / _time(fn))
                    row["paths"] = _paths(model)
                except Exception as err:
                    row["error"] = f"{type(err).__name__}: {err}"
                rows.append(row)
        model.set_kernel(use_fla=None)
    return {"shape": BENCH, "rows": rows, "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)}


# ---- 4. benchmarks/gpu.py -------------------------------------------------------------------------------


def run_gpu_bench(limit_s: float, dry_run: bool = False) -> dict:
    """benchmarks/gpu.py in a fresh process (its models and their memory go with it): its one JSON object."""
    command = [sys.executable, "benchmarks/gpu.py", "--json", "--budget", f"{max(limit_s - 20, 30):.0f}"]
    command += ["--dry-run"] if dry_run else []
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return {"error": f"benchmarks/gpu.py ran past {limit_s:.0f} s"}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"benchmarks/gpu.py exited {done.returncode}", "tail": done.stderr[-2000:]}


# ---- main -----------------------------------------------------------------------------------------------


def _imported(module: str, dist: str) -> str:
    """The package's version and the folder it imports from (a carried wheel's or the image's), or why not."""
    try:
        folder = Path(importlib.import_module(module).__file__ or "").parent
        return f"{importlib.metadata.version(dist)} ({folder})"
    except Exception as err:
        return f"not importable: {type(err).__name__}: {str(err)[:200]}"


def device_facts() -> dict:
    import torch

    facts = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if facts["cuda"]:
        facts["device"] = torch.cuda.get_device_name(0)
        facts["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    for module, dist in DISTRIBUTIONS.items():
        facts[module] = _imported(module, dist)
    return facts


def dry_run(facts: dict, reason: str, command: str) -> dict:
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/models/test_cuda.py", "-o", "addopts=", "-m", "cuda", "--co", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    tests = [line for line in collected if "::" in line]
    return {
        "dry_run": True,
        "reason": reason,
        "facts": facts,
        "would_run": PLAN,
        "skipped": {part: reason for part in PLAN},
        "cuda_tests": {"count": len(tests), "ids": tests},
        "gpu_plan": run_gpu_bench(120, dry_run=True),
        "command": command,
    }


def run_parts(args: argparse.Namespace, report: dict, clock: Budget) -> dict:
    """The four parts on the GPU, each under its share of the budget."""
    # shares of the budget: tests 30%, parity as long as it takes (about 10%), gpu 40%, bench what is left
    gpu_share = GPU_SHARE * args.budget if "gpu" not in args.skip else 0.0
    if "tests" not in args.skip:
        report["tests"] = timed(lambda: run_tests(0.3 * args.budget))
    if "parity" not in args.skip:
        report["parity"] = timed(run_parity)
    if "bench" not in args.skip:
        left = clock.left(reserve=gpu_share + 10)
        report["bench"] = timed(lambda: run_bench(max(left, 20.0)))
    if "gpu" not in args.skip:
        left = clock.left(reserve=5)
        report["gpu"] = timed(lambda: run_gpu_bench(max(left, 60.0)))
    report["skipped"] = {part: "--skip" for part in args.skip}
    report["wall_s"] = round(clock.spent(), 1)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", action="store_true", help="one JSON object on stdout (the default prints it indented)"
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would run and what is skipped; run nothing")
    parser.add_argument("--budget", type=float, default=360.0, help="seconds for the whole check (default 360)")
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(PLAN), help="parts to leave out")
    parser.add_argument("--wheels", type=Path, help="install these wheels first (a folder of scripts/gpu_wheels.py)")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    clock = Budget(args.budget)  # the wheels' install counts against the budget too
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    import torch  # before the wheels: whether there is a GPU decides whether they are installed or only listed

    rehearsal = args.dry_run or not torch.cuda.is_available()
    wheels = install_wheels(args.wheels.resolve(), dry_run=rehearsal) if args.wheels else None
    if wheels is not None and "error" in wheels:  # without fla / transformer_lens every part would fail
        print(f"device_check: {wheels['error']}", file=sys.stderr)
        print_report({"dry_run": rehearsal, "wheels": wheels}, args.json, args.out)
        return 2
    facts = device_facts()
    if rehearsal:
        command = "python3 scripts/device_check.py --json" + (f" --wheels {args.wheels}" if args.wheels else "")
        why = "--dry-run" if args.dry_run else "no CUDA device here (torch.cuda.is_available() is False)"
        report = dry_run(facts, why, command)
    else:
        report = run_parts(args, {"dry_run": False, "facts": facts, "budget_s": args.budget}, clock)
    if wheels is not None:
        report["wheels"] = wheels
    return print_report(report, args.json, args.out)


if __name__ == "__main__":
    sys.exit(main())
