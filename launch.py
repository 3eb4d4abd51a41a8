"""Trains a DBAF stage.

    python launch.py --config configs/stage1.py[:variants] --workdir W [--config.batch_size=32 ...]

The config file's ``get_config(variants)`` gives every hyperparameter; any field can
be overridden on the command line. Re-running the same command resumes from the
workdir's latest checkpoint. On a multi-host pod pass --distributed on every host.
"""

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and samples.", required=True)
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first (multi-host).")
config_flags.DEFINE_config_file("config", None, "Experiment config file (configs/*.py[:variants]).", lock_config=True)
flags.mark_flags_as_required(["config"])


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO; -v 0 shows it
    import jax

    if FLAGS.distributed:
        jax.distributed.initialize()
    from dbaf_jax.train import loop

    loop.train_and_evaluate(FLAGS.config, FLAGS.workdir)


if __name__ == "__main__":
    from dbaf_jax import commands

    # A missing dataset or model directory (any DbafError) ends in one `error:` line, exit 1.
    app.run(lambda argv: commands.run_main(main, argv))
