"""The one exception type for mistakes a person can fix (bad group name, corrupt checkpoint, ...).

It lives in `tasks` because every other room imports `tasks`. The CLI prints its message as one
line on stderr and exits 2; a traceback is shown only with `--debug`.
"""


class DeltalensError(ValueError):
    """A problem with the user's input, stated as one sentence that names the problem and the fix."""
