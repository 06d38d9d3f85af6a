"""What a recurrent layer hands from one chunk of a sequence to the next, so that a long sequence runs
in pieces with the unchunked result: the state S_T after the chunk's last token and the last W - 1
inputs of each short convolution (its receptive field reaches back W - 1 tokens).

A mixer with `carry` set (not None) reads both at the start of its forward and writes them at the
end; models/lm/chunked.py drives it. The short convolution sees [past inputs, chunk] and only the
chunk's outputs are kept, which are exactly the unchunked ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from deltalens.core.errors import DeltalensError

__all__ = ["Carry", "conv_with_carry", "keep_final", "keep_last", "replay_kept", "silu_qkv", "start_state"]


@dataclass
class Carry:
    state: Any = None  # S (B, H, d_k, d_v) after the last token seen, fp32 (an LSTM layer: its (h, c))
    conv: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> last W - 1 conv inputs (B, <=W-1, D)
    tokens: int = 0  # tokens seen so far: where the next chunk starts on the renormalisation grid


def conv_with_carry(conv: nn.Module, x: torch.Tensor, carry: Optional[Carry], name: str) -> torch.Tensor:
    """conv(x) (B, T, D) continuing from the inputs `carry` kept for `name`, which it then updates."""
    if carry is None:
        return conv(x)
    past = carry.conv.get(name)
    full = x if past is None else torch.cat([past, x], dim=1)
    reach = conv.kernel_size[0] - 1
    carry.conv[name] = full[:, full.shape[1] - min(reach, full.shape[1]) :].detach()
    return conv(full)[:, full.shape[1] - x.shape[1] :]


def conv_qkv(mixer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A mixer's q, k, v projections through its short convolutions (`q_conv1d`, ...), carried on from a chunk
    before where the mixer has a carry: the step every delta-rule mixer with `use_short_conv` shares."""
    return tuple(
        conv_with_carry(getattr(mixer, f"{n}_conv1d"), getattr(mixer, f"{n}_proj")(x), mixer.carry, n) for n in "qkv"
    )


def silu_qkv(mixer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v before the head split as fla's gated layers make them: through the short convolutions (conv +
    SiLU, carried) where the mixer has `use_short_conv`, else SiLU of the projections."""
    if mixer.use_short_conv:
        return conv_qkv(mixer, x)
    return F.silu(mixer.q_proj(x)), F.silu(mixer.k_proj(x)), F.silu(mixer.v_proj(x))


def start_state(carry: Optional[Carry], state_edit, renorm_every: int = 0) -> Optional[torch.Tensor]:
    """The state this chunk continues from (None: zeros, the sequence start)."""
    if carry is None:
        return None
    if state_edit is not None:
        raise DeltalensError(
            "a state_edit counts tokens from the sequence start: run the sequence whole, not in chunks"
        )
    if renorm_every and carry.tokens % renorm_every:
        raise DeltalensError(
            f"a chunk must start on the renormalisation grid (a multiple of state_norm_every = {renorm_every} "
            f"tokens), not after {carry.tokens}"
        )
    return carry.state


def keep_final(carry: Optional[Carry], o: torch.Tensor, final: Optional[torch.Tensor]) -> torch.Tensor:
    """A fast kernel's read-out, its final state kept for the next chunk."""
    if carry is not None and final is not None:
        carry.state = final.detach()
    return o


def keep_last(carry: Optional[Carry], states: torch.Tensor) -> torch.Tensor:
    """Per-token states (B, T, H, d_k, d_v), the last one kept for the next chunk."""
    if carry is not None and states.shape[1]:
        carry.state = states[:, -1].detach().float()
    return states


def replay_kept(carry: Optional[Carry], o: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A replay's read-out and the trajectory it followed, whose final state is kept for the next chunk."""
    keep_last(carry, states)
    return o, states
