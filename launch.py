"""Trains a DBAF stage.

    python launch.py --config configs/dbaf/stage1.py[:variants] --workdir W [--config.batch_size=32 ...]

The config file's ``get_config(variants)`` gives every hyperparameter; any field can
be overridden on the command line, written ``--config.FIELD=VALUE`` (a boolean needs
the ``=``: ``--config.data.synthetic=False``). An argument the launcher does not use
is refused. The run's full configuration is stored in W/config.json; re-running the
same command resumes from the workdir's latest checkpoint, and resuming with another
configuration is refused (naming the fields that differ) unless --allow_config_change,
which logs the change to W/config_history.jsonl. On a multi-host pod pass
--distributed on every host.
"""

from absl import app, flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and samples.", required=True
)
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() first (multi-host).")
flags.DEFINE_bool(
    "allow_config_change",
    False,
    "Resume a workdir with a configuration other than the stored one (logged to W/config_history.jsonl).",
)
config_flags.DEFINE_config_file(
    "config",
    None,
    "Experiment config file (configs/<method>/*.py[:variants], e.g. configs/dbaf/stage1.py:tiny).",
    lock_config=True,
)
flags.mark_flags_as_required(["config"])


def main(argv):
    from dbaf_jax.errors import ConfigError

    if len(argv) > 1:
        # absl reads `--config.data.synthetic False` as "set True" plus a stray word `False`.
        raise ConfigError(
            f"unused argument(s) {' '.join(argv[1:])}: write each override as --config.FIELD=VALUE "
            "(e.g. --config.data.synthetic=False)"
        )
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO; -v 0 shows it
    import jax

    if FLAGS.distributed:
        jax.distributed.initialize()
    from dbaf_jax.train import loop, run_config

    if jax.process_index() == 0:
        run_config.check_and_store(
            FLAGS.workdir, FLAGS.config, FLAGS.allow_config_change, "--allow_config_change"
        )
    loop.train_and_evaluate(FLAGS.config, FLAGS.workdir)


if __name__ == "__main__":
    from dbaf_jax import commands

    # A missing dataset or model directory (any DbafError) ends in one `error:` line, exit 1.
    app.run(lambda argv: commands.run_main(main, argv))
