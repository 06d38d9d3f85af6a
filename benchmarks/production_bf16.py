"""Logits of our hooked production models against transformers' own, both loaded from one offline stand-in
(tests/production_standin.py), in bf16 and, for reference, fp32: the bf16 table of docs/guide/production-models.md.

    python3 benchmarks/production_bf16.py

    parity(kind, hf_home) -> Parity      # kind: one of KINDS

Ours is opened as a user opens it, `dl.load(hub id, dtype=...)`; transformers' is `from_pretrained` on the
same snapshot with the same dtype (eager attention). Errors are over all logits of two 55-token sequences:
max |ours - theirs| and ||ours - theirs|| / ||theirs|| (Frobenius, in fp32). `theirs_bf16_vs_fp32` is
transformers' own bf16 model against its fp32 one: the rounding bf16 costs before any of our code runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the offline stand-in
from production_standin import put_standin  # noqa: E402

KINDS = ("qwen3_5_text", "qwen3_5_moe_text", "olmo_hybrid", "qwen3_next", "kimi_linear", "glm5_next")
TEXT = ">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n>>> print('a', a)\na 2\n>>> c = 3\n"


@dataclass(frozen=True)
class Parity:
    kind: str
    fp32_max: float
    fp32_rel: float
    bf16_max: float
    bf16_rel: float
    theirs_bf16_vs_fp32_max: float
    theirs_bf16_vs_fp32_rel: float
    logit_scale: float  # max |logit| of transformers' fp32 model: what the absolute errors are out of
    fp32_kept: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (ours, theirs): fp32 tensors in bf16 models


@contextlib.contextmanager
def offline(hf_home: Path):
    """HF_HOME at the stand-ins' cache, the Hub unreachable (as in the tests)."""
    saved = {key: os.environ.get(key) for key in ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE")}
    os.environ.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    os.environ.pop("HF_HUB_CACHE", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _errors(ours: torch.Tensor, theirs: torch.Tensor) -> tuple[float, float]:
    diff = ours.float() - theirs.float()
    return diff.abs().max().item(), (diff.norm() / theirs.float().norm()).item()


def parity(kind: str, hf_home: Path) -> Parity:
    """Our model and transformers', each in fp32 and bf16, on the stand-in of `kind` put in `hf_home`."""
    import deltalens as dl
    from deltalens.models.production import production_family, standin_kinds

    library = production_family(standin_kinds()[kind]).lm_class  # transformers' class (GLM-5 Next: multimodal)

    repo, snapshot = put_standin(kind, hf_home / "hub")
    with offline(hf_home):
        ours = {name: dl.load(repo, dtype=name) for name in ("fp32", "bf16")}
    theirs = {
        name: library.from_pretrained(snapshot, attn_implementation="eager", dtype=dtype).eval()
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    tokens = ours["fp32"].to_tokens([TEXT, TEXT[::-1]])
    with torch.no_grad():
        mine = {name: model(tokens) for name, model in ours.items()}
        ref = {name: model(tokens).logits for name, model in theirs.items()}
    return Parity(
        kind,
        *_errors(mine["fp32"], ref["fp32"]),
        *_errors(mine["bf16"], ref["bf16"]),
        *_errors(ref["bf16"], ref["fp32"]),
        ref["fp32"].abs().max().item(),
        (_fp32_names(ours["bf16"]), _fp32_names(theirs["bf16"])),
    )


def _fp32_names(model) -> tuple[str, ...]:
    """The parameters a bf16 model keeps in fp32, named from the decoder layers down (ours wraps
    transformers' model, so the prefixes differ)."""
    return tuple(
        sorted(name[name.index("layers.") :] for name, p in model.named_parameters() if p.dtype == torch.float32)
    )


def main() -> int:
    print("| model type | fp32 max abs | fp32 rel | bf16 max abs | bf16 rel | transformers bf16 vs fp32 (max abs, rel) "
          "| max abs logit |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as home:
        for kind in KINDS:
            p = parity(kind, Path(home))
            own = f"{p.theirs_bf16_vs_fp32_max:.1e}, {p.theirs_bf16_vs_fp32_rel:.1e}"
            print(
                f"| {kind} | {p.fp32_max:.1e} | {p.fp32_rel:.1e} | {p.bf16_max:.1e} | {p.bf16_rel:.1e} | {own} "
                f"| {p.logit_scale:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
