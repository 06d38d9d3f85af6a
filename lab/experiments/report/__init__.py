"""The report of `deltalens reproduce` (reproduce.py), one module per section of it."""
