"""XLA:CPU's YNNPACK fusions miscompiled the jitted bfloat16 DBAF parser (JAX 0.12): NaN
logits for most pixels of a random `UNetParser` at 64 px and batch 2, which made the
reduced stage-2 step of ``benchmarks/gpu/quick.sh --reduced`` stop with ``g_total nan``.
`compilation_cache.enable` turns those fusions off (`compilation_cache.CPU_XLA_FLAGS`).
The option is read when the CPU backend starts, so the check runs in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dbaf_jax.core import compilation_cache

PROGRAM = """
from dbaf_jax.core import compilation_cache
compilation_cache.enable()  # before the first computation, as every entry point
import jax, jax.numpy as jnp, numpy as np
from dbaf_jax.core import precision
from dbaf_jax.models.parsers import UNetParser
images = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32))
parser = UNetParser()
variables = parser.init(jax.random.PRNGKey(0), images)
jitted = jax.jit(lambda v, x: precision.apply("bfloat16", parser, v, x))(variables, images)
eager = precision.apply("bfloat16", parser, variables, images)
print(int(jnp.isnan(jitted).sum()), bool(jnp.array_equal(jitted, eager)))
"""


@pytest.mark.slow  # a fresh process compiling the parser twice, without the compilation cache
def test_jitted_bfloat16_parser_is_finite_and_equals_the_eager_one():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "DBAF_JAX_CACHE_DIR": "off"}
    env.pop(compilation_cache.KEEP_CPU_FUSIONS_VARIABLE, None)  # conftest keeps them for the suite
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    nans, equal = result.stdout.split()[-2:]
    assert nans == "0", f"{nans} NaN logits of 155,648"
    assert equal == "True"
