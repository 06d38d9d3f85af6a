"""OwnConfigLM: a HookedDeltaLM whose config is a deltalens dataclass rather than an fla config, for the
families fla does not have (M²RNN, the DeltaNet / M²RNN hybrid, the value-gated DeltaNet): their checkpoints
hold the config in config.json's "deltalens" section, and the fla interchange says in one sentence that there
is none."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional

import torch.nn as nn

from deltalens.core.errors import DeltalensError
from deltalens.models.lm.delta_lm import HookedDeltaLM

__all__ = ["OwnConfigLM"]


class OwnConfigLM(HookedDeltaLM):
    """HookedDeltaLM with a deltalens config dataclass instead of an fla config: no fla interchange."""

    @property
    def model_config(self) -> dict[str, Any]:
        """JSON-able config: `models.build(model.arch, **model.model_config)` rebuilds this model."""
        return asdict(self.config)

    @classmethod
    def from_fla(cls, fla_model: nn.Module):
        raise DeltalensError(f"fla has no {cls.__name__[6:]}; build one with models.build and load with models.load")

    def to_fla(self) -> nn.Module:
        raise DeltalensError(f"fla has no {type(self).__name__[6:]}; save it with models.save instead")

    def save_pretrained(self, save_directory, extra_config: Optional[dict] = None) -> None:
        raise DeltalensError(f"{type(self).__name__} has no fla format; save it with models.save instead")

    @classmethod
    def from_pretrained(cls, directory, device=None, dtype=None):
        raise DeltalensError(f"{cls.__name__} has no fla format; open its checkpoint with models.load instead")
