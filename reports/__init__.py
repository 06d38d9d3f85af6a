"""The reproduce report: the experiment grid's results judged against the paper's claims, tables and figures.

This room is code only; what it writes (reproduce.md, figures/) and the run results it reads (sweep/,
search/, pfsa/, family/) live in the repository's top-level results/ folder, which is not installed.
"""
