"""Train a byte-level BPE tokenizer on REPL traces (the `tokenizers` library), saved as tokenizer.json.

    train_repl_bpe(TraceSpec(group="S3", actions=16, spacing=2), "tokenizer.json", vocab_size=160)

This is how the offline stand-in for a pretrained LM gets a tokenizer that is not ours: its merges
are learnt from text, so tokens cross statement boundaries ("\\n>>>", " 2\\n") the way a pretrained
LM's do, and reading a trace needs the text-level alignment (tasks/text_traces.py). Byte-level, so
any text encodes; <pad> is id 0 and <bos> id 1, as in our tokenizers.
"""

from __future__ import annotations

from pathlib import Path

from deltalens.core.errors import DeltalensError
from deltalens.tasks.traces import TraceSpec, generate_trace


def train_repl_bpe(
    spec: TraceSpec, path, vocab_size: int = 384, n_traces: int = 2000, seed: int = 0, split: str = "lines"
) -> Path:
    """Learn merges from `n_traces` traces of `spec` and write tokenizer.json to `path`.

    vocab_size: the whole vocabulary, the 256 bytes and the two specials included (so > 258).
    split: what merges may not cross: "lines" (a token never holds two lines' characters, but may
    hold a whole statement, or an output line's name and value), "words" (GPT-2's pre-split), or
    "none" (merges anywhere: "\n>>> print('" and the like)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or not 259 <= vocab_size <= 1 << 20:
        raise DeltalensError(f"vocab_size counts the 256 bytes and 2 specials, so it must be > 258, got {vocab_size!r}")
    tokenizer = Tokenizer(models.BPE())
    if split not in ("lines", "words", "none"):
        raise DeltalensError(f"split must be lines, words or none, got {split!r}")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split == "words")
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Split("\n", behavior="merged_with_previous"), byte_level])
        if split == "lines"
        else byte_level
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(  # all 256 bytes in the alphabet: any text encodes
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<bos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = (generate_trace(spec, seed * 1_000_003 + i).text for i in range(n_traces))
    tokenizer.train_from_iterator(texts, trainer=trainer, length=n_traces)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path
