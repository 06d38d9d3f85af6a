"""The Streamlit dashboard over the shipped checkpoints (it imports every room; none imports it)."""
