"""The deltalens dashboard: `deltalens app` or `streamlit run app/Home.py`.

Pages (app/views/): Checkpoints, Trace explorer, Heads, Interventions, Beliefs. The checkpoint
folder is $DELTALENS_APP_CHECKPOINTS (set by `deltalens app --checkpoints DIR`), else the shipped
checkpoints/.
"""

from pathlib import Path

import streamlit as st

from deltalens.app.common import checkpoint_dir

VIEWS = Path(__file__).resolve().parent / "views"

st.set_page_config(page_title="deltalens", layout="wide")
st.sidebar.markdown("**deltalens**: state tracking in linear RNNs")
st.sidebar.caption(f"checkpoints: `{checkpoint_dir()}`")
page = st.navigation(
    [
        st.Page(VIEWS / "checkpoints.py", title="Checkpoints", default=True),
        st.Page(VIEWS / "trace_explorer.py", title="Trace explorer"),
        st.Page(VIEWS / "heads.py", title="Heads"),
        st.Page(VIEWS / "interventions.py", title="Interventions"),
        st.Page(VIEWS / "beliefs.py", title="Beliefs"),
    ]
)
page.run()
