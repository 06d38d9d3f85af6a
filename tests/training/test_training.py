"""Training loop: exact resume, NaN stop, config overrides, evaluation on held-out traces."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from tiny_runs import tiny_config

from deltalens import models
from deltalens.core.errors import DeltalensError
from deltalens.loading.export import export_run
from deltalens.tasks import PAD_ID, TraceSpec, make_tokenizer
from deltalens.tasks.dataset import make_batch
from deltalens.training.config import apply_overrides, dump_toml, load_config
from deltalens.training.data import TrainingData
from deltalens.training.evaluate import evaluate, score_batch
from deltalens.training.loop import LAST, next_token_loss, train


def test_resume_after_kill_matches_unbroken_run(tmp_path):
    config = tiny_config(steps=6)
    unbroken = train(config, tmp_path / "unbroken", progress=False)

    class Killed(Exception):
        pass

    def kill_after_four(step, loss):
        if step == 4:  # the checkpoint of step 3 is on disk, step 4 is lost
            raise Killed

    with pytest.raises(Killed):
        train(config, tmp_path / "broken", progress=False, on_step=kill_after_four)
    state = json.loads((tmp_path / "broken" / LAST / "trainer_state.json").read_text())
    assert state["step"] == 3
    resumed = train(config, tmp_path / "broken", resume=True, progress=False)
    assert resumed.step == unbroken.step == 6
    a = models.load(unbroken.checkpoint).state_dict()
    b = models.load(resumed.checkpoint).state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert [h["reveal_accuracy"] for h in resumed.history] == [h["reveal_accuracy"] for h in unbroken.history]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    config = tiny_config(arch="lstm", steps=8)
    real_forward = None

    def poison_after_step_4(step, loss):
        nonlocal real_forward
        if step == 4:  # from now on the model outputs NaN logits
            model_cls = type(models.load(tmp_path / "run" / LAST))
            real_forward = model_cls.forward
            monkeypatch.setattr(
                model_cls, "forward", lambda self, tokens, *a, **k: real_forward(self, tokens) * float("nan")
            )

    with pytest.raises(DeltalensError, match="loss became nan at step 5"):
        train(config, tmp_path / "run", progress=False, on_step=poison_after_step_4)
    state = json.loads((tmp_path / "run" / LAST / "trainer_state.json").read_text())
    assert state["step"] == 3  # the last checkpoint written before the NaN, intact and loadable
    monkeypatch.undo()
    model = models.load(tmp_path / "run" / LAST)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_refuses_to_overwrite_or_resume_a_changed_config(tmp_path):
    config = tiny_config(arch="lstm", steps=3)
    train(config, tmp_path / "run", progress=False)
    with pytest.raises(DeltalensError, match="already holds a run"):
        train(config, tmp_path / "run", progress=False)
    changed = tiny_config(arch="lstm", steps=3)
    changed.optim.lr = 1e-4
    with pytest.raises(DeltalensError, match="cannot resume: the task, model, optimiser"):
        train(changed, tmp_path / "run", resume=True, progress=False)
    cadence = tiny_config(arch="lstm", steps=3)
    cadence.run.eval_every, cadence.run.threads = 1, 0  # cadence may change on resume
    assert train(cadence, tmp_path / "run", resume=True, progress=False).step == 3


def test_config_file_and_overrides(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text(dump_toml(tiny_config()))
    config = load_config(path, ["task.group=S5", "optim.lr=1e-3", "run.steps=7", "task.spacing=4"])
    assert config.task.group == "S5" and config.optim.lr == 1e-3 and config.run.steps == 7
    assert config.task.spacing == [4, 4]
    assert load_config(path).to_dict() == tiny_config().to_dict()  # dump -> load round trip
    with pytest.raises(DeltalensError, match="unknown key"):
        load_config(path, ["optim.learning_rate=1"])
    with pytest.raises(DeltalensError, match="table.key=value"):
        apply_overrides({}, ["lr=1"])
    with pytest.raises(DeltalensError, match=r"is a folder: give the run's TOML file"):
        load_config(tmp_path)


def test_data_stream_is_a_function_of_seed_and_step():
    data = TrainingData(tiny_config().task, seed=5)
    a, b = data.train_batch(7, 4, 10), data.train_batch(7, 4, 10)
    assert torch.equal(a["tokens"], b["tokens"])
    assert not torch.equal(a["tokens"][:, :10], data.train_batch(8, 4, 10)["tokens"][:, :10])
    # mixed spacing: both spacings 1 and 2 occur in a batch of 64 traces
    batch = data.train_batch(0, 64, 10)
    reveals, actions = batch["reveal_mask"].sum(1), (batch["kinds"] == 2).any(-1)
    assert len(set(reveals.tolist())) > 1 and actions.all()


def test_evaluate_scores_a_perfect_oracle_and_a_constant_model():
    data = TrainingData(tiny_config().task, seed=0)
    spec = data.eval_spec()
    tokenizer = data.tokenizer

    class Oracle(torch.nn.Module):
        """Cheats by reading the answer tokens: logits put all mass on the next token."""

        def forward(self, tokens):
            nxt = torch.zeros_like(tokens)
            nxt[:, :-1] = tokens[:, 1:]
            return torch.nn.functional.one_hot(nxt, tokenizer.vocab_size).float()

    oracle = evaluate(Oracle(), tokenizer, spec, n_traces=16)
    assert oracle.reveal_accuracy == 1.0 and oracle.trace_accuracy == 1.0 and oracle.n_traces == 16

    class Constant(torch.nn.Module):
        def forward(self, tokens):
            logits = torch.zeros(*tokens.shape, tokenizer.vocab_size)
            logits[..., PAD_ID] = 1.0  # always predicts <pad>
            return logits

    constant = evaluate(Constant(), tokenizer, spec, n_traces=16)
    assert constant.reveal_accuracy == 0.0 and constant.trace_accuracy == 0.0
    assert sum(p["count"] for p in oracle.by_position) == oracle.n_reveals > 0


def test_export_writes_card_config_and_loadable_weights(tmp_path):
    config = tiny_config(arch="lstm", steps=2)
    train(config, tmp_path / "run", progress=False)
    target = tmp_path / "ship"
    target.mkdir()
    (target / "train.toml").write_text(dump_toml(config))  # the committed config the export sits beside
    report = export_run(tmp_path / "run", target, dump_toml(config), "deltalens train x", n_traces=8)
    assert sorted(p.name for p in target.iterdir()) == ["CARD.md", "config.json", "model.safetensors", "train.toml"]
    assert [r["actions"] for r in report["lengths"]] == [6, 12, 24]  # 1x, 2x, 4x the training length
    meta = models.read_checkpoint_meta(target)
    assert meta["metrics"]["eval"]["lengths"] == report["lengths"]
    assert "optimizer.safetensors" not in {p.name for p in target.iterdir()}
    card = (target / "CARD.md").read_text()
    assert "| `one` | 12 (2x) |" in card and "| `all` | 12 (2x) |" in card
    assert f"Reproduce with `deltalens eval {target}`" in card  # the folder it is in, not checkpoints/NAME
    assert meta["metrics"]["eval_reveal_all"]["reveal"] == "all"
    assert load_config(target / "train.toml").to_dict() == config.to_dict()
    models.load(target)


def test_export_skips_lengths_past_a_transformers_context(tmp_path):
    config = tiny_config(arch="transformer", steps=2)
    config.model["n_ctx"] = 48  # 6 actions fit, 24 (4x) do not
    train(config, tmp_path / "run", progress=False)
    report = export_run(tmp_path / "run", tmp_path / "ship", dump_toml(config), "deltalens train x", n_traces=8)
    assert [r["actions"] for r in report["lengths"]][0] == 6
    assert 24 in [s["actions"] for s in report["skipped"]]
    assert "Not evaluated at 24 actions:" in (tmp_path / "ship" / "CARD.md").read_text()


def test_spacing_schedule_switches_reveal_density():
    task = tiny_config().task
    task.actions, task.spacing_schedule = [12, 12], [[0, 1, 1], [5, 4, 4]]
    data = TrainingData(task, seed=0)
    dense, sparse = data.train_batch(0, 8, 10), data.train_batch(5, 8, 10)
    assert (dense["reveal_mask"].sum(1) == 12).all() and (sparse["reveal_mask"].sum(1) == 3).all()


def test_mixed_reveals_draw_one_or_all_per_trace_and_evaluate_on_one():
    task = tiny_config().task
    task.reveal, task.actions, task.spacing = "mixed", [8, 8], [2, 2]
    data = TrainingData(task, seed=0)
    per_trace = data.train_batch(0, 32, 10)["reveal_mask"].sum(1)
    assert set(per_trace.tolist()) == {4, 12}  # 4 prints of one variable, or of all three
    assert data.eval_spec().reveal == "one" and data.eval_spec(reveal="all").reveal == "all"
    task.reveal = "some"
    with pytest.raises(DeltalensError, match="one, all or mixed"):
        TrainingData(task, seed=0)


def test_next_token_loss_pairs_logits_at_t_minus_1_with_token_t():
    tokens = torch.tensor([[1, 5, 6, 7, 0]])
    batch = {
        "tokens": tokens,
        "loss_mask": torch.tensor([[False, True, True, True, False]]),
        "reveal_mask": torch.tensor([[False, False, False, True, False]]),
    }
    logits = torch.full((1, 5, 8), -30.0)
    for t in range(4):
        logits[0, t, tokens[0, t + 1]] = 30.0  # a perfect next-token predictor
    loss, accuracy = next_token_loss(logits, batch)
    assert loss < 1e-6 and accuracy == 1.0
    logits[0, 2, 7], logits[0, 2, 3] = -30.0, 30.0  # now wrong on the revealed token (t = 3)
    loss, accuracy = next_token_loss(logits, batch)
    assert accuracy == 0.0 and abs(loss.item() - 60.0 / 3) < 1e-3  # one of three targets off by 60 nats
    batch["loss_mask"][0, 3] = False  # the padding position and unmasked targets never count
    assert next_token_loss(logits, batch)[0] < 1e-6


def test_ctrl_c_saves_finished_steps_and_early_stop_survives_resume(tmp_path):
    config = tiny_config(arch="lstm", steps=8)
    config.run.checkpoint_every = 0

    def interrupt(step, loss):
        if step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "run", progress=False, on_step=interrupt)
    assert json.loads((tmp_path / "run" / LAST / "trainer_state.json").read_text())["step"] == 5

    stop = tiny_config(arch="lstm", steps=8)
    stop.run.early_stop_accuracy = 1e-9  # any evaluation stops it (at step 3)
    first = train(stop, tmp_path / "stop", progress=False)
    assert first.stopped_early and first.step == 3
    again = train(stop, tmp_path / "stop", resume=True, progress=False)
    assert again.step == 3 and again.stopped_early


def test_accuracy_by_position_counts_actions_not_action_tokens():
    spec = TraceSpec(group="S3", actions=12, spacing=4)
    tokenizer = make_tokenizer("code", spec)  # ~9 tokens per action line
    batch = make_batch(spec, tokenizer, 4)

    class Zero(torch.nn.Module):
        def forward(self, tokens):
            return torch.zeros(*tokens.shape, tokenizer.vocab_size)

    scores = score_batch(Zero(), batch)
    assert sorted(set(scores["actions_before"][scores["reveal"]].tolist())) == [4, 8, 12]


def test_ctrl_c_inside_an_optimizer_step_never_saves_a_torn_state(tmp_path, monkeypatch):
    """A SIGINT delivered while AdamW is updating takes effect after the step: the resumed run is
    bit-identical to an unbroken one."""
    config = tiny_config(steps=6)
    config.run.checkpoint_every = 0
    unbroken = train(config, tmp_path / "unbroken", progress=False)
    real_step = torch.optim.AdamW.step
    calls = []

    def step_then_ctrl_c(self, *args, **kwargs):
        result = real_step(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 4:  # the interrupt arrives with the parameters already updated
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", step_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "broken", progress=False)
    monkeypatch.undo()
    state = json.loads((tmp_path / "broken" / LAST / "trainer_state.json").read_text())
    assert state["step"] == 4  # the step the signal landed in was finished, then saved
    resumed = train(config, tmp_path / "broken", resume=True, progress=False)
    a, b = models.load(unbroken.checkpoint).state_dict(), models.load(resumed.checkpoint).state_dict()
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_validation_uses_its_own_seed_and_a_quiet_run_prints_nothing(tmp_path, capsys, monkeypatch):
    import deltalens.training.loop as loop

    seeds = []
    real = loop.evaluate

    def recording(*args, seed, **kwargs):
        seeds.append(seed)
        return real(*args, seed=seed, **kwargs)

    monkeypatch.setattr(loop, "evaluate", recording)
    config = tiny_config(steps=2)
    config.run.eval_every, config.run.seed = 1, 3
    own = train(config, tmp_path / "own", progress=False).history
    config.run.validation_seed = 7
    other = train(config, tmp_path / "other", progress=False).history
    assert seeds == [3, 3, 7, 7]  # -1 (the default) means the run's seed; else its own split
    assert capsys.readouterr().out == ""  # the caller's stdout stays its own (benchmarks print one JSON line)
    assert [h["step"] for h in own] == [h["step"] for h in other] == [1, 2]


def test_a_damaged_trainer_state_is_refused_in_words(tmp_path):
    from deltalens.training.history import read_trainer_state

    last = tmp_path / "run" / "last"
    last.mkdir(parents=True)
    for text in ("{not json", "[]", '{"step": "3"}'):
        (last / "trainer_state.json").write_text(text)
        with pytest.raises(DeltalensError, match=r"trainer_state.json is damaged .* remove the run folder"):
            read_trainer_state(last)
    (last / "trainer_state.json").write_text('{"step": 3, "config": {}}')
    assert read_trainer_state(last)["step"] == 3
