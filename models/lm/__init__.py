"""The language models: the delta-rule family's LM (DeltaNet, Gated DeltaNet, DeltaProduct), the
Transformer baseline (TransformerLens's own) and the LSTM, all HookedRootModules with
TransformerLens names (hook_names.py) and its tokenizer helpers (lens.py).
"""
