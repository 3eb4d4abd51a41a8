"""MAAR: parity with the reference's AttrBlock (eval and train BatchNorm), the paper variant.

Each test builds its own PyTorch reference: a train-mode forward changes the reference's
BatchNorm running statistics, so a shared one would make results depend on test order."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from convert.common import to_numpy
from convert.dbaf_stages import maar_variables
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models.dbaf.cid import CID
from dbaf_jax.models.dbaf.dbaf import DBAF
from dbaf_jax.models.dbaf.kria import KRIA
from dbaf_jax.models.dbaf.maar import MAAR
from dbaf_jax.models.e4e import Encoder4Editing
from dbaf_jax.models.stylegan2 import Generator
from tests.conversion import convert_state_dict, edited, layout_refusal
from tests.parity import assert_parity, nchw, nhwc, randomize_
from tests.torch_reference.dbaf import AttrBlock

# Reduced widths and sizes: c3, c2, c1 at 4, 8, 16 px (16, 32, 64 at 256 px).
IN_CHANNELS = (16, 8, 4)
CHANNELS, REDUCTION = 32, 4
SIZES = (4, 8, 16)


def feature_maps(batch=2, seed=0):
    rng = np.random.default_rng(seed)
    return [
        rng.normal(size=(batch, s, s, c)).astype(np.float32) for s, c in zip(SIZES, IN_CHANNELS)
    ]


def torch_maar():
    """A fresh reference with the same random weights on every call, in eval mode."""
    return randomize_(AttrBlock(IN_CHANNELS, CHANNELS, REDUCTION), seed=0, scale=0.5).eval()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The converted network of `torch_maar` (Flax variables are immutable: safe to share)."""
    ckpt = tmp_path_factory.mktemp("maar") / "best_model_attr_block.pth"
    module = MAAR(channels=CHANNELS, reduction=REDUCTION)
    return convert_state_dict(
        maar_variables, module, torch_maar().state_dict(), ckpt, in_channels=IN_CHANNELS
    )


def test_eval_mode_matches_reference(converted):
    ref, net = torch_maar(), converted
    maps = feature_maps()
    gated = {}
    hook = ref.cbam_c2.ChannelGate.register_forward_hook(lambda m, i, o: gated.update(c2=nhwc(o)))
    with torch.no_grad():
        expected = [nhwc(t) for t in ref(*map(nchw, maps))]
    hook.remove()
    outputs, state = net.module.apply(net.variables, *maps, capture_intermediates=True)
    for name, actual, want in zip(("c3", "c2", "c1"), outputs, expected):
        assert actual.shape == want.shape == (2, *want.shape[1:3], CHANNELS)
        assert_parity(actual, want, name=name)
    channel_gated = state["intermediates"]["cbam_c2"]["channel_gate"]["__call__"][0]
    assert_parity(channel_gated, gated["c2"], name="c2 channel gate")


def test_train_mode_matches_reference_and_updates_running_stats(converted):
    ref, net = torch_maar().train(), converted
    maps = feature_maps(batch=3, seed=1)
    with torch.no_grad():
        expected = [nhwc(t) for t in ref(*map(nchw, maps))]
    outputs, updates = net.module.apply(net.variables, *maps, train=True, mutable=["batch_stats"])
    for name, actual, want in zip(("c3", "c2", "c1"), outputs, expected):
        assert_parity(actual, want, name=f"{name} (train)")
    for name in ("c3", "c2", "c1"):
        bn = getattr(ref, f"cbam_{name}").SpatialGate.spatial.bn
        stats = updates["batch_stats"][f"cbam_{name}"]["spatial_gate"]["bn"]
        before = net.variables["batch_stats"][f"cbam_{name}"]["spatial_gate"]["bn"]
        assert not np.allclose(stats["mean"], before["mean"])
        assert_parity(stats["mean"], bn.running_mean.numpy(), name=f"{name} running mean")
        assert_parity(stats["var"], bn.running_var.numpy(), name=f"{name} running var")


def test_train_mode_statistics_span_the_global_batch_when_sharded(converted):
    net = converted
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    maps = feature_maps(batch=8, seed=3)
    sharded = [jax.device_put(m, NamedSharding(mesh, PartitionSpec("data"))) for m in maps]
    step = jax.jit(lambda v, *m: net.module.apply(v, *m, train=True, mutable=["batch_stats"]))
    (expected, expected_stats), (actual, actual_stats) = (
        step(net.variables, *maps),
        step(net.variables, *sharded),
    )
    for a, e in zip(
        jax.tree.leaves((actual, actual_stats)), jax.tree.leaves((expected, expected_stats))
    ):
        assert_parity(a, e, tol=1e-6)


def test_paper_variant_follows_equations_6_to_8():
    module = MAAR(channels=CHANNELS, variant="paper")
    maps = feature_maps(seed=2)
    variables = jax.jit(module.init)(jax.random.key(0, impl="rbg"), *maps)
    assert "batch_stats" not in variables
    outputs = module.apply(variables, *maps)
    # A direct numpy reading of the equations for c1.
    p = jax.tree.map(np.asarray, variables["params"])
    x = maps[2] @ p["conv_c1"]["kernel"][0, 0] + p["conv_c1"]["bias"]
    d = x.shape[-1]
    pooled = np.repeat(
        x.max(-1, keepdims=True) + x.mean(-1, keepdims=True), d, axis=-1
    )  # Psi_CME + Psi_CAE
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    attention = p["attention_c1"]
    m_prime = sigmoid(pooled @ attention["kernel"] + attention["bias"])  # (6)
    summary = np.concatenate([m_prime.max(axis=(1, 2)), m_prime.mean(axis=(1, 2))], axis=-1)
    m_bar = sigmoid(
        summary @ attention["spatial_mlp"]["kernel"] + attention["spatial_mlp"]["bias"]
    )  # (7)
    expected = m_bar[:, None, None, :] * m_prime * x  # (8)
    assert_parity(outputs[2], expected, name="paper c1")
    assert [o.shape for o in outputs] == [(2, s, s, CHANNELS) for s in SIZES]


def dbaf_at(size: int, maar: MAAR | None) -> DBAF:
    """A DBAF composition (modules only) at ``size`` px with the public checkpoints' widths."""
    generator = Generator(size=size)
    return DBAF(
        e4e=Encoder4Editing(stylegan_size=size, input_size=size),
        cid=CID(n_latent=generator.n_latent, groups=(4, 4, generator.n_latent - 8)),
        maar=maar,
        decoder=generator,
        kria=KRIA(groups=(4, 4, generator.n_latent - 8)),
        key_generator=generator,
    )


def test_maps_replace_generator_noise_inputs_3_to_8():
    m16, m32, m64 = (jnp.full((1, s, s, 512), s, jnp.float32) for s in (16, 32, 64))
    noise = dbaf_at(256, MAAR()).noise_inputs((m16, m32, m64))
    assert sorted(noise) == [3, 4, 5, 6, 7, 8]
    assert (
        noise[3] is m16
        and noise[4] is m16
        and noise[5] is m32
        and noise[6] is m32
        and noise[8] is m64
    )


def test_a_map_that_fits_no_noise_input_is_refused_at_build_time():
    with pytest.raises(ConfigError, match="2x2.*fits none"):
        dbaf_at(32, MAAR())  # the coarsest map would be 2x2; the generator's smallest noise is 4x4
    with pytest.raises(ConfigError, match="channels"):
        dbaf_at(256, MAAR(channels=256))
    dbaf_at(64, MAAR())  # maps at 4, 8 and 16 px
    dbaf_at(32, None)  # without MAAR nothing needs to fit


def test_full_size_shapes_parameter_count_and_generator_fit():
    module = MAAR()
    maps = [
        jax.ShapeDtypeStruct((2, s, s, c), jnp.float32)
        for s, c in zip((16, 32, 64), (512, 256, 128))
    ]
    variables = jax.eval_shape(module.init, jax.random.key(0), *maps)
    outputs = jax.eval_shape(module.apply, variables, *maps)
    assert [o.shape for o in outputs] == [(2, 16, 16, 512), (2, 32, 32, 512), (2, 64, 64, 512)]
    with torch.device("meta"):
        reference = AttrBlock()
    n_reference = sum(
        t.numel()
        for k, t in reference.state_dict().items()
        if not k.endswith("num_batches_tracked")
    )
    assert sum(a.size for a in jax.tree.leaves(variables)) == n_reference
    generator = Generator()
    latents = jax.ShapeDtypeStruct((2, 14, 512), jnp.float32)
    gen_variables = jax.eval_shape(generator.init, jax.random.key(0), latents)
    noise_inputs = dbaf_at(256, module).noise_inputs
    image = jax.eval_shape(
        lambda v, w, m: generator.apply(v, w, noise=noise_inputs(m)),
        gen_variables,
        latents,
        outputs,
    )
    assert image.shape == (2, 256, 256, 3)


def test_refuses_missing_unexpected_and_misshaped_keys():
    good = to_numpy(AttrBlock(IN_CHANNELS, CHANNELS, REDUCTION).state_dict(), "ref")
    assert "cbam_c1.SpatialGate.spatial.bn.num_batches_tracked" in good  # ignored, not unexpected
    module = MAAR(channels=CHANNELS, reduction=REDUCTION)

    def refuse(**edits):
        to_variables = lambda sd: maar_variables(sd, module, "bad.pth", in_channels=IN_CHANNELS)  # noqa: E731
        return layout_refusal(to_variables, edited(good, **edits))

    missing = refuse(drop=["cbam_c1.SpatialGate.spatial.bn.running_var"])
    assert "missing (1): cbam_c1.SpatialGate.spatial.bn.running_var" in missing
    unexpected = refuse(add={"cbam_c3.SpatialGate.spatial.conv.bias": np.zeros((1,), np.float32)})
    assert "unexpected (1): cbam_c3.SpatialGate.spatial.conv.bias" in unexpected
    misshaped = refuse(add={"conv_c2.weight": np.zeros((CHANNELS, 7, 1, 1), np.float32)})
    assert "mis-shaped (1): conv_c2.weight [32, 7, 1, 1]" in misshaped
