"""RWKV's token shift: each position reads the previous token's input beside its own (x_{t-1}, zeros before
the first token), carried across the chunks of a long sequence as the short convolution's inputs are
(models/layers/carry.py: the last input is kept under a name in `carry.conv`).

    previous = shifted(x, carry, "attn")       # (B, T, D): x_{t-1}
    mixed = x + (previous - x) * mu            # fla's addcmul(x, delta, mu): a learned per-channel blend
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from deltalens.models.layers.carry import Carry

__all__ = ["shifted"]


def shifted(x: torch.Tensor, carry: Optional[Carry], name: str) -> torch.Tensor:
    """x (B, T, D) moved one token later: position t holds x_{t-1}; position 0 the last input `carry` kept
    under `name` (zeros at a sequence's start), which it then replaces with this chunk's last input."""
    past = None if carry is None else carry.conv.get(name)
    if past is None:
        out = F.pad(x, (0, 0, 1, -1))  # zeros first, the last token dropped
    else:
        out = torch.cat([past.to(x.dtype), x[:, :-1]], dim=1)[:, : x.shape[1]]
    if carry is not None and x.shape[1]:
        carry.conv[name] = x[:, -1:].detach()
    return out
