"""Running many trainings: the experiment grid and where its cells run.

grid.py            the paper's experiment grid: sweep file, cells, resumable runs, result files
sweep_file.py      a sweep file's TOML read and checked; sweep_cells.py its cells and their configs
sweep_results.py   the result files a finished cell leaves (the durable record)
lanes.py           cells in parallel worker processes that never outlive the sweep
slurm_executor.py  the grid's cells as Slurm jobs (submitit): submit, wait, --status, --cancel;
                   slurm_job.py what a job runs, slurm_ledger.py which cell went to which job

One training is training/'s (training.loop.train); this room only decides which run where.
"""
