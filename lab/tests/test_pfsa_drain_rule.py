"""lab/experiments/pfsa_drain.py: the cause-vs-length rule fixed before the runs, on made-up records."""

import importlib
import json

import pytest

drain = importlib.import_module("lab.experiments.pfsa_drain")
H = drain.HORIZONS
GUESS = 0.49


def record(kl_drain, kl_no_drain):
    return {
        "checkpoint": "made-up",
        "horizons": {
            str(h): {
                "drain": {"kl": a, "top_right": 1.0, "calibration": 0.0, "support": 1.0},
                "no_drain": {"kl": b, "top_right": 1.0, "calibration": 0.0, "support": 1.0},
            }
            for h, a, b in zip(H, kl_drain, kl_no_drain)
        },
    }


def write(folder, name, rec):
    (folder / f"{name}.json").write_text(json.dumps(rec))


def folder_with(tmp_path, runs, seeds=3):
    """runs: (arch, cycles) -> (drain curve, no-drain curve), written for lr 1e-3 and `seeds` seeds."""
    (tmp_path / "guesses.json").write_text(json.dumps({"block_uniform": {str(h): GUESS for h in H}}))
    for (arch, cycles), (d, n) in runs.items():
        for s in range(seeds):
            write(tmp_path, f"{arch}-c{cycles}-lr1e-3-s{s}", record(d, n))
    return tmp_path


FLAT = [0.1] * len(H)
# the drain curve turns at H = 16 and keeps rising; the no-drain one stays flat
DRAINED = [0.1, 0.12, 0.5, 1.0, 1.5, 2.0, 2.5]
# both curves turn where training ended: at H = 32 for the 4-16-cycle model, at H = 128 for the 4-64-cycle one
LENGTH_16 = [0.1, 0.1, 0.15, 0.6, 1.0, 1.2, 1.3]
LENGTH_64 = [0.1, 0.1, 0.1, 0.1, 0.15, 0.6, 1.0]


def test_a_drain_gap_at_a_fixed_turn_beside_a_flat_lstm_supports_the_theory(tmp_path):
    folder = folder_with(
        tmp_path,
        {
            ("deltanet-neg", 16): (DRAINED, FLAT),
            ("deltanet-neg", 64): (DRAINED, FLAT),
            ("lstm", 16): (FLAT, FLAT),
            ("lstm", 64): (FLAT, FLAT),
        },
    )
    verdict = drain.verdict(drain.read_records(folder), "1e-3", folder)
    assert verdict.startswith("supports the theory at lr 1e-3"), verdict
    assert "turning point 16 (c16) -> 16 (c64)" in verdict


def test_coinciding_curves_whose_turn_moves_with_training_length_are_length_generalisation(tmp_path):
    folder = folder_with(
        tmp_path,
        {
            ("deltanet-neg", 16): (LENGTH_16, LENGTH_16),
            ("deltanet-neg", 64): (LENGTH_64, LENGTH_64),
            ("lstm", 16): (FLAT, FLAT),
            ("lstm", 64): (FLAT, FLAT),
        },
    )
    verdict = drain.verdict(drain.read_records(folder), "1e-3", folder)
    assert verdict.startswith("length generalisation at lr 1e-3"), verdict


def test_an_lstm_with_its_own_gap_makes_the_drain_gap_mixed(tmp_path):
    folder = folder_with(
        tmp_path,
        {
            ("deltanet-neg", 16): (DRAINED, FLAT),
            ("deltanet-neg", 64): (DRAINED, FLAT),
            ("lstm", 16): (DRAINED, FLAT),
            ("lstm", 64): (FLAT, FLAT),
        },
    )
    assert drain.verdict(drain.read_records(folder), "1e-3", folder).startswith("mixed at lr 1e-3")


def test_a_reference_that_never_holds_the_mixture_makes_it_not_testable(tmp_path):
    at_guess = [GUESS] * len(H)
    folder = folder_with(
        tmp_path,
        {
            ("deltanet-neg", 16): (DRAINED, FLAT),
            ("deltanet-neg", 64): (DRAINED, FLAT),
            ("lstm", 16): (at_guess, at_guess),
            ("lstm", 64): (FLAT, FLAT),
        },
    )
    verdict = drain.verdict(drain.read_records(folder), "1e-3", folder)
    assert verdict.startswith("not testable at lr 1e-3: lstm c16 do not hold the mixture"), verdict


def test_fewer_than_three_seeds_is_not_measured(tmp_path):
    folder = folder_with(tmp_path, {("deltanet-neg", 16): (DRAINED, FLAT), ("lstm", 16): (FLAT, FLAT)}, seeds=2)
    verdict = drain.verdict(drain.read_records(folder), "1e-3", folder)
    assert verdict.startswith("not measured at lr 1e-3"), verdict
    assert "deltanet-neg c16" in verdict and "lstm c64" in verdict


@pytest.mark.parametrize("kl_at_4, held", [(0.3, "yes"), (0.45, "no")])
def test_the_per_run_table_applies_the_premise_to_each_run(tmp_path, kl_at_4, held):
    folder = folder_with(tmp_path, {("deltanet-neg", 16): ([kl_at_4] + DRAINED[1:], FLAT)}, seeds=1)
    lines = drain.seed_table(folder)
    row = [line for line in lines if line.startswith("| DeltaNet [0, 2] | 16 | 1e-3 | 0 |")]
    assert len(row) == 1 and f"| {held} |" in row[0], lines
    assert lines[-1] == f"Runs that hold the mixture: DeltaNet [0, 2] lr 1e-3: {int(held == 'yes')} of 1."


def test_the_wider_lstm_stands_in_for_the_reference_at_16_cycles_only(tmp_path):
    at_guess = [GUESS] * len(H)
    folder = folder_with(
        tmp_path,
        {
            ("deltanet-neg", 16): (DRAINED, FLAT),
            ("deltanet-neg", 64): (DRAINED, FLAT),
            ("lstm", 16): (at_guess, at_guess),
            ("lstm", 64): (at_guess, at_guess),
            ("lstm-wide", 16): (FLAT, FLAT),
        },
    )
    cells = drain.read_records(folder)
    assert drain.verdict(cells, "1e-3", folder).startswith("not testable")
    substituted = drain.verdict(cells, "1e-3", folder, reference="lstm-wide", reference_cycles=(16,))
    assert substituted.startswith("supports the theory at lr 1e-3"), substituted
    assert any(line.startswith("- With the wider") and "supports the theory" in line for line in drain.table(folder))


def test_the_readme_tables_are_rewritten_between_their_markers_and_the_prose_kept(tmp_path):
    folder = folder_with(tmp_path, {("deltanet-neg", 16): (DRAINED, FLAT)}, seeds=1)
    readme = tmp_path / "README.md"
    readme.write_text(
        "intro\n<!-- table -->\nSTALE\n<!-- /table -->\nmiddle\n<!-- seeds -->\nSTALE\n<!-- /seeds -->\nend\n"
    )
    drain.fill_readme(readme, folder)
    text = readme.read_text()
    assert text.startswith("intro\n<!-- table -->\n| model |") and "\nmiddle\n" in text and text.endswith("-->\nend\n")
    assert "STALE" not in text and "| DeltaNet [0, 2] | 16 | 1e-3 | 0 | yes |" in text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="needs exactly one"):
        drain.fill_readme(readme, folder)
    assert readme.read_text() == "no markers\n"


# --- linearity or one-sidedness (lab/experiments/drain_sides.py), the value-gated DeltaNet beside DeltaNet [0, 2] ---
sides = importlib.import_module("lab.experiments.drain_sides")


def with_probe_mass(rec, mass):
    for entry in rec["horizons"].values():
        for adversary in entry.values():
            adversary["probe_mass"] = mass
    return rec


def sides_folder(tmp_path, gated, probe_mass=None, plain=(DRAINED, FLAT)):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "guesses.json").write_text(json.dumps({"block_uniform": {str(h): GUESS for h in H}}))
    for s in range(3):
        write(tmp_path, f"deltanet-neg-c16-lr1e-3-s{s}", record(*plain))
        rec = record(*gated)
        write(tmp_path, f"vgated-c16-lr1e-3-s{s}", rec if probe_mass is None else with_probe_mass(rec, probe_mass))
    return drain.read_records(tmp_path)


def test_no_gated_gap_where_deltanet_drains_is_one_sidedness(tmp_path):
    cells = sides_folder(tmp_path, (FLAT, FLAT), probe_mass=0.0)
    verdict = sides.sides_verdict(cells, "1e-3", 16, {str(h): GUESS for h in H}, H)
    assert verdict.startswith("one-sidedness at lr 1e-3, 16 cycles"), verdict


def test_a_gated_gap_with_mass_on_the_probe_value_says_the_gate_is_not_used(tmp_path):
    cells = sides_folder(tmp_path, (DRAINED, FLAT), probe_mass=0.8)
    verdict = sides.sides_verdict(cells, "1e-3", 16, {str(h): GUESS for h in H}, H)
    assert verdict.startswith("gate not learned or used"), verdict


def test_a_gated_gap_spread_over_the_block_supports_the_precision_view(tmp_path):
    spread = [0.1, 0.12, 0.3, 0.45, 0.49, 0.5, 0.52]  # rises to the block-uniform guess, no probe mass
    cells = sides_folder(tmp_path, (spread, FLAT), probe_mass=0.02)
    verdict = sides.sides_verdict(cells, "1e-3", 16, {str(h): GUESS for h in H}, H)
    assert verdict.startswith("support for the renormalisation / precision view"), verdict


def test_the_sides_rule_needs_both_models_to_hold_the_mixture_and_the_probe_mass(tmp_path):
    guess = {str(h): GUESS for h in H}
    unheld = sides_folder(tmp_path / "a", ([0.45] * len(H), [0.45] * len(H)), probe_mass=0.0)
    assert sides.sides_verdict(unheld, "1e-3", 16, guess, H).startswith("not testable")
    unmeasured = sides_folder(tmp_path / "b", (DRAINED, FLAT))
    assert "not measured" in sides.sides_verdict(unmeasured, "1e-3", 16, guess, H)
    assert sides.sides_verdict(unmeasured, "1e-3", 64, guess, H).startswith("not measured at lr 1e-3, 64 cycles")


def test_the_gate_table_counts_heads_that_close_a_column_at_the_reveals_only(tmp_path):
    cells = sides_folder(tmp_path, (DRAINED, FLAT))
    for record in cells[("vgated", 16, "1e-3")]:  # L0H0 selective, L0H1 low everywhere, L1H0 open at reveals
        record["vgate"] = {"0.0": [0.01, 0.9], "0.1": [0.05, 0.06], "1.0": [0.8, 0.7]}
    table = sides.gate_table(cells)
    assert table[0].startswith("| run | L0H0 | L0H1 | L1H0 | heads closing at reveals |")
    rows = [line for line in table if line.startswith("| vgated-c16-lr1e-3-s")]
    assert len(rows) == 3 and all(
        row.endswith("| 0.010 / 0.90 | 0.050 / 0.06 | 0.800 / 0.70 | 1 of 3 |") for row in rows
    )
    assert sides.gate_table({}) == ["(no value-gated record yet)"]


def test_the_filters_reproduce_the_analytical_facts():
    """The column-masked filter, read out per row, is exact on drain where its block mass has decayed; the
    row-only filter loses the arrangement by H = 8, its mass moving to the probe's value."""
    from deltalens.tasks.prob_spec import ProbTraceSpec

    run = drain.Path(__file__).parents[2] / "lab/results/pfsa_drain/deltanet-neg-c16-lr1e-3-s0.json"
    spec = ProbTraceSpec.from_dict(json.loads(run.read_text())["spec"])
    mask = sides.filter_metrics(spec, 64, drain=True, reveal="mask", n_traces=4)
    assert mask["max_tv"] < 1e-6 and mask["block_mass"] < 0.01 and mask["top_right"] == 1.0
    row = sides.filter_metrics(spec, 16, drain=True, reveal="row", n_traces=4)
    assert row["top_right"] == 0.0 and row["probe_mass"] > 0.8
    control = sides.filter_metrics(spec, 16, drain=False, reveal="row", n_traces=4)
    assert control["max_tv"] < 1e-6
