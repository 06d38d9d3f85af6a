"""Dictionaries: a sparse dictionary (TopK SAE, sparsify's coder) of one head's state, trained on held-out traces,
its latents ranked by the fact "variable x holds value v" each matches, one latent's activation along a trace
beside the truth, and the reveal accuracy with the dictionary spliced into the recurrence
(probes/sparse_dictionary.py, probes/dictionary_scores.py, interp/dictionary_splice.py).

Training waits for a click and is then kept on disk keyed by the weights and every setting (app/disk_cache.py).
"""

import plotly.graph_objects as go
import streamlit as st

from deltalens.app import figures
from deltalens.app.common import Controls, attempt, describe, model_lock, pick_checkpoint
from deltalens.app.disk_cache import MISSING, cached_result, read_result
from deltalens.core.errors import DeltalensError

PAGE = "dict"
SITES = {"state": "S_t of the head (flattened)", "state_rows": "each row of S_t", "z": "the head's read-out z"}
LATENTS = [32, 64, 128, 256]
KS = [2, 4, 8]
STEPS = [300, 1000, 2000]
TRACES = [128, 256, 512]


def state_layers(model) -> list[int]:
    return [layer for layer in range(model.cfg.n_layers) if f"blocks.{layer}.attn.hook_state" in model.hook_dict]


def trained(checkpoint, site: str, layer: int, head: int, latents: int, k: int, steps: int, traces: int):
    """Everything the page draws (tables and arrays, not the coder), computed once per setting."""
    import deltalens as dl
    from deltalens.probes.sparse_dictionary import site_names, site_vectors

    def compute():
        with model_lock(str(checkpoint.path)):
            model = checkpoint.model
            batch = checkpoint.batch(traces, seed=0)
            if "states" not in batch:
                raise DeltalensError("this checkpoint's traces carry no true state to score a dictionary against.")
            cap = dl.capture(model, batch, names=site_names(site, layer))
            bar = st.progress(0.0, text="training the dictionary ...")
            d = dl.train_sae(cap, site=site, layer=layer, head=head, num_latents=latents, k=k, steps=steps,
                             progress_bar=False)  # fmt: skip
            bar.progress(0.7, text="scoring it against the true state, splicing it in ...")
            score = dl.score_sae(d, cap)
            splice = dl.splice_report(model, d, checkpoint.batch(64, seed=1)) if site != "write" else None
            one = cap.labels["trace"] == 1  # the first held-out trace
            x, token = site_vectors(cap, site, layer, head)
            rows = (cap.labels["trace"][token] == 1).numpy()
            acts = d.activations(x[rows]).numpy()
            if site == "state_rows":  # a token's rows: the largest activation of each latent over them
                acts = acts.reshape(int(one.sum()), -1, acts.shape[-1]).max(1)
            bar.empty()
            return {
                "facts": score.facts, "arrangements": score.arrangements, "features": score.features,
                "fvu": score.fvu, "coverage": score.coverage, "n_facts": score.n_facts,
                "arrangement_coverage": score.arrangement_coverage, "seconds": d.meta["train_seconds"],
                "splice": None if splice is None else splice.to_dict(),
                "trace_tokens": model.to_str_tokens(cap.labels["token"][one]),
                "trace_states": cap.states[one].numpy(), "trace_acts": acts,
            }  # fmt: skip

    params = f"{site}/{layer}/{head}/{latents}/{k}/{steps}/{traces}"
    return cached_result("dictionary", checkpoint.path, params, compute)


def default_head(checkpoint, layers: list[int]) -> tuple[int, int]:
    """The head the census singles out (near-reflections on actions), where it applies; else the first head."""
    from deltalens.models.capabilities import capabilities_of

    model = checkpoint.model
    if "householder" not in capabilities_of(model):
        return layers[0], 0

    def compute():
        import deltalens as dl

        with model_lock(str(checkpoint.path)):
            found = dl.census(model, checkpoint.batch(32, seed=0)).most_reflecting()[1]
        return found if found is not None and found[0] in layers else (layers[0], 0)

    return cached_result("dictionary-head", checkpoint.path, "census/32/0", compute)


def activation_figure(found: dict, latent: int, variable: int, value: int) -> go.Figure:
    """One latent's activation along the held-out trace, beside whether its fact holds at each token."""
    names = "abcdefghij"
    tokens = [t.replace("\n", "⏎") for t in found["trace_tokens"]]
    x = list(range(len(tokens)))
    holds = (found["trace_states"][:, variable] == value + 1).astype(float)
    acts = found["trace_acts"][:, latent]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=holds, name=f"{names[variable]} holds {value + 1} (truth)", opacity=0.3))
    fig.add_trace(go.Scatter(x=x, y=acts / max(float(acts.max()), 1e-12), name=f"latent {latent} (scaled to 1)",
                             mode="lines+markers"))  # fmt: skip
    fig.update_layout(
        title=f"latent {latent} along held-out trace 1 against '{names[variable]} holds {value + 1}'",
        xaxis=dict(tickmode="array", tickvals=x, ticktext=tokens, tickangle=-60),
        yaxis=dict(range=[0, 1.05], title="activation / truth"),
        height=420,
        legend=dict(orientation="h", y=1.02, yanchor="bottom"),
    )
    return fig


def main() -> None:
    checkpoint = pick_checkpoint("dict-ckpt")
    if checkpoint is None:
        return
    st.caption(describe(checkpoint))
    model = checkpoint.model
    layers = state_layers(model)
    if not layers:
        st.info("This model shows no matrix state (hook_state), so there is no head's state to code; pick a "
                "delta-rule or M²RNN checkpoint.")  # fmt: skip
        return
    controls = Controls(PAGE, checkpoint)
    cols = st.columns(4)
    first = attempt(default_head, checkpoint, layers) or (layers[0], 0)
    layer = controls.widget(cols[0].selectbox, "layer", "layer", layers, default=first[0], valid=layers.__contains__)
    heads = list(range(model.cfg.n_heads))
    head = controls.widget(cols[1].selectbox, "head", "head", heads, default=first[1], valid=heads.__contains__)
    site = controls.widget(cols[2].selectbox, "site", "site", list(SITES), default="state", format_func=SITES.get)
    latents = controls.widget(cols[3].selectbox, "latents", "latents", LATENTS, default=64)
    cols = st.columns(3)
    k = controls.widget(cols[0].selectbox, "k", "active latents per row (k)", KS, default=4)
    steps = controls.widget(cols[1].selectbox, "steps", "training steps", STEPS, default=1000)
    traces = controls.widget(cols[2].selectbox, "traces", "held-out traces", TRACES, default=256)
    controls.show_notes()
    params = f"{site}/{layer}/{head}/{latents}/{k}/{steps}/{traces}"
    if read_result("dictionary", checkpoint.path, params) is MISSING:
        st.caption("Training takes from several seconds to a few minutes on a CPU; the result is then kept on disk.")
        if not st.button("train the dictionary", key=controls.key("train"), type="primary"):
            return
    found = attempt(trained, checkpoint, site, int(layer), int(head), int(latents), int(k), int(steps), int(traces))
    if found is None:
        return
    st.markdown(
        f"**{found['coverage']} of {found['n_facts']}** facts have a latent at F1 >= 0.9, "
        f"**{found['arrangement_coverage']} of {len(found['arrangements'])}** arrangements; held-out FVU "
        f"{found['fvu']:.3f}; trained in {found['seconds']:.0f} s."
    )
    splice = found["splice"]
    if splice is not None:
        st.markdown(
            f"Spliced into the forward (the reconstruction is the state the recurrence continues from): reveal "
            f"accuracy **{splice['baseline']:.3f} → {splice['spliced']:.3f}** on 64 fresh traces."
        )
    left, right = st.columns(2)
    facts = found["facts"].copy()
    facts.insert(0, "fact", [f"{'abcdefghij'[x]} = {v + 1}" for x, v in zip(facts["variable"], facts["value"])])
    left.dataframe(facts.drop(columns=["variable", "value"]).round(3), hide_index=True, width="stretch")
    right.dataframe(found["arrangements"].round(3), hide_index=True, width="stretch")
    live = found["features"][~found["features"]["dead"]].sort_values("f1", ascending=False)
    if live.empty:
        st.info("Every latent is dead on the held-out traces.")
        return
    labels = {
        int(r.latent): f"latent {int(r.latent)}: {'abcdefghij'[int(r.variable)]} = {int(r.value) + 1} (F1 {r.f1:.2f})"
        for r in live.itertuples()
    }
    latent = st.selectbox("latent (by the F1 of its best fact)", list(labels), format_func=labels.get,
                          key=controls.key("latent") + params)  # fmt: skip
    row = live.set_index("latent").loc[latent]
    figures.show(activation_figure(found, int(latent), int(row["variable"]), int(row["value"])), title_width=110)
    st.caption(
        "Latents: every dictionary latent that fires on the held-out traces, with its best fact by F1 "
        "(precision: how often the fact holds when the latent fires; recall: how often the latent fires when the "
        "fact holds). `deltalens sae` and `dl.train_sae` / `dl.score_sae` give the same numbers."
    )


attempt(main)
