"""What every room needs, below tasks: errors for people, progress bars and display, atomic file writes.

    DeltalensError     core.errors    the one exception a person is meant to read
    set_progress, ...  core.display   progress bars (tqdm) on every long job, switchable
    write_atomic, ...  core.atomic    temp file + rename, fsync, whole-folder swaps

This room imports nothing else of deltalens.
"""
