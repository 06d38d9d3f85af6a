"""Layers: the token mixers of the delta-rule family (fla's parameter names, our forward and hooks),
their norms and short convolution, and the Transformer's attention forward.
"""
