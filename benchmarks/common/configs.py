"""The training configs the benchmarks build: a stage's ``reference`` config at another
size, widths, dtype and batch (the train-step, FLOP and program-size benchmarks, and the
random models of `benchmarks.common.models`)."""

from __future__ import annotations

import numpy as np

from configs.dbaf import stage1, stage2
from dbaf_jax.core.errors import ConfigError


def stage_config(
    stage: int,
    size: int,
    width_scale: float,
    encoder_width_scale: float,
    dtype: str,
    batch: int = 1,
    fsdp: int = 1,
    two_pass: bool = False,
):
    """The ``reference`` config of a stage at another size, widths, dtype and batch."""
    config = (stage1 if stage == 1 else stage2).get_config("reference")
    config.model.size = size
    n_latent = 2 * int(np.log2(size)) - 2
    if n_latent <= 8:
        raise ConfigError(
            f"--size {size}: the coarse/medium/fine split 4/4/rest needs at least 64 px"
        )
    config.model.latent_groups = (4, 4, n_latent - 8)
    config.model.width_scale = width_scale
    config.model.encoder_width_scale = encoder_width_scale
    config.compute_dtype = dtype
    config.batch_size = batch
    config.mesh.fsdp = fsdp
    config.two_pass = two_pass
    return config
