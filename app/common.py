"""What every page of the dashboard shares: the checkpoint folder and picker, cached models, controls
that belong to one checkpoint, and one sentence on the page for any error (the server never goes down).

Models are cached with st.cache_resource (one copy per checkpoint); measurements in memory and on
disk (app/disk_cache.py); the computations themselves are the library's. Nothing here imports torch,
transformer_lens or scikit-learn when imported (the Checkpoints page, the first, lists checkpoints from
their saved files before they load: tests/app/test_first_page_imports.py); opening a model imports them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from deltalens.app.folder import ENV_DIR, PAPER_MODEL, checkpoint_dir, checkpoint_sources  # noqa: F401
from deltalens.app.trace_view import state_text, trace_html  # noqa: F401
from deltalens.core.errors import DeltalensError
from deltalens.loading.listing import checkpoint_row, list_checkpoints
from deltalens.models.architecture import article_of, is_delta_rule

if TYPE_CHECKING:  # opened.py imports torch: loaded with the first model (opened())
    from deltalens.loading.opened import Checkpoint


def attempt(fn: Callable, *args: Any, **kwargs: Any):
    """fn(*args, **kwargs), or None after one st.error sentence (the page goes on)."""
    try:
        return fn(*args, **kwargs)
    except DeltalensError as err:
        st.error(str(err))
    except Exception as err:  # an unforeseen input: still one sentence, and the server lives on
        first = (str(err).strip().splitlines() or [""])[0]
        st.error(f"unexpected {type(err).__name__}: {first}")
    return None


def locked(checkpoint: Checkpoint, fn: Callable, *args: Any, **kwargs: Any):
    """`attempt(fn, ...)` holding the checkpoint's model lock (for anything that runs its model)."""
    with model_lock(str(checkpoint.path)):
        return attempt(fn, *args, **kwargs)


def build_kernels(checkpoint: Checkpoint) -> None:
    """The C kernels a delta-rule model's first forward would compile, built under a message that says so
    (once per machine; the server's preload thread usually has them ready)."""
    if not is_delta_rule(checkpoint.arch):
        return
    from deltalens.models.ops import native

    pending = native.unbuilt()
    if pending:
        with st.spinner(
            f"Compiling the C kernels for this CPU ({', '.join(pending)}: once per machine, a few seconds) ..."
        ):
            for name in pending:
                native.library(name)


@st.cache_resource(max_entries=32)
def model_lock(path: str) -> threading.Lock:
    """One lock per cached model: sessions share it (st.cache_resource) and run in their own
    threads, so every forward that attaches hooks holds this lock."""
    return threading.Lock()


@st.cache_data(show_spinner=False)
def checkpoint_table(sources: tuple[str, ...] | str) -> pd.DataFrame:
    """Every checkpoint the sources name, one row each (list_checkpoints' columns) with the folder it
    opens from in column "folder": a folder of checkpoints gives its checkpoints, a model folder itself,
    a Hub id (org/name) its snapshot in the Hugging Face cache, named by the id."""
    frames, skipped = [], {}
    for source in (sources,) if isinstance(sources, str) else sources:
        try:
            frame = _rows_of(source)
        except DeltalensError as err:
            skipped[source] = str(err)
            continue
        skipped.update(frame.attrs.get("skipped", {}))
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    where = ", ".join((sources,) if isinstance(sources, str) else sources)
    if table.empty and skipped:
        raise DeltalensError(next(iter(skipped.values())))
    if table.empty:
        raise DeltalensError(
            f"{where} holds no checkpoints (folders with config.json and model.safetensors); "
            "start the app with --checkpoints DIR (or a Hub id)."
        )
    table = table.drop_duplicates("name", keep="first", ignore_index=True)  # the first source wins a name
    table.attrs["skipped"] = skipped
    return table


def _rows_of(source: str) -> pd.DataFrame:
    from deltalens.models.io.hub import hub_model_folder, split_hub_id

    path = Path(source).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():  # a folder of checkpoints
        table = list_checkpoints(path, skip_unreadable=True)
        table["folder"] = [str(path / name) for name in table.get("name", [])]
        return table
    if path.is_dir():  # one model folder; a run's checkpoint is named by its run (RUN/last)
        name = f"{path.parent.name}/{path.name}" if path.name == "last" else path.name
        return pd.DataFrame([{**checkpoint_row(path, name=name), "folder": str(path)}])
    hub_id = split_hub_id(source)
    if hub_id is not None and not path.is_absolute():
        folder = hub_model_folder(*hub_id).path  # the snapshot in the HF cache, config checked first
        return pd.DataFrame([{**checkpoint_row(folder, name=source), "folder": str(folder), "id": source}])
    raise DeltalensError(
        f"checkpoint folder {source} does not exist (nor is it a Hub id org/name); start the app with "
        "--checkpoints DIR or ID."
    )


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """The table as a page shows it: without the folder each row opens from."""
    return table.drop(columns=["folder", "id"], errors="ignore")


def command_name(table: pd.DataFrame, name: str) -> str:
    """What the CLI takes for this row: its Hub id, else its folder."""
    row = table.loc[table["name"] == name].iloc[0]
    return str(row["id"]) if isinstance(row.get("id"), str) else str(row["folder"])


def folder_of(table: pd.DataFrame, name: str) -> str:
    return str(table.loc[table["name"] == name, "folder"].iloc[0])


@st.cache_resource(show_spinner="loading the checkpoint ...", max_entries=8)
def opened(path: str) -> Checkpoint:
    from deltalens.loading.opened import open_checkpoint  # torch and TransformerLens: the first model pays them

    return open_checkpoint(path)


def pick_checkpoint(
    key: str, label: str = "checkpoint", where: Callable[[pd.Series], bool] | None = None, default: str = PAPER_MODEL
) -> Checkpoint | None:
    """A selectbox over the folder's checkpoints (optionally filtered), then the opened checkpoint."""
    table = attempt(checkpoint_table, tuple(checkpoint_sources()))
    if table is None:
        return None
    for sentence in table.attrs.get("skipped", {}).values():
        st.error(sentence)
    if where is not None:
        table = table[table.apply(where, axis=1)]
        if table.empty:
            st.error(f"no checkpoint in {', '.join(checkpoint_sources())} fits this page.")
            return None
    names = list(table["name"])
    if st.session_state.get(key) not in names:  # first visit, or a folder without the last choice
        st.session_state[key] = default if default in names else names[0]
    name = st.selectbox(label, names, key=key)
    checkpoint = attempt(opened, folder_of(table, name))
    if checkpoint is not None:
        build_kernels(checkpoint)  # before the page's first forward, under a message
    return checkpoint


class Controls:
    """The widgets after a checkpoint picker, each with a key of its own per checkpoint.

    A checkpoint switch therefore never leaves a widget showing one value while the page computes
    with another. Each control starts from this checkpoint's own last value, else from the last
    choice made on this page when it is valid for this checkpoint (`carry`), else from the
    checkpoint's own default; a remembered choice that does not carry over is said in one sentence
    under the controls (`show_notes`) until the user touches that control.
    """

    def __init__(self, page: str, checkpoint: Checkpoint):
        self.page, self.checkpoint = page, checkpoint.path.name
        self.article = article_of(checkpoint.arch)
        self.notes: list[str] = []
        self.shown = 0  # notes already on the page

    def key(self, name: str) -> str:
        return f"{self.page}-{name}@{self.checkpoint}"

    def last(self, name: str, default: Any = None) -> Any:
        """The last value chosen for control `name` on this page, on any checkpoint."""
        return st.session_state.get(f"{self.page}-{name}@last", (default, None))[0]

    def widget(
        self,
        draw: Callable,
        name: str,
        *args: Any,
        default: Any,
        valid: Callable[[Any], bool] | None = None,
        carry: bool | Callable[[Any], bool] = True,
        why: Callable[[Any, str], str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """`draw(*args, key=..., **kwargs)` (an st widget) seeded as the class docstring says.

        valid(value): whether a value applies to this checkpoint; carry: whether a choice made on another
        checkpoint is carried over (a callable: which ones); why(value, checkpoint): the sentence for a
        remembered value that is not carried over (None: nothing to say)."""
        valid = valid or (lambda value: True)
        key, state = self.key(name), st.session_state
        if key not in state or not _safe(valid, state[key]):
            value, source = state.get(f"{self.page}-{name}@last", (None, None))
            if f"{key}#kept" in state and _safe(valid, state[f"{key}#kept"]):
                state[key] = state[f"{key}#kept"]  # back on this checkpoint: its own last choice
            elif carry and source is not None and _safe(valid, value) and (carry is True or _safe(carry, value)):
                state[key] = value  # the choice made on another checkpoint applies here too
            else:
                state[key] = default
                note = why(value, source) if why is not None and source is not None and value != default else None
                if note:
                    state[f"{key}#note"] = (note, default)
        kept = state.get(f"{key}#note")
        if kept is not None and state[key] == kept[1]:
            self.notes.append(kept[0])
        elif kept is not None:
            del state[f"{key}#note"]  # the user has chosen since: the note is stale
        value = draw(*args, key=key, **kwargs)
        state[f"{self.page}-{name}@last"] = (value, self.checkpoint)
        state[f"{key}#kept"] = value  # widget state is dropped while the widget is not drawn; this is not
        return value

    def show_notes(self) -> None:
        """One st.info per note not shown yet (a page may call it after each group of controls)."""
        for note in self.notes[self.shown :]:
            st.info(note)
        self.shown = len(self.notes)


def _safe(valid: Callable[[Any], bool], value: Any) -> bool:
    try:
        return bool(valid(value))
    except Exception:  # a remembered value of another type: not valid here
        return False


def describe(checkpoint: Checkpoint) -> str:
    spec = checkpoint.spec
    if spec is None:
        task = "no task"
    elif checkpoint.data is None:  # a model from elsewhere: asked the default task with its own tokenizer
        task = f"{spec.group} {spec.action_set}, the default task (none recorded), its own tokenizer"
    else:
        task = f"{spec.group} {spec.action_set}, {checkpoint.task.tokenizer} tokenizer"
    return f"{article_of(checkpoint.arch)} ({task})"
