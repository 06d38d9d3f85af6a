"""PFSA-SR at long horizons (training/long_horizon.py) and its part of the report."""

import math

import pytest

from deltalens.core.errors import DeltalensError
from deltalens.loading.opened import open_checkpoint
from deltalens.training.belief_kl import partial_counts
from deltalens.training.long_horizon import at_horizons, long_horizon_kl, long_traces
from lab.experiments.report.pfsa_section import long_horizon_lines


@pytest.fixture(scope="module")
def prob_checkpoint():
    return open_checkpoint("s3-deltanet-neg-statement-prob")


@pytest.mark.parametrize("kind", ["random", "adversarial"])
def test_long_traces_count_partial_reveals_up_to_the_horizon(prob_checkpoint, kind):
    traces = long_traces(prob_checkpoint.eval_spec(), horizon=40, count=3, kind=kind)
    for trace in traces:
        counts = partial_counts(trace)
        assert max(counts) == 40 and counts[0] == 0
        # no full reveal after the start: the count never falls back
        assert counts == sorted(counts)


def test_long_horizon_rows_by_dtype_kind_and_count(prob_checkpoint):
    rows = long_horizon_kl(
        prob_checkpoint.model,
        prob_checkpoint.tokenizer,
        prob_checkpoint.eval_spec(),
        horizons=(5, 12),
        dtypes=("float32", "bfloat16"),
        n_traces=3,
    )
    assert set(rows.dtype) == {"float32", "bfloat16", "uniform"} and set(rows.kind) == {"random", "adversarial"}
    assert rows.partial_reveals.max() == 12 and (rows.kl >= -1e-9).all()
    assert str(next(prob_checkpoint.model.parameters()).dtype) == "torch.float32"  # the model is put back
    summary = at_horizons(rows, (5, 12))
    keys = {(r["dtype"], r["kind"], r["horizon"]) for r in summary}
    assert ("bfloat16", "adversarial", 12) in keys and ("uniform", "random", 5) in keys
    fp32 = next(r for r in summary if r["dtype"] == "float32" and r["kind"] == "random" and r["horizon"] == 5)
    assert fp32["count"] == 3 * 5 and math.isfinite(fp32["kl"])
    # a trained model beats guessing at short horizons
    uniform = next(r for r in summary if r["dtype"] == "uniform" and r["kind"] == "random" and r["horizon"] == 5)
    assert fp32["kl"] < uniform["kl"]


def test_a_model_that_cannot_take_the_length_gets_an_error_row():
    transformer = open_checkpoint("s3-transformer-statement-prob")  # n_ctx 1024 tokens
    rows = long_horizon_kl(
        transformer.model,
        transformer.tokenizer,
        transformer.eval_spec(),
        horizons=(200,),
        dtypes=("float32",),
        n_traces=1,
        kinds=("random",),
    )
    model_rows = rows[rows.dtype == "float32"]
    assert len(model_rows) == 1 and "context" in model_rows.error.iloc[0]
    assert at_horizons(rows, (200,))[1]["error"] == model_rows.error.iloc[0]


def test_bad_arguments_are_one_sentence(prob_checkpoint):
    with pytest.raises(DeltalensError, match="unknown dtype"):
        long_horizon_kl(
            prob_checkpoint.model, prob_checkpoint.tokenizer, prob_checkpoint.eval_spec(), dtypes=("float8",)
        )
    with pytest.raises(DeltalensError, match="horizons"):
        long_horizon_kl(prob_checkpoint.model, prob_checkpoint.tokenizer, prob_checkpoint.eval_spec(), horizons=(0,))


def test_report_lines_show_seed_spread_and_errors():
    def result(seed, kl):
        rows = [
            {"dtype": d, "kind": k, "horizon": h, "kl": kl + h / 1000, "count": 5}
            for d in ("float32", "bfloat16", "float16")
            for k in ("random", "adversarial")
            for h in (50, 150)
        ]
        rows += [
            {"dtype": "uniform", "kind": k, "horizon": h, "kl": 0.5, "count": 5}
            for k in ("random", "adversarial")
            for h in (50, 150)
        ]
        return {"checkpoint": "m", "seed": seed, "at_horizons": rows, "curve": []}

    broken = {
        "checkpoint": "t",
        "seed": 0,
        "curve": [],
        "at_horizons": [{"dtype": "float32", "kind": "random", "horizon": h, "error": "too long"} for h in (50, 150)],
    }
    record = {"horizons": [50, 150], "traces_per_kind": 4, "results": [result(0, 0.1), result(1, 0.2), broken]}
    lines = long_horizon_lines(record, {"float32": 150, "bfloat16": 134, "float16": 25})
    text = "\n".join(lines)
    assert "| m | random | float32 | 0.200 [0.150–0.250] | 0.300 [0.250–0.350] |" in text
    assert "| uniform guess (reference) | random | – | 0.500 [0.500–0.500] | 0.500 [0.500–0.500] |" in text
    assert "| t | random | float32 | error: too long | error: too long |" in text
    assert "150 in float32, 134 in bfloat16, 25 in float16" in text
    # the reading under the table: m's adversarial KL 0.200 -> 0.300 (x1.5, not > 1.5x) stays flat
    assert "m stays flat (0.200 -> 0.300)" in text and "no model's KL by more than 0.000 nats" in text


def test_report_reading_names_a_growing_kl_and_the_dtype_gap():
    rows = [
        {"dtype": d, "kind": "adversarial", "horizon": h, "kl": kl, "count": 5}
        for d, shift in (("float32", 0.0), ("float16", 0.05))
        for h, kl in ((50, 0.1 + shift), (300, 0.9 + shift))
    ]
    rows += [{"dtype": "uniform", "kind": "adversarial", "horizon": h, "kl": 0.06, "count": 5} for h in (50, 300)]
    record = {
        "horizons": [50, 300],
        "traces_per_kind": 4,
        "results": [{"checkpoint": "linear", "seed": 0, "at_horizons": rows, "curve": []}],
    }
    text = "\n".join(long_horizon_lines(record, {"float32": 150, "bfloat16": 134, "float16": 25}))
    assert "linear grows (0.100 -> 0.900)" in text and "uniform guess 0.060 at 300" in text
    assert "by more than 0.050 nats" in text


def test_the_script_finds_the_shipped_checkpoints_and_its_record_from_the_lab():
    import importlib

    script = importlib.import_module("lab.experiments.pfsa_long_horizon")
    assert (script.ROOT / "checkpoints" / "s3-deltanet-neg-statement-prob" / "config.json").is_file()
    assert (script.ROOT / "lab" / "results" / "pfsa" / "long_horizon.json").is_file()
