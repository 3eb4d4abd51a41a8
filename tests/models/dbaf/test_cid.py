"""CID: parity with the reference's DisentanglementId through the converter, attention modes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from convert.common import to_numpy
from convert.dbaf_stages import cid_variables
from dbaf_jax.models.dbaf.cid import CID
from tests.conversion import (
    assert_not_a_checkpoint_message,
    convert_state_dict,
    edited,
    layout_refusal,
    not_a_checkpoint,
    read_state_dict,
    refusal,
)
from tests.parity import assert_parity, randomize_, relative_error
from tests.torch_reference.dbaf import DisentanglementId

# Reduced widths; 14 latents split 4/4/6 as at 256 px.
SMALL = dict(style_dim=32, depth=2, heads=2, head_dim=8, mlp_dim=48)
N_LATENT = 14


def torch_cid(seed=0):
    ref = DisentanglementId(
        dim=SMALL["style_dim"],
        depth=SMALL["depth"],
        heads=SMALL["heads"],
        dim_head=SMALL["head_dim"],
        mlp_dim=SMALL["mlp_dim"],
    )
    return randomize_(ref, seed=seed, scale=0.5).eval()


def jitted(module):
    """module.apply compiled: one XLA call instead of hundreds of small eager ops."""
    return jax.jit(module.apply, static_argnames=("deterministic", "capture_intermediates"))


def codes(batch, seed=1):
    return (
        np.random.default_rng(seed)
        .normal(size=(batch, N_LATENT, SMALL["style_dim"]))
        .astype(np.float32)
    )


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    ref = torch_cid()
    ckpt = tmp_path_factory.mktemp("cid") / "best_model_w_disentanglement.pth"
    return ref, convert_state_dict(
        cid_variables, CID(**SMALL, attention="batch"), ref.state_dict(), ckpt
    )


def test_batch_attention_matches_reference(converted):
    ref, net = converted
    assert net.module.attention == "batch"
    c = codes(4)
    attention_out = {}
    hook = (
        ref.layers[0]
        .transformer.layers[0][0]
        .register_forward_hook(lambda m, i, o: attention_out.update(a=o.detach().numpy()))
    )
    with torch.no_grad():
        expected = ref(torch.from_numpy(c)).numpy()
    hook.remove()
    (attribute, identity), state = jitted(net.module)(net.variables, c, capture_intermediates=True)
    assert_parity(attribute, expected, name="attribute code")
    assert_parity(identity, c - expected, name="identity code")
    # The first attention of the coarse ViT, laid out (layers, batch, dim) in both.
    first_attention = state["intermediates"]["vit_0"]["block_0"]["attention"]["__call__"][0]
    assert first_attention.shape == (4, 4, SMALL["style_dim"])
    assert_parity(first_attention, attention_out["a"], name="vit_0 block_0 attention")


def test_single_mode_matches_reference_run_one_image_at_a_time(converted):
    ref, net = converted
    c = codes(4, seed=2)
    with torch.no_grad():
        expected = np.concatenate([ref(torch.from_numpy(c[i : i + 1])).numpy() for i in range(4)])
    attribute, _ = jitted(net.module.clone(attention="single"))(net.variables, c)
    assert_parity(attribute, expected)
    # At batch 1 the reference's batch attention is the single-image mode.
    batch_of_one, _ = jitted(net.module)(net.variables, c[:1])
    assert_parity(batch_of_one, expected[:1])


def test_outputs_and_batch_mates(converted):
    """'single' and 'tokens' give an image the same codes whatever its batch-mates; 'batch' does not."""
    _, net = converted
    c = codes(4, seed=3)
    mixed = np.concatenate([c[:1], codes(3, seed=4)])
    out = {}
    for mode in ("single", "tokens", "batch"):
        apply = jitted(net.module.clone(attention=mode))
        out[mode] = (
            np.asarray(apply(net.variables, c)[0]),
            np.asarray(apply(net.variables, mixed)[0]),
        )
        assert out[mode][0].shape == (4, N_LATENT, SMALL["style_dim"])
    for mode in ("single", "tokens"):
        np.testing.assert_allclose(out[mode][1][0], out[mode][0][0], rtol=0, atol=1e-5)
    assert np.abs(out["batch"][1][0] - out["batch"][0][0]).max() > 1e-2
    # Tokens do attend to each other: not the single-image result.
    assert relative_error(out["tokens"][0], out["single"][0]) > 1e-2


def test_batch_attention_spans_the_global_batch_when_sharded(converted):
    _, net = converted
    devices = np.array(jax.devices()[:4])
    mesh = Mesh(devices, ("data",))
    c = codes(8, seed=5)
    sharded = jax.device_put(c, NamedSharding(mesh, PartitionSpec("data")))
    forward = jax.jit(lambda v, x: net.module.apply(v, x)[0])
    expected = forward(net.variables, c)
    actual = forward(net.variables, sharded)
    assert len(actual.sharding.device_set) == len(devices)
    assert_parity(actual, expected, tol=1e-6)


@pytest.mark.slow  # init and three dropout applies compile
def test_dropout_is_active_only_when_not_deterministic():
    module = CID(**dict(SMALL, depth=1), attention="tokens")
    c = jnp.asarray(codes(2, seed=6))
    # 'rbg' keys: XLA's own bit generator compiles in a fraction of threefry's time on CPU.
    key = lambda seed: jax.random.key(seed, impl="rbg")  # noqa: E731
    variables = jax.jit(module.init)(key(0), c)
    apply = jitted(module)
    eval_out, _ = apply(variables, c)
    train_a, _ = apply(variables, c, deterministic=False, rngs={"dropout": key(0)})
    train_b, _ = apply(variables, c, deterministic=False, rngs={"dropout": key(1)})
    assert relative_error(train_a, eval_out) > 1e-3
    assert relative_error(train_a, train_b) > 1e-3
    no_dropout = jitted(module.clone(dropout=0.0))
    train_plain, _ = no_dropout(variables, c, deterministic=False, rngs={"dropout": key(0)})
    assert_parity(train_plain, eval_out, tol=1e-6)


def test_shared_variant_has_one_vit_and_keeps_groups_apart():
    module = CID(**SMALL, shared=True)
    separate = CID(**SMALL)
    x = jnp.asarray(codes(2, seed=7))
    variables = jax.jit(module.init)(jax.random.key(0, impl="rbg"), x)
    assert sorted(variables["params"]) == ["linear_w", "pos_embedding", "vit"]
    count = lambda t: sum(a.size for a in jax.tree.leaves(t))  # noqa: E731
    vit = count(variables["params"]["vit"])
    assert count(jax.eval_shape(separate.init, jax.random.key(0), x)) == count(variables) + 2 * vit
    # Changing a fine latent leaves the coarse and medium outputs alone (attention within a group).
    apply = jitted(module)
    attribute, _ = apply(variables, x)
    attribute2, _ = apply(variables, x.at[:, 10].add(1.0))
    np.testing.assert_allclose(attribute2[:, :8], attribute[:, :8], rtol=0, atol=1e-6)
    assert np.abs(np.asarray(attribute2[:, 8:] - attribute[:, 8:])).max() > 1e-3


def test_full_size_shapes_and_parameter_count():
    module = CID(attention="single")
    x = jax.ShapeDtypeStruct((2, 14, 512), jnp.float32)
    variables = jax.eval_shape(module.init, jax.random.key(0), x)
    attribute, identity = jax.eval_shape(module.apply, variables, x)
    assert attribute.shape == identity.shape == (2, 14, 512)
    with torch.device("meta"):
        reference = DisentanglementId()
    n_reference = sum(p.numel() for p in reference.state_dict().values())
    n_flax = sum(a.size for a in jax.tree.leaves(variables))
    assert n_flax == n_reference == 71_140_864
    layout = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert layout["pos_embedding"] == (14, 1, 512)
    assert layout["layers.2.transformer.layers.5.0.fn.to_qkv.weight"] == (3 * 896, 512)
    assert layout["layers.0.transformer.layers.0.0.fn.to_out.0.weight"] == (512, 896)
    assert layout["layers.1.transformer.layers.3.1.fn.net.0.weight"] == (2048, 512)


def test_refuses_missing_unexpected_and_misshaped_keys():
    good = to_numpy(torch_cid().state_dict(), "ref")
    module = CID(**SMALL, attention="single")

    def refuse(**edits):
        return layout_refusal(
            lambda sd: cid_variables(sd, module, "bad.pth"), edited(good, **edits)
        )

    missing = refuse(drop=["layers.1.transformer.layers.0.1.fn.net.3.bias"])
    assert "missing (1): layers.1.transformer.layers.0.1.fn.net.3.bias" in missing
    unexpected = refuse(add={"layers.0.mlp_head.weight": np.zeros((2, 2), np.float32)})
    assert "unexpected (1): layers.0.mlp_head.weight" in unexpected
    misshaped = refuse(add={"pos_embedding": np.zeros((14, 2, 16), np.float32)})
    assert "mis-shaped (1): pos_embedding [14, 2, 16]" in misshaped


def test_non_checkpoint_file_is_one_line_error_and_exit_status_1(tmp_path):
    bad = not_a_checkpoint(tmp_path / "w_disentanglement.pth")
    err = refusal(lambda argv: cid_variables(read_state_dict(bad), CID(**SMALL), str(bad)), [])
    assert_not_a_checkpoint_message(err, bad)


@pytest.mark.slow  # forward and gradient programs, scanned and unrolled
def test_scanned_blocks_give_the_unrolled_outputs_and_gradients(converted):
    """scan=True runs each ViT's blocks under one lax.scan on the same (per-block)
    parameters: the reference's outputs, the unrolled gradients; dropout still acts."""
    ref, net = converted
    scanned = net.module.clone(scan=True)
    c = codes(4, seed=3)
    with torch.no_grad():
        expected = ref(torch.from_numpy(c)).numpy()
    attribute, _ = jitted(scanned)(net.variables, c)
    assert_parity(attribute, expected, name="scanned attribute code")

    def loss(module):
        return jax.jit(jax.grad(lambda v: jnp.sum(module.apply(v, c)[0] ** 2)))(net.variables)

    unrolled, rolled = loss(net.module), loss(scanned)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(unrolled), jax.tree.leaves(rolled)):
        assert_parity(b, a, name=jax.tree_util.keystr(path), tol=1e-5)
    key = lambda seed: jax.random.key(seed, impl="rbg")  # noqa: E731
    train_a, _ = jitted(scanned)(net.variables, c, deterministic=False, rngs={"dropout": key(0)})
    train_b, _ = jitted(scanned)(net.variables, c, deterministic=False, rngs={"dropout": key(1)})
    assert relative_error(train_a, attribute) > 1e-3 and relative_error(train_a, train_b) > 1e-3
    plain, _ = jitted(scanned.clone(dropout=0.0))(
        net.variables, c, deterministic=False, rngs={"dropout": key(0)}
    )
    assert_parity(plain, attribute, tol=1e-6)
