"""iFADIT's losses against the paper's formulas written out in NumPy (float64).

The networks are small stand-ins built twice from the same random weights, once
on jnp (what the losses call) and once on np (what the formulas below use).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train.ifadit import losses as ifadit_losses
from tests.parity import assert_parity, skimage_ssim

TOL = 1e-5
SIZE = 16  # >= 11, SSIM's window
EMBED = 8  # small, so that random faces give cosines of both signs


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(5)
    return {
        "identity": rng.normal(size=(SIZE * SIZE * 3, EMBED)) / 30,
        "landmarks": rng.normal(size=(SIZE * SIZE * 3, 10)) / 30,
        "parser": rng.normal(size=(3, 4)),
    }


def stand_in_networks(xp, weights) -> ifadit_losses.LossNetworks:
    """Identity (unit embeddings), landmarks (B, 10), parser (B, H, W, 4) and LPIPS (B,) on array module xp."""
    w = {
        name: xp.asarray(value, xp.float32 if xp is jnp else xp.float64)
        for name, value in weights.items()
    }

    def identity(images):
        e = images.reshape(images.shape[0], -1) @ w["identity"]
        return e / xp.linalg.norm(e, axis=-1, keepdims=True)

    def lpips(images0, images1):
        return xp.mean(
            xp.sum(xp.square(xp.tanh(2 * images0) - xp.tanh(2 * images1)), axis=-1), axis=(1, 2)
        )

    return ifadit_losses.LossNetworks(
        identity=identity,
        landmarks=lambda images: xp.tanh(images.reshape(images.shape[0], -1) @ w["landmarks"]),
        parser=lambda images: xp.tanh(images @ w["parser"]),
        lpips=lpips,
    )


def _images(rng, *leading):
    return rng.uniform(-1, 1, leading + (SIZE, SIZE, 3)).astype(np.float32)


def _cos(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _l1(a, b):
    return float(np.mean(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _numpy_image_loss(originals, generated, lam, net):
    """Eq. (20) image by image, averaged over the N x B generated images."""
    values = []
    for versions in generated:
        for x, x_bar in zip(originals.astype(np.float64), versions.astype(np.float64)):
            values.append(
                lam[0] * _l1(x, x_bar)
                + lam[1] * net.lpips(x[None], x_bar[None])[0]
                + lam[2] * _l1(net.landmarks(x[None]), net.landmarks(x_bar[None]))
                + lam[3] * np.mean(np.square(net.parser(x) - net.parser(x_bar)))
            )
    return np.mean(values)


def _numpy_identity_terms(original_emb, anonymized_emb, recovered_emb, wrong_emb):
    """Eqs. (15), (17), (18) pair by pair."""
    keys, faces = anonymized_emb.shape[:2]
    anon = np.mean(
        [
            max(0.0, _cos(anonymized_emb[k, b], original_emb[b]))
            for k in range(keys)
            for b in range(faces)
        ]
    )
    face_pairs = list(itertools.combinations(range(faces), 2))
    key_pairs = list(itertools.combinations(range(keys), 2))
    inter_identity = np.mean(
        [
            max(0.0, _cos(anonymized_emb[k, i], anonymized_emb[k, j]))
            for k in range(keys)
            for i, j in face_pairs
        ]
    )
    inter_key = np.mean(
        [
            max(0.0, _cos(anonymized_emb[k1, b], anonymized_emb[k2, b]))
            for b in range(faces)
            for k1, k2 in key_pairs
        ]
    )
    matching = np.mean(
        [1.0 - _cos(r[b], original_emb[b]) for r in recovered_emb for b in range(faces)]
    )
    non_matching = np.mean(
        [max(0.0, _cos(w[b], original_emb[b])) for w in wrong_emb for b in range(faces)]
    )
    return anon, inter_identity + inter_key, matching + non_matching


def test_visual_quality_loss_is_alpha_one_minus_ssim_plus_beta_l1(np_rng):
    originals, reconstructed = _images(np_rng, 3), _images(np_rng, 3)
    reconstructed[0] = np.clip(
        originals[0] + np_rng.normal(0, 0.1, originals[0].shape), -1, 1
    )  # one SSIM near 1
    expected = np.mean(
        [
            0.84 * (1 - skimage_ssim(y, x)) + 0.16 * _l1(y, x)
            for x, y in zip(originals, reconstructed)
        ]
    )
    assert_parity(
        jax.jit(ifadit_losses.visual_quality_loss)(reconstructed, originals), expected, TOL, "L_VQ"
    )


def test_semantic_and_phase1_losses(np_rng, weights):
    originals, reconstructed = _images(np_rng, 3), _images(np_rng, 3)
    net, ref = stand_in_networks(jnp, weights), stand_in_networks(np, weights)
    x, y = originals.astype(np.float64), reconstructed.astype(np.float64)
    sem = _l1(ref.identity(y), ref.identity(x)) + _l1(ref.landmarks(y), ref.landmarks(x))
    vq = np.mean(
        [
            0.84 * (1 - skimage_ssim(b, a)) + 0.16 * _l1(b, a)
            for a, b in zip(originals, reconstructed)
        ]
    )
    total, terms = jax.jit(lambda r, o: ifadit_losses.phase1_loss(r, o, net))(
        reconstructed, originals
    )
    assert_parity(terms["sem"], sem, TOL, "L_Sem")
    assert_parity(terms["vq"], vq, TOL, "L_VQ")
    assert_parity(total, 0.01 * vq + sem, TOL, "L_P1")


def test_identity_terms_clamp_negative_cosines(np_rng):
    keys, faces = 3, 4
    shapes = ((faces,), (keys, faces), (2, faces), (2, faces))
    original, anonymized, recovered, wrong = (
        np_rng.normal(size=s + (EMBED,)).astype(np.float32) for s in shapes
    )
    anonymized[0, 0] = original[0] + 0.1  # one face barely anonymized
    all_cosines = [_cos(a, b) for a, b in itertools.combinations(anonymized.reshape(-1, EMBED), 2)]
    assert min(all_cosines) < -0.2 and max(all_cosines) > 0.2, "the clamp at 0 must be exercised"
    anon, div, deanon = _numpy_identity_terms(original, anonymized, recovered, wrong)
    assert_parity(jax.jit(ifadit_losses.anonymity_loss)(anonymized, original), anon, TOL, "L_Anon")
    assert_parity(jax.jit(ifadit_losses.diversity_loss)(anonymized), div, TOL, "L_Div")
    assert_parity(
        jax.jit(ifadit_losses.deanonymization_loss)(recovered, wrong, original),
        deanon,
        TOL,
        "L_DeAnon",
    )


@pytest.mark.parametrize("kind", ["recovered", "other"])
def test_image_loss(np_rng, weights, kind):
    lam = {
        "recovered": ifadit_losses.RECOVERED_IMAGE_WEIGHTS,
        "other": ifadit_losses.OTHER_IMAGE_WEIGHTS,
    }[kind]
    paper_lambda = {"recovered": (10, 1, 0.1, 0.01), "other": (0.01, 0.1, 0.1, 0.01)}[
        kind
    ]  # eq. (21)
    originals, generated = _images(np_rng, 2), _images(np_rng, 3, 2)
    net, ref = stand_in_networks(jnp, weights), stand_in_networks(np, weights)
    ours = jax.jit(lambda o, g: ifadit_losses.image_loss(o, g, lam, net))(originals, generated)
    assert_parity(
        ours, _numpy_image_loss(originals, generated, paper_lambda, ref), TOL, f"L_Img ({kind})"
    )


def test_phase2_loss_is_the_unweighted_sum(np_rng, weights):
    keys, faces = 2, 3
    originals, anonymized = _images(np_rng, faces), _images(np_rng, keys, faces)
    recovered, wrong = _images(np_rng, 1, faces), _images(np_rng, 2, faces)
    recovered[0] = np.clip(originals + np_rng.normal(0, 0.05, originals.shape), -1, 1)
    net, ref = stand_in_networks(jnp, weights), stand_in_networks(np, weights)

    def embed(images):
        flat = images.reshape((-1,) + images.shape[-3:]).astype(np.float64)
        return ref.identity(flat).reshape(images.shape[:-3] + (EMBED,))

    anon, div, deanon = _numpy_identity_terms(
        embed(originals), embed(anonymized), embed(recovered), embed(wrong)
    )
    img = (
        _numpy_image_loss(originals, recovered, (10, 1, 0.1, 0.01), ref)
        + _numpy_image_loss(originals, anonymized, (0.01, 0.1, 0.1, 0.01), ref)
        + _numpy_image_loss(originals, wrong, (0.01, 0.1, 0.1, 0.01), ref)
    )
    total, terms = jax.jit(lambda *a: ifadit_losses.phase2_loss(*a, net))(
        originals, anonymized, recovered, wrong
    )
    for name, value in (("anon", anon), ("div", div), ("deanon", deanon), ("img", img)):
        assert_parity(terms[name], value, TOL, name)
    assert_parity(total, anon + div + deanon + img, TOL, "L_P2")


@pytest.mark.parametrize("shape", [(1, 4, EMBED), (3, 1, EMBED)])
def test_diversity_needs_two_keys_and_two_faces(shape):
    with pytest.raises(ConfigError, match="2 keys and >= 2 faces"):
        ifadit_losses.diversity_loss(jnp.ones(shape))
