"""The published configurations of the production families (tests/fixtures/published/*.json, each with a
"_source" saying where its numbers come from) read as dl.load reads a config.json and built on the meta device
(nothing allocated): our hooked model's parameters against transformers' own class's (fla's, for an fla-format
release: RWKV-7), the bound the load path checks before any weight is fetched, and the bytes in fp32 and bf16
against the memory this machine has.

    python3 scripts/published_shapes.py        # the published-shapes table of docs/guide/production-models.md

    measure(name, folder) -> Shape             # folder: an empty scratch folder for the config.json
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "published"
NOMINAL = {  # fixture -> (the Hub id, the parameter count its name states)
    "qwen3_5_0_8b": ("Qwen/Qwen3.5-0.8B", 0.8e9),
    "qwen3_5_27b": ("Qwen/Qwen3.5-27B", 27e9),
    "qwen3_5_35b_a3b": ("Qwen/Qwen3.5-35B-A3B", 35e9),
    "qwen3_6_35b_a3b": ("Qwen/Qwen3.6-35B-A3B", 35e9),
    "qwen3_next_80b_a3b_instruct": ("Qwen/Qwen3-Next-80B-A3B-Instruct", 80e9),
    "olmo_hybrid_7b": ("allenai/Olmo-Hybrid-7B", 7e9),
    "kimi_linear_48b_a3b_instruct": ("moonshotai/Kimi-Linear-48B-A3B-Instruct", 48e9),
    "rwkv7_1_5b_world": ("fla-hub/rwkv7-1.5B-world", 1.5e9),
    "glm_5_3_flash": ("zai-org/GLM-5.3-Flash", 320e9),
}


@dataclass(frozen=True)
class Shape:
    name: str
    hub_id: str
    arch: str
    ours: int  # parameters of our hooked model (tied weights once)
    theirs: int  # of transformers' own causal LM class (models/production/family.py: footprint)
    config_bound: int  # the load path's count from config.json alone, checked before any weight is fetched
    budget: int | None  # bytes this machine has available (models/io/footprint.py: memory_budget)
    refused: str | None  # the load path's sentence where it refuses the config.json here (too big in bf16)

    def estimate(self):
        """The exact count as the load path's estimate (what it prints before a big load)."""
        from deltalens.models.io.footprint import WeightsEstimate

        return WeightsEstimate(self.theirs, 0, "meta device")

    def gigabytes(self, dtype: str) -> float:
        return self.estimate().bytes(dtype) / 2**30

    def fits(self) -> str:
        """Which precisions the weights fit in here ('fp32 and bf16', 'bf16 only', 'no')."""
        fit = [d for d in ("fp32", "bf16") if self.budget is None or self.gigabytes(d) * 2**30 <= self.budget]
        return {2: "fp32 and bf16", 1: "bf16 only", 0: "no"}[len(fit)]


def published(name: str) -> dict:
    """The fixture's config.json fields (its "_source" left out)."""
    raw = json.loads((FIXTURES / f"{name}.json").read_text())
    return {key: value for key, value in raw.items() if key != "_source"}


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def measure(name: str, folder: Path) -> Shape:
    """The fixture written to `folder`/config.json, read by the load path, built on the meta device twice."""
    from deltalens.core.errors import DeltalensError
    from deltalens.models.io.footprint import memory_budget
    from deltalens.models.io.model_folder import read_model_folder
    from deltalens.models.production.family import footprint
    from deltalens.models.registry import family

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(published(name)))
    try:
        read_model_folder(folder)  # fields and the memory bound checked, as dl.load does first
        refused = None
    except DeltalensError as err:  # too big for this machine in any precision: said before any weight is read
        refused = str(err)
    with _no_memory_limit():
        read = read_model_folder(folder)  # the same reading, to build on the meta device whatever its size
    record = family(read.arch)
    config = record.make_config(read.build_config)
    with torch.device("meta"):
        ours = record.resolve_model()(config)
    theirs = _fla_count(config) if record.settings is not None else footprint(ours.family, config).parameters
    return Shape(name, NOMINAL[name][0], read.arch, _count(ours), theirs, read.estimate.values,
                 memory_budget()[0], refused)  # fmt: skip


def _fla_count(config) -> int:
    """The parameters of fla's own causal LM class for an fla-format family's config, built on the meta device."""
    from unittest import mock

    import transformers.modeling_utils

    from deltalens.models.io.configs import fla_class, to_fla_config

    # with this flag False fla's RWKV-7 layers skip their initialisation (a Python loop per channel: 40 s)
    with torch.device("meta"), mock.patch.object(transformers.modeling_utils, "_init_weights", False, create=True):
        return _count(fla_class(config.fla_model)(to_fla_config(config)))


@contextlib.contextmanager
def _no_memory_limit():
    """The load path's memory check lifted ($DELTALENS_MAX_MODEL_GB at 1 PB) while the block runs."""
    from deltalens.models.io.footprint import MEMORY_LIMIT_ENV

    saved = os.environ.get(MEMORY_LIMIT_ENV)
    os.environ[MEMORY_LIMIT_ENV] = str(2**20)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(MEMORY_LIMIT_ENV)
        else:
            os.environ[MEMORY_LIMIT_ENV] = saved


def table(shapes: list[Shape]) -> str:
    budget = shapes[0].budget
    lines = [
        f"Weights only; this machine had {budget / 2**30:.1f} GB available when measured." if budget else "",
        "",
        "| model | parameters (ours = transformers') | fp32 GB | bf16 GB | fits here? | config.json bound "
        "| dl.load here |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in shapes:
        load = "refused before any weight is read" if s.refused else "checked, loads"
        lines.append(
            f"| {s.hub_id} | {s.theirs:,} | {s.gigabytes('fp32'):.1f} | {s.gigabytes('bf16'):.1f} | {s.fits()} "
            f"| {s.config_bound:,} | {load} |"
        )
    return "\n".join(lines)


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        shapes = [measure(name, Path(scratch) / name) for name in NOMINAL]
    for s in shapes:
        if s.ours != s.theirs:
            print(f"{s.name}: ours {s.ours:,} != transformers' {s.theirs:,}", file=sys.stderr)
    print(table(shapes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
