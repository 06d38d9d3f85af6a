"""The compiled-kernel cache is verified before it is loaded: a truncated, replaced or foreign shared
object is rebuilt with one warning line, never loaded (a truncated .so crashed the process with SIGBUS)."""

import os
import shutil
import subprocess
import sys

import pytest

# builds the kernel if needed, then runs it: the C delta rule and the C short conv against the references
SCRIPT = """
import torch
from deltalens.models.ops.native import library
from deltalens.models.ops.delta_rule import chunk_delta_rule, delta_rule_recurrence
from deltalens.models.layers.short_conv import ShortConvolution, short_conv_ref
assert library("delta_rule") is not None and library("short_conv") is not None
torch.manual_seed(0)
q, k = (torch.nn.functional.normalize(torch.randn(2, 9, 2, 4), dim=-1) for _ in range(2))
v, beta = torch.randn(2, 9, 2, 4), torch.rand(2, 9, 2)
o, _ = chunk_delta_rule(q, k, v, beta)
assert torch.allclose(o, delta_rule_recurrence(q, k, v, beta)[0], atol=1e-5)
conv, x = ShortConvolution(6, 4), torch.randn(2, 9, 6)
assert torch.allclose(conv(x), short_conv_ref(x, conv.weight, None, "silu"), atol=1e-6)
print("ok")
"""


def _run(cache):
    env = {**os.environ, "DELTALENS_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache folder with both kernels built and verified once."""
    cache = tmp_path_factory.mktemp("cache")
    out = _run(cache)
    assert out.stdout.strip() == "ok" and "warning" not in out.stderr.lower(), out.stderr
    return cache


def _fresh_copy(built, tmp_path):
    shutil.copytree(built, tmp_path / "cache")
    return tmp_path / "cache", sorted((tmp_path / "cache" / "kernels").glob("delta_rule-*.so"))[0]


def test_every_build_has_a_digest_beside_it(built):
    for so in (built / "kernels").glob("*.so"):
        assert (
            so.with_suffix(".sha256").read_text().strip() == __import__("hashlib").sha256(so.read_bytes()).hexdigest()
        )


@pytest.mark.parametrize("kept", [0.3, 0.5, 0.9])
def test_a_truncated_cached_kernel_is_rebuilt_not_loaded(built, tmp_path, kept):
    cache, so = _fresh_copy(built, tmp_path)
    data = so.read_bytes()
    so.write_bytes(data[: int(len(data) * kept)])
    out = _run(cache)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "rebuilding the cached C kernel" in out.stderr and "digest" in out.stderr
    assert so.read_bytes() == data  # the same build again


def test_a_foreign_library_without_the_kernels_symbols_is_rebuilt(built, tmp_path):
    cache, so = _fresh_copy(built, tmp_path)
    foreign = sorted((cache / "kernels").glob("short_conv-*.so"))[0]
    shutil.copy(foreign, so)  # a valid shared object, digest and all, that lacks delta_rule_forward
    shutil.copy(foreign.with_suffix(".sha256"), so.with_suffix(".sha256"))
    out = _run(cache)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "lacks delta_rule_block" in out.stderr


def test_a_cache_that_cannot_be_rebuilt_falls_back_to_torch_with_one_warning(built, tmp_path):
    cache, so = _fresh_copy(built, tmp_path)
    so.write_bytes(so.read_bytes()[:1000])
    script = (
        "import torch\n"
        "from deltalens.models.ops.delta_rule import chunk_delta_rule\n"
        "from deltalens.models.ops.native import library_error\n"
        "q = torch.randn(1, 5, 2, 4); o, _ = chunk_delta_rule(q, q, q, torch.rand(1, 5, 2))\n"
        "print(o.shape, library_error('delta_rule'))\n"
    )
    env = {**os.environ, "DELTALENS_CACHE": str(cache), "CC": "no-such-compiler", "PATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("torch.Size([1, 5, 2, 4]) no C compiler found"), out.stdout
    assert out.stderr.count("rebuilding the cached C kernel") == 1
