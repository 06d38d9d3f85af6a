"""The first-GPU check: one command, a few minutes, one JSON object out.

    python3 scripts/device_check.py --json              # on a machine with a CUDA GPU (about 6 minutes)
    python3 scripts/device_check.py --dry-run --json    # what it would run and skip (automatic without CUDA)

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

Every part reports its own error instead of stopping the others.
"""

# ruff: noqa: B023 (the closures in loops are called inside the iteration that defines them)

from __future__ import annotations

import argparse
import copy
import json
import os
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
GPU_SHARE = 0.4  # of the budget, for benchmarks/gpu.py (its first calls compile and autotune fla's kernels)


def err_ratio(ref, got) -> float:
    ref, got = ref.detach().float().cpu(), got.detach().float().cpu()
    return float((ref - got).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-12))


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


def device_facts() -> dict:
    import torch

    facts = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if facts["cuda"]:
        facts["device"] = torch.cuda.get_device_name(0)
        facts["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    try:
        import fla

        facts["fla"] = getattr(fla, "__version__", "unknown")
    except Exception as err:
        facts["fla"] = f"not importable: {type(err).__name__}"
    try:
        import triton

        facts["triton"] = triton.__version__
    except Exception:
        facts["triton"] = None
    return facts


def dry_run(facts: dict, reason: str) -> dict:
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
        "command": "python3 scripts/device_check.py --json",
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", action="store_true", help="one JSON object on stdout (the default prints it indented)"
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would run and what is skipped; run nothing")
    parser.add_argument("--budget", type=float, default=360.0, help="seconds for the whole check (default 360)")
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(PLAN), help="parts to leave out")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(ROOT))

    facts = device_facts()
    if args.dry_run or not facts["cuda"]:
        report = dry_run(
            facts, "--dry-run" if args.dry_run else "no CUDA device here (torch.cuda.is_available() is False)"
        )
    else:
        clock = Budget(args.budget)
        report = {"dry_run": False, "facts": facts, "budget_s": args.budget}
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
    return print_report(report, args.json, args.out)


if __name__ == "__main__":
    sys.exit(main())
