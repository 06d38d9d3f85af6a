"""The built-in families, one module each, each registering its record once (models/registry.py).

Importing this package registers them in the order below, the order tables and messages list them
in. A new built-in family is a module here (its Family record and register call) and its name below;
its config, layers and language model live in their tiers (io/, layers/, lm/).
"""

import importlib

BUILTIN = (
    "deltanet",
    "gated_deltanet",
    "deltaproduct",
    "transformer",
    "lstm",
    "qwen3_5",
    "qwen3_5_moe",
    "olmo_hybrid",
    "qwen3_next",
    "kimi_linear",
    "glm5_next",
    "m2rnn",
    "deltanet_m2rnn",
    "kda",
    "value_gated_deltanet",
    "comba",
    "rwkv7",
)
for _name in BUILTIN:
    importlib.import_module(f"{__name__}.{_name}")
