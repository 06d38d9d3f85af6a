"""Training and held-out evaluation.

config.py          the TOML training config ([task], [model], [optim], [run]) and overrides
data.py            the training stream: batch s is a pure function of (seed, s)
loop.py            the training loop: AdamW, warmup + cosine, atomic resumable checkpoints
history.py         a run's training history from its saved files (no torch: the dashboard's curves)
evaluate.py        held-out reveal accuracy, by length and by position
belief_kl.py       KL of a model's predictive to the exact belief (probabilistic traces)

Grids of many trainings (the cells, their lanes, Slurm) are grids/'s; a saved model opened, evaluated
or exported (dl.load, evaluate_checkpoint, export_run) is loading/'s.
"""
