#!/usr/bin/env bash
# Retrain shipped checkpoints from their committed configs, one after another:
#   bash scripts/train_checkpoints.sh s3-deltanet-neg-statement s5-deltanet-neg-statement ...
# (no names: all of checkpoints/*). A run killed half-way resumes where its last checkpoint left it.
set -euo pipefail
cd "$(dirname "$0")/.."
names=("$@")
[ ${#names[@]} -gt 0 ] || names=($(ls checkpoints))
for name in "${names[@]}"; do
    resume=()
    [ -f "runs/$name/last/trainer_state.json" ] && resume=(--resume)
    deltalens train "checkpoints/$name/train.toml" --out "runs/$name" "${resume[@]}" \
        --export "checkpoints/$name" --replace
done
