"""Training and held-out evaluation.

config.py          the TOML training config ([task], [model], [optim], [run]) and overrides
data.py            the training stream: batch s is a pure function of (seed, s)
loop.py            the training loop: AdamW, warmup + cosine, atomic resumable checkpoints
history.py         a run's training history from its saved files (no torch: the dashboard's curves)
evaluate.py        held-out reveal accuracy, by length and by position
belief_kl.py       KL of a model's predictive to the exact belief (probabilistic traces)

Sweeps of many trainings (the grid, its lanes, Slurm) are sweeps/'s; a saved model opened, evaluated
or exported (dl.load, evaluate_checkpoint, export_run) is loading/'s.
"""
