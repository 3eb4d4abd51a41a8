"""`FaceAnonymizer` casts a model's variables to its compute dtype in one jitted program
(one compile, not one per leaf shape): the values are the eager cast's bit for bit."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.storage import model_families
from tests.inference.test_anonymize_cli import workspace  # noqa: F401 (the fixture)


@pytest.mark.slow  # converts the CLI tests' model (the workspace fixture) for this one test
def test_bfloat16_variables_are_the_eager_cast_bit_for_bit(workspace):  # noqa: F811
    half = FaceAnonymizer(workspace / "model", dtype="bfloat16")
    model, variables = model_families.load(workspace / "model", False)
    expected = model.for_inference().with_compute_dtype("bfloat16").compute_variables(variables)
    got, want = jax.tree.leaves_with_path(half.variables), jax.tree.leaves_with_path(expected)
    assert [p for p, _ in got] == [p for p, _ in want]
    assert {str(x.dtype) for _, x in got} >= {"bfloat16", "float32"}
    for (path, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(
            np.asarray(a).reshape(-1).view(np.uint8),
            np.asarray(b).reshape(-1).view(np.uint8),
            jax.tree_util.keystr(path),
        )
