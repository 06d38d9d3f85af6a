"""One table of a model's heads for circuit finding: direct logit attribution beside attribution patching.

`head_attribution(model, clean, corrupt)` measures every head two ways on a clean / corrupted pair of
trace batches (interp/trace_pairs.py: the corrupted twin relabels the values, so every reveal's answer
changes):

* `dla`: the head's direct contribution to logit[true value] - mean logit[other values] at the
  positions that predict the clean run's reveals (interp/logit_attribution.py; the delta-rule family
  only, NaN elsewhere): which heads write the answer;
* `ap_<site>`: attribution patching's first-order estimate of restoring the clean answer (the
  clean-minus-corrupt logit difference) by patching that head's hook_<site> from the clean run at every
  position (interp/attribution_patching.py): which heads carry the information, from one forward and
  one backward.

`patch_grid(model, clean, corrupt, site)` is the exact counterpart of one `ap_<site>` column: activation
patching, one forward per head; `method_agreement(grid, attribution)` says how far the estimate ranks
the heads as the exact grid does (Spearman's rank correlation, each method's top head). The CLI
(`deltalens probe --attribution`, `deltalens intervene --patch-grid`), the dashboard's Circuit page and
notebook 05 all read these.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from deltalens.core.display import Summary
from deltalens.core.errors import DeltalensError
from deltalens.core.indices import integer_indices
from deltalens.models.architecture import architecture_of, article_of, is_delta_rule
from deltalens.models.registry import family

__all__ = [
    "HeadAttribution",
    "head_attribution",
    "patch_grid",
    "attribution_sites",
    "MethodAgreement",
    "method_agreement",
]


def attribution_sites(model) -> tuple[str, ...]:
    """The sites attribution patching can estimate on this model: z, beta and state on the delta rule (state where its
    adjoint scan applies: transitions alpha (I - beta k k^T), no value gate), z elsewhere."""
    arch = architecture_of(model)
    if arch == "lstm":
        raise DeltalensError(
            f"{article_of(arch)} has no attention heads, so there is nothing to attribute or patch per head."
        )
    if not is_delta_rule(arch):
        return ("z",)
    adjoint = {"householder", "one_pattern"} <= family(arch).capabilities  # the state adjoint's transitions
    return ("z", "beta", "state") if adjoint else ("z", "beta")


@dataclass(repr=False)
class HeadAttribution(Summary):
    """Every head measured two ways on a clean / relabelled pair: direct logit attribution and attribution patching.

    >>> result = dl.head_attribution(model, *dl.trace_pair(model, 4))
    >>> isinstance(result, dl.HeadAttribution), result.sites
    (True, ('z', 'beta', 'state'))
    """

    frame: pd.DataFrame  # one row per head: layer, head, dla, ap_<site>..., rank (1 = largest |ap_z|)
    clean: float  # the metric (clean-minus-corrupt answer logit difference) on the clean run
    corrupt: float  # and on the corrupted run
    dla_error: float  # max |sum of DLA components - real logit difference| (NaN without DLA)
    forward_equivalents: float  # attribution patching's wall time / one plain forward
    n_traces: int
    sites: tuple[str, ...]

    def title(self) -> str:
        top = self.frame.iloc[0]
        return (
            f"Heads of {self.n_traces} trace pairs: metric clean {self.clean:.3f}, corrupt {self.corrupt:.3f}; "
            f"attribution patching ranks L{int(top['layer'])}H{int(top['head'])} first "
            f"({self.forward_equivalents:.1f} forward-equivalents)"
        )

    def display_frame(self) -> pd.DataFrame:
        return self.frame

    def dla_grid(self) -> torch.Tensor:
        """(n_layers, n_heads) DLA per head."""
        return self._grid("dla")

    def ap_grid(self, site: str = "z") -> torch.Tensor:
        """(n_layers, n_heads) attribution-patching estimate per head at one site."""
        if f"ap_{site}" not in self.frame:
            raise DeltalensError(f"site {site!r} was not estimated; estimated: {', '.join(self.sites)}.")
        return self._grid(f"ap_{site}")

    def _grid(self, column: str) -> torch.Tensor:
        L, H = int(self.frame["layer"].max()) + 1, int(self.frame["head"].max()) + 1
        grid = torch.full((L, H), float("nan"), dtype=torch.float64)
        for layer, head, value in self.frame[["layer", "head", column]].itertuples(index=False):
            grid[int(layer), int(head)] = float(value)
        return grid

    def to_dict(self) -> dict:
        def number(x):
            return None if pd.isna(x) else round(float(x), 5)

        return {
            "clean_metric": number(self.clean),
            "corrupt_metric": number(self.corrupt),
            "dla_error": number(self.dla_error),
            "attribution_forward_equivalents": number(self.forward_equivalents),
            "n_traces": self.n_traces,
            "sites": list(self.sites),
            "heads": [
                {k: (int(v) if k in ("layer", "head", "rank") else number(v)) for k, v in row.items()}
                for row in self.frame.to_dict("records")
            ],
        }


def head_attribution(model, clean: dict, corrupt: dict) -> HeadAttribution:
    """DLA per head (delta-rule family) and attribution patching per head and site, ranked by |ap_z|.

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> table = dl.head_attribution(model, clean, corrupt)
    >>> [int(x) for x in table.frame.iloc[0][["layer", "head"]]]   # attribution patching's top head
    [0, 3]
    """
    from deltalens.interp.attribution_patching import attribution_patching
    from deltalens.interp.logit_attribution import logit_attribution, reveal_rows
    from deltalens.interp.trace_pairs import reveal_metric

    sites = attribution_sites(model)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    rows = [{"layer": layer, "head": head} for layer in range(L) for head in range(H)]
    frame = pd.DataFrame(rows)
    dla_error = float("nan")
    if is_delta_rule(architecture_of(model)):
        positions, answer, against = reveal_rows(clean)
        with torch.no_grad():
            _, cache = model.run_with_cache(clean["tokens"].to(next(model.parameters()).device))
        dla = logit_attribution(model, cache, positions, answer, against)
        dla_error = dla.error
        frame["dla"] = dla.head_grid().flatten().numpy()
    else:
        frame["dla"] = float("nan")
    metric = reveal_metric(clean, corrupt)
    ap = attribution_patching(model, clean, corrupt, metric, sites=sites)
    for site in sites:
        frame[f"ap_{site}"] = ap.per_head(site).flatten().numpy()
    frame = frame.sort_values("ap_z", key=abs, ascending=False, ignore_index=True)
    frame["rank"] = range(1, len(frame) + 1)
    return HeadAttribution(
        frame=frame,
        clean=ap.clean,
        corrupt=ap.corrupt,
        dla_error=dla_error,
        forward_equivalents=ap.forward_equivalents,
        n_traces=int(clean["tokens"].shape[0]),
        sites=sites,
    )


@integer_indices("on_head")
def patch_grid(model, clean: dict, corrupt: dict, site: str = "z", progress: bool = True, on_head=None):
    """Activation patching of every head's hook_{site} from the clean into the corrupted run (a PatchGrid),
    scored by reveal_metric; on_head(layer, head) is called before each head (a progress bar).

    >>> clean, corrupt = dl.trace_pair(model, 4)
    >>> dl.patch_grid(model, clean, corrupt, site="z", progress=False).top()
    (0, 3)
    """
    from deltalens.interp.patching import patch_heads
    from deltalens.interp.trace_pairs import reveal_metric

    if site not in attribution_sites(model):
        raise DeltalensError(
            f"{article_of(architecture_of(model))} has no per-head hook_{site} to patch; "
            f"use one of: {', '.join(attribution_sites(model))}."
        )
    return patch_heads(
        model, clean, corrupt, reveal_metric(clean, corrupt), site=site, progress=progress, on_head=on_head
    )


@dataclass(frozen=True)
class MethodAgreement:
    """How far attribution patching's estimate agrees with activation patching on one site."""

    site: str
    spearman: float  # rank correlation of the two per-head values (NaN when one method is flat)
    top_exact: tuple[int, int]  # (layer, head) activation patching restores most
    top_estimate: tuple[int, int]  # and the one attribution patching estimates most
    exact_at_top: float  # fraction restored by activation patching at its top head
    estimate_at_top: float  # attribution patching's estimate at that same head

    span_ok: bool = True  # the runs differ by at least patching.SPAN_FLOOR
    exact_standout: str = ""  # patching.standout_sentence of each grid: names a top head only when one stands out
    estimate_standout: str = ""

    def sentence(self) -> str:
        rho = "undefined (one method is flat)" if self.spearman != self.spearman else f"{self.spearman:+.2f}"
        if not self.span_ok or self.exact_standout.startswith("no head"):
            return (
                f"hook_{self.site}: the two methods rank the heads with Spearman correlation {rho}; activation "
                f"patching: {self.exact_standout}; attribution patching: {self.estimate_standout}."
            )
        (la, ha), (lb, hb) = self.top_exact, self.top_estimate
        same = "the same top head" if self.top_exact == self.top_estimate else "different top heads"
        rho = "undefined (one method is flat)" if self.spearman != self.spearman else f"{self.spearman:+.2f}"
        return (
            f"hook_{self.site}: the two methods rank the heads with Spearman correlation {rho} and name {same} "
            f"(activation patching L{la}H{ha}, attribution patching L{lb}H{hb}); at L{la}H{ha} activation "
            f"patching restores {self.exact_at_top:.3f} of the answer, attribution patching estimates "
            f"{self.estimate_at_top:.3f}."
        )

    def __repr__(self) -> str:
        return f"MethodAgreement({self.sentence()})"


def method_agreement(exact, estimate: torch.Tensor) -> MethodAgreement:
    """Compare activation patching (`exact`, a PatchGrid of one site) with attribution patching's estimate
    of the same site (`estimate`, an (L, H) tensor of the metric's change, e.g. HeadAttribution.ap_grid),
    both as fractions of the clean-minus-corrupt span."""
    span = (exact.clean - exact.corrupt) or 1.0
    a = (exact.per_head() / span).flatten().double()
    b = (torch.as_tensor(estimate) / span).flatten().double()
    if a.shape != b.shape:
        raise DeltalensError(f"the two grids cover different heads ({a.numel()} and {b.numel()}).")
    rho = pd.Series(a.numpy()).corr(pd.Series(b.numpy()), method="spearman")
    H = exact.values.shape[1]
    # a layer without the site (a hybrid's attention layer) is NaN in both: never the top head
    top_a, top_b = (int(torch.nan_to_num(x.abs(), nan=-1.0).argmax()) for x in (a, b))
    from deltalens.interp.patching import standout_sentence

    unit = "fraction restored" if exact.span_ok else "change of the metric"
    grid_a, grid_b = (
        (exact.per_head() / span, torch.as_tensor(estimate) / span)
        if exact.span_ok
        else (
            exact.per_head(),
            torch.as_tensor(estimate),
        )
    )
    return MethodAgreement(
        site=exact.site,
        spearman=float(rho),
        top_exact=divmod(top_a, H),
        top_estimate=divmod(top_b, H),
        exact_at_top=float(a[top_a]),
        estimate_at_top=float(b[top_a]),
        span_ok=exact.span_ok,
        exact_standout=standout_sentence(grid_a.double(), unit),
        estimate_standout=standout_sentence(grid_b.double(), unit),
    )
