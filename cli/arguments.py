"""Argument types shared by every command: each number is checked here, once, for being a number,
finite and in range; argparse puts the option's name in front of the message."""

from __future__ import annotations

import argparse
import math

MAX_DIGITS = 18  # a whole number longer than this is a typo (and past int64)


def _number(text: str, kind: type, lo: float | None, hi: float | None, what: str):
    raw = text.strip()
    if kind is int and (len(raw.lstrip("+-")) > MAX_DIGITS or not raw.lstrip("+-").isascii()):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text[:40]!r}")
    try:
        value = kind(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text[:40]!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text[:40]!r}")
    return value


def whole(lo: int | None = None, hi: int | None = None):
    """A whole number in [lo, hi] (either bound optional)."""
    bounds = f" >= {lo}" if hi is None else f" from {lo} to {hi}"
    what = "a whole number" + ("" if lo is None else bounds)
    convert = lambda text: _number(text, int, lo, hi, what)  # noqa: E731
    convert.__name__ = "whole number"
    return convert


def real(lo: float | None = None, hi: float | None = None):
    """A finite number in [lo, hi] (either bound optional)."""
    what = "a finite number" + ("" if lo is None else f" from {lo:g} to {hi:g}" if hi is not None else f" >= {lo:g}")
    convert = lambda text: _number(text, float, lo, hi, what)  # noqa: E731
    convert.__name__ = "number"
    return convert


SEED = whole(0, 2**62)  # seeds are non-negative: the data split is keyed by them
COUNT = whole(1, 1_000_000)  # traces, steps, lengths
ACTIONS = whole(1, 100_000)  # actions per trace
PROBABILITY = real(0.0, 1.0)


def add_dtype(parser) -> None:
    """`--dtype auto|fp32|bf16`: the weights' dtype for this command (the recurrence and its state stay fp32)."""
    parser.add_argument(
        "--dtype",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="bf16: matmuls in bf16, the recurrence and its state in fp32; auto (default): as saved for small "
        "models, for big ones bf16 where this CPU's bf16 matmuls beat fp32 (measured once), else fp32",
    )


def add_reveal_schedule(parser, default_spacing: int) -> None:
    """--spacing K | --reveal-prob P | --no-reveals: when a trace prints (trace and ptrace)."""
    schedule = parser.add_mutually_exclusive_group()
    schedule.add_argument(
        "--spacing", type=ACTIONS, default=None, help=f"reveal after every k-th action (default {default_spacing})"
    )
    schedule.add_argument(
        "--reveal-prob", type=PROBABILITY, default=None, help="reveal after each action with probability p"
    )
    schedule.add_argument("--no-reveals", action="store_true", help="never reveal")


def check_head_range(args) -> None:
    """--layer / --head against the folder's config.json, read before any model is loaded (a load takes
    seconds to tens of seconds; a typo should not wait for it)."""
    folder = getattr(args, "folder", None)
    config = getattr(folder, "build_config", None)
    if not isinstance(config, dict):
        return
    from deltalens.core.errors import DeltalensError

    layers = next((config[k] for k in ("num_hidden_layers", "n_layers") if isinstance(config.get(k), int)), None)
    heads = [config[k] for k in ("num_heads", "num_v_heads", "n_heads") if isinstance(config.get(k), int)]
    layer, head = getattr(args, "layer", None), getattr(args, "head", None)
    if isinstance(layer, int) and layers is not None and not 0 <= layer < layers:
        raise DeltalensError(f"layer {layer} is out of range: {args.checkpoint} has layers 0..{layers - 1}")
    if isinstance(head, int) and heads and not 0 <= head < max(heads):
        raise DeltalensError(f"head {head} is out of range: {args.checkpoint} has heads 0..{max(heads) - 1} per layer")
