"""The deltalens dashboard: `deltalens app` or `streamlit run app/Home.py`.

Pages (app/views/): Checkpoints, Trace explorer, Heads, Interventions, Circuit, Census, Dictionaries, Beliefs. The
checkpoints are $DELTALENS_APP_CHECKPOINTS's, one source a line (set by `deltalens app --checkpoints
DIR_OR_ID ...`: folders of checkpoints, model folders, Hugging Face Hub ids), else the shipped checkpoints/.

This script imports nothing heavy: the navigation, the page's title and what it shows are on the
screen before a page imports torch and the library (seconds, the first time a server runs one).
"""

import os
import threading

# One BLAS/OpenMP thread per computation, set before numpy or torch load (the server runs this first).
# The dashboard's matrices are small (thousands of rows by a few hundred): one thread is as fast,
# and OpenMP/BLAS threads spin when the cores are busy: an SVD of 2000 x 256 took 0.1 s on one
# thread and up to 9 s on two on a loaded 2-core machine. An explicit setting is kept.
for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

from pathlib import Path  # noqa: E402

import streamlit as st  # noqa: E402

from deltalens.app.folder import sources_label  # noqa: E402
from deltalens.app.preload import first_page_drawn, start_preload  # noqa: E402

VIEWS = Path(__file__).resolve().parent / "views"
PAGES = {  # file -> (title, what the page shows: drawn before its first import)
    "checkpoints.py": (
        "Checkpoints",
        "Every checkpoint given (folders, model folders, Hub ids) with its card, saved accuracies and training "
        "curves, the family of architectures, and the paper's claims with their verdicts (all from saved files).",
    ),
    "trace_explorer.py": (
        "Trace explorer",
        "A generated or pasted REPL trace: each revealed value coloured by whether the model predicts it, "
        "the true state after each action; paste a print without its output to ask the model.",
    ),
    "heads.py": (
        "Heads",
        "Per head: beta and the transition eigenvalues, products of reflections, the state's subspace, "
        "and linear probes, measured on held-out traces.",
    ),
    "interventions.py": (
        "Interventions",
        "Rescale, clip, ablate or patch chosen heads and see the reveal accuracy before and after, the trace "
        "under the intervention, and the same kind's sweep over every head (the paper's: the beta range).",
    ),
    "circuit.py": (
        "Circuit",
        "One head's exact effective attention at a reveal, each head's direct logit attribution, activation "
        "patching beside attribution patching, and the automaton the head's states form.",
    ),
    "census.py": (
        "Census",
        "On the shipped S3 and S5 DeltaNet [0, 2] checkpoints the transition census singles out L0H3, the "
        "tracking head, a near-reflection on its action tokens; per layer and head of any delta-rule model: the "
        "share of beta > 1 and of near-reflections, of negative gates, the smallest transition eigenvalue and the "
        "effective rank of S_t.",
    ),
    "dictionaries.py": (
        "Dictionaries",
        "A sparse dictionary (TopK SAE) of one head's state, trained on held-out traces: its latents ranked by the "
        "fact 'variable x holds value v' each matches, one latent along a trace beside the truth, and the reveal "
        "accuracy with the dictionary spliced into the recurrence.",
    ),
    "beliefs.py": (
        "Beliefs",
        "Probabilistic traces: the exact posterior at every printed value next to each probabilistic "
        "checkpoint's prediction, and how an unnormalised belief decays.",
    ),
}

st.set_page_config(page_title="deltalens", layout="wide")
st.sidebar.markdown("**deltalens**: state tracking in linear RNNs")
st.sidebar.caption(f"checkpoints: `{sources_label()}`")
page = st.navigation(
    [st.Page(VIEWS / file, title=title, default=file == "checkpoints.py") for file, (title, _) in PAGES.items()]
)
title, summary = next(entry for entry in PAGES.values() if entry[0] == page.title)
st.title(title)
st.caption(summary)
try:
    page.run()
finally:  # after the page: its first render never waits on imports it does not need
    first_page_drawn(threading.current_thread())  # under `deltalens app` the preload waits for this run to end
    start_preload()  # a no-op under `deltalens app` (app/serve.py started it with the server)
