"""bf16 parity of the production families: our hooked model (dl.load by Hub id, dtype="bf16") against
transformers' own loaded in bf16 from the same offline stand-in, with the fp32 pair for reference
(benchmarks/production_bf16.py prints the bf16 table of docs/guide/production-models.md from the same measurement).

The stated tolerances are the measured errors (docs/guide/production-models.md, bf16) with a margin of about 3x;
in bf16 our recurrence runs in fp32 and so does transformers' chunked one, so what differs is where each rounds
to bf16, which is why our error is compared with transformers' own bf16-vs-fp32 error too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the measurement the docs table prints
from production_bf16 import KINDS, parity  # noqa: E402

# kind -> (max abs, relative) allowed between our bf16 logits and transformers' bf16 logits
# measured (docs/guide/production-models.md):
BF16_TOLERANCE = {  # 1.2e-2, 1.0e-2 | 6.8e-3, 6.7e-3 | 1.7e-2, 8.9e-3 | 8.5e-2, 2.3e-2
    "qwen3_5_text": (4e-2, 3e-2),
    "qwen3_5_moe_text": (5e-2, 3e-2),  # measured 1.2e-2, 8.3e-3 (its own bf16 vs fp32: 2.6e-2, 1.1e-2)
    "olmo_hybrid": (2e-2, 2e-2),
    "qwen3_next": (5e-2, 3e-2),
    "kimi_linear": (0.25, 7e-2),  # KDA: a decay per key channel, more bf16 roundings between the two scans
    "glm5_next": (0.15, 8e-2),  # measured 5.2e-2, 2.5e-2 (its own bf16 vs fp32: 1.0e-1, 7.2e-2; logits within 0.64)
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    home = tmp_path_factory.mktemp("hf")
    return {kind: parity(kind, home) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_bf16_logits_match_transformers_bf16_within_the_stated_tolerance(measured, kind):
    p = measured[kind]
    max_abs, rel = BF16_TOLERANCE[kind]
    assert p.bf16_max <= max_abs and p.bf16_rel <= rel, p
    assert p.fp32_max < 1e-4  # the reference pair, as tests/models/test_production.py has it
    # both really ran in bf16 (an fp32 pair differs by 1e-6), and ours is no further from transformers' bf16
    # model than twice the distance of that model from its own fp32 self
    assert p.bf16_max > 100 * p.fp32_max and p.bf16_rel <= 2 * p.theirs_bf16_vs_fp32_rel, p


@pytest.mark.parametrize("kind", KINDS)
def test_bf16_keeps_in_fp32_what_transformers_keeps_in_fp32(measured, kind):
    """What transformers names in `_keep_in_fp32_modules_strict` stays fp32 in our bf16 model (Kimi Linear's
    router weight, its correction bias and dt_bias: a bf16 router can pick other experts); nothing else does.
    OLMo-Hybrid's A_log is fp32 in transformers' bf16 model only because its __init__ builds it in fp32 (not
    a declared rule); ours holds it in bf16 and, like theirs, takes exp in fp32 (docs/guide/production-models.md,
    bf16)."""
    ours, theirs = measured[kind].fp32_kept
    assert set(ours) <= set(theirs)
    if kind in ("kimi_linear", "glm5_next"):  # GLM-5 Next: its hyper-connections' base and scale too
        assert ours == theirs
        assert any(name.endswith("dt_bias") for name in ours) and any("gate.weight" in name for name in ours)
