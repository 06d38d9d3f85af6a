"""The ``hf`` tokenizer: a model folder's own tokenizer (tokenizer.json, or a SentencePiece
tokenizer.model) via transformers' AutoTokenizer, behind the interface of ours.

    tok = HFTokenizer.from_folder("path/to/model")     # or HFTokenizer.from_file("tokenizer.json")
    tok.encode(text), tok.decode(ids), tok.pieces(ids)   # as every deltalens tokenizer
    tok.encode_trace(trace)                               # labels per token from the text's offsets

encode_trace writes the trace as text (tasks/text_traces.py: names, value words and solved examples
from `text_format`), tokenizes it with character offsets and carries each character's labels onto
the tokens, so reveal accuracy, probes and interventions read a BPE model as they read ours. Special
ids are the tokenizer's own: <bos> is its bos token (none if it has none), padding its pad token
(else 0, which only padding positions ever hold: scoring and probes read masks, not ids).

The spec records the recipe (kind "hf", the file it is read from, the text format) and a sha256
fingerprint of the vocabulary, checked when a checkpoint is reopened; the tokenizer itself is the
file beside the weights.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, TypeGuard

from deltalens.core.errors import DeltalensError
from deltalens.tasks.groups import MAX_N
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.tasks.text_traces import AlignedTrace, TextFormat, align, render
from deltalens.tasks.tokenizers.base import SPEC_FORMAT, SPEC_VERSION, Tokenizer
from deltalens.tasks.traces import Trace, TraceSpec

PROBE_TEXT = ">>> a = 1\n>>> b = 2\n>>> a, b = b, a\n>>> print('a', a)\na 2\n" + "a" * 64 + "\n"  # read at load
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")  # what makes a folder's tokenizer (either one)
HF_KIND = "hf"


def missing_tokenizer(where) -> str:
    """The one sentence for a model folder with no tokenizer: what to add, and where."""
    return (
        f"{where} has no tokenizer, so text and REPL traces cannot be encoded for it: copy the tokenizer.json (or "
        "tokenizer.model) the model was trained with into that folder, beside its config.json, and open it again "
        "(a deltalens checkpoint records its own; token ids work without one)."
    )


HF_PREFIX = "hf:"  # task.tokenizer = "hf:PATH": a tokenizer.json file or a folder holding one


def refuse_folder_code(config_file: Path) -> None:
    """Refuse a tokenizer_config.json / config.json whose `auto_map` names Python classes of the folder:
    deltalens never runs code from a model folder, whatever a terminal prompt would answer."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    except (OSError, ValueError):
        return  # the reader after this one names what is wrong with the file
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if config_file.name == "config.json" and isinstance(auto_map, dict):
        auto_map = {k: v for k, v in auto_map.items() if "Tokenizer" in k}  # the model's own classes are not read
    if auto_map:
        raise DeltalensError(
            f"{config_file} asks to run Python code from its folder (auto_map); deltalens never runs code from a "
            f"model folder, so remove auto_map (a tokenizer.json alone is read without code)"
        )


def has_tokenizer(folder) -> bool:
    return any((Path(folder) / name).is_file() for name in TOKENIZER_FILES)


class HFTokenizer(Tokenizer):
    """A transformers tokenizer with deltalens's labels; `text_format` says how traces are written."""

    kind = HF_KIND

    def __init__(self, hf, source: str = "", text_format: TextFormat | None = None):
        super().__init__(MAX_N)
        self.hf, self.source = hf, source
        self.text_format = text_format or TextFormat()
        if not getattr(hf, "is_fast", False):
            raise DeltalensError(
                f"the tokenizer of {source or 'this model'} is not a fast (Rust) tokenizer, so it gives no character "
                "offsets; save it as tokenizer.json (tokenizer.save_pretrained) or install sentencepiece and protobuf "
                "so transformers can convert tokenizer.model"
            )
        self.bos_id = hf.bos_token_id  # None: the tokenizer has no <bos>, and nothing is put first
        self.pad_id = hf.pad_token_id if hf.pad_token_id is not None else 0
        self._specials = frozenset(hf.all_special_ids)
        self._size = len(hf)
        self._tokenize(PROBE_TEXT)  # a pre-tokenizer that cannot read a trace is refused here, at load

    def _tokenize(self, text: str, **options):
        """The tokenizer on `text`; a regular expression of its pre-tokenizer that backtracks past Oniguruma's
        retry limit (a Rust panic, not an Exception) becomes one sentence."""
        try:
            return self.hf(text, add_special_tokens=False, **options)
        except BaseException as err:
            if type(err).__name__ != "PanicException":
                raise
            reason = str(err).strip().splitlines()[0] if str(err).strip() else "a panic"
            raise DeltalensError(
                f"the tokenizer of {self.source or 'this model'} cannot split REPL text: its pre-tokenizer's regular "
                f"expression backtracks past the regex engine's limit ({reason}); use a tokenizer.json with a simpler "
                f"pattern"
            ) from None

    # --- construction ---
    @classmethod
    def from_folder(cls, folder, text_format: TextFormat | None = None) -> HFTokenizer:
        folder = Path(folder)
        if not has_tokenizer(folder):
            raise DeltalensError(f"{folder} holds no tokenizer ({' or '.join(TOKENIZER_FILES)})")
        if not (folder / "tokenizer_config.json").is_file() and (folder / "tokenizer.json").is_file():
            return cls.from_file(folder / "tokenizer.json", text_format)  # a bare tokenizers file
        for name in ("tokenizer_config.json", "config.json"):  # AutoTokenizer reads a tokenizer class from both
            refuse_folder_code(folder / name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from transformers import AutoTokenizer, PretrainedConfig

                # trust_remote_code never left to transformers' "run custom code? [y/N]" prompt at a terminal; a
                # blank config so config.json (a delta_net type transformers may not know) is not read for it
                hf = AutoTokenizer.from_pretrained(
                    str(folder), config=PretrainedConfig(), local_files_only=True, trust_remote_code=False
                )
        except Exception as err:  # transformers raises many kinds (OSError, ValueError, ImportError, ...)
            text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            hint = " (pip install sentencepiece protobuf)" if "sentencepiece" in text.lower() else ""
            raise DeltalensError(f"the tokenizer in {folder} cannot be read: {text}{hint}") from None
        return cls(hf, str(folder), text_format)

    @classmethod
    def from_file(cls, path, text_format: TextFormat | None = None) -> HFTokenizer:
        """A tokenizer.json file (or a folder holding one) as written by the tokenizers library."""
        path = Path(path).expanduser()
        if path.is_dir():
            return cls.from_folder(path, text_format)
        if not path.is_file():
            raise DeltalensError(f"tokenizer file {path} does not exist")
        try:
            from transformers import PreTrainedTokenizerFast

            hf = PreTrainedTokenizerFast(tokenizer_file=str(path))
        except Exception as err:
            raise DeltalensError(f"{path} is not a tokenizers JSON file ({type(err).__name__}: {err})") from None
        # the specials by their usual names, when the vocabulary has them
        vocab = hf.get_vocab()
        for role, names in (("bos_token", ("<bos>", "<s>", "<|endoftext|>")), ("pad_token", ("<pad>",))):
            for name in names:
                if name in vocab:
                    hf.add_special_tokens({role: name})
                    break
        return cls(hf, str(path), text_format)

    def with_format(self, text_format: TextFormat) -> HFTokenizer:
        """The same tokenizer writing traces in another format."""
        return HFTokenizer(self.hf, self.source, text_format)

    # --- the Tokenizer interface ---
    @property
    def vocab_size(self) -> int:
        return self._size

    def token_of(self, token_id: int) -> str:
        if not 0 <= int(token_id) < self._size:
            raise DeltalensError(f"token id {token_id} is outside the vocabulary (0..{self._size - 1}).")
        raw = self.hf.convert_ids_to_tokens(int(token_id))
        if int(token_id) in self._specials:
            return raw
        text = self.hf.decode([int(token_id)], clean_up_tokenization_spaces=False)
        if raw[:1] in ("▁", "Ġ") and not text.startswith(" "):
            text = " " + text  # SentencePiece and byte-level BPE drop a leading space decoding one token
        return text

    def describe(self) -> str:
        return f"hf ({Path(self.source).name or 'in memory'}, {self._size} tokens)"

    def check_spec(self, spec: TraceSpec | ProbTraceSpec) -> None:
        self.text_format.check(spec.n)

    def encode(self, text: str) -> list[int]:
        return list(self._tokenize(text)["input_ids"])

    def decode(self, ids) -> str:
        keep = [int(i) for i in ids if int(i) not in self._specials]
        return self.hf.decode(keep, clean_up_tokenization_spaces=False)

    def encode_trace(self, trace: Trace[Any], add_bos: bool = True) -> AlignedTrace:
        rendered = render(trace, self.text_format)
        found = self._tokenize(rendered.text, return_offsets_mapping=True)
        return align(rendered, found["input_ids"], found["offset_mapping"], self.bos_id if add_bos else None)

    def files(self) -> dict[str, str]:
        """The files that hold this tokenizer, to write beside a checkpoint's weights."""
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",  # what transformers' AutoTokenizer builds from it
            "bos_token": self.hf.bos_token,
            "pad_token": self.hf.pad_token,
            "model_max_length": 1_000_000,
        }
        return {
            "tokenizer.json": self.hf.backend_tokenizer.to_str(pretty=True),
            "tokenizer_config.json": json.dumps({k: v for k, v in config.items() if v is not None}, indent=2) + "\n",
        }

    # --- the spec ---
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for token, index in sorted(self.hf.get_vocab().items(), key=lambda item: item[1]):
            digest.update(f"{index}\x00{token}\x00".encode())
        return "sha256:" + digest.hexdigest()

    def to_spec(self) -> dict[str, Any]:
        return {
            "format": SPEC_FORMAT,
            "version": SPEC_VERSION,
            "kind": HF_KIND,
            "file": "tokenizer.json",
            "text_format": self.text_format.to_dict(),
            "vocab_size": self.vocab_size,
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "fingerprint": self.fingerprint(),
        }

    @classmethod
    def build_from_spec(cls, spec: dict[str, Any]) -> Tokenizer:
        raise DeltalensError(
            "an hf tokenizer is read from the tokenizer.json beside the weights, not from its spec alone; "
            "open the checkpoint folder (deltalens.load)"
        )

    @classmethod
    def from_spec_in(cls, folder, spec: dict[str, Any]) -> HFTokenizer:
        """The tokenizer a checkpoint's spec names, read from its folder and checked against the spec."""
        tokenizer = cls.from_file(Path(folder) / spec.get("file", "tokenizer.json"))
        tokenizer = tokenizer.with_format(TextFormat.from_dict(spec.get("text_format")))
        if spec.get("fingerprint") and spec["fingerprint"] != tokenizer.fingerprint():
            raise DeltalensError(
                f"the tokenizer.json in {folder} is not the one this checkpoint was trained with (its vocabulary "
                "differs from the recorded fingerprint); restore the checkpoint's own tokenizer.json"
            )
        return tokenizer


def load_hf_tokenizer(path, text_format: TextFormat | dict | None = None) -> HFTokenizer:
    """`task.tokenizer = "hf:PATH"`: the tokenizer at PATH (a tokenizer.json or a model folder)."""
    if isinstance(text_format, dict):
        text_format = TextFormat.from_dict(text_format)
    return HFTokenizer.from_file(path, text_format)


def spec_is_hf(spec: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(spec, dict) and spec.get("kind") == HF_KIND


# not one of the kinds Tokenizer.from_spec rebuilds from a spec alone (the table of tokenizers/__init__.py):
# an hf tokenizer is its file, read with HFTokenizer.from_spec_in(folder, spec)
Tokenizer.kinds.pop(HF_KIND, None)
