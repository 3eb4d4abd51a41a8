"""Stage 2 (anonymization): KRIA learns key-conditioned identity transforms.

Starts from a stage-1 result (``init_from``: a stage-1 workdir or a converted DBAF
model directory). Variants as ``--config configs/dbaf/stage2.py:paper`` or ``:reference,tiny``:
  reference     (default) the authors' train_anonymization_stage.py exactly: latent-space
                recovery, its loss terms and weights, CID attention across the batch
  paper         the paper's loss set (eqs. 29-39), recovery by re-encoding the anonymized
                image, and its CID/MAAR arrangement
  tiny          reduced widths at 64 px on synthetic data
  single_stage  ablation: train everything from the base checkpoints in one stage
  frozen_generator  keep the fine-tuned generator fixed
  tokens, no_cid, no_maar, no_adv  as in stage 1
  hford         HFORD's anonymization training (its sec. IV-A), latent-space recovery
"""

import ml_collections

from configs import common
from configs.dbaf import schema as dbaf_schema


def reference(c: ml_collections.ConfigDict) -> None:
    c.loss.form = "reference"
    c.loss.id = 1.0  # ref: identity terms unweighted (its --lambdaid 2.0 is never used)
    c.loss.id_margin = 0.1  # ref --id_cos_margin (stage 2)
    c.loss.rec = 0.05  # ref --lambdarec, SmoothL1, summed over the five outputs
    c.loss.lpips = 1.0  # ref --lambdalpips, summed over the five outputs
    c.loss.parse = 0.1  # ref --lambdaparse, summed over the five outputs
    c.loss.reg = 0.1  # ref --lambdalatent, mean(w^2) averaged over the five codes
    c.loss.adv = 1.0  # ref: G loss averaged over the five outputs
    c.recovery = "latent"  # ref: A + KRIA([KRIA([I, key]), key]) with the original A and MAAR maps


def paper(c: ml_collections.ConfigDict) -> None:
    c.loss.form = "paper"
    c.loss.id = 2.0  # paper lambda_id
    c.loss.id_margin = 0.0  # paper eqs. (29)-(31): max(0, cos)
    c.loss.rec = 0.05  # paper lambda_rec, L1 summed over S2
    c.loss.lpips = 1.0  # paper lambda_lpips
    c.loss.parse = 0.1  # paper lambda_parse
    c.loss.reg = 0.1  # paper lambda_reg
    c.loss.adv = 1.0  # paper eq. (38): summed over S2
    c.recovery = "image"  # paper eqs. (21)-(23): re-encode the anonymized image
    dbaf_schema.paper_model(c)


def hford(c: ml_collections.ConfigDict) -> None:
    """HFORD's anonymization training, sec. IV-A: eq. (18) with lambda_c = 0,
    lambda_id = 2.0, lambda_lips = 1.0, lambda_rec = 0.05, lambda_parse = 0.1,
    lambda_reg = 0.1; 2 anonymizing and 2 wrong passwords (n = 4), one recovery (m = 1)."""
    dbaf_schema.hford_losses(c)
    c.loss.identity_reduction = "mean"  # HFORD eqs. (10)-(12): 1/(n(n-1)) over pairs, 1/n, 1/m
    c.loss.id = 2.0  # HFORD lambda_id
    c.loss.lpips = 1.0  # HFORD lambda_lips
    c.loss.rec = 0.05  # HFORD lambda_rec
    c.loss.parse = 0.1  # HFORD lambda_parse
    c.loss.reg = 0.1  # HFORD lambda_reg
    c.loss.adv = 1.0  # HFORD eq. (18): L_adv unweighted
    c.recovery = "latent"  # HFORD: the cMLP applied again to the anonymized identity code


def single_stage(c: ml_collections.ConfigDict) -> None:
    """Ablation: no disentanglement stage; CID and MAAR start untrained."""
    c.init_from = ""


def frozen_generator(c: ml_collections.ConfigDict) -> None:
    c.trainable = tuple(t for t in c.trainable if t != "decoder")


VARIANTS = {
    "reference": reference,
    "paper": paper,
    "hford": hford,
    "single_stage": single_stage,
    "frozen_generator": frozen_generator,
    **dbaf_schema.STAGE_VARIANTS,
}


def get_config(variants: str = "reference") -> ml_collections.ConfigDict:
    c = dbaf_schema.dbaf_config()
    c.stage = 2
    c.batch_size = 8  # ref stage 2 --batchsize
    c.trainable = ("kria", "cid", "maar", "decoder", "discriminator")  # ref stage 2
    c.best_metric = "recovery_psnr"  # W/best/: the model directory where this was highest
    reference(c)
    return common.apply_variants(c, variants, VARIANTS)
