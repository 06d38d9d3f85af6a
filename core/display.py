"""How deltalens objects show themselves: progress bars, and one-screen summaries in a notebook.

It lives in `tasks`, the lowest room, because every room has long jobs and report objects.

    progress(iterable, desc="sweep")   a tqdm bar on stderr (terminal or pipe), a widget in
                                       Jupyter when ipywidgets is there; off with
                                       set_progress(False) or DELTALENS_PROGRESS=0
    class EigenvalueReport(Summary)    repr() / _repr_html_ from `display_frame()` (a DataFrame), with
                                       `highlight()` (layer, head) marked: the tracking head
"""

from __future__ import annotations

import html
import os
import sys
from collections.abc import Iterable
from typing import Any

_enabled: bool | None = None  # None: on unless DELTALENS_PROGRESS=0


def set_progress(enabled: bool | None) -> None:
    """Turn every deltalens progress bar on or off (None: back to the DELTALENS_PROGRESS default).

    >>> dl.set_progress(False)                             # every progress bar off ...
    >>> dl.set_progress(None)                              # ... and back to the DELTALENS_PROGRESS default
    """
    global _enabled
    _enabled = enabled


def progress_enabled() -> bool:
    if _enabled is not None:
        return _enabled
    return os.environ.get("DELTALENS_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


def _in_notebook_with_widgets() -> bool:
    """A Jupyter kernel with ipywidgets: there tqdm's widget bar works (without them tqdm.auto
    warns "IProgress not found" and falls back, so we pick the text bar ourselves)."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is None or "IPKernelApp" not in getattr(shell, "config", {}):
        return False
    try:
        import ipywidgets  # noqa: F401  (only to know whether the widget bar can draw)
    except ImportError:
        return False
    return True


def progress(iterable: Iterable | None = None, enabled: bool = True, **kwargs: Any):
    """A tqdm bar over `iterable` (or with `total=`), shown when `enabled` and progress is on."""
    if _in_notebook_with_widgets():
        from tqdm.notebook import tqdm  # imports ipywidgets: only where a notebook will draw it
    else:
        from tqdm.std import tqdm
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, disable=not (enabled and progress_enabled()), file=kwargs.pop("file", sys.stderr), **kwargs)


class Summary:
    """Mixin for report objects: `display_frame()` is the one-screen table; repr and HTML use it.

    Dataclasses that use it say `@dataclass(repr=False)` so that this repr is the one shown.
    """

    max_rows = 24

    def display_frame(self):
        raise NotImplementedError

    def title(self) -> str:
        return type(self).__name__

    def highlight(self) -> tuple[int, int] | None:
        """(layer, head) to point out in the table, e.g. the tracking head."""
        return None

    def __repr__(self) -> str:
        frame = self.display_frame()
        mark = self.highlight()
        note = "" if mark is None else f"  (tracking head: layer {mark[0]}, head {mark[1]})"
        table = "(empty)"
        if len(frame):
            table = frame.to_string(max_rows=self.max_rows, index=False, float_format=lambda x: f"{x:.3f}")
        return f"{self.title()}{note}\n{table}"

    def _repr_html_(self) -> str:
        frame = self.display_frame()
        mark = self.highlight()
        head = f"<b>{html.escape(self.title())}</b>"
        if mark is not None:
            head += f" &nbsp;tracking head: layer {mark[0]}, head {mark[1]} (highlighted)"
        if not len(frame):
            return head + "<br><i>(empty)</i>"
        shown = frame.head(self.max_rows)
        styler = shown.style.format(precision=3).hide(axis="index")
        if mark is not None and {"layer", "head"} <= set(shown.columns):

            def paint(row):
                hit = int(row["layer"]) == mark[0] and int(row["head"]) == mark[1]
                return ["background-color: #fff3b0; font-weight: bold" if hit else "" for _ in row]

            styler = styler.apply(paint, axis=1)
        more = f"<br><i>{len(frame) - self.max_rows} more rows</i>" if len(frame) > self.max_rows else ""
        return head + styler.to_html() + more
