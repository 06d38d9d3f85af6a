"""The Trace explorer says what it is doing and what to do (issue 55 item 5): a message while the C kernels
build, and a context error a user can act on from the page (a number of actions and a button that sets it)."""

from __future__ import annotations

import dataclasses

import pytest
import streamlit
from test_app import REPO, key, page

from deltalens.loading.opened import open_checkpoint
from deltalens.models.ops import native
from deltalens.tasks.traces import generate_trace

TRANSFORMER = "s3-transformer-statement"


def test_a_fresh_cache_builds_the_kernels_under_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("DELTALENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_loaded", {})  # this process has loaded them already: forget that
    if not native.unbuilt():
        pytest.skip("no C compiler here: the torch kernels run and nothing is built")  # reported, not green
    said = []
    spinner = streamlit.spinner

    def recording(text, *args, **kwargs):
        said.append(text)
        return spinner(text, *args, **kwargs)

    monkeypatch.setattr(streamlit, "spinner", recording)
    app = page("views/trace_explorer.py")
    assert not app.exception and not app.error
    assert any(text.startswith("Compiling the C kernels for this CPU (delta_rule, short_conv") for text in said)
    assert native.unbuilt() == []  # built once: the next page says nothing
    said.clear()
    app.number_input(key=key("trace-seed")).set_value(3).run()
    assert not any("Compiling" in text for text in said)


def test_too_long_for_the_transformer_offers_the_actions_that_fit():
    app = page("views/trace_explorer.py")
    app.selectbox(key="trace-ckpt").select(TRANSFORMER).run()
    app.number_input(key=key("trace-actions", TRANSFORMER)).set_value(512).run()
    assert not app.exception and len(app.error) == 1
    message = app.error[0].value
    assert "context is" in message and "models.load" not in message and "Set **actions** to" in message
    fits = int(message.split("Set **actions** to ")[1].split()[0])
    assert 1 <= fits < 512
    app.button(key=key("trace-actions", TRANSFORMER) + "-fit").click().run()
    assert not app.error and not app.exception
    assert app.number_input(key=key("trace-actions", TRANSFORMER)).value == fits  # and the trace is drawn
    assert app.metric and int(app.metric[1].value) > 0
    app.number_input(key=key("trace-actions", TRANSFORMER)).set_value(fits + 1).run()
    assert app.error and "context is" in app.error[0].value  # one more does not fit: the number is the largest


def test_a_pasted_transcript_too_long_is_told_how_many_lines_to_keep():
    app = page("views/trace_explorer.py")
    app.selectbox(key="trace-ckpt").select(TRANSFORMER).run()
    checkpoint = open_checkpoint(REPO / "checkpoints" / TRANSFORMER)
    text = generate_trace(dataclasses.replace(checkpoint.spec, actions=700), 0).text  # past the 1,024-token context
    app.radio(key=key("trace-source", TRANSFORMER)).set_value("paste").run()
    app.text_area(key=key("trace-text", TRANSFORMER)).input(text).run()
    assert not app.exception and app.error
    assert "keep about its first" in app.error[0].value and "models.load" not in app.error[0].value
    assert "rotary positions have no per-position weights" in app.error[0].value  # this Transformer's own kind


def test_an_empty_paste_says_so():
    app = page("views/trace_explorer.py")
    app.radio(key=key("trace-source")).set_value("paste").run()
    app.text_area(key=key("trace-text")).input("  \n").run()
    assert not app.exception and not app.error
    assert any("The box is empty" in info.value for info in app.info)
