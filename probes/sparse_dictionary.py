"""Sparse dictionaries (TopK sparse autoencoders) of a delta-rule site, with EleutherAI's sparsify coder.

    d = dl.train_sae(model, batch, site="state", layer=0, head=3, num_latents=256, k=8)   # or a Capture
    d.save("saes/s3-L0H3-state")     # sparsify's own folder (cfg.json, sae.safetensors) + deltalens.json
    d = dl.load_sae("saes/s3-L0H3-state")
    d.encode(x), d.reconstruct(x)    # x: the site's vectors, as `site_vectors` gives them

A site is one head's (or one layer's) vectors, one row per kept token:

    state       S_t of the head, flattened (d_k * d_v): the matrix the recurrence carries
    state_rows  each of S_t's d_k rows (a value-sized vector) as a row of its own: d_k rows per token
    write       the head's write beta_t k_t v_t^T, flattened (what the token adds before the read-out)
    z           hook_z of the head, o_t = S_t^T q_t (d_v)
    resid       the residual stream after the layer (blocks.{l}.hook_resid_post; head is None)

The coder is sparsify's `SparseCoder` (TopK activation, decoder rows of unit norm), saved in its folder
format so sparsify's `SparseCoder.load_from_disk` opens it. sparsify's trainer reads a Hugging Face model
over a text dataset at its hookpoints; these sites are a recurrence's states on traces with a known truth,
so the loop here feeds the coder the captured vectors: Adam, sparsify's AuxK loss on dead latents (alpha
1/32, a latent dead after it has not fired for `dead_after` rows), the decoder kept at unit norm with its
gradient parallel to the rows removed, as sparsify's trainer does. Inputs are divided by their RMS norm
(`scale`, kept with the dictionary), so one learning rate serves every site.

Rows: even-numbered traces train, odd-numbered ones are held out (probes/dictionary_scores.py scores there).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from deltalens.core.atomic import usual_mode, write_json_atomic
from deltalens.core.display import progress
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.probes.dictionary_sites import SITES, site_names

__all__ = ["SITES", "Dictionary", "load_sae", "site_names", "site_vectors", "train_sae"]

META = "deltalens.json"  # beside sparsify's cfg.json and sae.safetensors


def _require_sparsify():
    try:
        import sparsify.sparse_coder as coder_module
        from sparsify import SparseCoder, SparseCoderConfig
        from sparsify.utils import eager_decode
    except ImportError as err:  # a dependency of deltalens: missing only in a broken install
        raise DeltalensError(
            f"sparse dictionaries need EleutherAI's sparsify (pip install eai-sparsify): {err}"
        ) from None
    if not torch.cuda.is_available():  # its Triton decoder needs a GPU driver; its own torch fallback otherwise
        coder_module.decoder_impl = eager_decode  # (SPARSIFY_DISABLE_TRITON does the same, printing to stdout)
    return SparseCoder, SparseCoderConfig


def site_vectors(cap, site: str, layer: int, head: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(vectors (rows, d_in) fp32, token (rows,): the capture row each vector belongs to)."""
    for name in site_names(site, layer):
        if name not in cap:
            raise DeltalensError(f"the capture lacks {name}; capture with names={site_names(site, layer)!r}.")
    n = len(cap.labels["trace"])
    token = torch.arange(n)
    if site == "resid":
        return cap[site_names(site, layer)[0]].float(), token
    if head is None:
        raise DeltalensError(f"site {site!r} is one head's: give head=")
    first = cap[site_names(site, layer)[0]]
    if not 0 <= head < first.shape[1]:
        raise DeltalensError(f"head {head} is out of range: layer {layer} has {first.shape[1]} heads.")
    if site == "state":
        return cap.layer("state", layer)[:, head].flatten(1).float(), token
    if site == "state_rows":
        S = cap.layer("state", layer)[:, head].float()  # (N, d_k, d_v)
        return S.flatten(0, 1), token.repeat_interleave(S.shape[1])
    if site == "z":
        return cap.layer("z", layer)[:, head].float(), token
    beta, k, v = (cap.layer(x, layer)[:, head].float() for x in ("beta", "k", "v"))
    if beta.ndim != 1:
        raise DeltalensError("site 'write' is one write per token; a DeltaProduct head writes several (its factors).")
    return (beta[:, None, None] * k[:, :, None] * v[:, None, :]).flatten(1), token


@dataclass
class Dictionary:
    """A trained sparse dictionary of one site: sparsify's coder and what it was trained on.

    >>> d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> d.reconstruct(cap.layer("state", 0)[:, 3].flatten(1)).shape[1]     # d_k * d_v
    256
    """

    coder: Any  # sparsify.SparseCoder
    site: str
    layer: int
    head: int | None
    scale: float  # inputs are divided by this (their RMS norm over the training rows)
    meta: dict[str, Any] = field(default_factory=dict)  # arch, checkpoint, steps, seconds, fvu, ...

    @property
    def num_latents(self) -> int:
        return int(self.coder.num_latents)

    @property
    def k(self) -> int:
        return int(self.coder.cfg.k)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(top activations, their latent indices), each (rows, k)."""
        out = self.coder.encode(x.float() / self.scale)
        return out.top_acts, out.top_indices

    @torch.no_grad()
    def activations(self, x: torch.Tensor) -> torch.Tensor:
        """Every latent's activation, (rows, num_latents): zero where it is not among a row's top k."""
        acts, indices = self.encode(x)
        dense = torch.zeros(x.shape[0], self.num_latents)
        return dense.scatter_(1, indices, acts.float())

    @torch.no_grad()
    def reconstruct(self, x: torch.Tensor, drop: torch.Tensor | None = None) -> torch.Tensor:
        """x through the dictionary, in x's units; `drop` (latent indices) are set to zero first."""
        acts, indices = self.encode(x)
        if drop is not None:
            acts = acts.masked_fill(torch.isin(indices, drop.to(indices.device)), 0.0)
        return self.coder.decode(acts, indices).float() * self.scale

    def save(self, folder) -> Path:
        """sparsify's folder (cfg.json, sae.safetensors) plus deltalens.json (site, scale, training record)."""
        folder = Path(folder)
        self.coder.save_to_disk(folder)
        for name in ("cfg.json", "sae.safetensors"):  # sparsify's files, as readable as the ones written here
            if (folder / name).is_file():
                usual_mode(folder / name)
        record = {"site": self.site, "layer": self.layer, "head": self.head, "scale": self.scale, **self.meta}
        write_json_atomic(folder / META, record)
        return folder


def load_sae(folder) -> Dictionary:
    """A dictionary saved by `Dictionary.save` (sparsify's folder and deltalens.json).

    >>> import tempfile
    >>> d = dl.train_sae(cap, site="state", layer=0, head=3, num_latents=32, k=4, steps=20)
    >>> dl.load_sae(d.save(tempfile.mkdtemp())).num_latents
    32
    """
    SparseCoder, _ = _require_sparsify()
    folder = Path(folder)
    for name in ("cfg.json", "sae.safetensors", META):
        if not (folder / name).is_file():
            raise DeltalensError(f"{folder} is not a saved dictionary: it has no {name}.")
    try:
        record = json.loads((folder / META).read_text())
        site, layer, head, scale = record.pop("site"), record.pop("layer"), record.pop("head"), record.pop("scale")
    except (ValueError, KeyError) as err:
        raise DeltalensError(f"{folder / META} is not a dictionary record ({err}).") from None
    coder = SparseCoder.load_from_disk(folder)
    return Dictionary(coder.eval(), site, int(layer), head, float(scale), record)


def _capture_for(source, batch, site: str, layer: int):
    from deltalens.interp.capture import capture
    from deltalens.interp.capture_result import Capture

    if isinstance(source, Capture):
        return source
    if batch is None:
        raise DeltalensError("pass a Capture, or a model together with a batch of traces (or token ids, or text).")
    return capture(source, batch, names=site_names(site, layer))


def _fit(coder, data, steps: int, batch_size: int, lr: float, dead_after, generator, desc: str, bar: bool) -> float:
    """sparsify's objective on `data` (rows already scaled): FVU plus 1/32 of the AuxK loss on latents dead for
    `dead_after` rows, Adam, the decoder at unit norm; the last step's FVU."""
    width = coder.num_latents
    optimizer = torch.optim.Adam(coder.parameters(), lr=lr)
    dead_after = dead_after if dead_after is not None else 10 * len(data)
    since_fired = torch.zeros(width, dtype=torch.long)
    variance = (data - data.mean(0)).pow(2).sum(1).mean()
    fvu = math.nan
    shown = progress(range(steps), enabled=bar, desc=desc)
    for _ in shown:
        rows = data[torch.randint(len(data), (min(batch_size, len(data)),), generator=generator)]
        out = coder(rows, dead_mask=since_fired > dead_after, total_variance=variance * len(rows))
        loss = out.fvu + out.auxk_loss / 32
        optimizer.zero_grad()
        loss.backward()
        coder.remove_gradient_parallel_to_decoder_directions()
        optimizer.step()
        coder.set_decoder_norm_to_unit_norm()
        fired = torch.zeros(width, dtype=torch.bool)
        fired[out.latent_indices.flatten()] = True
        since_fired = torch.where(fired, 0, since_fired + len(rows))
        fvu = float(out.fvu.detach())
        shown.set_postfix(fvu=f"{fvu:.3f}", dead=int((since_fired > dead_after).sum()))
    return fvu


@integer_indices("layer", "head")
def train_sae(
    source,
    batch=None,
    *,
    site: str = "state",
    layer: int = 0,
    head: int | None = None,
    num_latents: int | None = None,
    expansion: int = 4,
    k: int = 8,
    steps: int = 2000,
    batch_size: int = 1024,
    lr: float = 1e-3,
    dead_after: int | None = None,
    seed: int = 0,
    progress_bar: bool = True,
) -> Dictionary:
    """A TopK dictionary of `site` (module docstring) at `layer` / `head`, trained on the even-numbered traces
    of `source` (a Capture holding the site's hooks, or a model with `batch`). num_latents: the width (default
    expansion x d_in); k: latents active per row.

    >>> d = dl.train_sae(model, batch, site="z", layer=0, head=3, num_latents=64, k=4, steps=50)
    >>> d.num_latents, d.k, d.site
    (64, 4, 'z')
    """
    SparseCoder, SparseCoderConfig = _require_sparsify()
    cap = _capture_for(source, batch, site, layer)
    x, token = site_vectors(cap, site, layer, head)
    train = (cap.labels["trace"][token] % 2) == 0
    x_train = x[train]
    if len(x_train) < 2:
        raise DeltalensError("a dictionary needs training rows: capture at least two traces (the even ones train).")
    d_in = x.shape[1]
    width = num_latents if num_latents is not None else expansion * d_in
    for name, value in (("num_latents", width), ("k", k), ("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise DeltalensError(f"{name} must be a whole number >= 1, got {value!r}.")
    if k > width:
        raise DeltalensError(f"k={k} latents per row cannot exceed the width, num_latents={width}.")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise DeltalensError(f"lr must be a finite learning rate > 0, got {lr!r}.")
    scale = float(x_train.pow(2).sum(1).mean().sqrt().clamp_min(1e-12))
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        coder = SparseCoder(d_in, SparseCoderConfig(num_latents=width, k=k))
    data = x_train / scale
    where = f"L{layer}" + ("" if head is None else f"H{head}")
    start = time.perf_counter()
    fvu = _fit(coder, data, steps, batch_size, lr, dead_after, generator, f"dictionary {site} {where}", progress_bar)
    finite = math.isfinite(fvu) and all(bool(torch.isfinite(p).all()) for p in coder.parameters())
    if not finite:
        raise DeltalensError(
            f"training diverged: the dictionary's error or weights are not finite after {steps} steps at lr {lr:g}; "
            "train again with a smaller lr"
        )
    coder.eval()
    meta = {
        "arch": cap.arch,
        "d_in": d_in,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "train_rows": len(data),
        "train_seconds": round(time.perf_counter() - start, 2),
        "train_fvu": fvu,
        "library": "sparsify (eai-sparsify) SparseCoder, TopK",
    }
    return Dictionary(coder, site, layer, head, scale, meta)
