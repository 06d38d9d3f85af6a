"""Every delta-rule architecture runs under torch.inference_mode (inference tensors have no version
counter, so no layer may read one on its plain path) with the logits it gives under no_grad."""

import pytest
import torch

from deltalens import models

CONFIGS = {
    "deltanet": dict(hidden_size=32, num_heads=2),
    "gated_deltanet": dict(hidden_size=32, num_heads=2, head_dim=8),
    "deltaproduct": dict(hidden_size=32, num_heads=2, head_dim=8, use_forget_gate=True),
}


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_forward_under_inference_mode(arch):
    model = models.build(arch, vocab_size=23, num_hidden_layers=2, **CONFIGS[arch]).eval()
    tokens = torch.randint(0, 23, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(tokens)
    with torch.inference_mode():
        got = model(tokens)
    assert torch.equal(got, expected)
