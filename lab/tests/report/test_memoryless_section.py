"""The baselines table of the reproduce report: accuracies judged against the window predictor."""

from lab.experiments.report.baselines_section import CANNOT_TELL, baseline_lines, beyond_window, cell_baselines


def result(seed: int, accuracy: float, k: int = 4) -> dict:
    """A result file as a sweep cell writes it (S3 swaps, 16 actions, evaluated on 64 traces)."""
    return {
        "group": "S3",
        "tokenizer": "statement",
        "arch": "deltanet-pos",
        "spacing": k,
        "seed": seed,
        "config": {"task": {"group": "S3", "action_set": "swaps"}},
        "eval": {
            "spacing": k,
            "reveal": "one",
            "n_traces": 64,
            "seed": 0,
            "lengths": [{"actions": 16, "x_train": 1.0, "reveal_accuracy": accuracy}],
        },
    }


def test_beyond_the_window_needs_the_mean_and_two_thirds_of_the_seeds():
    window = cell_baselines(result(0, 0.0), 1.0).window
    assert 0.6 < window < 0.9  # S3 at k = 4: four actions and the prints since say a lot
    above, below = min(1.0, window + 0.1), window - 0.01
    assert beyond_window([result(s, above) for s in range(3)], 1.0) is True
    assert beyond_window([result(0, above), result(1, below), result(2, below)], 1.0) is False
    # far above chance (1/3) and still not beyond the window
    assert beyond_window([result(s, window) for s in range(3)], 1.0) is False


def test_the_table_lists_each_cell_once_per_length_with_its_verdict():
    lines = baseline_lines([result(s, 1.0) for s in range(3)] + [result(s, 0.4, k=8) for s in range(3)])
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines if line.startswith("| S3")]
    assert len(rows) == 2
    (k4, verdict4, matching4), (k8, verdict8, matching8) = [(r[3], r[9], r[10]) for r in rows]
    assert (k4, verdict4, k8, verdict8) == ("4", "yes", "8", "no") and "(8)" in rows[1][8]
    # a perfect model is matched only by a look-back that knows the state: here, the whole trace
    assert matching4 == "16"
    # 0.4 at k = 8 (prints after actions 8 and 16): a look-back under 8 actions sees no print (1/3),
    # one of 8 reaches the init lines for the first print (about (1 + 1/3) / 2)
    assert matching8 == "8"


def test_results_that_do_not_say_how_they_were_evaluated_are_left_out():
    bare = {"group": "S3", "tokenizer": "statement", "arch": "lstm", "spacing": 4, "eval": {"lengths": []}}
    assert baseline_lines([bare]) == []


def test_where_the_window_predictor_is_nearly_perfect_the_verdict_is_cannot_tell():
    # k = 1: four actions back see about three printed values, which fixes an S3 state
    dense = [result(s, 1.0, k=1) for s in range(3)]
    assert cell_baselines(dense[0], 1.0).window > 0.95
    assert beyond_window(dense, 1.0) == CANNOT_TELL
