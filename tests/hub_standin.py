"""Put the shipped BPE DeltaNet into a Hugging Face cache as a Hub model, so the "Open a pretrained LM"
commands run offline exactly as they run on fla-hub's models.

    python3 tests/hub_standin.py [--hf-home DIR] [--repo deltalens/s3-deltanet-bpe]
    HF_HOME=DIR HF_HUB_OFFLINE=1 deltalens eval deltalens/s3-deltanet-bpe

The copy is what a model on the Hub looks like: fla's config.json alone (no deltalens section, so no
task: deltalens asks it S3 text traces by default), model.safetensors, its tokenizer.json, a README.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STANDIN = ROOT / "checkpoints" / "s3-deltanet-bpe"
REPO = "deltalens/s3-deltanet-bpe"


def put_standin(hf_home, repo: str = REPO) -> Path:
    """The snapshot folder of the stand-in inside `hf_home`/hub."""
    from deltalens import models
    from deltalens.models.io.hub import put_in_cache

    with tempfile.TemporaryDirectory() as staging:
        folder = Path(staging) / "model"
        models.load(STANDIN).save_pretrained(folder)  # fla's files only
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy2(STANDIN / name, folder / name)
        shutil.copy2(STANDIN / "CARD.md", folder / "README.md")
        return put_in_cache(folder, repo, cache=Path(hf_home) / "hub")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    parser.add_argument("--hf-home", default=default, help=f"the HF_HOME to write into (default {default})")
    parser.add_argument("--repo", default=REPO, help=f"the Hub id it gets (default {REPO})")
    args = parser.parse_args(argv)
    snapshot = put_standin(args.hf_home, args.repo)
    print(f"{args.repo} -> {snapshot}")
    print(f"HF_HOME={args.hf_home} HF_HUB_OFFLINE=1 deltalens eval {args.repo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
