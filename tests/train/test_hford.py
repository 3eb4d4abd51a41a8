"""HFORD as config variants of DBAF's two stages: each loss difference against a NumPy
computation of HFORD's formula, and the variants' settings (and the no_adv ablation of
both methods)."""

import numpy as np
import pytest

from configs.dbaf import stage1, stage2
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train.dbaf import losses
from dbaf_jax.train.dbaf.adversarial import StepSettings


def np_cos(a, b):
    return np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture
def embeddings():
    # 8-d embeddings: their cosines spread over both signs, so max(0, .) matters.
    rng = np.random.default_rng(3)
    return [rng.standard_normal((6, 8)).astype(np.float32) for _ in range(6)]


def test_identity_loss_is_hford_eqs_10_to_13(embeddings):
    """L_id = L_dif + L_anony + L_rev with X = {X^anony (2), X^wr (2)}: n = 4, m = 1."""
    ori, ano1, ano2, rec, err1, err2 = [e.astype(np.float64) for e in embeddings]
    x = [ano1, ano2, err1, err2]
    n, m = len(x), 1
    cosines = [np_cos(x[i], x[j]) for i in range(n) for j in range(n) if i != j]
    assert min(c.min() for c in cosines) < 0 < max(c.max() for c in cosines)
    l_dif = sum(np.maximum(0, c) for c in cosines) / (n * (n - 1))  # eq. (10)
    l_anony = sum(np.maximum(0, np_cos(ori, xi)) for xi in x) / n  # eq. (11)
    l_rev = (1 - np_cos(ori, rec)) / m  # eq. (12)
    expected = np.mean(l_dif + l_anony + l_rev)  # eq. (13), then over the batch
    got = float(losses.stage2_identity_paper(*embeddings, margin=0.0, reduction="mean"))
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # DBAF sums the same terms (eqs. 29-32): 4 anonymity terms and 6 pairs.
    summed = np.mean(l_dif * (n * (n - 1)) / 2 + l_anony * n + l_rev)
    np.testing.assert_allclose(
        float(losses.stage2_identity_paper(*embeddings, margin=0.0)), summed, rtol=1e-5
    )


def test_parse_loss_on_hford_classes_is_eq_14():
    """||F_p(X^ori) - F_p(X^*)||_2 on the identity-related classes only, as a mean over
    every logit (the other classes count as zero, as the reference's mask does)."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 2, 8, 8, 19)).astype(np.float32)
    classes = stage2.get_config("hford").loss.parse_classes
    mask = np.isin(np.arange(19), classes)
    expected = np.mean((mask * (a.astype(np.float64) - b)) ** 2)
    np.testing.assert_allclose(float(losses.parse_loss(a, b, classes)), expected, rtol=1e-5)
    assert float(losses.parse_loss(a, b, classes)) != pytest.approx(float(losses.parse_loss(a, b)))


def test_adversarial_terms_are_expectations_in_hford():
    """HFORD eqs. (16)-(17) average G's and D's terms over the generated faces; DBAF's
    paper sums them over S2."""
    per_output = {"adv": np.array([0.3, 1.2, 0.7, 2.0, 0.1], np.float32)}
    settings = StepSettings.from_config(stage2.get_config("hford"), losses.STAGE2_TERMS)
    assert settings.form.output_reductions["d_logistic"] == "mean"
    np.testing.assert_allclose(
        float(settings.form.reduce_terms(per_output)["adv"]), np.mean(per_output["adv"]), rtol=1e-6
    )
    paper = StepSettings.from_config(stage2.get_config("paper"), losses.STAGE2_TERMS)
    np.testing.assert_allclose(
        float(paper.form.reduce_terms(per_output)["adv"]), np.sum(per_output["adv"]), rtol=1e-6
    )


def test_hford_variants_hold_its_weights_and_recovery():
    pre = StepSettings.from_config(stage1.get_config("hford"), losses.STAGE1_TERMS)
    assert dict(pre.weights) == {
        "contrastive": 1.0,
        "lpips": 1.0,
        "rec": 3.5,
        "parse": 0.1,
        "reg": 0.1,
        "adv": 1.0,
    }
    config = stage2.get_config("hford")
    anonymization = StepSettings.from_config(config, losses.STAGE2_TERMS)
    assert dict(anonymization.weights) == {
        "id": 2.0,
        "lpips": 1.0,
        "rec": 0.05,
        "parse": 0.1,
        "reg": 0.1,
        "adv": 1.0,
    }
    assert anonymization.identity_reduction == "mean" and config.recovery == "latent"
    assert anonymization.form.reconstruction is losses.l1_loss
    assert anonymization.parse_classes == pre.parse_classes == (2, 3, 4, 5, 10, 11, 12, 13)


@pytest.mark.parametrize(
    "module, terms", [(stage1, losses.STAGE1_TERMS), (stage2, losses.STAGE2_TERMS)]
)
@pytest.mark.parametrize("method", ["reference", "paper", "hford"])
def test_no_adv_ablation_of_every_method(module, terms, method):
    settings = StepSettings.from_config(module.get_config(f"{method},no_adv"), terms)
    assert "adv" not in dict(settings.weights) and not settings.train_discriminator
    assert StepSettings.from_config(module.get_config(method), terms).train_discriminator


def test_reference_form_refuses_hford_normalisation():
    config = stage2.get_config("reference")
    config.loss.identity_reduction = "mean"
    with pytest.raises(ConfigError, match="identity_reduction"):
        StepSettings.from_config(config, losses.STAGE2_TERMS)
