"""Mixed precision: each network computes in the compute dtype, everything between
networks is float32.

A network runs in bfloat16 when its parameters and its inputs are bfloat16: the
modules compute in the dtype of what they are given (Flax's layers with
``dtype=None``, and our own layers keep to their inputs' dtype), so no module needs a
dtype field of its own and a model directory's architecture (and fingerprint) does
not depend on how it is run. `apply` casts a network's parameters and inputs to the
compute dtype and its floating-point outputs back to float32, so losses, their
reductions, optimizer updates and the values one network hands the next are float32.

Only the ``params`` collection is cast. Running statistics (BatchNorm) and buffers
stay float32, so running averages keep accumulating small updates that bfloat16's
8-bit mantissa would round away; layers cast them to their input's dtype where they
use them. Trainable parameters stay float32 in the train state and are cast inside
the step (their gradients arrive in float32 through the cast); frozen networks'
parameters are cast once, with `cast_params`, before training or inference starts.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.core.errors import ConfigError

COMPUTE_DTYPES = ("float32", "bfloat16")


def check_compute_dtype(dtype: str | None) -> None:
    """Raises ConfigError unless ``dtype`` is None or one of `COMPUTE_DTYPES`."""
    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise ConfigError(f"compute_dtype {dtype!r}: expected one of {COMPUTE_DTYPES}")


def is_reduced(dtype: str | None) -> bool:
    """Whether ``dtype`` asks for anything but float32 (None means float32)."""
    return dtype not in (None, "float32")


def cast_floats(tree: Any, dtype: Any) -> Any:
    """``tree`` with every floating-point array leaf in ``dtype``; other leaves
    (integers, booleans, PRNG keys, strings) unchanged."""

    def cast(leaf):
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating):
            return jnp.asarray(leaf).astype(dtype)
        return leaf

    return jax.tree.map(cast, tree)


def cast_params(variables: dict, dtype: str | None) -> dict:
    """One network's variables with its ``params`` collection in ``dtype`` (None or
    float32: unchanged, no copy); running statistics and buffers stay as they are."""
    if not is_reduced(dtype) or "params" not in variables:
        return variables
    return {**variables, "params": cast_floats(variables["params"], dtype)}


def apply(dtype: str | None, module: nn.Module, variables: dict, *args, **kwargs) -> Any:
    """``module.apply(variables, *args, **kwargs)`` computed in ``dtype``: float params
    and float inputs cast to it, float outputs (updated collections included) returned
    in float32. ``dtype`` None or float32: exactly ``module.apply``."""
    if not is_reduced(dtype):
        return module.apply(variables, *args, **kwargs)
    args, kwargs = cast_floats((args, kwargs), dtype)
    return cast_floats(module.apply(cast_params(variables, dtype), *args, **kwargs), jnp.float32)
