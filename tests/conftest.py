"""Test setup: CPU JAX with 8 host devices for the sharding tests, torch on the CPU."""

import os
import sys
import types

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile afresh unless they set a cache themselves (test_train shares one
# between its workers): a cache in the user's home would make runs depend on each other.
os.environ.setdefault("DBAF_JAX_CACHE_DIR", "off")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
# The only torchvision wheel for torch 2.13 is a CUDA build: its pure-Python model
# definitions (needed by lpips) import once this module of compiled ops is stubbed.
sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))

import gc  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
    """Drops JAX's compiled programs after each test file: a worker runs dozens of
    files, and their executables (whole training steps among them) otherwise pile up
    past the 24 GiB of a CI machine shared by two workers."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def np_rng():
    return np.random.default_rng(0)
