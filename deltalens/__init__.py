"""deltalens: a mechanistic-interpretability workbench for state tracking in linear RNNs.

The one import root. Its rooms are top-level folders of the repository, mapped under this name
by pyproject.toml, and each imports only the rooms before it:

    deltalens.tasks     groups, REPL traces, PFSA-SR beliefs, tokenizers, datasets
    deltalens.models    DeltaNet (fla-compatible), Transformer and LSTM baselines, checkpoint files
    deltalens.training  training loop, configs, held-out evaluation, export, the experiment grid
    deltalens.interp    capture, interventions, head sweeps on trained models
    deltalens.probes    measurements of captures: eigenvalues, subspaces, linear probes
    deltalens.reports   the reproduce report: claims, tables, figures
    deltalens.cli       the `deltalens` command (parsing and printing only)
    deltalens.app       the Streamlit dashboard
"""

__version__ = "0.1.0"
