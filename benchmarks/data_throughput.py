"""Data pipeline speed: tokens per second for generate + tokenize + collate, on one core.

    python3 benchmarks/data_throughput.py [--seconds 3] [--batch-size 64]

Prints ONE JSON object. The task is the paper's basic one (S5 swaps, 24 actions, a reveal every
4 actions); both tokenizers run through the real path, TraceDataset items then ``collate``.
"generate_only" times the trace generator alone, to show where the time goes.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from deltalens.tasks.dataset import TraceDataset, collate
from deltalens.tasks.tokenizers import TRACE_SPEC_KINDS, make_tokenizer
from deltalens.tasks.traces import TraceSpec, generate_trace

SPEC = TraceSpec(group="S5", action_set="swaps", actions=24, spacing=4)


def pipeline_rate(kind: str, seconds: float, batch_size: int) -> dict:
    tokenizer = make_tokenizer(kind, SPEC)
    dataset = TraceDataset(SPEC, tokenizer, size=10**9, seed=0)
    collate([dataset[i] for i in range(batch_size)])  # warm the tokenizer's line cache
    tokens = traces = batches = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        first = (batches + 1) * batch_size  # fresh traces every batch
        batch = collate([dataset[first + i] for i in range(batch_size)])
        tokens += int(batch["lengths"].sum())
        traces += batch_size
        batches += 1
    elapsed = time.perf_counter() - start
    return {
        "tokens_per_s": round(tokens / elapsed),
        "traces_per_s": round(traces / elapsed),
        "tokens_per_trace": round(tokens / traces, 1),
        "vocab_size": tokenizer.vocab_size,
        "batches": batches,
    }


def generate_rate(seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        generate_trace(SPEC, count)
        count += 1
    return round(count / (time.perf_counter() - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement (default 3)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {kind: pipeline_rate(kind, args.seconds, args.batch_size) for kind in TRACE_SPEC_KINDS}
    print(
        json.dumps(
            {
                "benchmark": "data_throughput",
                "what": "tokens per second through generate_trace + encode_trace + tensors + collate, one core",
                "task": SPEC.to_dict(),
                "batch_size": args.batch_size,
                "torch_threads": torch.get_num_threads(),
                "results": results,
                "generate_only_traces_per_s": generate_rate(args.seconds / 2),
                "python": platform.python_version(),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
