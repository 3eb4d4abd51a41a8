"""iFADIT's model (issue 13): the secure identity flow inverts exactly with its key and
not with another, keys change the anonymized identity, the composition has the
model-family protocol and the paper's shapes at 256 px, and its networks round-trip
through a model directory."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.ifadit import phases as ifadit_config
from dbaf_jax.models.ifadit import ifadit
from dbaf_jax.models.ifadit.sif import SecureIdentityFlow, bounded_log_scale
from dbaf_jax.storage import keys, model_directory, model_families, network_kinds
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages
from dbaf_jax.train.ifadit.networks import IFADITNetworks

IDENTITY_DIM = 512
KEY_DIM = 512


def unit(x: jax.Array) -> jax.Array:
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def cosine(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def flow():
    """A full-size flow (the paper's 512-d identity and key) with random weights, and inputs."""
    sif = SecureIdentityFlow(identity_dim=IDENTITY_DIM, key_dim=KEY_DIM)
    rng = np.random.default_rng(0)
    identity = unit(
        jnp.asarray(rng.standard_normal((6, IDENTITY_DIM)), jnp.float32)
    )  # ArcFace-like unit vectors
    key, other_key = (jnp.asarray(rng.standard_normal((6, KEY_DIM)), jnp.float32) for _ in range(2))
    variables = sif.init(jax.random.PRNGKey(0), identity, key)
    return sif, variables, identity, key, other_key


def test_flow_inverts_exactly_with_its_key(flow):
    sif, variables, identity, key, _ = flow
    anonymized = sif.apply(variables, identity, key)
    recovered = sif.apply(variables, anonymized, key, method="inverse")
    # float32: the inverse subtracts the coupling offsets from values of the
    # anonymized identity's magnitude, so its rounding error scales with that.
    error = float(jnp.max(jnp.abs(recovered - identity)))
    assert error < 4e-6 * float(jnp.max(jnp.abs(anonymized))), error
    # The inverse is exact math: in float64 the same weights give back the input to 1e-12.
    with jax.enable_x64(True):
        as64 = lambda tree: jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), tree)  # noqa: E731
        v64, z64, k64 = as64(variables), as64(identity), as64(key)
        back = sif.apply(v64, sif.apply(v64, z64, k64), k64, method="inverse")
        assert float(jnp.max(jnp.abs(back - z64))) < 1e-12


def test_flow_forward_inverts_inverse(flow):
    sif, variables, identity, key, _ = flow
    inverse = sif.apply(variables, identity, key, method="inverse")
    forward = sif.apply(variables, inverse, key)
    error = float(jnp.max(jnp.abs(forward - identity)))
    assert error < 4e-6 * float(jnp.max(jnp.abs(inverse))), error


def test_wrong_key_does_not_invert(flow):
    sif, variables, identity, key, other_key = flow
    anonymized = sif.apply(variables, identity, key)
    wrong = sif.apply(variables, anonymized, other_key, method="inverse")
    # The identity is unit-norm: an error of the identity's own size is no recovery at all.
    assert float(jnp.min(jnp.linalg.norm(wrong - identity, axis=-1))) > 1.0
    assert np.all(np.abs(cosine(wrong, identity)) < 0.5)


def test_keys_give_different_anonymized_identities(flow):
    sif, variables, identity, key, other_key = flow
    first, second = sif.apply(variables, identity, key), sif.apply(variables, identity, other_key)
    assert np.all(cosine(first, second) < 0.9)
    assert np.all(cosine(first, identity) < 0.5)
    # The same key on another batch row gives the same map: a key is a function, not noise.
    np.testing.assert_array_equal(sif.apply(variables, identity[:2], key[:2]), first[:2])


def test_bounded_log_scale():
    s = jnp.asarray([-1e4, -1.0, 0.0, 1.0, 1e4])
    np.testing.assert_allclose(
        bounded_log_scale(s, 2.0), 2.0 * np.tanh(np.asarray(s) / 2.0), atol=1e-6
    )


def full_size_networks() -> IFADITNetworks:
    return stages.build_networks(ifadit_config.get_config("phase2"))


@pytest.mark.slow
def test_full_size_shapes():
    """The paper's sizes (256 px, 512-d identity and key, 14 W+ rows) by abstract evaluation."""
    nets = full_size_networks()
    model = nets.model
    variables = jax.eval_shape(
        lambda r: networks_lib.init_variables(nets, r, 256), jax.random.PRNGKey(0)
    )
    images = jax.ShapeDtypeStruct((2, 256, 256, 3), jnp.float32)
    key_z = jax.ShapeDtypeStruct((3, 1, 1, 512), jnp.float32)  # K = 3 keys shared by the batch
    assert model.key_shape == (1, 512)
    assert (model.input_size, model.output_size) == (256, 256)
    key = jax.eval_shape(model.key_from_z, variables, key_z)
    assert key.shape == (3, 1, 1, 512)
    identity = jax.eval_shape(model.identity, variables, images)
    assert identity.shape == (2, 512)
    assert jax.eval_shape(model.attributes, variables, images).shape == (2, 14, 512)
    anonymized = jax.eval_shape(model.anonymize_images, variables, images, key)
    assert anonymized.shape == (3, 2, 256, 256, 3) and anonymized.dtype == jnp.float32
    assert jax.eval_shape(model.recover_images, variables, images, key).shape == (3, 2, 256, 256, 3)
    params = variables["sif"]["params"]["couplings_0"]["omega"]
    assert params["dense_0"]["kernel"].shape == (256 + 512, 512)  # [z1, k] in R^768 (paper 3.3.2)
    assert params["dense_2"]["kernel"].shape == (512, 256)


@pytest.fixture(scope="module")
def tiny():
    """The tiny config's model (64 px) with random weights."""
    nets = stages.build_networks(ifadit_config.get_config("phase2,tiny"))
    model = nets.model
    variables = networks_lib.init_variables(
        nets, jax.random.PRNGKey(1), 64, tuple(model.networks())
    )
    return model, variables


@pytest.mark.slow  # the tiny model's initialisation and programs compile for minutes on a CPU
def test_protocol(tiny):
    model, variables = tiny
    assert model.FAMILY == ifadit.FAMILY == "ifadit"
    assert model.for_inference() is model
    assert set(model.networks()) == set(ifadit.NETWORKS)
    z = jnp.asarray(keys.key_latents(bytes(32), *model.key_shape))
    key = model.key_from_z(variables, z)
    assert key.shape == (1, model.key_generator.style_dim)
    images = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)), jnp.float32)
    keys_k = jnp.stack([key, model.key_from_z(variables, z + 1.0)])[:, None]  # (K=2, 1, 1, D)
    anonymized = jax.jit(model.anonymize_images)(variables, images, keys_k)
    assert anonymized.shape == (2, 2, 64, 64, 3)
    recovered = jax.jit(model.recover_images)(variables, anonymized[0], keys_k)
    assert recovered.shape == (2, 2, 64, 64, 3)
    bf16 = model.with_compute_dtype("bfloat16")
    cast = bf16.compute_variables(variables)
    assert cast["decoder"]["params"]["constant_input"].dtype == jnp.bfloat16
    assert cast["sif"]["params"]["couplings_0"]["omega"]["dense_0"]["kernel"].dtype == jnp.float32
    assert cast[ifadit.KEY_GENERATOR] is variables[ifadit.KEY_GENERATOR]
    assert jax.eval_shape(bf16.anonymize_images, cast, images, keys_k).dtype == jnp.float32


@pytest.mark.slow  # the tiny model's initialisation and programs compile for minutes on a CPU
def test_background_refinement_keeps_the_background(tiny):
    """Eq. 11: outside the parser's (blurred) face mask the output is the input."""
    model, variables = tiny
    images = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (2, 64, 64, 3)), jnp.float32)
    key = model.key_from_z(variables, jnp.ones((1, 1, 1, model.key_generator.style_dim)))
    refined = jax.jit(model.anonymize, static_argnames="blend")(variables, images, key, blend=True)
    mask = np.asarray(jax.jit(model.face_mask)(variables, images))
    assert mask.shape == (2, 64, 64, 1) and mask.min() >= 0 and mask.max() <= 1 + 1e-6
    expected = mask * np.asarray(refined.generated) + (1 - mask) * np.asarray(images)
    np.testing.assert_allclose(refined.images, expected, atol=1e-5)
    background = mask[..., 0] == 0
    np.testing.assert_array_equal(
        np.asarray(refined.images)[0][background], np.asarray(images)[background]
    )
    # The default (inference) path refines; without a parser nothing is blended.
    np.testing.assert_allclose(
        jax.jit(model.anonymize_images)(variables, images, key), refined.images, atol=1e-6
    )
    plain = dataclasses.replace(model, parser=None)
    np.testing.assert_allclose(
        jax.jit(plain.anonymize_images)(variables, images, key), refined.generated, atol=1e-6
    )


@pytest.mark.slow  # the tiny model's initialisation and programs compile for minutes on a CPU
def test_recovery_inverts_the_flow_on_the_read_identity(tiny):
    """With the right key, recovery decodes T^-1(C(E_ID(X_anon)), k): on an identity read
    exactly (C = identity at init) it gives back the original identity."""
    model, variables = tiny
    images = jnp.asarray(np.random.default_rng(2).uniform(-1, 1, (2, 64, 64, 3)), jnp.float32)
    key = model.key_from_z(variables, jnp.ones((1, 1, 1, model.key_generator.style_dim)))
    identity = model.identity(variables, images)
    anonymized_identity = model.transform_identity(variables, identity, key)[0]
    compensated = model.apply("icl", variables, anonymized_identity)
    np.testing.assert_array_equal(
        compensated, anonymized_identity
    )  # the ICL starts as the identity map
    back = model.transform_identity(variables, compensated, key, inverse=True)[0]
    np.testing.assert_allclose(
        back, identity, atol=4e-6 * float(jnp.max(jnp.abs(anonymized_identity)))
    )


@pytest.mark.slow  # the tiny model's initialisation and programs compile for minutes on a CPU
def test_model_directory_round_trip(tiny, tmp_path):
    model, variables = tiny
    networks = {name: (module, variables[name]) for name, module in model.networks().items()}
    model_directory.save_model(tmp_path, ifadit.FAMILY, networks, {})
    loaded, loaded_variables = model_families.load_family(ifadit.FAMILY, tmp_path)
    assert loaded.networks() == model.networks()
    fingerprint = network_kinds.model_fingerprint
    assert fingerprint(loaded.networks(), loaded_variables) == fingerprint(
        model.networks(), variables
    )
    # A DBAF loader refuses it, naming the family.
    from dbaf_jax.models.dbaf import dbaf

    with pytest.raises(model_directory.ModelDirectoryError, match="'ifadit' model"):
        model_families.load_family(dbaf.FAMILY, tmp_path)
