"""The file format: the family's configs (fla's fields and defaults, without importing fla) and the
one reader and writer of a Hugging Face folder (config.json + model.safetensors, written atomically).
"""
