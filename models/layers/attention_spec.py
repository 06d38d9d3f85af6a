"""fla's `attn` config field (hybrid models), read without fla: which layers are softmax attention and how.

fla's configs of the delta-rule family take `attn`: None (every layer a delta-rule mixer), one dict,
or a list of dicts, each

    {"layers": [1, 5], "num_heads": 16, "num_kv_heads": 16, "qkv_bias": False,
     "window_size": None, "rope_theta": 10000.0}

and build fla's `fla.layers.attn.Attention` on the listed layers (fla.models.modeling_utils.get_attention).
`parse_attention` fills fla's defaults (num_kv_heads = num_heads, qkv_bias False, window_size None,
rope_theta 10000.0) in fla's order, keeps the dict-or-list form, so the config.json we write equals
fla's; `attention_spec_for(attn, layer)` is that layer's spec or None. Bad values are refused in one
sentence naming the field; so is any key we do not implement (fla keeps unknown keys and ignores
them, so a key we do not know may mean something to the code that wrote it).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from deltalens.core.errors import DeltalensError

__all__ = ["ATTENTION_KEYS", "attention_layers", "attention_spec_for", "parse_attention"]

# the keys fla's get_attention reads, with fla's defaults (None: required)
ATTENTION_KEYS: dict[str, Any] = {
    "layers": None,
    "num_heads": None,
    "num_kv_heads": None,  # None -> num_heads
    "qkv_bias": False,
    "window_size": None,
    "rope_theta": 10000.0,
}


def parse_attention(attn: Any, num_hidden_layers: int) -> Any:
    """`attn` checked and completed with fla's defaults (a new dict or list; the input is not changed)."""
    if attn is None:
        return None
    if not isinstance(attn, (dict, list)):
        raise DeltalensError(f"config field attn must be None, a JSON object or a list of them, got {attn!r}")
    specs = [attn] if isinstance(attn, dict) else attn
    assigned: dict[int, int] = {}
    parsed = []
    for index, spec in enumerate(specs):
        where = "attn" if isinstance(attn, dict) else f"attn[{index}]"
        if not isinstance(spec, dict):
            raise DeltalensError(f"{where} must be a JSON object with 'layers' and 'num_heads', got {spec!r}")
        unknown = [key for key in spec if key not in ATTENTION_KEYS]
        if unknown:
            raise DeltalensError(
                f"{where} option {unknown[0]!r} is not implemented by deltalens (it implements "
                f"{', '.join(ATTENTION_KEYS)}); remove it from the config."
            )
        for required in ("layers", "num_heads"):
            if required not in spec:
                raise DeltalensError(f"{where} needs the field {required!r} (fla requires it too)")
        out = dict(spec)
        layers = out["layers"]
        if not isinstance(layers, (list, tuple)) or not all(_is_int(i) for i in layers):
            raise DeltalensError(f"{where}.layers must be a list of layer indices, got {layers!r}")
        for layer in layers:
            if not 0 <= layer < num_hidden_layers:
                raise DeltalensError(
                    f"{where}.layers has layer {layer}, outside [0, {num_hidden_layers}) of this model"
                )
            if layer in assigned:
                raise DeltalensError(f"{where}.layers names layer {layer} twice (also in attn entry {assigned[layer]})")
            assigned[layer] = index
        out["layers"] = list(layers)
        if out.get("num_kv_heads") is None:
            out["num_kv_heads"] = out["num_heads"]
        for name in ("num_heads", "num_kv_heads"):
            if not _is_int(out[name]) or out[name] <= 0:
                raise DeltalensError(f"{where}.{name} must be a whole number >= 1, got {out[name]!r}")
        if out["num_heads"] % out["num_kv_heads"]:
            raise DeltalensError(
                f"{where}.num_heads ({out['num_heads']}) must be a multiple of num_kv_heads ({out['num_kv_heads']})"
            )
        out.setdefault("qkv_bias", False)
        if not isinstance(out["qkv_bias"], bool):
            raise DeltalensError(f"{where}.qkv_bias must be true or false, got {out['qkv_bias']!r}")
        out.setdefault("window_size", None)
        window = out["window_size"]
        if window is not None and (not _is_int(window) or window <= 0):
            raise DeltalensError(f"{where}.window_size must be None or a whole number >= 1, got {window!r}")
        out.setdefault("rope_theta", 10000.0)
        theta = out["rope_theta"]
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
            raise DeltalensError(f"{where}.rope_theta must be a positive finite number, got {theta!r}")
        parsed.append(out)
    return parsed[0] if isinstance(attn, dict) else parsed


def attention_spec_for(attn: Any, layer_idx: int) -> Optional[dict[str, Any]]:
    """The (parsed) spec of the attention layer at `layer_idx`, or None for a delta-rule layer."""
    if attn is None:
        return None
    for spec in [attn] if isinstance(attn, dict) else attn:
        if layer_idx in spec["layers"]:
            return spec
    return None


def attention_layers(attn: Any) -> list[int]:
    """Every softmax-attention layer index of a (parsed) `attn`, sorted."""
    if attn is None:
        return []
    return sorted(i for spec in ([attn] if isinstance(attn, dict) else attn) for i in spec["layers"])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
