"""The Streamlit dashboard over the checkpoints (it imports every room; none imports it).

Home.py is the entry (`deltalens app`, or `streamlit run app/Home.py`); views/ holds one file per
page; common.py the caching, the trace view and the error sentences the pages share.
"""
