"""Running many trainings: the experiment grid and where its cells run.

grid.py            the paper's experiment grid: grid file, cells, resumable runs, result files
grid_file.py       a grid file's TOML read and checked; cells.py its cells and their configs
grid_results.py    the result files a finished cell leaves (the durable record)
lanes.py           cells in parallel worker processes that never outlive the grid's run
slurm_executor.py  the grid's cells as Slurm jobs (submitit): submit, wait, --status, --cancel;
                   slurm_job.py what a job runs, slurm_ledger.py which cell went to which job

One training is training/'s (training.loop.train); this room only decides which run where. A grid is many
training runs; a *sweep* is the other word, one intervention on every head in turn (interp/head_sweep.py).
"""
