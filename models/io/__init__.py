"""The file format, below the language models: the family's typed configs (configs.py: fla's fields and
defaults without importing fla; config_checks.py: the one check of their fields), the one writer and the
low-level reader of a Hugging Face folder (hf_folder.py: config.json + model.safetensors, written
atomically), our "deltalens" section of config.json (deltalens_section.py), a folder read and checked once
(model_folder.py), and the one way in by name (named_folder.py: a folder, a shipped checkpoint's name or a Hub id,
hub.py fetching the last).
"""
