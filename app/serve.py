"""The dashboard's server process: `python -m deltalens.app.serve run app/Home.py [streamlit options]`
(what `deltalens app` starts). Streamlit's own command line, after starting the imports every page
needs in a background thread (app/preload.py): they run while the server starts and the browser opens,
not during a page's first render."""

from __future__ import annotations

import sys

from deltalens.app.preload import start_preload


def main() -> int:
    start_preload()
    from streamlit.web.cli import main as streamlit_main

    return streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
