"""PFSA-SR models: statement-prob tokens, adversarial traces for models, KL to the exact belief,
training and exporting on probabilistic traces, and the PFSA-SR section of the report."""

from __future__ import annotations

import json
import math

import numpy as np
import plotly.io
import pytest
import torch

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.grids.grid import CellStatus, load_grid
from deltalens.loading.export import export_run
from deltalens.tasks import Tokenizer, make_tokenizer
from deltalens.tasks.adversary import adversarial_sequence, adversarial_trace
from deltalens.tasks.pfsa import joint_filter
from deltalens.tasks.probabilistic import ProbTraceSpec, generate_prob_trace
from deltalens.tasks.traces import TraceSpec, generate_trace
from deltalens.training.belief_kl import partial_counts, reveal_kl, token_table, value_candidates
from deltalens.training.config import TrainConfig
from deltalens.training.data import TrainingData
from deltalens.training.loop import train
from lab.experiments.report.pfsa_section import probabilistic_checkpoints, uniform_kl
from lab.experiments.report.reproduce import write_report

SPEC = ProbTraceSpec(group="S3", actions=(10, 14), swap_prob=0.5, spacing=2, full_reveal_prob=0.3)


def test_statement_prob_tokens_one_per_statement_and_round_trip():
    tok = make_tokenizer("statement-prob", SPEC)
    statement = make_tokenizer("statement", "S3", action_set="swaps")
    for seed in range(40):
        trace = generate_prob_trace(SPEC, seed)
        enc = tok.encode_trace(trace, add_bos=False)
        statements = sum(line.startswith(">>>") for line in trace.lines)
        outputs = "".join(line for line in trace.lines if not line.startswith(">>>"))
        assert len(enc.ids) == statements + len(statement.encode(outputs))
        assert sum(enc.is_reveal) == sum(len(r.values) for r in trace.reveals)
        # decoding gives the transcript back, the seed dropped from the header
        assert tok.decode(enc.ids) == "".join([">>> import random\n", *trace.lines[1:]])
    # deterministic statements keep the statement tokenizer's ids
    det = generate_trace(TraceSpec(group="S3", actions=6, spacing=2), 3)
    assert tok.encode(det.text) == statement.encode(det.text)
    again = Tokenizer.from_spec(json.loads(tok.to_json()))
    assert again.vocab_size == tok.vocab_size and again.fingerprint() == tok.fingerprint()


def test_statement_prob_refuses_other_families_with_a_sentence():
    tok = make_tokenizer("statement-prob", SPEC)
    with pytest.raises(DeltalensError, match="p=0.5 only, not p=0.3"):
        tok.check_spec(ProbTraceSpec(group="S3", swap_prob=0.3))
    with pytest.raises(DeltalensError, match="not in the vocabulary"):
        tok.encode(">>> a, b = (b, a) if random.random() < 0.3 else (a, b)\n")
    with pytest.raises(DeltalensError, match="ProbTraceSpec"):
        make_tokenizer("statement-prob", "S3", action_set="swaps")
    with pytest.raises(DeltalensError, match="differs"):
        Tokenizer.from_spec({**tok.to_spec(), "swap_prob": 0.3})


def test_adversarial_trace_carries_the_exact_stationary_posterior():
    seq = adversarial_sequence(n=3, block=2, p=0.5, cycles=7)
    trace = adversarial_trace(seq, seed=4)
    assert len(trace.reveals) == 7 and all(r.variables == (2,) and r.values == (3,) for r in trace.reveals)
    # leak never taken, so c keeps 3; the block holds 1 and 2 in some order
    assert all(s[2] == 3 and sorted(s[:2]) == [1, 2] for s in trace.states)
    flat = [post for line in trace.posteriors for post in line]
    expected = joint_filter(trace.pfsa(), trace.events).reveals
    for got, want in zip(flat, expected):
        np.testing.assert_allclose(got.predictive, want.predictive, atol=1e-12)
    # c = 3 with probability 1 - p; else it took b's value, 1 or 2 evenly
    np.testing.assert_allclose(flat[-1].predictive, [0.25, 0.25, 0.5], atol=1e-12)
    enc = make_tokenizer("statement-prob", trace.spec).encode_trace(trace)
    assert sum(enc.is_reveal) == 7
    assert partial_counts(trace) == list(range(7))  # no full reset, ever


def test_partial_counts_reset_at_full_reveals():
    spec = ProbTraceSpec(group="S3", actions=30, swap_prob=0.5, spacing=1, full_reveal_prob=0.3)
    trace = generate_prob_trace(spec, 11)
    counts, since = partial_counts(trace), 0
    expected = []
    for reveal in trace.reveals:
        expected += [since] * len(reveal.values)
        since = 0 if len(reveal.values) == 3 else since + 1
    assert counts == expected and 0 in counts and max(counts) > 0


class Oracle(torch.nn.Module):
    """Logits that put exactly the given distribution on the value tokens at each reveal."""

    def __init__(self, tok, traces, exact: bool):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.tok, self.traces, self.exact = tok, traces, exact

    def forward(self, tokens):
        logits = torch.full((*tokens.shape, self.tok.vocab_size), -30.0)
        for b, trace in enumerate(self.traces):
            enc = self.tok.encode_trace(trace)
            flat = [post for line in trace.posteriors for post in line]
            positions = [t for t, flag in enumerate(enc.is_reveal) if flag]
            for t, post in zip(positions, flat):
                cands = value_candidates(token_table(self.tok), self.tok.token_of(enc.ids[t]), trace.n)
                p = np.asarray(post.predictive) if self.exact else np.full(trace.n, 1 / trace.n)
                logits[b, t - 1, cands] = torch.tensor(np.log(np.maximum(p, 1e-30)), dtype=torch.float32)
        return logits


def test_kl_is_zero_for_the_exact_predictive_and_known_for_uniform():
    traces = [generate_prob_trace(SPEC, s) for s in range(6)]
    tok = make_tokenizer("statement-prob", SPEC)
    exact = reveal_kl(Oracle(tok, traces, True), tok, traces, "random")
    assert len(exact) == sum(len(r.values) for t in traces for r in t.reveals)
    assert exact.kl.abs().max() < 1e-5 and (exact.value_mass > 0.999).all()
    uniform = reveal_kl(Oracle(tok, traces, False), tok, traces, "random")
    want = [sum(x * math.log(x * 3) for x in p if x > 0) for p in uniform.p]
    np.testing.assert_allclose(uniform.kl, want, atol=1e-5)
    assert uniform.kl.max() > 0.1  # some reveal was far from uniform, so the test could fail


def prob_config(arch: str = "deltanet", steps: int = 4) -> TrainConfig:
    model = {
        "deltanet": {
            "arch": "deltanet",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_heads": 2,
            "allow_neg_eigval": True,
        },
        "lstm": {"arch": "lstm", "d_model": 32, "n_layers": 1},
    }[arch]
    return TrainConfig.from_dict(
        {
            "task": {
                "group": "S3",
                "tokenizer": "statement-prob",
                "actions": [6, 8],
                "mix": [0.4, 0.4, 0.2],
                "swap_prob": 0.5,
                "spacing": [1, 2],
                "eval_spacing": 2,
            },
            "model": model,
            "optim": {"batch_size": 4, "warmup_steps": 2},
            "run": {"steps": steps, "eval_every": 2, "eval_traces": 8, "checkpoint_every": 2, "threads": 1},
        }
    )


def test_probabilistic_mix_and_tokenizer_must_agree():
    with pytest.raises(DeltalensError, match="statement-prob"):
        TrainingData(TrainConfig.from_dict({"task": {"mix": [0.5, 0.5, 0.0]}}).task, seed=0)
    with pytest.raises(DeltalensError, match="need such a mix"):
        TrainingData(TrainConfig.from_dict({"task": {"tokenizer": "statement-prob"}}).task, seed=0)


def test_training_batches_are_probabilistic_traces_and_deterministic_in_the_step():
    data = TrainingData(prob_config().task, seed=0)
    a, b = data.train_batch(3, 8, 10), data.train_batch(3, 8, 10)
    assert torch.equal(a["tokens"], b["tokens"]) and not torch.equal(a["tokens"], data.train_batch(4, 8, 10)["tokens"])
    texts = [data.tokenizer.decode(row) for row in a["tokens"].tolist()]
    assert any("random.random() < 0.5" in t for t in texts) and any("random.choice" in t for t in texts)
    assert a["loss_mask"].sum() == a["reveal_mask"].sum() > 0  # loss on printed values only


@pytest.mark.parametrize("arch", ["deltanet", "lstm"])
def test_train_export_and_report_a_probabilistic_checkpoint(tmp_path, arch):
    config = prob_config(arch)
    train(config, tmp_path / "run", progress=False)
    target = tmp_path / "checkpoints" / f"s3-{arch}-statement-prob"
    export_run(tmp_path / "run", target, "# config\n", "deltalens train ...", n_traces=16)
    meta = models.read_checkpoint_meta(target)
    kl = meta["metrics"]["belief_kl"]
    assert set(kl["mean_kl"]) == {"random", "adversarial"} and all(v >= 0 for v in kl["mean_kl"].values())
    assert {r["kind"] for r in kl["by_partial_reveals"]} == {"random", "adversarial"}
    card = (target / "CARD.md").read_text()
    assert "## Belief (PFSA-SR)" in card and "| adversarial | 0 |" in card
    assert probabilistic_checkpoints(tmp_path / "checkpoints") == {target.name: kl}
    # the report's uniform reference scores exactly the same reveals
    uniform = uniform_kl(tmp_path / "checkpoints", target.name, kl)
    counts = {(r["kind"], r["partial_reveals"]): r["count"] for r in kl["by_partial_reveals"]}
    assert {(r["kind"], r["partial_reveals"]): r["count"] for r in uniform["by_partial_reveals"]} == counts
    assert uniform["mean_kl"]["random"] > 0


def test_report_gains_the_pfsa_section(tmp_path, monkeypatch):
    from tiny_runs import tiny_sweep

    monkeypatch.setattr(plotly.io, "write_images", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no chrome")))
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    sweep = load_grid(tiny_sweep(tmp_path))
    statuses = [CellStatus(c, short="not trained yet", reason="no result file") for c in sweep.cells]
    report = write_report(sweep, statuses, tmp_path / "reports", pfsa_checkpoints=ckpts)
    md = report.markdown.read_text()
    assert "## PFSA-SR: probabilistic state tracking" in md
    assert "| float32 | 150 | 150 |" in md and "| float16 | 25 | 25 |" in md  # the 1/2-per-reveal law
    assert "No probabilistic checkpoint" in md
    assert {f.name for f in report.figures} >= {"pfsa_joint_decay", "pfsa_marginal_decay", "pfsa_model_kl"}
