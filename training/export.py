"""Export a finished run as a shipped checkpoint: weights, config, training config and a model card.

The shipped directory holds no optimiser state (a few hundred KB instead of a few MB) and is
written atomically together with `train.toml` (the config it was trained from) and `CARD.md`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import models
from tasks.errors import DeltalensError
from training.evaluate import evaluate_checkpoint
from training.loop import LAST


def export_run(run_dir: str | Path, target: str | Path, config_text: str, command: str, n_traces: int = 512) -> dict[str, Any]:
    """Evaluate `run_dir/last` at 1x, 2x and 4x its training length and write it to `target`."""
    last = Path(run_dir) / LAST
    if not last.is_dir():
        raise DeltalensError(f"{run_dir} has no finished checkpoint ({last} is missing); train it first")
    meta = models.read_checkpoint_meta(last)
    report = evaluate_checkpoint(last, n_traces=n_traces)  # reveal as in training ("one" for mixed)
    other = "all" if report["reveal"] == "one" else "one"
    report_other = evaluate_checkpoint(last, n_traces=n_traces, reveal=other)
    metrics = {**(meta.get("metrics") or {}), "eval": report, f"eval_reveal_{other}": report_other}
    extra = {key: meta[key] for key in ("tokenizer", "task", "training")}
    extra["training"] = {**extra["training"], "command": command}
    card = model_card(Path(target).name, meta, [report, report_other], command)
    models.save(models.load(last), target, extra={**extra, "metrics": metrics},
                files={"train.toml": config_text, "CARD.md": card})
    return report


def model_card(name: str, meta: dict[str, Any], reports: list[dict[str, Any]], command: str) -> str:
    config = meta["training"]["config"]
    task, model = config["task"], config["model"]
    report = reports[0]
    rows = "\n".join(
        f"| `{rep['reveal']}` | {r['actions']} ({r['x_train']:g}x) | {r['reveal_accuracy']:.4f} "
        f"| {r['trace_accuracy']:.4f} | {r['n_reveals']} |"
        for rep in reports for r in rep["lengths"]
    )
    arch = ", ".join(f"{k}={v}" for k, v in model.items())
    schedule = sorted(task["spacing_schedule"])
    spacing = schedule if schedule and schedule[0][0] == 0 else [[0, *task["spacing"]], *schedule]
    return f"""# {name}

* **Task:** {task['group']} `{task['action_set']}`, `{task['tokenizer']}` tokenizer, {task['actions'][0]}-{task['actions'][1]} actions
  per trace, reveal `{task['reveal']}`, supervision `{task['supervision']}`; reveal spacing
  schedule `[from_step, lo, hi]`: {spacing}.
* **Model:** {arch}.
* **Training:** {meta['training']['step']} steps, {meta['training']['wall_time_s']:.0f} s of training wall time, seed {config['run']['seed']}.
* **Command:** `{command}`

## Held-out evaluation

Fresh traces from the evaluation split (seeds never used in training), reveal spacing
{report['spacing']}, {report['n_traces']} traces per length. Reveal accuracy: fraction of revealed values
predicted right (argmax over the whole vocabulary); trace accuracy: every reveal of a trace right.
Reveal `one` prints one random variable (`print('a', a)`), `all` prints every variable.

| reveal | actions | reveal accuracy | trace accuracy | reveals |
|---|---|---|---|---|
{rows}

Reproduce with `deltalens eval checkpoints/{name}`.
"""
