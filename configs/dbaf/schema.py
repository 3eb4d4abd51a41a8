"""DBAF's (and HFORD's) config schema: `common.base_config` plus the fields of both
adversarial stages, and the variants configs/dbaf/stage1.py and configs/dbaf/stage2.py share.

Both stages have every field (a field a stage does not read keeps its default), so a
default is written once, here. "ref" is the authors' PyTorch code, "paper" the DBAF
paper; docs/reference_code.md describes both.
"""

import ml_collections

from configs import common


def dbaf_config() -> ml_collections.ConfigDict:
    c = common.base_config()
    c.stage = 1
    # model_dir holds e4e, generator, discriminator, arcface, lpips_alex, parser_unet.

    c.model.latent_groups = (4, 4, 6)  # ref: coarse, medium, fine
    c.model.cid = ml_collections.ConfigDict()
    c.model.cid.kind = "vit"  # "vit" (ref/paper) or "mlp" (paper ablation w/o CID: a 4-layer MLP)
    c.model.cid.attention = "batch"  # "batch" (ref: attention across the batch) or "tokens" (paper)
    c.model.cid.shared = False  # ref: one ViT per group; paper: one shared attention
    c.model.cid.depth = 6  # ref
    c.model.cid.heads = 14  # ref
    c.model.cid.head_dim = 64  # ref
    c.model.cid.mlp_dim = 2048  # ref
    c.model.cid.dropout = 0.1  # ref (active whenever the reference trains)
    c.model.maar = ml_collections.ConfigDict()
    c.model.maar.enabled = True  # paper ablation w/o MAAR: generator reads its stored noise
    c.model.maar.variant = "reference"  # "reference" (1x1 conv + CBAM) or "paper" (eqs. 6-8)

    c.optimizer.name = "ranger"  # ref: Ranger for G side and D
    c.r1_gamma = 10.0  # ref --r1
    c.r1_every = 1  # ref: R1 on every D step
    # Lazy R1 (StyleGAN2's recipe): with r1_every = k the penalty is k times stronger on
    # the steps that take it, so its average weight stays r1_gamma. ref: False.
    c.r1_lazy = False
    c.trainable = ("cid", "maar", "decoder", "discriminator")  # ref stage 1
    # False: one generator-side forward per step serves D's and G's updates (fast).
    # True: the reference's two forwards (D's fakes, then G's loss), so MAAR's running
    # statistics update twice per step and D and G see different dropout masks.
    c.two_pass = False
    # True: each of CID's ViTs runs its blocks under one lax.scan (`models.dbaf.cid.ViT`): a
    # smaller step program, the same parameters and outputs (docs/performance.md).
    c.cid_scan = False

    # Stage 1: every pair_self_every-th step of an epoch pairs each image with itself.
    c.pair_self_every = 3  # ref --cycle_num
    # Stage 2: "latent" (ref: A + KRIA(KRIA(I, k), k) with the original A and MAAR maps)
    # or "image" (paper eqs. 21-23: re-encode the anonymized image).
    c.recovery = "latent"

    # Stage 2: KRIA's latent-space warm-up before the first step (not in the papers;
    # dbaf_jax.train.dbaf.kria_warmup). Only the quick start turns it on.
    c.kria_warmup = ml_collections.ConfigDict()
    c.kria_warmup.steps = 0
    c.kria_warmup.learning_rate = 3e-3
    c.kria_warmup.noise = 0.5
    c.kria_warmup.images = 256

    # Loss weights (0: the term is not computed) and their parameters; the stages'
    # `reference` and `paper` variants set them.
    c.loss = ml_collections.ConfigDict()
    c.loss.form = "reference"  # "reference" or "paper": dbaf_jax.train.dbaf.losses.FORMS
    c.loss.id = 0.0
    c.loss.rec = 0.0
    c.loss.lpips = 0.0
    c.loss.reg = 0.0
    c.loss.parse = 0.0
    c.loss.contrastive = 0.0  # stage 1 only
    c.loss.adv = 0.0
    c.loss.id_margin = 0.0  # clamp of the identity terms' cosines
    c.loss.identity_reduction = (
        "sum"  # stage 2 identity terms over outputs: "sum" (DBAF) or "mean" (HFORD)
    )
    c.loss.parse_classes = (2, 4, 5, 10, 11, 12)  # ref ParseLoss.select_list (CelebAMask-HQ labels)
    c.loss.adversarial_reduction = (
        ""  # "" the form's; "sum"/"mean" of G's and D's terms over the outputs
    )
    # Stage 1's contrastive thresholds, for every variant: the reference's --same_thres and
    # --not_same_thres; DBAF's tau+/tau- and HFORD's are not given in their papers.
    c.loss.same_threshold = 0.0
    c.loss.different_threshold = 0.5
    return c


def tiny(c: ml_collections.ConfigDict) -> None:
    """Reduced widths at 64 px so both stages train on a CPU in minutes."""
    common.tiny_base(c)
    c.model.latent_groups = (3, 3, 4)
    c.model.cid.depth = 1
    c.model.cid.heads = 2
    c.model.cid.head_dim = 8
    c.model.cid.mlp_dim = 32


QUICKSTART_DATA = "workdirs/quickstart/faces64"  # README: python -m dbaf_jax.commands.prepare_data --images quickstart/faces --out this --size 64


def quickstart(c: ml_collections.ConfigDict) -> None:
    """README's quick start: ``tiny`` on the 49 real faces the repository ships
    (quickstart/faces), the last 16 held out and measured at the end."""
    tiny(c)
    c.data.synthetic = False
    c.data.dir = QUICKSTART_DATA
    c.eval_images = 16
    # A generator trained from scratch for 30 steps cannot teach KRIA reversibility
    # through images in minutes; the latent warm-up does (stage 2 only).
    if c.stage == 2:
        c.kria_warmup.steps = 2000


def tokens(c: ml_collections.ConfigDict) -> None:
    """CID attention among each image's latent tokens (the paper's) instead of across the
    batch, keeping everything else: an image's codes no longer depend on its batch-mates."""
    c.model.cid.attention = "tokens"


def no_cid(c: ml_collections.ConfigDict) -> None:
    """Paper ablation: a 4-layer MLP instead of CID."""
    c.model.cid.kind = "mlp"


def no_maar(c: ml_collections.ConfigDict) -> None:
    """Paper ablation: no MAAR; the generator reads its stored noise."""
    c.model.maar.enabled = False


def no_adv(c: ml_collections.ConfigDict) -> None:
    """Ablation of both methods (DBAF Table IV, HFORD w/o L_adv): no adversarial term,
    and so no discriminator to train."""
    c.loss.adv = 0.0
    c.trainable = tuple(t for t in c.trainable if t != "discriminator")


# HFORD (the conference predecessor): the same networks under other names (IDM = CID,
# ARM = MAAR, cMLP = KRIA, pre-training = stage 1). It names no parser classes, only
# "identity-related parts" (sec. III-E, eq. 14): the inner face, both brows, both eyes,
# nose, mouth and both lips (CelebAMask-HQ labels). The reference's list for DBAF has
# one brow and one lip of each pair.
HFORD_PARSE_CLASSES = (2, 3, 4, 5, 10, 11, 12, 13)


def hford_losses(c: ml_collections.ConfigDict) -> None:
    """What both HFORD stages share and DBAF's paper form does not."""
    c.loss.form = (
        "paper"  # HFORD eq. 9: L1 reconstruction; eq. 15: sum_i ||Delta_i||_2, as DBAF's paper
    )
    c.loss.parse_classes = HFORD_PARSE_CLASSES  # HFORD eq. 14: identity-related parts only
    c.loss.adversarial_reduction = "mean"  # HFORD eqs. 16-17: expectations over all generated faces
    c.loss.id_margin = 0.0  # HFORD eqs. 10-11: max(0, cos)


def paper_model(c: ml_collections.ConfigDict) -> None:
    """The paper's CID and MAAR: one shared multi-head attention among tokens, MAAR by eqs. (6)-(8)."""
    c.model.cid.attention = "tokens"
    c.model.cid.shared = True
    c.model.maar.variant = "paper"


# The variants both stages take alike; each stage's VARIANTS adds its own.
STAGE_VARIANTS = {
    "tiny": tiny,
    "quickstart": quickstart,
    "tokens": tokens,
    "no_cid": no_cid,
    "no_maar": no_maar,
    "no_adv": no_adv,
}
