"""KRIA: parity with the reference's AnonymizationNet through the converter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from convert.common import to_numpy
from convert.dbaf_stages import kria_variables
from dbaf_jax.models.dbaf.kria import KRIA
from tests.conversion import convert_state_dict, edited, layout_refusal
from tests.parity import assert_parity
from tests.torch_reference.dbaf import AnonymizationNet
from tests.torch_reference.dbaf_pipeline import reduced_kria

DIM = 16  # reduced style_dim: layers 32 -> 64 -> 32 -> 16 -> 16 x 4 -> 16
GROUPS = (4, 4, 6)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    ref = reduced_kria(seed=0, dim=DIM, groups=GROUPS)
    ckpt = tmp_path_factory.mktemp("kria") / "best_model_id_mlp.pth"
    return ref, convert_state_dict(
        kria_variables, KRIA(style_dim=DIM, groups=GROUPS), ref.state_dict(), ckpt
    )


def test_matches_reference(converted):
    ref, net = converted
    rng = np.random.default_rng(0)
    identity = rng.normal(size=(3, 14, DIM)).astype(np.float32)
    key = rng.normal(size=(3, 14, DIM)).astype(np.float32)
    hidden = {}
    hook = (
        ref.mapper[2]
        .model[2]
        .register_forward_hook(lambda m, i, o: hidden.update(fine=o.detach().numpy()))
    )
    with torch.no_grad():
        expected = ref(torch.from_numpy(np.concatenate([identity, key], axis=-1))).numpy()
    hook.remove()
    actual, state = net.module.apply(net.variables, identity, key, capture_intermediates=True)
    assert actual.shape == (3, 14, DIM)
    assert_parity(actual, expected)
    # The fine cMLP's third layer, for the last latent the reference ran through it.
    third = state["intermediates"]["cmlp_fine"]["equal_linear_2"]["__call__"][0]
    assert_parity(third[:, -1], hidden["fine"], name="cmlp_fine equal_linear_2")
    # Recovery as the reference trains it: KRIA applied again with the same key.
    with torch.no_grad():
        twice = ref(torch.cat([torch.from_numpy(expected), torch.from_numpy(key)], dim=-1)).numpy()
    assert_parity(
        net.module.apply(net.variables, actual, key), twice, name="KRIA(KRIA(I, key), key)"
    )


def test_one_key_broadcasts_over_the_batch(converted):
    _, net = converted
    rng = np.random.default_rng(1)
    identity = rng.normal(size=(2, 14, DIM)).astype(np.float32)
    key = rng.normal(size=(1, 14, DIM)).astype(np.float32)
    shared = net.module.apply(net.variables, identity, key)
    repeated = net.module.apply(net.variables, identity, np.repeat(key, 2, axis=0))
    np.testing.assert_array_equal(shared, repeated)
    with pytest.raises(ValueError):
        net.module.apply(net.variables, identity[:, :13], key[:, :13])


def test_full_size_shapes_and_parameter_count():
    module = KRIA()
    codes = jax.ShapeDtypeStruct((2, 14, 512), jnp.float32)
    variables = jax.eval_shape(module.init, jax.random.key(0), codes, codes)
    one_key = jax.ShapeDtypeStruct((1, 14, 512), jnp.float32)
    assert jax.eval_shape(module.apply, variables, codes, one_key).shape == (2, 14, 512)
    with torch.device("meta"):
        reference = AnonymizationNet()
    layout = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert len(layout) == 3 * 8 * 2
    assert layout["mapper.0.model.0.weight"] == (2048, 1024)
    assert layout["mapper.2.model.7.weight"] == (512, 512)
    n_flax = sum(a.size for a in jax.tree.leaves(variables))
    assert n_flax == sum(v.numel() for v in reference.state_dict().values()) == 3 * 6_035_456


def test_refuses_missing_unexpected_and_misshaped_keys():
    good = to_numpy(AnonymizationNet(dim=DIM, groups=GROUPS).state_dict(), "ref")
    module = KRIA(style_dim=DIM, groups=GROUPS)

    def refuse(**edits):
        return layout_refusal(
            lambda sd: kria_variables(sd, module, "bad.pth"), edited(good, **edits)
        )

    assert "missing (1): mapper.1.model.7.bias" in refuse(drop=["mapper.1.model.7.bias"])
    unexpected = refuse(add={"mapper.1.model.8.weight": np.zeros((DIM, DIM), np.float32)})
    assert "unexpected (1): mapper.1.model.8.weight" in unexpected
    misshaped = refuse(add={"mapper.0.model.0.weight": np.zeros((2 * DIM, 4 * DIM), np.float32)})
    assert "mis-shaped (1): mapper.0.model.0.weight [32, 64]" in misshaped
