"""The conformance matrix: every public tool on a tiny model of every registered family (hybrids included).

Rows are tests/conformance_zoo.py's models (one per family, each fla family also as a hybrid with an attention
layer), columns the tools of models/capabilities.TOOLS. What applies is declared once: each tool's
needs (capabilities.TOOLS) against what the model has (capabilities.capabilities_of), and each family's record
declares what its models can have. Each cell asserts a meaningful result where the tool applies, and where it does
not, a one-sentence refusal (a DeltalensError of one line) at the tool's entry; any other outcome fails the cell.

    python3 -m pytest tests/test_conformance.py                   # the matrix
    python3 tests/test_conformance.py --table                      # it as a markdown table (ok / refused)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_zoo import ROWS, make_folder  # noqa: E402

import deltalens as dl  # noqa: E402
from deltalens.core.errors import DeltalensError  # noqa: E402
from deltalens.models.capabilities import TOOLS, applies, capabilities_of  # noqa: E402
from deltalens.models.registry import families, family  # noqa: E402


@dataclass
class Row:
    """One row of the matrix: its model, opened from its folder, and what the tools are given."""

    name: str
    folder: Path

    @cached_property
    def model(self):
        return dl.load(str(self.folder))

    @cached_property
    def batch(self) -> dict:
        return self.model.checkpoint.batch(4)

    @cached_property
    def pair(self) -> tuple[dict, dict]:
        return dl.trace_pair(self.model, 4, checkpoint=self.model.checkpoint)

    @cached_property
    def capabilities(self) -> frozenset[str]:
        return capabilities_of(self.model)

    def layer_head(self, needs_delta: bool = True) -> tuple[int, int]:
        from deltalens.models.architecture import delta_layers_of

        layers = delta_layers_of(self.model) if needs_delta else list(range(self.model.cfg.n_layers))
        return (layers[-1] if layers else 0), 0


def _capture(row: Row, name: str):
    cap = dl.capture(row.model, row.batch, names=(name,))
    assert len(cap) == int(row.batch["lengths"].sum()) and cap.names
    if name == "state":  # TransformerLens's pos_slice cuts S_t (batch, pos, head, d_k, d_v) at pos, not d_k
        tokens, hooked = row.batch["tokens"][:2], lambda hook: hook.endswith("hook_state")
        _, whole = row.model.run_with_cache(tokens, names_filter=hooked)
        _, cut = row.model.run_with_cache(tokens, names_filter=hooked, pos_slice=[1, 3])
        assert all(torch.equal(cut[key], whole[key][:, [1, 3]]) for key in whole.keys())
    return cap


def _eigen(row: Row):
    report = dl.eigenvalue_report(dl.capture(row.model, row.batch, names=("beta", "k")))
    assert sorted(set(report.heads["layer"])) == _delta(row)
    assert report.heads["min_eigenvalue"].between(-1 - 1e-4, 1 + 1e-4).all()
    return report


def _tracking(row: Row):
    found = _eigen(row).tracking_head()
    assert found is None or found[0] in _delta(row)
    return found


def _delta(row: Row) -> list[int]:
    from deltalens.models.architecture import delta_layers_of

    return delta_layers_of(row.model)


def _subspace(row: Row):
    report = dl.subspace_report(dl.capture(row.model, row.batch, names=("state", "k")))
    assert sorted(set(report.heads["layer"])) == _delta(row) and (report.heads["effective_rank"] >= 1).all()


def _products(row: Row):
    report = dl.product_report(dl.capture(row.model, row.batch, names=("beta", "k")))
    assert sorted(set(report.heads["layer"])) == _delta(row)


def _probes(row: Row, sites=None):
    report = dl.linear_probes(row.model, row.batch, sites=sites, max_iter=20, max_tokens=200)
    assert report.results["accuracy"].between(0, 1).all()
    if sites == ("state",):  # every layer with a matrix state, none other (a hybrid's attention layers)
        stateful = [l for l in range(row.model.cfg.n_layers) if f"blocks.{l}.attn.hook_state" in row.model.hook_dict]
        assert sorted(set(report.results["layer"])) == stateful


def _summary(row: Row):
    summary = dl.probe_summary(row.model, row.batch, probes=False)
    assert summary.heads.empty == ("delta" not in row.capabilities)


def _state_layer(row: Row) -> int:
    """The last layer whose mixer shows a state (hook_state); 0 where none does (the tool then says why)."""
    layers = [l for l in range(row.model.cfg.n_layers) if f"blocks.{l}.attn.hook_state" in row.model.hook_dict]
    return layers[-1] if layers else 0


def _sae(row: Row):
    layer = _state_layer(row)
    d = dl.train_sae(row.model, row.batch, site="state", layer=layer, head=0, num_latents=16, k=2, steps=5,
                     progress_bar=False)  # fmt: skip
    score = dl.score_sae(d, row.model, row.batch)
    assert score.rows > 0 and len(score.facts) == score.n_facts
    assert 0.0 <= dl.splice_report(row.model, d, row.batch).spliced <= 1.0


def _census(row: Row):
    result = dl.census(row.model, row.batch)
    assert sorted(set(result.heads["layer"])) == _delta(row)
    assert result.heads["min_eigenvalue"].le(1 + 1e-4).all()


def _effective_attention(row: Row):
    layer, head = row.layer_head()
    T = row.batch["tokens"].shape[1]
    A = dl.effective_attention(row.model, row.batch["tokens"][:1], layer, head)
    assert A.shape[1] == A.shape[2] == T and torch.isfinite(A).all()  # (batch, query, key[, factor])


def _dla(row: Row):
    tokens = row.batch["tokens"][:2]
    _, cache = row.model.run_with_cache(tokens)
    positions = torch.nonzero(row.batch["reveal_mask"][:2])
    answer = row.batch["answers"][:2][row.batch["reveal_mask"][:2]]
    result = dl.logit_attribution(row.model, cache, positions, answer)
    assert len(result.frame) > 0


def _patch_grid(row: Row):
    clean, corrupt = row.pair
    grid = dl.patch_grid(row.model, clean, corrupt, site="z", progress=False)
    assert grid.values.shape[0] == row.model.cfg.n_layers and torch.isfinite(grid.values).any()


def _attribution(row: Row):
    clean, corrupt = row.pair
    result = dl.attribution_patching(row.model, clean, corrupt, dl.reveal_metric(clean, corrupt))
    assert result.grids and all(torch.isfinite(grid).any() for grid in result.grids.values())


def _automaton(row: Row):
    layer, head = row.layer_head()
    cap = dl.capture(row.model, row.model.checkpoint.batch(16), names=("state",))
    automaton = dl.extract_automaton(cap, layer, head)
    assert automaton is not None


def _decompose(row: Row):
    _, cache = row.model.run_with_cache(row.batch["tokens"][:2])
    resid, labels = cache.decompose_resid(apply_ln=True, return_labels=True)
    assert resid.shape[0] == len(labels) > row.model.cfg.n_layers


def _accumulated(row: Row):
    _, cache = row.model.run_with_cache(row.batch["tokens"][:2])
    resid = cache.accumulated_resid(apply_ln=True)
    assert resid.shape[0] == row.model.cfg.n_layers + 1


def _stack_heads(row: Row):
    _, cache = row.model.run_with_cache(row.batch["tokens"][:2])
    stacked, labels = cache.stack_head_results(return_labels=True)
    assert stacked.shape[0] == len(labels) > 0


def _logit_attrs(row: Row):
    _, cache = row.model.run_with_cache(row.batch["tokens"][:2])
    resid, _ = cache.decompose_resid(apply_ln=True, return_labels=True, pos_slice=-1)
    attrs = cache.logit_attrs(resid, tokens=row.batch["tokens"][:2, -1], pos_slice=-1)
    assert attrs.shape[0] == resid.shape[0]


def _generate(row: Row):
    text = ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> print('a', a)\na"
    out = row.model.generate(text, max_new_tokens=2)
    assert isinstance(out, str) and out.startswith(text)


def _sweep(row: Row, kind: str, factor=None):
    result = dl.sweep(row.model, row.batch, kind, progress=False, factor=factor)
    assert 0 <= result.baseline <= 1 and len(result.frame) > 0
    assert set(result.frame["layer"]) <= set(range(row.model.cfg.n_layers))


def _clamp_gate(row: Row):
    layer, head = row.layer_head()
    assert 0 <= dl.accuracy_under(row.model, row.batch, dl.clamp_gate(row.model, layer, head)) <= 1


def _patch_state(row: Row):
    layer, head = row.layer_head()
    clean, corrupt = row.pair
    _, cache = row.model.run_with_cache(clean["tokens"], names_filter=lambda name: name.endswith("hook_state"))
    assert 0 <= dl.accuracy_under(row.model, corrupt, dl.patch_state(layer, head, cache)) <= 1
    _the_patched_cache_is_the_trajectory_run(row, layer, head, cache, corrupt["tokens"])


def _the_patched_cache_is_the_trajectory_run(row: Row, layer: int, head: int, clean_cache, tokens) -> None:
    """Patched at one position, the cache (and a capture) shows the states the layer ran on after it: pinning
    every position to the cached trajectory gives the patched run's logits, and the states moved after it."""
    name, at = f"blocks.{layer}.attn.hook_state", 3
    patch = dl.patch_state(layer, head, clean_cache, positions=[at])
    with patch.applied(row.model):
        patched, cache = row.model.run_with_cache(tokens, names_filter=name)
    captured = dl.capture(row.model, tokens, names=(name,), hooks=patch.hooks).padded(name)
    _, plain = row.model.run_with_cache(tokens, names_filter=name)
    moved = (cache[name] - plain[name]).abs().amax(dim=(0, 2, 3, 4))  # per position
    assert moved[at + 1 :].max() > moved[:at].max()  # the edit carried on (a production stand-in's decays: faintly)
    pinned = row.model.run_with_hooks(tokens, fwd_hooks=[(name, lambda states, hook: cache[name].clone())])
    assert (pinned - patched).abs().max() <= 1e-4 * max(1.0, patched.abs().max().item())
    lengths = captured.shape[1]
    assert (captured - cache[name][:, :lengths]).abs().max() <= 1e-5


def _cli(row: Row, *args: str):
    """`deltalens ARGS` on the row's folder, in this process: exit 0 with output, or one line and exit 2."""
    import contextlib
    import io
    import json

    from deltalens.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([args[0], str(row.folder), *args[1:]])
    errors = [line for line in err.getvalue().splitlines() if line.startswith("deltalens: error: ")]
    if code == 2 and len(errors) == 1 and "Traceback" not in err.getvalue():
        raise DeltalensError(errors[0].removeprefix("deltalens: error: "))
    assert code == 0, f"exit {code}: {err.getvalue()[-800:]}"
    if "--json" in args:
        assert json.loads(out.getvalue().splitlines()[-1])
    else:
        assert out.getvalue().strip()


CELLS = {
    "capture:resid": lambda row: _capture(row, "resid"),
    "capture:beta": lambda row: _capture(row, "beta"),
    "capture:k": lambda row: _capture(row, "k"),
    "capture:state": lambda row: _capture(row, "state"),
    "capture:gate": lambda row: _capture(row, "gate"),
    "eigenvalue_report": _eigen,
    "tracking_head": _tracking,
    "subspace_report": _subspace,
    "product_report": _products,
    "linear_probes": _probes,
    "linear_probes:state": lambda row: _probes(row, ("state",)),
    "probe_summary": _summary,
    "census": _census,
    "train_sae": _sae,
    "effective_attention": _effective_attention,
    "logit_attribution": _dla,
    "patch_grid": _patch_grid,
    "attribution_patching": _attribution,
    "extract_automaton": _automaton,
    "decompose_resid": _decompose,
    "accumulated_resid": _accumulated,
    "stack_head_results": _stack_heads,
    "logit_attrs": _logit_attrs,
    "generate": _generate,
    "sweep:beta-range": lambda row: _sweep(row, "beta-range"),
    "sweep:beta-clip": lambda row: _sweep(row, "beta-clip"),
    "sweep:transition-clip": lambda row: _sweep(row, "transition-clip"),
    "sweep:write-clip": lambda row: _sweep(row, "write-clip"),
    "sweep:eigen-abs": lambda row: _sweep(row, "eigen-abs"),
    "sweep:zero-z": lambda row: _sweep(row, "zero-z"),
    "sweep:mean-state": lambda row: _sweep(row, "mean-state"),
    "sweep:factor": lambda row: _sweep(row, "beta-range", factor=1),  # the second Householder factor
    "intervene:clamp_gate": _clamp_gate,
    "intervene:patch_state": _patch_state,
    "cli:eval": lambda row: _cli(row, "eval", "--n-traces", "4", "--lengths", "4", "--json"),
    "cli:probe": lambda row: _cli(row, "probe", "--n-traces", "8", "--no-probes", "--json"),
    "cli:census": lambda row: _cli(row, "census", "--n-traces", "4", "--json"),
    "cli:sae": lambda row: _cli(
        row,
        "sae",
        "--layer",
        str(_state_layer(row)),
        "--head",
        "0",
        "--latents",
        "16",
        "--k",
        "2",
        "--steps",
        "5",
        "--n-traces",
        "4",
        "--json",
    ),  # fmt: skip
    "cli:intervene --sweep beta-range": lambda row: _cli(
        row, "intervene", "--sweep", "beta-range", "--n-traces", "4", "--json"
    ),
    "cli:intervene --patch-grid": lambda row: _cli(row, "intervene", "--patch-grid", "--n-traces", "4", "--json"),
}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance")
    return {name: Row(name, make_folder(name, root)) for name in ROWS}


def outcome(row: Row, tool: str) -> tuple[str, str]:
    """("ok", "") or ("refused", the sentence) or ("failing", what went wrong)."""
    try:
        CELLS[tool](row)
    except DeltalensError as err:
        text = str(err)
        return ("refused", text) if "\n" not in text.strip() else ("failing", f"a refusal of several lines: {text}")
    except Exception as err:  # noqa: BLE001 - every other outcome is a failing cell, said as such
        return "failing", f"{type(err).__name__}: {err}"
    return "ok", ""


def test_every_tool_has_a_cell_and_every_family_a_row():
    assert set(CELLS) == set(TOOLS)
    assert {arch for arch, _ in ROWS.values()} == {record.arch for record in families()}


@pytest.mark.parametrize("row_name", list(ROWS))
def test_a_model_has_no_capability_its_family_does_not_declare(zoo, row_name):
    row = zoo[row_name]
    declared = family(ROWS[row_name][0]).capabilities | {"tokenizer"}
    assert row.capabilities <= declared, sorted(row.capabilities - declared)


def test_each_family_declares_what_its_rows_have_and_no_more(zoo):
    """The union of a family's rows' capabilities is its record's declaration: the table advertises nothing
    that no model of the family has (its rows: the family, and its hybrid where fla builds one)."""
    for record in families():
        rows = [zoo[name] for name, (arch, _) in ROWS.items() if arch == record.arch]
        have = frozenset().union(*(row.capabilities for row in rows)) - {"tokenizer"}
        assert have == record.capabilities, (record.arch, sorted(have ^ record.capabilities))


def test_the_published_table_is_the_declarations():
    """docs/what-applies.md is `python3 -m deltalens.models.capabilities`'s output, as committed."""
    from deltalens.models.capabilities import applicability_markdown

    page = (Path(__file__).resolve().parents[1] / "docs" / "what-applies.md").read_text()
    assert applicability_markdown() in page


SHAPE = ("n_layers", "n_heads", "d_model", "d_head", "d_vocab", "n_ctx")  # TransformerLens's cfg fields


@pytest.mark.parametrize("row_name", list(ROWS))
def test_a_model_answers_its_shape_through_cfg_alone(zoo, row_name):
    """TransformerLens's habit on every family: `model.cfg` holds the shape, what the modules and hooks have,
    and the model repeats none of it as an attribute of its own."""
    from deltalens.models import architecture
    from deltalens.models.architecture import delta_layers_of

    model = zoo[row_name].model
    cfg = model.cfg
    assert [name for name in SHAPE if not hasattr(cfg, name)] == []
    assert [name for name in (*SHAPE, "d_k", "d_v") if hasattr(model, name)] == []
    assert not hasattr(architecture, "n_layers_of") and not hasattr(architecture, "n_heads_of")
    assert len(model.blocks) == cfg.n_layers and tuple(model.W_U.shape) == (cfg.d_model, cfg.d_vocab)
    layers = delta_layers_of(model) or range(cfg.n_layers)  # a hybrid's heads: its delta-rule layers'
    names = [f"blocks.{layer}.attn.hook_z" for layer in layers if f"blocks.{layer}.attn.hook_z" in model.hook_dict]
    if not names:  # the LSTM: no heads
        assert cfg.n_heads == 0 == cfg.d_head and row_name == "lstm"
        return
    _, cache = model.run_with_cache(zoo[row_name].batch["tokens"][:1, :8], names_filter=names)
    assert all(cache[name].shape[2:] == (cfg.n_heads, cfg.d_head) for name in names)  # (batch, pos, head, d_head)


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("row_name", list(ROWS))
def test_cell(zoo, row_name, tool):
    row = zoo[row_name]
    expected = applies(TOOLS[tool], row.capabilities)
    got, why = outcome(row, tool)
    assert got != "failing", why
    assert got == ("ok" if expected else "refused"), f"{tool} on {row_name}: declared {expected}, got {got} {why}"


if __name__ == "__main__":  # the matrix as a markdown table
    import tempfile

    root = Path(tempfile.mkdtemp())
    rows = {name: Row(name, make_folder(name, root)) for name in ROWS}
    print("| tool | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    refusals = []
    for tool in TOOLS:
        cells = []
        for name, row in rows.items():
            got, why = outcome(row, tool)
            cells.append(got)
            if got != "ok":
                refusals.append(f"- `{tool}` on {name}: {got}: {why}")
        print(f"| {tool} | " + " | ".join(cells) + " |")
    print("\n" + "\n".join(refusals))
