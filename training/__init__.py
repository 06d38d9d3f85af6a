"""Training and held-out evaluation.

config.py          the TOML training config ([task], [model], [optim], [run]) and overrides
data.py            the training stream: batch s is a pure function of (seed, s)
loop.py            the training loop: AdamW, warmup + cosine, atomic resumable checkpoints
evaluate.py        held-out reveal accuracy, by length and by position
belief_kl.py       KL of a model's predictive to the exact belief (probabilistic traces)
opened.py          open a checkpoint with its tokenizer and task (used by every room above)
export.py          a finished run as a shipped checkpoint with its model card
grid.py            the paper's experiment grid: sweep file, cells, resumable runs, result files
slurm_executor.py  the grid's cells as Slurm jobs (submitit): submit, wait, --status, --cancel;
                   slurm_job.py what a job runs, slurm_ledger.py which cell went to which job
"""
