"""The dashboard's server process: `python -m deltalens.app.serve run app/Home.py [streamlit options]`
(what `deltalens app` starts). Streamlit's own command line, after starting the imports every page
needs in a background thread (app/preload.py): the first page's light ones while the server starts and
the browser opens, then torch and the rest once that first page is drawn (or after FIRST_PAGE_WAIT
seconds without a visitor), so that neither a page's first render nor the first page waits for them."""

from __future__ import annotations

import sys

from deltalens.app.preload import FIRST_PAGE_WAIT, start_preload


def main() -> int:
    # streamlit first: importing it draws plotly objects, and plotly takes a pandas or numpy it finds in
    # sys.modules as imported; one the preload thread was still importing crashed the server (2 starts in 4)
    from streamlit.web.cli import main as streamlit_main

    start_preload(wait=FIRST_PAGE_WAIT)
    return streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
