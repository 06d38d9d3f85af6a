"""Shared test set-up."""

import torch

# Two shared cores: one intra-op thread avoids OpenMP oversubscription, which makes small LSTM and
# delta-rule ops up to 100x slower when another process holds the other core.
torch.set_num_threads(1)
