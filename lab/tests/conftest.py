"""The lab's tests: one intra-op thread, as the library's tests (tests/conftest.py), for the same reason."""

import torch

torch.set_num_threads(1)
