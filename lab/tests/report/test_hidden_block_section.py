"""The hidden-block table and its verdict rule (lab/experiments/report/hidden_block_section.py), on made-up records."""

import json

from lab.experiments.report.hidden_block_section import (
    behind,
    hidden_block_figure,
    hidden_block_lines,
    read_records,
    verdict,
)

HORIZONS = (10, 300)


def record(arch: str, seed: int, kl: dict[int, float]) -> dict:
    return {
        "checkpoint": f"{arch}-s{seed}",
        "spec": {"group": "S4", "hidden_block": 3, "swap_prob": 0.3, "actions": 32, "query_prob": 0.2},
        "query_kl": {str(h): {"kl": v} for h, v in kl.items()},
        "family_kl": 0.1,
        "state_norms": {"cycles": [1, 300], "norms": {} if arch == "transformer" else {"L0H0": [1.0, 2.0]}},
        "probes": {"r2_joint": 0.5, "r2_marginal": 0.7, "query_tv": {"50": 0.3, "300": 0.4}},
    }


def write(folder, kls: dict[str, list[dict[int, float]]]):
    for arch, per_seed in kls.items():
        for seed, kl in enumerate(per_seed):
            (folder / f"{arch}-s{seed}.json").write_text(json.dumps(record(arch, seed, kl)))
    guesses = {
        "eps": 0.8,
        "by_horizon": {str(h): {"uniform": 0.775, "last_reveal": 0.7, "block_mass": 1e-3} for h in HORIZONS},
    }
    (folder / "guesses.json").write_text(json.dumps(guesses))


def test_behind_needs_the_margin_and_two_of_three_seeds():
    lstm = {0: 0.10, 1: 0.10, 2: 0.10}
    assert behind({0: 0.30, 1: 0.30, 2: 0.05}, lstm)  # mean gap 0.117, 2 of 3 seeds worse
    assert not behind({0: 0.40, 1: 0.05, 2: 0.05}, lstm)  # mean gap 0.067 but 1 of 3 seeds
    assert not behind({0: 0.13, 1: 0.13, 2: 0.13}, lstm)  # every seed worse, gap 0.03 < margin
    assert behind({0: 0.3, 1: 0.3}, lstm) is None  # not 3 seeds in common


def test_verdicts_holds_mixed_fails_and_not_measured(tmp_path):
    flat, rising = {10: 0.1, 300: 0.1}, {10: 0.1, 300: 0.6}
    write(tmp_path, {"deltanet-neg": [rising] * 3, "deltanet-pos": [flat] * 3, "lstm": [flat] * 3})
    by_arch, _ = read_records(tmp_path)
    assert verdict(by_arch, 10)[0] == "fails"
    assert verdict(by_arch, 300)[0] == "mixed"
    by_arch["deltanet-pos"] = by_arch["deltanet-neg"]
    assert verdict(by_arch, 300)[0] == "**holds**"
    del by_arch["lstm"]
    assert verdict(by_arch, 300)[0] == "not measured"


def test_each_lstm_is_compared_with_the_linear_models_of_its_own_budget(tmp_path):
    flat, rising = {10: 0.1, 300: 0.1}, {10: 0.1, 300: 0.6}
    write(
        tmp_path,
        {
            "deltanet-neg": [rising] * 3,
            "deltanet-pos": [rising] * 3,
            "lstm": [flat] * 3,
            "deltanet-neg-6k": [flat] * 3,
            "lstm-6k": [flat] * 3,
        },
    )
    by_arch, _ = read_records(tmp_path)
    assert verdict(by_arch, 300, "lstm")[0] == "**holds**"
    # the 1,500-step linear models never stand in for the 6,000-step ones
    result, measured = verdict(by_arch, 300, "lstm-6k")
    assert result == "not measured" and measured == "needs 3 seeds of DeltaNet β∈[0,1], 6,000 steps at this horizon"
    by_arch["deltanet-pos-6k"] = by_arch["deltanet-pos"]
    result, measured = verdict(by_arch, 300, "lstm-6k")
    assert result == "mixed" and "DeltaNet β∈[0,2], 6,000 steps 0.100 (not behind)" in measured
    text = "\n".join(hidden_block_lines(tmp_path))
    assert "| 300 | LSTM, 6,000 steps | not measured |" in text


def test_not_measured_counts_the_seeds_with_a_number_at_that_horizon(tmp_path):
    flat, short = {10: 0.1, 300: 0.1}, {10: 0.1}
    write(tmp_path, {"deltanet-neg": [flat] * 3, "deltanet-pos": [flat, flat, short], "lstm": [flat] * 3})
    by_arch, _ = read_records(tmp_path)
    assert verdict(by_arch, 10)[0] == "fails"
    # 3 records of DeltaNet [0, 1], but only 2 reach H = 300
    assert verdict(by_arch, 300) == ("not measured", "needs 3 seeds of DeltaNet β∈[0,1] at this horizon")
    # 3 seeds each, but not the same ones
    by_arch["lstm"] = [{**r, "seed": r["seed"] + 1} for r in by_arch["lstm"]]
    result, measured = verdict(by_arch, 10)
    assert result == "not measured" and measured.startswith("needs 3 seeds in common between")


def test_the_section_shows_every_architecture_guesses_and_states(tmp_path):
    kl = {10: 0.2, 300: 0.5}
    write(tmp_path, {"deltanet-neg": [kl] * 3, "lstm": [kl] * 3, "transformer": [kl]})
    text = "\n".join(hidden_block_lines(tmp_path))
    assert "| DeltaNet β∈[0,2] | 3 | 0.200 [0.200–0.200] | 0.500 [0.500–0.500] |" in text
    assert "| Transformer | 1 | 0.200 | 0.500 |" in text
    assert "uniform guess | | 0.775 | 0.775" in text and "ε = 0.80" in text
    assert "no recurrent state" in text  # the Transformer's row of the state table
    assert hidden_block_figure(tmp_path) is not None


def test_an_empty_folder_says_what_to_run(tmp_path):
    assert "python3 -m lab.experiments.pfsa_hidden_block" in "\n".join(hidden_block_lines(tmp_path))
    assert hidden_block_figure(tmp_path) is None
