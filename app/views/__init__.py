"""The dashboard's pages, one file each (run by Home.py through st.navigation)."""
