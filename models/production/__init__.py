"""Production delta-rule LMs from transformers, opened with our hooks: Qwen3.5 (`qwen3_5_text`, and the
text tower of `qwen3_5`), Qwen3-Next (`qwen3_next`), OLMo-Hybrid (`olmo_hybrid`, beta in [0, 2]) and Kimi
Linear (`kimi_linear`, Kimi Delta Attention: a decay per key channel).

One module per family (qwen3_5.py, olmo_hybrid.py, ...) holds its hooked delta-rule layer, its model class
and its `FAMILY` record (family.py); models/families/<family>.py registers it with the registry, so
models.load, dl.load (folders and Hub ids) and the CLI open it as any other family. What they share:
hooked_gdn.py (the Gated DeltaNet layer with our recurrence), hooked_kda.py (the same for KDA),
attention.py (attention hooks) and lm.py (the hooked model around transformers' own).
"""
