"""Judging results against claims and drawing them: the claim table and its verdict rules (claims.py),
plotly figures (figures.py; those of saved checkpoints, torch-free, in checkpoint_figures.py), number
formats (numbers.py). The lab's report that uses them, one module per experiment, is lab/experiments/report/
in a clone (not installed); what it writes and reads lives in the repository's lab/results/ folder.
"""
