"""The config schema every method shares, every field with its default, and the helpers
of the variants.

Each method's schema adds its own fields to `base_config` (DBAF's and HFORD's:
`configs/dbaf/schema.py`; iFADIT's: `configs/ifadit/phases.py`), so a shared default is
written once, here. Sources named in the comments: "ref" is the authors' PyTorch code
of DBAF (its argparse defaults and training scripts); docs/reference_code.md
describes it.
"""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0

    # Converted checkpoints (python -m convert.*) that a run starts from; each method's
    # schema says which sub-directories it reads.
    c.model_dir = ""
    # A model directory (e.g. a stage-1 workdir's model/) whose networks replace the
    # base ones: every network of this run that it holds is loaded from it.
    c.init_from = ""

    c.model = ml_collections.ConfigDict()
    c.model.size = 256  # ref --stylegan_size; >= 64 (MAAR's coarsest map is size/16)
    c.model.style_dim = 512  # ref
    c.model.n_mlp = 8  # ref Generator(size, 512, 8)
    c.model.channel_multiplier = 2  # ref (rosinality default)
    c.model.width_scale = 1.0  # generator and D widths; 1.0 = the public checkpoints
    c.model.encoder_width_scale = (
        1.0  # e4e and ArcFace (IR-SE50) widths; >= 0.25 (squeeze-excitation)
    )

    c.data = ml_collections.ConfigDict()
    c.data.dir = ""  # `python -m dbaf_jax.commands.prepare_data --images DIR --out DATA_DIR`
    c.data.synthetic = False  # deterministic synthetic images, for smoke runs
    c.data.synthetic_size = 64  # number of synthetic images

    c.batch_size = 16  # global batch; ref stage 1: 16, stage 2: 8
    c.num_epochs = 5  # ref --epoch
    c.num_steps = -1  # > 0 overrides num_epochs

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.learning_rate = 1e-4  # ref --lr, both optimizers
    # Rematerialisation of the generator-side forward in the step, for batches that do
    # not fit: "none", "dots" (keep matmul/conv outputs, recompute the rest) or "full".
    c.remat = "none"

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1  # -1: all devices not used by fsdp
    c.mesh.fsdp = 1
    c.mesh.min_shard_size = 2**18  # fsdp splits only arrays with at least this many elements
    c.compute_dtype = "float32"  # or "bfloat16" (parameters stay float32)

    # Evaluation during training (the stage's ``evaluate``): the last eval_images of
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


def apply_variants(
    config: ml_collections.ConfigDict, variants: str, table: dict
) -> ml_collections.ConfigDict:
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
