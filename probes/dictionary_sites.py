"""The sites a sparse dictionary codes and the hooks each reads (torch-free: the CLI lists them before any import).

state, state_rows  blocks.{l}.attn.hook_state        S_t of a head, flattened or row by row
write              blocks.{l}.attn.hook_beta, hook_k, hook_v   beta_t k_t v_t^T of a head
z                  blocks.{l}.attn.hook_z            the head's read-out
resid              blocks.{l}.hook_resid_post        the residual stream after the layer
"""

from __future__ import annotations

from deltalens.core.errors import DeltalensError

__all__ = ["SITES", "site_names"]

SITES = ("state", "state_rows", "write", "z", "resid")


def site_names(site: str, layer: int) -> tuple[str, ...]:
    """The hooks a capture must hold for `site` at `layer`."""
    attn = f"blocks.{layer}.attn.hook_"
    names = {
        "state": (attn + "state",),
        "state_rows": (attn + "state",),
        "write": (attn + "beta", attn + "k", attn + "v"),
        "z": (attn + "z",),
        "resid": (f"blocks.{layer}.hook_resid_post",),
    }
    if site not in names:
        raise DeltalensError(f"unknown site {site!r}; use one of {', '.join(SITES)}.")
    return names[site]
