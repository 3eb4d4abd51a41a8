"""CID: Contrastive Identity Disentanglement (the reference's ``DisentanglementId``).

The e4e code C (B, n_latent, style_dim) goes through a Linear applied to every
latent, gets a learned positional embedding per latent, is split into the coarse,
medium and fine groups (4/4/6 at 256 px) and each group goes through a ViT encoder
(pre-LayerNorm, multi-head attention with a bias-free qkv projection, GELU MLP,
dropout, no class token). The result is the attribute code A; the identity code is
I = C - A, with C the e4e code itself (before the Linear), as in the reference.

What the attention attends over is the field ``attention``:

- ``'tokens'``: a group's latent tokens attend to each other, image by image. This is
  what the paper describes and the default for new training.
- ``'batch'``: the reference's behaviour. It permutes the codes to (layers, batch,
  dim) before its ViTs, whose attention takes the first axis as the batch, so the
  attention runs over the images of the batch, separately for each latent layer, and
  an image's codes depend on its batch-mates. Use it to reproduce the reference and
  to continue training its checkpoints. Under ``jax.jit`` with a data-sharded batch
  the computation keeps its global meaning: the attention spans the whole global
  batch (XLA gathers the small code tensor across devices), never just the
  per-device shard, so results equal an unsharded run at the same global batch.
- ``'single'``: every image as if it were alone, i.e. ``'batch'`` at batch size 1
  (the reference's test script), where the softmax runs over one element and each
  attention reduces to ``to_out(v)``. Use it for inference with converted reference
  checkpoints: an output never depends on what else is in the batch, on any number
  of devices, and no cross-device communication is needed.

``shared``: False gives three separate ViTs (the reference). True is the paper's
variant: "the latent codes at three levels are processed independently by a shared
Multi-head Attention module" (eqs. 1-3). The paper gives no depth or MLP for it, so
the port keeps the reference's transformer (same depth, heads, MLP) and shares one
set of its weights across the three groups; each group still attends only within
itself, and the per-latent positional embedding tells the groups apart.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.core import sharding
from dbaf_jax.models.stylegan2 import LATENT_GROUPS

ATTENTION_MODES = ("tokens", "batch", "single")

# torch.nn.LayerNorm's epsilon; torch's nn.GELU is the exact (erf) form.
_LAYER_NORM_EPS = 1e-5


def _layer_norm(name: str) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=_LAYER_NORM_EPS, use_fast_variance=False, name=name)


class SelfAttention(nn.Module):
    """Multi-head self-attention among the entries of axis -2.

    Input (..., N, D) -> output (..., N, D); every leading axis is a batch axis.
    """

    heads: int
    head_dim: int
    dropout: float

    @nn.compact
    def __call__(self, x: jnp.ndarray, deterministic: bool) -> jnp.ndarray:
        inner = self.heads * self.head_dim
        qkv = nn.Dense(3 * inner, use_bias=False, name="to_qkv")(x)
        # Each of q, k, v is laid out (heads, head_dim) along its last axis, as in torch.
        q, k, v = (
            t.reshape(*t.shape[:-1], self.heads, self.head_dim) for t in jnp.split(qkv, 3, axis=-1)
        )
        logits = jnp.einsum("...qhd,...khd->...hqk", q, k) * self.head_dim**-0.5
        weights = nn.Dropout(self.dropout)(nn.softmax(logits, axis=-1), deterministic=deterministic)
        out = jnp.einsum("...hqk,...khd->...qhd", weights, v).reshape(*x.shape[:-1], inner)
        out = nn.Dense(x.shape[-1], name="to_out")(out)
        return nn.Dropout(self.dropout)(out, deterministic=deterministic)


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: x + attention(norm(x)), then x + MLP(norm(x))."""

    heads: int
    head_dim: int
    mlp_dim: int
    dropout: float

    @nn.compact
    def __call__(self, x: jnp.ndarray, deterministic: bool) -> jnp.ndarray:
        attention = SelfAttention(self.heads, self.head_dim, self.dropout, name="attention")
        x = x + attention(_layer_norm("attention_norm")(x), deterministic)
        h = nn.Dense(self.mlp_dim, name="mlp_in")(_layer_norm("mlp_norm")(x))
        h = nn.Dropout(self.dropout)(nn.gelu(h, approximate=False), deterministic=deterministic)
        h = nn.Dropout(self.dropout)(
            nn.Dense(x.shape[-1], name="mlp_out")(h), deterministic=deterministic
        )
        return x + h


class ViT(nn.Module):
    """Input dropout then ``depth`` transformer blocks; attention over axis -2.

    ``scan``: once initialised, the blocks run as one `jax.lax.scan` over their
    parameters stacked at call time, so the program holds one block, not ``depth``
    (a smaller program to compile); the parameters keep their per-block names
    (``block_i``), so checkpoints and converters are the same either way. The outputs
    are the unrolled ones; with dropout, the masks are drawn from other keys.
    """

    depth: int
    heads: int
    head_dim: int
    mlp_dim: int
    dropout: float
    scan: bool = False

    @nn.compact
    def __call__(self, x: jnp.ndarray, deterministic: bool) -> jnp.ndarray:
        x = nn.Dropout(self.dropout)(x, deterministic=deterministic)
        if not self.scan or self.is_initializing():
            for i in range(self.depth):
                x = TransformerBlock(
                    self.heads, self.head_dim, self.mlp_dim, self.dropout, name=f"block_{i}"
                )(x, deterministic)
            return x
        params = self.variables["params"]
        stacked = jax.tree.map(
            lambda *p: jnp.stack(p), *(params[f"block_{i}"] for i in range(self.depth))
        )
        keys = (
            jax.random.split(self.make_rng("dropout"), self.depth)
            if not deterministic
            else jnp.zeros((self.depth, 2), jnp.uint32)
        )
        block = TransformerBlock(self.heads, self.head_dim, self.mlp_dim, self.dropout, parent=None)

        def step(h, inputs):
            block_params, key = inputs
            rngs = None if deterministic else {"dropout": key}
            return block.apply({"params": block_params}, h, deterministic, rngs=rngs), None

        return jax.lax.scan(step, x, (stacked, keys))[0]


class CID(nn.Module):
    """Splits an e4e code into attribute and identity codes.

    Call: ``attribute_code, identity_code = cid.apply(variables, codes)`` with codes
    (B, n_latent, style_dim); both outputs (B, n_latent, style_dim). Pass
    ``deterministic=False`` (and a 'dropout' rng) to train with dropout.
    """

    n_latent: int = 14
    style_dim: int = 512
    groups: tuple[int, ...] = LATENT_GROUPS
    depth: int = 6
    heads: int = 14
    head_dim: int = 64
    mlp_dim: int = 2048
    dropout: float = 0.1
    attention: str = "tokens"
    shared: bool = False
    scan: bool = False  # `ViT.scan`: one scanned block per ViT in the program

    def setup(self):
        if self.attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, not {self.attention!r}")
        if sum(self.groups) != self.n_latent:
            raise ValueError(f"groups {self.groups} do not add up to n_latent {self.n_latent}")
        self.linear_w = nn.Dense(self.style_dim, name="linear_w")
        self.pos_embedding = self.param(
            "pos_embedding", nn.initializers.normal(1.0), (self.n_latent, self.style_dim)
        )

        def vit(name: str) -> ViT:
            return ViT(
                self.depth,
                self.heads,
                self.head_dim,
                self.mlp_dim,
                self.dropout,
                self.scan,
                name=name,
            )

        if self.shared:
            self.vits = (vit("vit"),) * len(self.groups)
        else:
            self.vits = tuple(vit(f"vit_{g}") for g in range(len(self.groups)))

    def __call__(
        self, codes: jnp.ndarray, deterministic: bool = True
    ) -> tuple[jnp.ndarray, jnp.ndarray]:
        x = self.linear_w(codes) + self.pos_embedding
        outputs, start = [], 0
        for vit, size in zip(self.vits, self.groups):
            outputs.append(self._encode_group(vit, x[:, start : start + size], deterministic))
            start += size
        attribute_code = jnp.concatenate(outputs, axis=1)
        return attribute_code, codes - attribute_code

    def _encode_group(self, vit: ViT, x: jnp.ndarray, deterministic: bool) -> jnp.ndarray:
        """x (B, group, D) -> (B, group, D), attending as ``self.attention`` says."""
        if self.attention == "tokens":
            return vit(x, deterministic)
        if self.attention == "batch":
            # Every image attends to the whole (global) batch: each device runs the small
            # ViT on all of it rather than moving its activations piecewise.
            return vit(sharding.replicate(x).swapaxes(0, 1), deterministic).swapaxes(0, 1)
        return vit(x[:, :, None, :], deterministic)[:, :, 0, :]


class LatentMLP(nn.Module):
    """The paper's ablation without CID: a 4-layer MLP per latent in place of the ViTs.

    Same contract as `CID`: codes (B, n_latent, style_dim) -> (attribute_code,
    identity_code = codes - attribute_code). ``deterministic`` is accepted for the
    common call and unused (no dropout).
    """

    style_dim: int = 512
    depth: int = 4

    @nn.compact
    def __call__(
        self, codes: jnp.ndarray, deterministic: bool = True
    ) -> tuple[jnp.ndarray, jnp.ndarray]:
        del deterministic
        x = codes
        for i in range(self.depth):
            x = nn.Dense(self.style_dim, name=f"linear_{i}")(x)
            if i < self.depth - 1:
                x = nn.gelu(x, approximate=False)
        return x, codes - x
