"""Can a head with 3 reflections per token decode 1.00 per action on A5 and fail between read-outs?

The A5 n_h = 3 no-conv cell decodes its actions 1.00 per action (loosely: median residual 0.29) and 0.22
between read-outs. A 5-cycle needs 4 reflections in A5's 4-dim standard representation, so 3 can only
come near it. This takes, for every 5-cycle g, the product of 3 reflections nearest rho(g) (least
squares over the 3 unit vectors, best of 8 starts), uses the exact factors for every other element
(2 reflections at most), and asks what the product probe's decoding (the nearest rho(h)) makes of single
products and of products of L random elements. No model is involved: this is the arithmetic the probe
meets in such a head.

    python3 -m lab.experiments.family_a5_puzzle [--samples 2000] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.optimize import minimize

from deltalens.cli import arguments
from deltalens.tasks.representations import _mult, cycle_type, generated_group, standard_rep
from deltalens.tasks.rotation_reps import householder_factors, icosahedron_rotations
from lab.experiments import entry


def reflection(u: np.ndarray) -> np.ndarray:
    return np.eye(len(u)) - 2 * np.outer(u, u) / np.dot(u, u)


def nearest_product(target: np.ndarray, factors: int, rng, starts: int = 8) -> np.ndarray:
    """The product of `factors` reflections nearest `target` (Frobenius), best of `starts` local fits."""
    d = len(target)

    def product(x):
        out = np.eye(d)
        for u in x.reshape(factors, d):
            out = out @ reflection(u)
        return out

    fits = [
        minimize(lambda x: np.sum((product(x) - target) ** 2), rng.standard_normal(factors * d)) for _ in range(starts)
    ]
    return product(min(fits, key=lambda r: r.fun).x)


def run(samples: int = 2000, seed: int = 0, lengths=(1, 2, 4, 8), starts: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    elements = generated_group(list(icosahedron_rotations()))
    rho = standard_rep(elements)
    applied = []
    for g, m in zip(elements, rho):
        if cycle_type(g) == (5,):
            applied.append(nearest_product(m, 3, rng, starts))
        else:
            exact = np.eye(len(m))
            for u in householder_factors(m):
                exact = exact @ reflection(u)
            applied.append(exact)
    applied = np.stack(applied)
    index = {g: i for i, g in enumerate(elements)}
    five = np.array([cycle_type(g) == (5,) for g in elements])

    def decode(M):
        return int(np.argmin(np.linalg.norm(rho - M[None], axis=(1, 2))))

    out = {
        "five_cycle_residual": float(np.mean(np.linalg.norm(applied[five] - rho[five], axis=(1, 2)) / 2)),
        "single_decoded": float(np.mean([decode(applied[i]) == i for i in range(len(elements))])),
        "compositions": [],
    }
    for length in lengths:
        hits, with_five = [], []
        for _ in range(samples):
            seq = rng.integers(0, len(elements), length)
            M, g = np.eye(len(rho[0])), tuple(range(5))
            for s in seq:
                M, g = applied[s] @ M, _mult(elements[s], g)
            hits.append(decode(M) == index[g])
            with_five.append(bool(five[seq].any()))
        hits, with_five = np.array(hits), np.array(with_five)
        out["compositions"].append(
            {
                "length": length,
                "decoded": float(hits.mean()),
                "with_a_five_cycle": float(hits[with_five].mean()) if with_five.any() else None,
                "without": float(hits[~with_five].mean()) if (~with_five).any() else None,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=arguments.COUNT, default=2000)
    parser.add_argument("--seed", type=arguments.SEED, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.samples, args.seed)
    if args.json:
        print(json.dumps(result))
        return
    print(
        "5-cycles by their nearest 3 reflections: residual ||M - rho(g)|| / ||I|| "
        f"{result['five_cycle_residual']:.3f}; "
        f"single products decoded {result['single_decoded']:.3f}"
    )
    for row in result["compositions"]:
        parts = [f"with a 5-cycle {row['with_a_five_cycle']:.3f}" if row["with_a_five_cycle"] is not None else ""]
        parts.append(f"without {row['without']:.3f}" if row["without"] is not None else "")
        print(f"  product of {row['length']}: decoded {row['decoded']:.3f} ({', '.join(p for p in parts if p)})")


if __name__ == "__main__":
    entry.run(main)
