"""Circuit: which tokens a head reads at one reveal (exact effective attention), which heads write the
answer (direct logit attribution), which heads carry it (activation patching beside attribution
patching, on clean traces and their value-relabelled twins), and the automaton a head's states form.

Every measurement is the library's (interp/effective_attention.py, interp/circuit.py,
probes/automaton.py), cached per checkpoint and setting, and run under the checkpoint's model lock.
A section that does not apply to the checkpoint (no delta rule, no heads, random actions) says so.
"""

import plotly.graph_objects as go
import streamlit as st

from deltalens.app import figures
from deltalens.app.common import Controls, attempt, describe, locked, opened, pick_checkpoint
from deltalens.models.architecture import ARTICLE, is_delta_rule

PAGE = "circuit"
PAIRS = [4, 8, 16]
AUTOMATON_TRACES = [32, 64, 128, 256]


@st.cache_data(show_spinner="attribution patching and direct logit attribution ...", max_entries=16)
def attribution_of(path: str, n_pairs: int, seed: int):
    from deltalens.interp.circuit import head_attribution
    from deltalens.interp.trace_pairs import trace_pair

    checkpoint = opened(path)
    clean, corrupt = trace_pair(checkpoint.model, n_pairs, seed=seed, checkpoint=checkpoint)
    return head_attribution(checkpoint.model, clean, corrupt)


@st.cache_data(show_spinner="activation patching, one forward per head ...", max_entries=16)
def grid_of(path: str, n_pairs: int, seed: int, site: str):
    from deltalens.interp.circuit import patch_grid
    from deltalens.interp.trace_pairs import trace_pair

    checkpoint = opened(path)
    clean, corrupt = trace_pair(checkpoint.model, n_pairs, seed=seed, checkpoint=checkpoint)
    return patch_grid(checkpoint.model, clean, corrupt, site=site, progress=False)


@st.cache_data(show_spinner="effective attention of one trace ...", max_entries=32)
def reading_of(path: str, seed: int, layer: int, head: int):
    """(token texts, reveal rows [(prediction position, text)], A (T, T) summed over factors) of one trace."""
    from deltalens.interp.effective_attention import effective_attention

    checkpoint = opened(path)
    batch = checkpoint.batch(1, seed=seed)
    tokens = batch["tokens"]
    texts = [checkpoint.tokenizer.token_of(int(i)) for i in tokens[0]]
    reveals = [
        (t - 1, f"{texts[t - 2].strip() if t >= 2 else ''} -> {texts[t].strip()} (position {t})")
        for t in batch["reveal_mask"][0].nonzero().flatten().tolist()
        if t >= 1
    ]
    A = effective_attention(checkpoint.model, tokens, layer, head)[0]
    A = A.sum(-1) if A.ndim == 3 else A  # DeltaProduct: factors summed
    return texts, reveals, A.numpy()


@st.cache_data(show_spinner="clustering the head's states ...", max_entries=16)
def automaton_of(path: str, n_traces: int, seed: int, layer: int, head: int):
    from deltalens.interp.capture import capture
    from deltalens.probes.automaton import extract_automaton

    checkpoint = opened(path)
    cap = capture(checkpoint.model, checkpoint.batch(n_traces, seed=seed), names=("state",))
    return extract_automaton(cap, layer, head, seed=seed)


def reading_figure(texts, A, row: int, layer: int, head: int) -> go.Figure:
    weights = A[row, : row + 1]
    labels = [f"{s}: {texts[s].strip()}" for s in range(row + 1)]
    fig = go.Figure(go.Bar(x=labels, y=weights, hovertemplate="%{x}<br>A = %{y:.3f}<extra></extra>"))
    fig.update_layout(
        title=f"L{layer}H{head} at position {row} (predicts the next value): exact weight A[t, s] of each "
        "earlier token's value in the read-out",
        xaxis_title="key position s",
        yaxis_title="A[t, s]",
        height=420,
    )
    return fig


def dla_bar(result) -> go.Figure:
    frame = result.frame.sort_values(["layer", "head"])
    names = [f"L{int(layer)}H{int(head)}" for layer, head in zip(frame["layer"], frame["head"])]
    fig = go.Figure(go.Bar(x=names, y=frame["dla"], hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(
        title="Direct logit attribution: each head's share of logit[answer] - mean logit[other values]",
        xaxis_title="head",
        yaxis_title="logit difference",
        height=380,
    )
    return fig


def main() -> None:
    checkpoint = pick_checkpoint("circuit-ckpt")
    if checkpoint is None:
        return
    st.caption(describe(checkpoint))
    path, article = str(checkpoint.path), ARTICLE.get(checkpoint.arch, checkpoint.arch)
    delta = is_delta_rule(checkpoint.arch)
    controls = Controls(PAGE, checkpoint)
    n_layers, n_heads = checkpoint.model.cfg.n_layers, getattr(checkpoint.model.cfg, "n_heads", 0)
    if checkpoint.arch == "lstm" or not n_heads:
        st.info(f"{article} has no attention heads: there is no per-head circuit to draw; try a DeltaNet checkpoint.")
        return
    left, right = st.columns(2)
    n_pairs = controls.widget(left.selectbox, "pairs", "trace pairs (clean / relabelled)", PAIRS, default=8)
    seed = controls.widget(right.number_input, "seed", "trace seed", min_value=0, max_value=10**6, default=0)
    controls.show_notes()

    found = None
    if not hasattr(checkpoint.spec, "reveal"):  # a PFSA-SR task: no relabelled twin with a single answer
        st.info(
            "This checkpoint's traces have random actions, so attribution and patching (which need a clean / "
            "relabelled pair with one answer each) do not apply; the other sections do."
        )
    else:
        found = locked(checkpoint, attribution_of, path, n_pairs, seed)
    heads = [f"L{layer}H{head}" for layer in range(n_layers) for head in range(n_heads)]
    top = f"L{int(found.frame.iloc[0]['layer'])}H{int(found.frame.iloc[0]['head'])}" if found is not None else heads[0]
    chosen = controls.widget(
        st.selectbox,
        "head",
        "head (effective attention and automaton; default: attribution patching's top head)",
        heads,
        default=top,
        valid=lambda value: value in heads,
    )
    layer, head = (int(x) for x in chosen[1:].split("H"))

    st.subheader("Effective attention of one reveal")
    if not delta:
        st.info(
            f"{article} has no delta-rule read-out to unroll; its attention pattern is its own (hook_pattern), so "
            "this section applies to the delta-rule family only."
        )
    else:
        reading = locked(checkpoint, reading_of, path, seed, layer, head)
        if reading is not None:
            texts, reveals, A = reading
            if not reveals:
                st.info("this trace reveals no values; pick another seed.")
            else:
                labels = [text for _, text in reveals]
                picked = st.selectbox("reveal", labels, key=controls.key("reveal") + f"-{seed}")
                row = reveals[labels.index(picked)][0]
                figures.show(reading_figure(texts, A, row, layer, head), title_width=110)

    st.subheader("Direct logit attribution per head")
    if not delta:
        st.info(f"Direct logit attribution here unrolls the delta-rule family's heads; {article} is not one.")
    elif found is not None:
        figures.show(dla_bar(found), title_width=110)
        st.caption(
            f"The components (heads, MLPs, embedding) sum to the real logit difference within {found.dla_error:.1e}."
        )

    st.subheader("Patching grid")
    if found is not None:
        sites = list(found.sites)
        site = controls.widget(
            st.radio, "site", "patched site", sites, default="z", horizontal=True, valid=lambda value: value in sites
        )
        grid = locked(checkpoint, grid_of, path, n_pairs, seed, site)
        left, right = st.columns(2)
        if grid is not None:
            from deltalens.interp.patching import patch_grid_figure

            figures.show(
                patch_grid_figure(grid, title=f"activation patching: hook_{site} ({grid.n_forwards} forwards)"), left
            )
            estimate = found.ap_grid(site)
            approx = type(grid)(
                estimate + grid.corrupt, grid.clean, grid.corrupt, site, n_forwards=0, method="attribution patching"
            )
            figures.show(
                patch_grid_figure(
                    approx,
                    title=f"attribution patching: hook_{site} ({found.forward_equivalents:.1f} forward-equivalents)",
                ),
                right,
            )
            st.caption(
                "Each cell: the fraction of the clean answer's logit difference restored when that head's activation "
                f"comes from the clean run (clean {grid.clean:.2f}, corrupt {grid.corrupt:.2f})."
            )

    st.subheader("Automaton")
    if not delta:
        st.info(f"{article} has no matrix state S_t to cluster; the automaton applies to the delta-rule family.")
        return
    n_traces = controls.widget(
        st.selectbox, "traces", "traces to cluster (an S5 head needs 256)", AUTOMATON_TRACES, default=64
    )
    automaton = locked(checkpoint, automaton_of, path, n_traces, seed, layer, head)
    if automaton is not None:
        from deltalens.probes.automaton import automaton_figure

        st.markdown(automaton.title())
        figures.show(automaton_figure(automaton, title=f"Automaton of L{layer}H{head}"), title_width=110)


attempt(main)
