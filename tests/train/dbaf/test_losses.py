"""Each loss term of DBAF (and the two it shares with iFADIT, `dbaf_jax.train.losses`) against a PyTorch computation of the reference's formula on the same inputs."""

import itertools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from configs.dbaf import stage1, stage2
from dbaf_jax.train import losses as shared_losses
from dbaf_jax.train.dbaf import losses
from tests.parity import assert_parity, nchw, nhwc


def arcface_perceptual_loss(maps_a: Sequence[jax.Array], maps_b: Sequence[jax.Array]) -> jax.Array:
    """Sum over ArcFace's intermediate maps of the mean absolute difference.

    IDLossExtractor computes it (maps after the stem and body units 2, 6, 20, 23);
    neither training script adds it to a loss.
    """
    if len(maps_a) != len(maps_b):
        raise ValueError(f"{len(maps_a)} maps against {len(maps_b)}")
    return sum(jnp.mean(jnp.abs(a - b)) for a, b in zip(maps_a, maps_b))


TOL = 1e-6


def t(x):
    return torch.from_numpy(np.asarray(x, np.float32))


@pytest.fixture
def embeddings(np_rng):
    """Six batches of unit ArcFace-like embeddings, correlated so cosines spread over [-1, 1]."""
    base = np_rng.normal(size=(6, 512))
    out = []
    for _ in range(6):
        e = base * np_rng.uniform(-1, 1, size=(6, 1)) + np_rng.normal(size=(6, 512))
        out.append((e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32))
    return out


def test_cosine_similarity(embeddings, np_rng):
    a, b = embeddings[0], np_rng.normal(size=(6, 512)).astype(np.float32) * 3  # not unit
    assert_parity(
        shared_losses.cosine_similarity(a, b), torch.cosine_similarity(t(a), t(b)).numpy(), TOL
    )


@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_identity_terms(embeddings, margin):
    a, b = embeddings[0], embeddings[1]
    cos = torch.cosine_similarity(t(a), t(b))
    assert_parity(
        losses.identity_loss(a, b, margin), (1 - cos.clamp(min=margin)).mean().numpy(), TOL
    )
    assert_parity(
        losses.reverse_identity_similarity(a, b, margin), cos.clamp(min=margin).mean().numpy(), TOL
    )
    assert_parity(
        losses.contrastive_distance(a, b, margin), (1 - cos).clamp(min=margin).numpy(), TOL
    )


@pytest.mark.parametrize("same", [True, False])
def test_contrastive_loss(embeddings, same):
    dists = (1 - torch.cosine_similarity(t(embeddings[2]), t(embeddings[3]))).clamp(min=0.0)
    if same:
        expected = torch.clamp(dists - 0.0, min=0.0).mean()
    else:
        expected = torch.clamp(0.5 - dists, min=0.0).mean()
    actual = losses.contrastive_loss(
        losses.contrastive_distance(embeddings[2], embeddings[3]), same, 0.0, 0.5
    )
    assert_parity(actual, expected.numpy(), TOL)
    traced = jax.jit(losses.contrastive_loss)(dists.numpy(), jnp.asarray(same))
    assert_parity(traced, expected.numpy(), TOL)


def test_arcface_perceptual_loss(np_rng):
    shapes = [(2, 56, 56, 64), (2, 56, 56, 64), (2, 28, 28, 128), (2, 14, 14, 256), (2, 7, 7, 512)]
    a = [np_rng.normal(size=s).astype(np.float32) for s in shapes]
    b = [np_rng.normal(size=s).astype(np.float32) for s in shapes]
    expected = sum(F.l1_loss(nchw(x), nchw(y)) for x, y in zip(a, b))
    assert_parity(arcface_perceptual_loss(a, b), expected.numpy(), TOL)


def test_image_terms(np_rng):
    a = np_rng.uniform(-1, 1, size=(2, 16, 16, 3)).astype(np.float32)
    b = (a + np_rng.normal(scale=0.8, size=a.shape)).astype(
        np.float32
    )  # |d| on both sides of beta=1
    assert_parity(
        losses.smooth_l1_loss(a, b), torch.nn.SmoothL1Loss()(nchw(a), nchw(b)).numpy(), TOL
    )
    assert_parity(shared_losses.l1_loss(a, b), F.l1_loss(nchw(a), nchw(b)).numpy(), TOL)
    distances = np_rng.uniform(0, 0.5, size=(5,)).astype(np.float32)
    expected = torch.sum(t(distances).reshape(5, 1, 1, 1)) / 5  # sum(cat(per-layer maps)) / B
    assert_parity(losses.lpips_batch_mean(distances), expected.numpy(), TOL)


def test_parse_loss(np_rng):
    x = np_rng.normal(size=(2, 19, 8, 8)).astype(np.float32)
    y = np_rng.normal(size=(2, 19, 8, 8)).astype(np.float32)

    def predict(logits):
        mask = torch.zeros_like(logits)
        mask[:, [2, 4, 5, 10, 11, 12], ...] = 1
        return mask * logits

    expected = F.mse_loss(predict(t(x)), predict(t(y)))
    assert_parity(losses.parse_loss(nhwc(t(x)), nhwc(t(y))), expected.numpy(), TOL)


def test_latent_regularisers(np_rng):
    w = np_rng.normal(size=(3, 14, 512)).astype(np.float32)
    assert_parity(losses.latent_square_mean(w), (t(w) ** 2).mean().numpy(), TOL)
    w_avg = np_rng.normal(size=(14, 512)).astype(np.float32)
    expected = torch.linalg.norm(t(w)[:, 1:] - t(w_avg)[1:], dim=-1).sum(dim=1).mean()
    assert_parity(losses.latent_distance_to_average(w, w_avg), expected.numpy(), TOL)
    assert_parity(
        losses.latent_distance_to_average(w, w_avg[0]),
        torch.linalg.norm(t(w)[:, 1:] - t(w_avg)[0], dim=-1).sum(1).mean().numpy(),
        TOL,
    )


def test_adversarial_terms(np_rng):
    real = np_rng.normal(scale=3, size=(4, 1)).astype(np.float32)
    fake = np_rng.normal(scale=3, size=(4, 1)).astype(np.float32)
    assert_parity(
        losses.generator_nonsaturating_loss(fake), F.softplus(-t(fake)).mean().numpy(), TOL
    )
    expected = F.softplus(-t(real)).mean() + F.softplus(t(fake)).mean()
    assert_parity(losses.discriminator_logistic_loss(real, fake), expected.numpy(), TOL)


class TinyTorchD(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.linear = torch.nn.Linear(4 * 8 * 8, 1)

    def forward(self, x):
        return self.linear(F.leaky_relu(self.conv(x), 0.2).flatten(1))


def tiny_jax_d(params, x):
    h = jax.lax.conv_general_dilated(
        x, params["conv_w"], (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    h = jax.nn.leaky_relu(h + params["conv_b"], 0.2)
    h = h.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)  # flatten in NCHW order, as torch
    return h @ params["lin_w"] + params["lin_b"]


def test_r1_penalty_and_its_parameter_gradient(np_rng):
    torch.manual_seed(0)
    d = TinyTorchD()
    images = np_rng.uniform(-1, 1, size=(3, 8, 8, 3)).astype(np.float32)

    real = nchw(images).requires_grad_(True)
    real_pred = d(real)
    (grad_real,) = torch.autograd.grad(real_pred.sum(), real, create_graph=True)
    r1 = 10.0 / 2 * grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()
    r1.backward()

    params = {
        "conv_w": d.conv.weight.detach().numpy().transpose(2, 3, 1, 0),
        "conv_b": d.conv.bias.detach().numpy(),
        "lin_w": d.linear.weight.detach().numpy().T,
        "lin_b": d.linear.bias.detach().numpy(),
    }

    def penalty(params):
        return losses.r1_penalty(lambda x: tiny_jax_d(params, x), jnp.asarray(images), gamma=10.0)

    (value, logits), grads = jax.value_and_grad(penalty, has_aux=True)(params)
    assert_parity(value, r1.detach().numpy(), 1e-5)
    assert_parity(logits, real_pred.detach().numpy(), 1e-5)
    assert_parity(
        grads["conv_w"], d.conv.weight.grad.numpy().transpose(2, 3, 1, 0), 1e-5, "dR1/dconv"
    )
    assert_parity(grads["lin_w"], d.linear.weight.grad.numpy().T, 1e-5, "dR1/dlinear")
    assert_parity(grads["conv_b"], d.conv.bias.grad.numpy(), 1e-5, "dR1/dbias")


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_pair_attribute_images(np_rng, index):
    images = np_rng.normal(size=(5, 4, 4, 3)).astype(np.float32)
    if index % 3 == 0:
        expected = t(images)
    else:  # the reference's cycle_images_to_create_different_order
        source = t(images)
        expected = torch.empty_like(source)
        expected[0] = source[4]
        expected[1:] = source[:4]
    attr, same = losses.pair_attribute_images(jnp.asarray(images), index)
    np.testing.assert_array_equal(attr, expected.numpy())
    assert bool(same) == (index % 3 == 0)


def test_stage2_identity_reference(embeddings):
    ori, ano1, ano2, rec, err1, err2 = (t(e) for e in embeddings)
    margin = 0.1

    def extractor(a, b):  # IDLossExtractor.calculate_loss: (id_loss, rev_id_loss)
        cos = torch.cosine_similarity(a, b)
        return (1 - cos.clamp(min=margin)).mean(), cos.clamp(min=margin).mean()

    enc = (extractor(ori, ano1)[1] + extractor(ori, ano2)[1] + extractor(ano1, ano2)[1]) / 3
    rev = (
        extractor(rec, err1)[1]
        + extractor(rec, err2)[1]
        + extractor(err1, err2)[1]
        + extractor(ori, err1)[1]
        + extractor(ori, err2)[1]
    ) / 5
    expected = enc + rev + extractor(ori, rec)[0]
    assert_parity(
        losses.stage2_identity_reference(*embeddings, margin=margin), expected.numpy(), TOL
    )


def test_stage2_identity_paper(embeddings):
    ori, ano1, ano2, rec, err1, err2 = (t(e) for e in embeddings)
    cos = lambda a, b: torch.cosine_similarity(a, b)  # noqa: E731
    s1 = [ano1, ano2, err1, err2]
    dif = sum(cos(ori, x).clamp(min=0).mean() for x in s1)
    div = sum(cos(x, y).clamp(min=0).mean() for x, y in itertools.combinations(s1, 2))
    expected = dif + (1 - cos(ori, rec)).mean() + div
    assert_parity(losses.stage2_identity_paper(*embeddings), expected.numpy(), TOL)


def config_weights(stage_config, variant: str) -> dict[str, float]:
    """The loss weights a stage's config variant sets (the training steps read the same fields)."""
    loss = stage_config.get_config(variant).loss
    terms = losses.STAGE1_TERMS if stage_config is stage1 else losses.STAGE2_TERMS
    return {name: loss[name] for name in terms}


def test_stage1_weighted_sum_reference():
    terms = {
        "id": 0.3,
        "rec": 0.2,
        "lpips": 0.4,
        "reg": 1.7,
        "parse": 2.5,
        "contrastive": 0.25,
        "adv": 0.69,
    }
    # G_total = lambdaid*id + lambdarec*rec + lambdalpips*lp + lambdalatent*latent + lambdaparse*parse
    #           + lambdacontrastive*contrastive + g_loss, with the script's defaults
    expected = 0.5 * 0.3 + 3.5 * 0.2 + 1.0 * 0.4 + 0.1 * 1.7 + 0.1 * 2.5 + 0.1 * 0.25 + 0.69
    total, weighted = losses.weighted_total(
        terms, config_weights(stage1, "reference"), losses.STAGE1_TERMS
    )
    assert total == pytest.approx(expected, rel=1e-12)
    assert weighted["rec"] == pytest.approx(0.7)


def test_weighted_sum_refuses_mismatched_terms():
    paper = {name: weight for name, weight in config_weights(stage1, "paper").items() if weight}
    terms = {"rec": 1.0, "lpips": 1.0, "reg": 1.0, "parse": 1.0, "contrastive": 1.0, "adv": 1.0}
    total, _ = losses.weighted_total(terms, paper, losses.STAGE1_TERMS)
    assert total == pytest.approx(3.5 + 1 + 0.1 + 0.1 + 1 + 1)
    with pytest.raises(KeyError, match=r"terms without a weight \['id'\]"):
        losses.weighted_total({**terms, "id": 1.0}, paper, losses.STAGE1_TERMS)
    with pytest.raises(KeyError, match=r"not computed \['adv'\]"):
        losses.weighted_total(
            {k: v for k, v in terms.items() if k != "adv"}, paper, losses.STAGE1_TERMS
        )
    with pytest.raises(KeyError, match=r"unknown loss terms \['contrastive'\]"):
        losses.weighted_total(terms, config_weights(stage2, "paper"), losses.STAGE2_TERMS)
    zero_id = {**paper, "id": 0.0}
    assert losses.weighted_total(terms, zero_id, losses.STAGE1_TERMS)[0] == pytest.approx(total)


def test_stage2_reductions_and_discriminator(np_rng):
    five = np_rng.uniform(0, 1, 5)
    per_output = {"rec": five, "lpips": five, "parse": five, "reg": five, "adv": five}
    reference = losses.FORMS["reference"].reduce_terms(per_output)
    paper = losses.FORMS["paper"].reduce_terms(per_output)
    assert reference["rec"] == pytest.approx(sum(five)) and reference["adv"] == pytest.approx(
        sum(five) / 5
    )
    assert reference["reg"] == pytest.approx(sum(five) / 5) and paper["adv"] == pytest.approx(
        sum(five)
    )
    total, weighted = losses.weighted_total(
        {**reference, "id": 0.8}, config_weights(stage2, "reference"), losses.STAGE2_TERMS
    )
    s = sum(five)
    assert total == pytest.approx(0.8 + 0.05 * s + 1.0 * s + 0.1 * s + 0.1 * s / 5 + s / 5)
    # D (reference stage 2): (d_loss_1 + d_loss_12 + d_loss_11 + d_loss_2 + d_loss_21) / 5 + r1/2 * R1
    d_total, d_terms = losses.discriminator_loss(five, 0.3, "mean")
    assert d_total == pytest.approx(s / 5 + 0.3) and d_terms["r1"] == 0.3
    assert losses.discriminator_loss(five, 0.3, "sum")[0] == pytest.approx(s + 0.3)
