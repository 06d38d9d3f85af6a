"""The "Per-token products" section of a reproduce report, from OUT/products.json
(lab/experiments/family_products.py: probes/products.py on every finished run). No file (or no run in it), no
section."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

from deltalens.reports.figures import ARCH_LABELS
from deltalens.reports.numbers import mean_range


def _mean_of(rows: list[dict], key: str) -> str:
    """Mean of a column that files written before it existed lack ('–')."""
    values = [r[key] for r in rows if key in r]
    return f"{mean(values):.3f}" if values else "–"


def products_lines(out: Path) -> list[str]:
    file = Path(out) / "products.json"
    if not file.is_file():
        return []
    data = json.loads(file.read_text())
    if not data.get("runs"):
        return []  # no finished run probed yet
    lines = [
        "## Per-token products of reflections",
        "",
        "Does the tracking head's per-token product of reflections P_t apply the action's permutation? "
        "probes/products.py reads P_t from each run's weights and activations on held-out traces "
        f"({data['traces']} per run): the cycle type read off P_t's eigenvalues against the action's "
        "(`spectral`), and a fixed map F with P_t F = F rho(pi_t) fitted on half the traces, then each P_t of the "
        "other half decoded as the permutation that fits it best (`decoded`). The head with the best decoding is "
        "reported; it *implements* the permutations when decoded ≥ 0.9 and the median residual ≤ 0.25. "
        "`context spread`: how far P_t moves between occurrences of the same action (per √d_k; 0 when P_t is a "
        "function of the action alone). `state holds values`: the best head's linear probe of every variable's "
        "value from its state S_t at the read-out tokens (probes/linear_probes.py; chance 1/n): a head can track "
        "the state while its P_t is no fixed-basis representation. `between read-outs`: the same decoding of the "
        "product of every token's transition from one read-out to the next against the permutation composed "
        'there (`span="readout"`; best head): per-token bases that move with the context can cancel there.',
        "",
        "| group | architecture | seeds implementing | decoded (mean [min–max]) | spectral | residual "
        "| context spread | between read-outs: decoded (mean [min–max]) | state holds values (mean [min–max]) "
        "| reveal acc. 1x |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in data["runs"]:
        groups.setdefault((row["group"], row["arch"]), []).append(row)
    for (group, arch), rows in groups.items():
        decoded = [r["decoded_accuracy"] for r in rows]
        accuracy = [r["reveal_accuracy_1x"] for r in rows if r["reveal_accuracy_1x"] is not None]
        lines.append(
            f"| {group} | {ARCH_LABELS.get(arch, arch)} | {sum(r['implements'] for r in rows)} of {len(rows)} "
            f"| {mean_range(decoded)} | {mean(r['spectral_agreement'] for r in rows):.3f} "
            f"| {mean(r['heldout_residual'] for r in rows):.3f} | {_mean_of(rows, 'context_spread')} "
            f"| {mean_range([r['readout_decoded_accuracy'] for r in rows if 'readout_decoded_accuracy' in r])} "
            f"| {mean_range([r['state_value_accuracy'] for r in rows if 'state_value_accuracy' in r])} "
            f"| {f'{mean(accuracy):.3f}' if accuracy else '–'} |"
        )
    if data.get("missing_checkpoints"):
        lines += ["", f"Runs without a checkpoint here (not probed): {', '.join(data['missing_checkpoints'])}."]
    return [*lines, ""]
