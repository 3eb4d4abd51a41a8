"""iFADIT (a second model family): its two training phases.

    python launch.py --config configs/ifadit/phases.py:phase1 --workdir runs/ifadit1 --config.model_dir models --config.data.dir data/ffhq256
    python launch.py --config configs/ifadit/phases.py:phase2 --workdir runs/ifadit2 --config.model_dir models --config.data.dir data/ffhq256 --config.init_from runs/ifadit1

Variants (combine with commas, e.g. ``:phase2,tiny``):
  phase1   (default) disentangle-reconstruct: e4e and the mapper learn to rebuild the
           image from its ArcFace identity and its W+ attribute code (paper 3.5.1)
  phase2   the secure identity flow and the identity compensation layer learn to
           anonymize and recover, everything else frozen (paper 3.5.2); starts from
           phase 1 (``init_from``)
  tiny     reduced widths at 64 px on synthetic data, minutes on a CPU

The schema is `configs/common.py`'s shared fields plus iFADIT's own (below).
"paper" in a comment is the iFADIT paper; "chosen" marks a value the paper leaves
open, with the reason (docs/ifadit.md lists them all). The loss weights are the
paper's and fixed (`dbaf_jax.train.ifadit.losses`).
"""

import ml_collections

from configs import common
from dbaf_jax.train.ifadit import PHASE1, PHASE2


def phase1(c: ml_collections.ConfigDict) -> None:
    c.stage = PHASE1
    c.trainable = (
        "e4e",
        "mapper",
    )  # paper 3.2: E_Attr and M train; ArcFace and StyleGAN2 stay fixed
    c.best_metric = "reconstruction_psnr"


def phase2(c: ml_collections.ConfigDict) -> None:
    c.stage = PHASE2
    c.trainable = ("sif", "icl")  # paper 3.5: SIF and ICL train, every other component frozen
    c.best_metric = "recovery_psnr"


def tiny(c: ml_collections.ConfigDict) -> None:
    """Reduced widths at 64 px so both phases train on a CPU in minutes."""
    common.tiny_base(c)
    c.model.mapper_hidden = 64
    c.model.sif.blocks = 2
    c.model.sif.hidden = 64
    c.model.icl.hidden = 64


VARIANTS = {"phase1": phase1, "phase2": phase2, "tiny": tiny}


def get_config(variants: str = "phase1") -> ml_collections.ConfigDict:
    c = common.base_config()
    c.stage = PHASE1  # a phase's name (phase1, phase2 set it)
    c.trainable = ("e4e", "mapper")
    c.family = "ifadit"  # the run's model family, as its exported model.json names it

    # Base checkpoints in model_dir: e4e, generator, arcface, parser_bisenet (the face
    # parser E_FP and the background mask), lpips_alex, mtcnn/onet (the landmark stand-in).
    c.model.identity_dim = 512  # paper 3.2: the ArcFace embedding, z in R^512
    # paper: "a two-layer MLP"; chosen: its hidden layer as wide as its input (512 + 512).
    c.model.mapper_hidden = 1024
    c.model.sif = ml_collections.ConfigDict()
    c.model.sif.blocks = 4  # N SACBs; chosen (unstated): 4 blocks, each updating both halves
    c.model.sif.hidden = 512  # chosen: the coupling MLPs' hidden width, that of the key
    c.model.sif.depth = 3  # chosen: Dense layers per coupling function (768 -> 512 -> 512 -> 256)
    # paper: "Sigmoid multiplied by a constant factor"; chosen: 2, HiNet's clamp (centred
    # sigmoid, so each block scales a half by a factor in [e^-2, e^2]).
    c.model.sif.clamp = 2.0
    c.model.icl = ml_collections.ConfigDict()
    c.model.icl.hidden = 512  # paper: "a four-layer MLP"; chosen: hidden width = identity width
    c.model.icl.layers = 4  # paper
    c.model.parser = (
        True  # BiSeNet in the model: the soft background mask at inference (paper eq. 11)
    )

    c.batch_size = 4  # paper 4.1
    # paper 4.1: ~150,000 iterations for both phases together; chosen: half each.
    c.num_steps = 75_000
    c.optimizer.name = "adam"
    c.optimizer.learning_rate = 4e-4  # paper 4.1, both phases
    c.optimizer.b1 = 0.0  # paper 4.1
    c.optimizer.b2 = 0.999  # paper 4.1
    c.best_mode = "max"
    phase1(c)
    return common.apply_variants(c, variants, VARIANTS)
