"""Saved models: opened, listed, evaluated, exported.

opened.py               dl.load / open_checkpoint: a folder, shipped name or hub id (its kind decided once and
                        the folder read in one pass by models/io/named_folder.py) with its tokenizer and task
                        (the CLI's default task where it records none)
listing.py              list_checkpoints, checkpoint rows and model cards from saved files alone (no torch)
evaluate_checkpoint.py  a saved checkpoint's accuracy at several lengths, or on transcripts from a file
export.py               a finished training run as a shipped checkpoint with its model card

Above training/ (a checkpoint's task is a training config's [task] and its data stream), below everything
that opens models by name.
"""
