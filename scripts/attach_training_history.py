"""Give shipped checkpoints the training history of a rerun of their own train.toml, by the rule of
docs/training-curves.md (stated before the comparison): the same weights -> its history; within 1e-4 and the
same accuracies (0.005) -> its history, marked as a rerun's; otherwise the rerun's weights, with their history.

    deltalens train checkpoints/NAME/train.toml --out runs/retrain/NAME --export RETRAINED/NAME   # per name
    python3 scripts/attach_training_history.py --retrained RETRAINED [--apply] NAME ...

Prints one JSON record per checkpoint and, with --apply, changes checkpoints/NAME (config.json; for a
replacement also model.safetensors) and writes the table into docs/training-curves.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[1]
WEIGHT_TOLERANCE = 1e-4
ACCURACY_TOLERANCE = 0.005
TABLE = ("<!-- curves -->", "<!-- /curves -->")


def accuracies(meta: dict) -> dict[str, float]:
    """Every held-out accuracy a config records: at the end of training, and the saved eval per length."""
    metrics = meta.get("metrics") or {}
    found = {"final reveal accuracy": metrics.get("reveal_accuracy")}
    for row in (metrics.get("eval") or {}).get("lengths") or []:
        found[f"eval {row['actions']} actions"] = row.get("reveal_accuracy")
    return {key: float(value) for key, value in found.items() if value is not None}


def compare(name: str, retrained: Path) -> dict:
    shipped = REPO / "checkpoints" / name
    old, new = load_file(shipped / "model.safetensors"), load_file(retrained / "model.safetensors")
    old_meta = json.loads((shipped / "config.json").read_text())["deltalens"]
    new_meta = json.loads((retrained / "config.json").read_text())["deltalens"]
    if set(old) != set(new) or old_meta["model_config"] != new_meta["model_config"]:
        raise SystemExit(f"{name}: the rerun built another model (tensors or model_config differ)")
    bitwise = all(torch.equal(old[key], new[key]) for key in old)
    largest = max(float((old[key].double() - new[key].double()).abs().max()) for key in old)
    before, after = accuracies(old_meta), accuracies(new_meta)
    moved = max((abs(before[key] - after[key]) for key in before if key in after), default=0.0)
    if bitwise:
        verdict = "same run"
    elif largest <= WEIGHT_TOLERANCE and moved <= ACCURACY_TOLERANCE:
        verdict = "rerun history"
    else:
        verdict = "replaced"
    return {
        "name": name,
        "verdict": verdict,
        "largest_weight_difference": largest,
        "largest_accuracy_change": moved,
        "accuracy_before": before.get("final reveal accuracy"),
        "accuracy_after": after.get("final reveal accuracy"),
        "history_points": len((new_meta.get("training") or {}).get("history") or []),
    }


def this_cpu() -> str:
    """The CPU's model name and torch's vector capability (what decides the summation order)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.machine()
    return f"{model} ({torch.backends.cpu.get_cpu_capability()}), torch {torch.__version__}"


def apply(record: dict, retrained: Path) -> None:
    shipped = REPO / "checkpoints" / record["name"]
    new_config = json.loads((retrained / "config.json").read_text())
    if record["verdict"] == "replaced":  # the rerun's weights, card and config, under the shipped command
        command = json.loads((shipped / "config.json").read_text())["deltalens"]["training"]["command"]
        shutil.copyfile(retrained / "model.safetensors", shipped / "model.safetensors")
        card = (retrained / "CARD.md").read_text().replace(new_config["deltalens"]["training"]["command"], command)
        (shipped / "CARD.md").write_text(card)
        config = new_config
        config["deltalens"]["training"]["command"] = command
        config["deltalens"]["training"]["retrained_on"] = this_cpu()
    else:
        config = json.loads((shipped / "config.json").read_text())
        training = config["deltalens"]["training"]
        training["history"] = new_config["deltalens"]["training"]["history"]
        if record["verdict"] == "rerun history":
            training["history_from"] = "rerun"
            training["history_largest_weight_difference"] = record["largest_weight_difference"]
    (shipped / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def table(records: list[dict]) -> str:
    lines = [
        "| checkpoint | verdict | largest weight difference | largest accuracy change | final accuracy shipped"
        " / rerun | history points |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['name']} | {r['verdict']} | {r['largest_weight_difference']:.1e} | "
            f"{r['largest_accuracy_change']:.4f} | {r['accuracy_before']:.4f} / {r['accuracy_after']:.4f} | "
            f"{r['history_points']} |"
        )
    return "\n".join(lines)


def write_table(records: list[dict]) -> None:
    doc = REPO / "docs" / "training-curves.md"
    text = doc.read_text()
    start, end = text.index(TABLE[0]) + len(TABLE[0]), text.index(TABLE[1])
    old = [line for line in text[start:end].strip().splitlines()[2:]]
    kept = {line.split(" | ")[0].strip("| "): line for line in old}
    new = table(records).splitlines()
    for line in new[2:]:
        kept[line.split(" | ")[0].strip("| ")] = line
    body = "\n".join([*new[:2], *(kept[key] for key in sorted(kept))])
    doc.write_text(text[:start] + "\n" + body + "\n" + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--retrained", type=Path, required=True, help="the folder of the reruns' exports")
    parser.add_argument("--apply", action="store_true", help="change checkpoints/ and the docs table")
    args = parser.parse_args()
    records = [compare(name, args.retrained / name) for name in args.names]
    for record in records:
        print(json.dumps(record))
        if args.apply:
            apply(record, args.retrained / record["name"])
    if args.apply:
        write_table(records)


if __name__ == "__main__":
    main()
