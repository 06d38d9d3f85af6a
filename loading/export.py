"""Export a finished run as a shipped checkpoint: weights, config, training config and a model card.

The shipped directory holds no optimiser state (a few hundred KB instead of a few MB) and is
written atomically together with `train.toml` (the config it was trained from) and `CARD.md`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.loading.evaluate_checkpoint import evaluate_checkpoint
from deltalens.loading.opened import open_checkpoint
from deltalens.models.checkpoint import is_replaceable
from deltalens.tasks.prob_spec import ProbTraceSpec
from deltalens.tasks.tokenizers.hf import missing_tokenizer
from deltalens.training.belief_kl import belief_kl
from deltalens.training.loop import LAST, training_history

# besides the weights and config.json (the tokenizer files of an hf tokenizer: tokenizers/hf.py)
EXPORTED_FILES = {"train.toml", "CARD.md", "tokenizer.json", "tokenizer_config.json"}


def check_export_target(target: str | Path, replace: bool = False, run_dir: str | Path | None = None) -> None:
    """Refuse to export over a checkpoint (a shipped one, say) or anything else already at `target`
    unless `replace`; a folder holding only the config the export is to sit beside is fine. Also, before any
    training: a target inside the run folder `run_dir`, or where nothing can be written."""
    target = Path(target)
    if run_dir is not None and target.resolve().is_relative_to(Path(run_dir).resolve()):
        raise DeltalensError(
            f"--export {target} is the run folder (--out {run_dir}) or inside it: export beside the run, not into it"
        )
    parent = next((p for p in [target, *target.parents] if p.exists()), Path("."))
    if not os.access(parent, os.W_OK):
        raise DeltalensError(f"cannot write --export {target}: {parent} is not writable (nothing was trained)")
    fresh = target.is_dir() and {p.name for p in target.iterdir()} <= EXPORTED_FILES
    if target.exists() and replace and not is_replaceable(target, EXPORTED_FILES):
        raise DeltalensError(
            f"--export {target} holds files that are not a checkpoint's; --replace overwrites only a "
            "checkpoint folder: choose another folder (nothing was written)"
        )
    if target.exists() and not fresh and not replace:
        raise DeltalensError(
            f"--export {target} already exists; pass --replace to overwrite it with this run's "
            "export, or choose another folder (nothing was written)"
        )


def export_run(
    run_dir: str | Path,
    target: str | Path,
    config_text: str,
    command: str,
    n_traces: int = 512,
    replace: bool = False,
) -> dict[str, Any]:
    """Evaluate `run_dir/last` at 1x, 2x and 4x its training length and write it to `target`
    (an existing `target` only with `replace`)."""
    check_export_target(target, replace)
    last = Path(run_dir) / LAST
    if not last.is_dir():
        raise DeltalensError(f"{run_dir} has no finished checkpoint ({last} is missing); train it first")
    meta = models.read_checkpoint_meta(last)
    report = evaluate_checkpoint(last, n_traces=n_traces)  # reveal as in training ("one" for mixed)
    if _probabilistic(meta):  # reveals follow full_reveal_prob; the measure is KL to the exact belief
        reports = [report]
        kl = belief_kl_report(last, n_random=n_traces)
        metrics = {**(meta.get("metrics") or {}), "eval": report, "belief_kl": kl}
    else:
        other = "all" if report["reveal"] == "one" else "one"
        reports = [report, evaluate_checkpoint(last, n_traces=n_traces, reveal=other)]
        kl = None
        metrics = {**(meta.get("metrics") or {}), "eval": report, f"eval_reveal_{other}": reports[1]}
    extra = {key: meta[key] for key in ("tokenizer", "task", "training")}
    history = training_history(last)  # the curves the Checkpoints page draws, kept with the model
    extra["training"] = {**extra["training"], "command": command, **({"history": history} if history else {})}
    card = model_card(Path(target).name, meta, reports, command, kl, where=str(target))
    tokenizer = open_checkpoint(last, load_model=False).tokenizer
    if tokenizer is None:  # evaluate_checkpoint above encoded with it: a run without one stops there
        raise DeltalensError(missing_tokenizer(last))
    models.save(
        models.load(last),
        target,
        extra={**extra, "metrics": metrics},
        files={"train.toml": config_text, "CARD.md": card, **tokenizer.files()},
    )
    return report


def _probabilistic(meta: dict[str, Any]) -> bool:
    return str(meta["training"]["config"]["task"].get("tokenizer", "")).endswith("-prob")


def belief_kl_report(
    checkpoint: Path, n_random: int = 512, n_adversarial: int = 128, cycles: int = 16
) -> dict[str, Any]:
    """KL(exact posterior predictive || model) on held-out random and adversarial traces
    (training/belief_kl.py), as JSON: mean per kind and the table by partial reveals."""
    opened = open_checkpoint(checkpoint)
    data, model = opened.require_task(), opened.model
    spec = data.eval_spec()
    if not isinstance(spec, ProbTraceSpec):
        raise DeltalensError(f"{checkpoint} was trained on deterministic traces; belief KL needs a probabilistic task")
    result = belief_kl(model, data.tokenizer, spec, n_random=n_random, n_adversarial=n_adversarial, cycles=cycles)
    return {
        "n_random": n_random,
        "n_adversarial": n_adversarial,
        "adversarial_cycles": cycles,
        "spacing": data.task.eval_spacing,
        "mean_kl": result.summary(),
        "by_partial_reveals": result.table().to_dict(orient="records"),
    }


def model_card(
    name: str,
    meta: dict[str, Any],
    reports: list[dict[str, Any]],
    command: str,
    kl: dict[str, Any] | None = None,
    where: str | None = None,
) -> str:
    """The CARD.md of an export; `where`: the folder as the export command named it (a shipped one's is
    checkpoints/NAME), which the card's eval command opens."""
    config = meta["training"]["config"]
    task, model = config["task"], config["model"]
    report = reports[0]
    rows = "\n".join(
        f"| `{rep['reveal']}` | {r['actions']} ({r['x_train']:g}x) | {r['reveal_accuracy']:.4f} "
        f"| {r['trace_accuracy']:.4f} | {r['n_reveals']} |"
        for rep in reports
        for r in rep["lengths"]
    )
    arch = ", ".join(f"{k}={v}" for k, v in model.items())
    schedule = sorted(task["spacing_schedule"])
    spacing = schedule if schedule and schedule[0][0] == 0 else [[0, *task["spacing"]], *schedule]
    lo, hi = task["actions"]
    training, seed = meta["training"], config["run"]["seed"]
    return f"""# {name}

* **Task:** {task["group"]} `{task["action_set"]}`, `{task["tokenizer"]}` tokenizer, {lo}-{hi} actions
  per trace, reveal `{task["reveal"]}`, supervision `{task["supervision"]}`; reveal spacing
  schedule `[from_step, lo, hi]`: {spacing}.
* **Model:** {arch}.
* **Training:** {training["step"]} steps, {training["wall_time_s"]:.0f} s of training wall time, seed {seed}.
* **Command:** `{command}`

## Held-out evaluation

Fresh traces from the evaluation split (seeds never used in training), reveal spacing
{report["spacing"]}, {report["n_traces"]} traces per length. Reveal accuracy: fraction of revealed values
predicted right (argmax over the whole vocabulary); trace accuracy: every reveal of a trace right.
Reveal `one` prints one random variable (`print('a', a)`), `all` prints every variable, `pfsa`
one or all by the probabilistic family's full_reveal_prob.

| reveal | actions | reveal accuracy | trace accuracy | reveals |
|---|---|---|---|---|
{rows}

{_skipped_lines(reports)}Reproduce with `deltalens eval {where or f"checkpoints/{name}"}`.
""" + (_kl_section(kl) if kl else "")


def _skipped_lines(reports: list[dict[str, Any]]) -> str:
    skipped = {s["actions"]: s["error"] for rep in reports for s in rep.get("skipped", [])}
    return "".join(f"Not evaluated at {actions} actions: {error}\n\n" for actions, error in sorted(skipped.items()))


def _kl_section(kl: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {r['kind']} | {r['partial_reveals']} | {r['kl']:.4f} | {r['value_mass']:.3f} | {r['count']} |"
        for r in kl["by_partial_reveals"]
        if r["count"] >= 20
    )
    means = ", ".join(f"{kind} {value:.4f}" for kind, value in kl["mean_kl"].items())
    return f"""
## Belief (PFSA-SR)

Reveals of probabilistic traces are samples, so accuracy is bounded by chance; what counts is
KL(exact posterior predictive ‖ model predictive) in nats at each printed value (the model's
next-token distribution restricted to the value tokens), by the number of partial reveals since
the last full reveal: {kl["n_random"]} held-out random traces at spacing {kl["spacing"]}, and
{kl["n_adversarial"]} adversarial traces of {kl["adversarial_cycles"]} mix/leak/reveal cycles
(tasks/adversary.py). Mean KL: {means}. Rows with at least 20 reveals:

| traces | partial reveals | mean KL | mass on values | reveals |
|---|---|---|---|---|
{rows}
"""
