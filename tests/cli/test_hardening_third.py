"""Third-round hostile inputs (issue 45) and the sentences of issue 44: no code from a model folder,
nothing unbounded, no wrong result that looks right, one sentence for every new surface."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hub_cache import put_in_hub_cache

import deltalens as dl
from deltalens.cli.main import main
from deltalens.core.errors import DeltalensError
from deltalens.models.io import named_folder
from deltalens.models.io.named_folder import resolve_checkpoint
from deltalens.tasks.tokenizers.hf import HFTokenizer
from deltalens.tasks.tokenizers.repl_bpe import train_repl_bpe
from deltalens.tasks.traces import TraceSpec, parse_trace

REPO = Path(__file__).resolve().parents[2]
CKPT = REPO / "checkpoints" / "s3-deltanet-neg-statement"
RENORM = REPO / "checkpoints" / "s3-deltanet-renorm-statement"
TRACE = ">>> a = 1\n>>> b = 2\n>>> c = 3\n>>> a, b = b, a\n>>> print('a', a)\n"


def run(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def one_sentence(code: int, err: str, words: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("deltalens:")]
    assert code == 2 and len(lines) == 1 and words in lines[0], err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def shipped():
    return dl.load(str(CKPT))


@pytest.fixture(scope="module")
def fla_folder(tmp_path_factory):
    """An fla-format DeltaNet folder with its own BPE tokenizer (tokenizer.json + tokenizer_config.json)."""
    from tests.conftest import build_tiny

    root = tmp_path_factory.mktemp("fla")
    tokenizer = HFTokenizer.from_file(
        train_repl_bpe(TraceSpec(group="S3", actions=8, spacing=2), root / "tok.json", 300, 200)
    )
    folder = root / "model"
    build_tiny("deltanet", seed=1, vocab_size=tokenizer.vocab_size).save_pretrained(folder)
    for name, text in tokenizer.files().items():
        (folder / name).write_text(text)
    return folder


def copy_with(folder: Path, dest: Path, file: str, **fields) -> Path:
    shutil.copytree(folder, dest)
    data = json.loads((dest / file).read_text())
    (dest / file).write_text(json.dumps({**data, **fields}))
    return dest


# ---- security: no code from a model folder, whatever a terminal would answer ----------------------


@pytest.mark.parametrize("file", ["tokenizer_config.json", "config.json"])
def test_a_folder_whose_tokenizer_asks_for_its_own_code_gets_one_sentence(fla_folder, tmp_path, file):
    auto_map = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    folder = copy_with(fla_folder, tmp_path / "evil", file, auto_map=auto_map)
    (folder / "tokenization_evil.py").write_text("raise SystemExit('the folder ran its code')\n")
    with pytest.raises(DeltalensError, match=r"asks to run Python code from its folder \(auto_map\)"):
        HFTokenizer.from_folder(folder)
    with pytest.raises(DeltalensError, match="never runs code from a model folder"):
        dl.load(str(folder))


def test_transformers_is_told_never_to_trust_remote_code(fla_folder, monkeypatch):
    import transformers

    seen = {}
    original = transformers.AutoTokenizer.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        seen.update(kwargs)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(spy))
    HFTokenizer.from_folder(fla_folder)
    assert seen.get("trust_remote_code") is False  # explicit, so no "[y/N]" prompt at a terminal


def test_a_hub_load_prints_no_model_type_warning(fla_folder, tmp_path, monkeypatch):
    import logging

    put_in_hub_cache(fla_folder, tmp_path / "hf" / "hub", "org/quiet")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("transformers").addHandler(handler)  # its own stderr handler was bound before any capture
    try:
        dl.load("org/quiet")
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert not [line for line in said if "to instantiate a model of type" in line], said


# ---- unbounded work ------------------------------------------------------------------------------


def test_generate_is_bounded_and_stops_after_a_print_s_values(shipped, monkeypatch):
    calls = []
    forward = type(shipped).forward

    def counted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) > 400:
            raise RuntimeError("generate ran on without bound")
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(shipped), "forward", counted)
    with pytest.raises(DeltalensError, match="max_new_tokens=1000000000 is more than generate's cap of 256"):
        shipped.generate(TRACE, 10**9)
    assert not calls  # refused before any forward
    out = shipped.generate(TRACE, 50)  # the statement tokenizer: the answer ends the line, no "\n" needed
    assert len(calls) <= 2 and out.startswith(TRACE) and out[len(TRACE) :].strip().isdigit(), out
    with pytest.raises(DeltalensError, match=r"token id 999 is outside this model's vocabulary \(0\.\.27\)"):
        shipped.generate([1, 999], 3)


def test_effective_attention_is_refused_before_its_memory_is_asked_for(shipped, monkeypatch):
    monkeypatch.setenv("DELTALENS_MAX_CAPTURE_GB", "0.001")
    tokens = torch.ones(1, 2_000, dtype=torch.long)
    start = time.perf_counter()
    with pytest.raises(DeltalensError, match=r"2,000 queries x 2,000 keys would take .* GB limit"):
        dl.effective_attention(shipped, tokens, 0)
    assert time.perf_counter() - start < 5  # before the forward, not after
    assert dl.effective_attention(shipped, tokens[:, :40], 0, head=1).shape == (1, 40, 40)


def test_long_traces_of_an_own_tokenizer_model_are_scored_in_chunks(tiny_model):
    from deltalens.models.lm.chunked import log_probs_at

    model = tiny_model("deltanet")
    tokens = torch.randint(2, model.cfg.d_vocab, (2, 100))
    where = torch.rand(2, 100) < 0.3
    seen = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[-1]))
    picked = log_probs_at(model, tokens, where, chunk_size=16)
    handle.remove()
    assert max(seen) <= 16  # never the whole sequence at once
    whole = model(tokens).float().log_softmax(-1)[where]
    torch.testing.assert_close(picked, whole, atol=2e-4, rtol=1e-4)


def test_a_local_looking_name_is_a_missing_folder_not_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    from deltalens.models.io import hub

    for module, name in ((named_folder, "hub_model_folder"), (hub, "hub_model_folder"), (hub, "hub_folder")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("asked the Hub"), raising=False)
    assert resolve_checkpoint("runs/no_such_model") == Path("runs/no_such_model")
    with pytest.raises(DeltalensError, match="checkpoint directory runs/no_such_model does not exist"):
        dl.load("runs/no_such_model")
    with pytest.raises(DeltalensError, match="checkpoint directory x does not exist"):
        dl.load("./x")
    for empty in ("", "  "):
        with pytest.raises(DeltalensError, match="the checkpoint name is empty"):
            dl.load(empty)


def test_a_hub_id_without_a_network_is_said_at_once(tmp_path, monkeypatch):
    from deltalens.models.io import hub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_unreachable", lambda: "huggingface.co: Name or service not known")
    start = time.perf_counter()
    with pytest.raises(DeltalensError, match=r"org/absent is not in the Hugging Face cache .* cannot be reached"):
        dl.load("org/absent")
    assert time.perf_counter() - start < 5  # no retries


# ---- wrong results that looked right -------------------------------------------------------------


def test_attribution_patching_of_a_renormalised_state_is_refused():
    model = dl.load(str(RENORM))
    clean, corrupt = dl.trace_pair(model, 2, seed=0)
    with pytest.raises(DeltalensError, match="attribution patching of 'state' is wrong on a model that renormalises"):
        dl.attribution_patching(model, clean, corrupt, dl.reveal_metric(clean, corrupt), sites=("state",))


def test_a_metric_that_returns_a_float_gets_a_sentence(shipped):
    clean, corrupt = dl.trace_pair(shipped, 2, seed=0)
    with pytest.raises(DeltalensError, match="metric must return a one-element tensor .* it returned float"):
        dl.attribution_patching(shipped, clean, corrupt, lambda logits: 0.5, time_forward=False)


def test_eval_of_an_own_tokenizer_model_honours_dtype(fla_folder, monkeypatch, capsys):
    from deltalens.training import text_eval

    seen = []
    real = text_eval.evaluate_since_reveal
    monkeypatch.setattr(
        text_eval,
        "evaluate_since_reveal",
        lambda m, *a, **k: seen.append(next(m.parameters()).dtype) or real(m, *a, **k),
    )
    assert main(["eval", str(fla_folder), "--n-traces", "2", "--dtype", "bf16", "--json"]) == 0
    assert seen == [torch.bfloat16]


@pytest.mark.parametrize(
    "kinds, words",
    [(99, "got 99"), ("revela", "did you mean 'reveal'"), ([], "kinds is empty"), (True, "got True")],
)
def test_capture_kinds_are_token_kinds(shipped, kinds, words):
    batch = shipped.checkpoint.batch(2)
    with pytest.raises(DeltalensError, match=words):
        dl.capture(shipped, batch, names=("beta",), kinds=kinds)
    assert len(dl.capture(shipped, batch, names=("beta",), kinds="reveal")) == int(batch["reveal_mask"].sum())


def test_a_disk_that_fills_behind_stdout_is_an_error(tmp_path):
    def small_files():  # a disk that fills after 600 kB: the write is cut short, then refused
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (600_000, 600_000))

    with open(tmp_path / "out.txt", "w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "deltalens.cli.main", "trace", "--group", "S3", "--actions", "100000"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=small_files,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert "cannot write the output: File too large; what was written is incomplete" in done.stderr


# ---- raw exceptions from the notebook API -> one sentence ----------------------------------------


def test_notebook_api_inputs_get_sentences(shipped):
    with pytest.raises(DeltalensError, match="not float8_e4m3fn; choose one of"):
        dl.load(str(CKPT), dtype=torch.float8_e4m3fn)
    batch = shipped.checkpoint.batch(2)
    with pytest.raises(DeltalensError, match="max_bytes must be a finite positive number of bytes, got inf"):
        dl.capture(shipped, batch, names=("beta",), max_bytes=float("inf"))
    with pytest.raises(DeltalensError, match=r"head 9 is out of range: blocks.0.attn.hook_state has heads 0..3"):
        _, cache = shipped.run_with_cache(batch["tokens"])
        dl.patch_state(0, 9, cache)
    with pytest.raises(KeyError, match="layer 5 is out of range: this model has layers 0..1"):
        cache["beta", 5]
    with pytest.raises(DeltalensError, match="'blocks.0.attn.hook_bta' is not a hook of this model; did you mean"):
        cache["blocks.0.attn.hook_bta"]


@pytest.fixture(scope="module")
def state_capture(shipped):
    return dl.capture(shipped, shipped.checkpoint.batch(8), names=("state",))


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(held_out=2), "held_out is the fraction of traces held out, strictly between 0 and 1, got 2"),
        (dict(candidates=[0]), "candidates are numbers of clusters, whole numbers from 2 to 1024; got 0"),
        (dict(candidates=[500]), r"none of the candidate cluster counts \[500\] fits these states"),
    ],
)
def test_automaton_choices_get_sentences(state_capture, options, words):
    with pytest.raises(DeltalensError, match=words):
        dl.extract_automaton(state_capture, 0, 3, **options)


def test_automaton_of_too_few_traces_gets_a_sentence(shipped):
    cap = dl.capture(shipped, shipped.checkpoint.batch(1), names=("state",))
    with pytest.raises(DeltalensError, match="the capture has 1 trace with actions; at least 2 are needed"):
        dl.extract_automaton(cap, 0, 3)


def test_a_backtracking_pre_tokenizer_is_refused_at_load(tmp_path):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+b"), "isolated")
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(DeltalensError, match="regular expression backtracks past the regex engine's limit"):
        HFTokenizer.from_file(tmp_path / "tokenizer.json")


def test_a_tokenizer_bigger_than_the_embedding_is_refused_at_load(shipped):
    from deltalens.models.lm.lens import attach_tokenizer
    from tests.conftest import build_tiny

    small = build_tiny("deltanet", vocab_size=8)
    with pytest.raises(DeltalensError, match="has 28 tokens but the model's embedding has 8 rows"):
        attach_tokenizer(small, shipped.tokenizer)


def test_slurm_ledger_with_null_log_paths_gets_a_sentence(tmp_path):
    from deltalens.grids.slurm_ledger import LEDGER, Ledger

    entry = {"cell": "c", "job_id": "1_0", "config": "x", "submitted": "now", "stdout": None, "stderr": None}
    (tmp_path / LEDGER).write_text(json.dumps({"sweep": "s", "jobs": {"c": entry}}))
    with pytest.raises(DeltalensError, match=r"is not a jobs ledger \(job 'c' has stdout=None, not text\)"):
        Ledger.load(tmp_path)


def fake_slurm(tmp_path: Path, sbatch: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (("sbatch", sbatch), ("srun", "exit 0")):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(stat.S_IRWXU)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize(
    "sbatch, words",
    [
        ("exec sleep 600", "sbatch did not answer within 1 s and was stopped"),
        ("echo 'queued, thank you'", r"sbatch answered without a job id \('queued, thank you'\)"),
    ],
)
def test_a_hung_or_mute_sbatch_gets_a_sentence_and_no_ledger(tmp_path, monkeypatch, sbatch, words):
    pytest.importorskip("submitit")
    from tiny_runs import tiny_sweep

    from deltalens.grids import slurm_executor
    from deltalens.grids.grid import load_grid, read_results
    from deltalens.grids.slurm_ledger import LEDGER

    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after the test
    fake_slurm(tmp_path, sbatch)
    monkeypatch.setattr(slurm_executor, "SBATCH_TIMEOUT_S", 1)
    sweep = load_grid(tiny_sweep(tmp_path))
    options = slurm_executor.SlurmOptions(folder=tmp_path / "slurm", poll_s=0.01)
    runner = slurm_executor.SlurmGrid(options, scheduler=None, wait=False, log=lambda text: None)
    start = time.perf_counter()
    with pytest.raises(DeltalensError, match=words):
        runner.train_missing(sweep, read_results(sweep, tmp_path / "res"), tmp_path / "runs", tmp_path / "res", False)
    assert time.perf_counter() - start < 30
    assert not (tmp_path / "res" / LEDGER).exists()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # SIGINT and SIGTERM reach us again


# ---- issue 44's messages -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, words",
    [
        ("print('a' a)", r"is not valid Python \(invalid syntax. Perhaps you forgot a comma\?\)"),
        ("print('a',a)", r"is not a print a trace holds; write print\('a', a\)"),
        ("prnt('a', a)", r"is neither an action like 'a, b = b, a' nor a print"),
    ],
)
def test_a_mistyped_line_gets_a_true_sentence(line, words):
    with pytest.raises(DeltalensError, match=f"^line 3: .*{words}"):
        parse_trace(f">>> a = 1\n>>> b = 2\n>>> {line}\na 1\n")


def test_argument_checks_come_before_the_model_loads(tmp_path):
    code = (
        "import sys; from deltalens.cli.main import main; code = main(sys.argv[1:]); "
        "print(code, 'transformer_lens' in sys.modules)"
    )
    for argv, words in (
        (["intervene", str(CKPT), "--layer", "0", "--head", "9"], "head 9 is out of range"),
        (["probe", str(CKPT), "--automaton", "--layer", "5", "--head", "0"], "layer 5 is out of range"),
        (["eval", str(REPO / "checkpoints" / "s3-deltanet-bpe"), "--group", "Z3"], "Z3 has no transpositions"),
    ):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
        assert out.stdout.split() == ["2", "False"], out.stderr
        assert words in out.stderr


def test_group_on_a_shipped_checkpoint_and_typos_get_sentences(capsys):
    one_sentence(
        *run(["eval", str(CKPT), "--group", "S3"], capsys),
        "--group changes the traces of a model with its own tokenizer only;",
    )
    code, err = run(["eval", "s3-deltanet-neg-statment"], capsys)
    one_sentence(code, err, "did you mean 's3-deltanet-neg-statement'?")
    shipped_names = [p.name for p in (REPO / "checkpoints").iterdir() if (p / "config.json").is_file()]
    assert f"and {len(shipped_names) - 8} more" in err  # a list cut short says so


def test_a_folder_of_another_family_is_told_which_are_supported(tmp_path):
    folder = copy_with(CKPT, tmp_path / "gla", "config.json", model_type="gla", deltalens=None)
    config = json.loads((folder / "config.json").read_text())
    config.pop("deltalens")
    (folder / "config.json").write_text(json.dumps(config))
    refusal = r"type 'gla', which deltalens does not open: it reads fla folders of"
    with pytest.raises(DeltalensError, match=refusal) as err:
        dl.load(str(folder))
    assert "rwkv7" in str(err.value) and "comba" in str(err.value)  # the supported fla types are named
