"""The config schema of both stages, every field with its default, and the shared variants.

Both stages have every field (a field a stage does not read keeps its default), so a
default is written once, here. Sources named in the comments: "ref" is the authors'
PyTorch code (its argparse defaults and training scripts), "paper" is the DBAF paper;
docs/reference_code.md describes both.
"""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.stage = 1

    # Converted checkpoints (python -m convert.*) that both stages start from.
    c.model_dir = ""  # e4e, generator, discriminator, arcface, lpips_alex, parser_unet
    # A model directory (e.g. a stage-1 workdir's model/) whose networks replace the
    # base ones: every network of this run that it holds is loaded from it.
    c.init_from = ""

    c.model = ml_collections.ConfigDict()
    c.model.size = 256  # ref --stylegan_size; >= 64 (MAAR's coarsest map is size/16)
    c.model.style_dim = 512  # ref
    c.model.n_mlp = 8  # ref Generator(size, 512, 8)
    c.model.channel_multiplier = 2  # ref (rosinality default)
    c.model.width_scale = 1.0  # generator and D widths; 1.0 = the public checkpoints
    c.model.encoder_width_scale = 1.0  # e4e and ArcFace (IR-SE50) widths; >= 0.25 (squeeze-excitation)
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

    c.data = ml_collections.ConfigDict()
    c.data.dir = ""  # prepared with `python -m dbaf_jax.prepare_data --images DIR --out DATA_DIR`
    c.data.synthetic = False  # deterministic synthetic images, for smoke runs
    c.data.synthetic_size = 64  # number of synthetic images

    c.batch_size = 16  # global batch; ref stage 1: 16, stage 2: 8
    c.num_epochs = 5  # ref --epoch
    c.num_steps = -1  # > 0 overrides num_epochs

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.name = "ranger"  # ref: Ranger for G side and D
    c.optimizer.learning_rate = 1e-4  # ref --lr, both optimizers
    c.r1_gamma = 10.0  # ref --r1
    c.r1_every = 1  # ref: R1 on every D step
    # Lazy R1 (StyleGAN2's recipe): with r1_every = k the penalty is k times stronger on
    # the steps that take it, so its average weight stays r1_gamma. ref: False.
    c.r1_lazy = False
    # Rematerialisation of the generator-side forward in the step, for batches that do
    # not fit: "none", "dots" (keep matmul/conv outputs, recompute the rest) or "full".
    c.remat = "none"
    c.trainable = ("cid", "maar", "decoder", "discriminator")  # ref stage 1
    # False: one generator-side forward per step serves D's and G's updates (fast).
    # True: the reference's two forwards (D's fakes, then G's loss), so MAAR's running
    # statistics update twice per step and D and G see different dropout masks.
    c.two_pass = False

    # Stage 1: every pair_self_every-th step of an epoch pairs each image with itself.
    c.pair_self_every = 3  # ref --cycle_num
    # Stage 2: "latent" (ref: A + KRIA(KRIA(I, k), k) with the original A and MAAR maps)
    # or "image" (paper eqs. 21-23: re-encode the anonymized image).
    c.recovery = "latent"

    # Loss weights (0: the term is not computed) and their parameters; the stages'
    # `reference` and `paper` variants set them.
    c.loss = ml_collections.ConfigDict()
    c.loss.form = "reference"  # "reference" or "paper": dbaf_jax.losses.FORMS
    c.loss.id = 0.0
    c.loss.rec = 0.0
    c.loss.lpips = 0.0
    c.loss.reg = 0.0
    c.loss.parse = 0.0
    c.loss.contrastive = 0.0  # stage 1 only
    c.loss.adv = 0.0
    c.loss.id_margin = 0.0  # clamp of the identity terms' cosines
    c.loss.identity_reduction = "sum"  # stage 2 identity terms over outputs: "sum" (DBAF) or "mean" (HFORD)
    c.loss.parse_classes = (2, 4, 5, 10, 11, 12)  # ref ParseLoss.select_list (CelebAMask-HQ labels)
    c.loss.adversarial_reduction = ""  # "" the form's; "sum"/"mean" of G's and D's terms over the outputs
    c.loss.same_threshold = 0.0  # stage 1 contrastive: ref --same_thres
    c.loss.different_threshold = 0.5  # stage 1 contrastive: ref --not_same_thres

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # -1: all devices not used by fsdp
    c.mesh.fsdp = 1
    c.mesh.min_shard_size = 2**18  # fsdp splits only arrays with at least this many elements
    c.compute_dtype = "float32"  # or "bfloat16" (parameters stay float32)

    # Evaluation during training (`AdversarialStage.evaluate`): the last eval_images of
    # the dataset are held out of training and measured every eval_every steps (<= 0:
    # never; nothing is held out). ref: every 10 steps on a separate test set (batch 16),
    # keeping the networks of lowest test G loss as best_result/.
    c.eval_every = 500
    c.eval_images = 16
    # The eval metric whose best value W/best/ keeps the model directory of ("": none);
    # best_mode "max" or "min". The stage configs choose one.
    c.best_metric = ""
    c.best_mode = "max"

    c.log_every = 10  # ref writes scalars every 10 steps
    c.sample_every = 500  # and after the last step; <= 0: no samples
    # > 0: trace that many steps with jax.profiler into W/profile/, two steps after the
    # run's first (dbaf_jax/train/profiling.py); 0: no trace.
    c.profile_steps = 0
    c.checkpoint_every = 1000
    c.keep_checkpoints = 3
    return c


def apply_variants(config: ml_collections.ConfigDict, variants: str, table: dict) -> ml_collections.ConfigDict:
    """Applies comma-separated variant names (``'paper,tiny'``) from ``table`` in order."""
    for name in filter(None, (v.strip() for v in (variants or "").split(","))):
        if name not in table:
            raise ValueError(f"unknown variant {name!r}; choose from {sorted(table)}")
        table[name](config)
    return config


def tiny_base(c: ml_collections.ConfigDict) -> None:
    """What every family's ``tiny`` variant shares: 64 px, reduced generator and encoder
    widths, synthetic data and a 30-step schedule that logs, samples, evaluates and
    checkpoints on a CPU in minutes."""
    c.model.size = 64
    c.model.style_dim = 32
    c.model.n_mlp = 2
    c.model.width_scale = 1 / 16
    c.model.encoder_width_scale = 1 / 4
    c.data.synthetic = True
    c.data.synthetic_size = 32
    c.batch_size = 4
    c.num_steps = 30
    c.log_every = 5
    c.sample_every = 15
    c.checkpoint_every = 15
    c.eval_every = 15
    c.eval_images = 4


def tiny(c: ml_collections.ConfigDict) -> None:
    """Reduced widths at 64 px so both stages train on a CPU in minutes."""
    tiny_base(c)
    c.model.latent_groups = (3, 3, 4)
    c.model.cid.depth = 1
    c.model.cid.heads = 2
    c.model.cid.head_dim = 8
    c.model.cid.mlp_dim = 32


QUICKSTART_DATA = "workdirs/quickstart/faces64"  # README: python -m dbaf_jax.prepare_data --images quickstart/faces --out this --size 64


def quickstart(c: ml_collections.ConfigDict) -> None:
    """README's quick start: ``tiny`` on the 49 real faces the repository ships
    (quickstart/faces), the last 16 held out and measured at the end."""
    tiny(c)
    c.data.synthetic = False
    c.data.dir = QUICKSTART_DATA
    c.eval_images = 16


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
    c.loss.form = "paper"  # HFORD eq. 9: L1 reconstruction; eq. 15: sum_i ||Delta_i||_2, as DBAF's paper
    c.loss.parse_classes = HFORD_PARSE_CLASSES  # HFORD eq. 14: identity-related parts only
    c.loss.adversarial_reduction = "mean"  # HFORD eqs. 16-17: expectations over all generated faces
    c.loss.id_margin = 0.0  # HFORD eqs. 10-11: max(0, cos)


def paper_model(c: ml_collections.ConfigDict) -> None:
    """The paper's CID and MAAR: one shared multi-head attention among tokens, MAAR by eqs. (6)-(8)."""
    c.model.cid.attention = "tokens"
    c.model.cid.shared = True
    c.model.maar.variant = "paper"
