"""Stage 1 (disentanglement): CID, MAAR, the generator and D learn to mix identity and attributes.

Select variants as ``--config configs/dbaf/stage1.py:paper`` or ``:reference,tiny``:
  reference    (default) the authors' train_disentanglement_stage.py exactly: its loss
               terms and weights, CID attention across the batch
  paper        the paper's loss set (eq. 18) and its CID/MAAR arrangement
  tiny         reduced widths at 64 px on synthetic data, minutes on a CPU
  tokens       CID attention among each image's tokens instead of across the batch
  no_cid       ablation: a 4-layer MLP instead of CID
  no_maar      ablation: no MAAR
  no_adv       ablation: no adversarial term (and no discriminator)
  hford        HFORD's pre-training (its sec. III-F): the same stage, HFORD's losses
"""

import ml_collections

from configs import common
from configs.dbaf import schema as dbaf_schema


def reference(c: ml_collections.ConfigDict) -> None:
    c.loss.form = "reference"
    c.loss.id = 0.5  # ref --lambdaid: 1 - clamp(cos(X_id, X_mix), min=margin)
    c.loss.id_margin = 0.0  # ref --id_cos_margin (stage 1)
    c.loss.rec = 3.5  # ref --lambdarec, SmoothL1(X_attr, X_mix)
    c.loss.lpips = 1.0  # ref --lambdalpips, LPIPS(alex) batch mean
    c.loss.reg = 0.1  # ref --lambdalatent, mean(w^2)
    c.loss.parse = 0.1  # ref --lambdaparse
    c.loss.contrastive = 0.1  # ref --lambdacontrastive
    c.loss.adv = 1.0  # ref: non-saturating G loss, unweighted


def paper(c: ml_collections.ConfigDict) -> None:
    c.loss.form = "paper"
    c.loss.id = 0.0  # paper eq. (18) has no identity term in stage 1
    c.loss.id_margin = 0.0
    c.loss.rec = 3.5  # paper: lambda_rec, L1
    c.loss.lpips = 1.0  # paper: lambda_lpips
    c.loss.reg = 0.1  # paper: lambda_reg, sum_i ||w_i - w_avg||
    c.loss.parse = 0.1  # paper: lambda_parse
    c.loss.contrastive = 1.0  # paper: lambda_c
    c.loss.adv = 1.0  # paper eq. (18)
    dbaf_schema.paper_model(c)


def hford(c: ml_collections.ConfigDict) -> None:
    """HFORD's pre-training, sec. III-F: eq. (18) with lambda_c = 1.0, lambda_id = 0,
    lambda_lips = 1.0, lambda_rec = 3.5, lambda_parse = 0.1, lambda_reg = 0.1."""
    dbaf_schema.hford_losses(c)
    c.loss.contrastive = 1.0  # HFORD lambda_c, eq. (6)
    c.loss.id = 0.0  # HFORD lambda_id = 0 in pre-training
    c.loss.lpips = 1.0  # HFORD lambda_lips
    c.loss.rec = 3.5  # HFORD lambda_rec
    c.loss.parse = 0.1  # HFORD lambda_parse
    c.loss.reg = 0.1  # HFORD lambda_reg
    c.loss.adv = 1.0  # HFORD eq. (18): L_adv unweighted


VARIANTS = {"reference": reference, "paper": paper, "hford": hford, **dbaf_schema.STAGE_VARIANTS}


def get_config(variants: str = "reference") -> ml_collections.ConfigDict:
    c = dbaf_schema.dbaf_config()
    c.stage = 1
    c.batch_size = 16  # ref stage 1 --batchsize
    c.best_metric = "reconstruction_psnr"  # W/best/: the model directory where this was highest
    reference(c)
    return common.apply_variants(c, variants, VARIANTS)
