"""The shared IR-SE body: layout facts, and parity of every unit's output with PyTorch
through the converters' shared key mapping (convert/irse.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from convert.common import map_state_dict, to_numpy
from convert.irse import IGNORED, irse_body_rules
from dbaf_jax.models.irse import IRSEBody, stage_ends, unit_specs
from tests.parity import assert_parity, nchw, nhwc, relative_error
from tests.torch_reference.irse import IRSEBody as TorchIRSEBody
from tests.torch_reference.irse import randomize_irse_


def test_ir_se50_layout():
    specs = unit_specs(50)
    assert len(specs) == 24
    assert [i for i, (cin, cout, _) in enumerate(specs) if cin != cout] == [3, 7, 21]
    assert [i for i, (_, _, s) in enumerate(specs) if s == 2] == [0, 3, 7, 21]
    assert stage_ends(50) == (2, 6, 20, 23)
    assert [specs[i][1] for i in stage_ends(50)] == [64, 128, 256, 512]


def test_width_too_small_for_squeeze_excitation_is_refused():
    with pytest.raises(ValueError, match="squeeze-excitation"):
        unit_specs(50, 0.125)


def convert_body(torch_body, width_scale, input_hw):
    module = IRSEBody(width_scale=width_scale)
    expected = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, *input_hw, 3)))
    sd = to_numpy(torch_body.state_dict(), "reference")
    return module, map_state_dict(
        sd, irse_body_rules((), 50, width_scale), expected, "reference", ignore=IGNORED
    )


@pytest.mark.parametrize("input_hw", [(32, 32), (29, 35)])  # odd sizes exercise stride-2 padding
def test_body_parity_every_unit(input_hw):
    torch.manual_seed(0)
    ref = randomize_irse_(TorchIRSEBody(50, width_scale=0.25), seed=1)
    module, variables = convert_body(ref, 0.25, input_hw)
    x = np.random.default_rng(0).standard_normal((2, *input_hw, 3)).astype(np.float32)
    with torch.no_grad():
        stem_t, units_t = ref(nchw(x))
    out = jax.jit(module.apply)(variables, x)
    assert_parity(out.stem, nhwc(stem_t), name="stem")
    errors = []
    for i, (a, e) in enumerate(zip(out.units, units_t)):
        assert_parity(a, nhwc(e), name=f"unit {i}")
        errors.append(relative_error(a, nhwc(e)))
    print(f"max relative error over units: {max(errors):.2e}")


def test_full_size_shapes():
    out = jax.eval_shape(
        IRSEBody().init_with_output, jax.random.key(0), jnp.zeros((2, 256, 256, 3))
    )[0]
    assert out.stem.shape == (2, 256, 256, 64)
    assert [out.units[i].shape for i in stage_ends(50)] == [
        (2, 128, 128, 64),
        (2, 64, 64, 128),
        (2, 32, 32, 256),
        (2, 16, 16, 512),
    ]
