"""Trains a DBAF stage (or an iFADIT phase).

    python launch.py --config configs/stage1.py[:variants] --workdir W [--config.batch_size=32 ...]

``configs/stage1.py`` and ``configs/stage2.py`` (the design card's names) are DBAF's
stages, whose home is ``configs/dbaf/``: ``configs/dbaf/stage1.py`` is the same config;
``configs/ifadit/phases.py`` is iFADIT's. A config file that is not there ends in one
line naming it and the known configs.

The config file's ``get_config(variants)`` gives every hyperparameter; any field can
be overridden on the command line, written ``--config.FIELD=VALUE`` (a boolean needs
the ``=``: ``--config.data.synthetic=False``). An argument the launcher does not use
is refused. The run's full configuration is stored in W/config.json; re-running the
same command resumes from the workdir's latest checkpoint, and resuming with another
configuration is refused (naming the fields that differ) unless --allow_config_change,
which logs the change to W/config_history.jsonl. On a multi-host pod pass
--distributed on every host.
"""

import os
from typing import Sequence

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
    "Experiment config file (configs/stage1.py, configs/stage2.py or configs/<method>/*.py, "
    "[:variants], e.g. configs/stage1.py:tiny).",
    lock_config=True,
)
flags.mark_flags_as_required(["config"])


def config_argument(argv: Sequence[str]) -> str | None:
    """--config's value as absl reads it (``--config=V`` or ``--config V``, one dash or
    two, before a bare ``--``); None when it is not given."""
    for index, arg in enumerate(argv[1:], start=1):
        if arg == "--":
            return None
        name, equals, value = arg.lstrip("-").partition("=")
        if name != "config" or not arg.startswith("-"):
            continue
        if equals:
            return value
        return argv[index + 1] if index + 1 < len(argv) else None
    return None


def require_config_file(argv: Sequence[str]) -> None:
    """ConfigError naming --config's file and the known configs when that file is not
    there: ml_collections would defer the failure to a traceback at the first use."""
    from dbaf_jax.core.errors import ConfigError

    value = config_argument(argv)
    if value is None:
        return  # absl's own message says --config is required
    path = value.split(":", 1)[0]
    if not os.path.isfile(path):
        import configs

        known = ", ".join(os.path.relpath(known) for known in configs.config_files())
        raise ConfigError(
            f"{path}: no such config file; the configs: {known} (variants as FILE:name)"
        )


def parse_flags(argv: Sequence[str]) -> list[str]:
    """absl's flag parsing, after `require_config_file` (one ``error:`` line, exit 1)."""
    from dbaf_jax import commands

    commands.run_main(require_config_file, argv)
    return app.parse_flags_with_usage(argv)


def main(argv):
    from dbaf_jax.core.errors import ConfigError

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
    app.run(lambda argv: commands.run_main(main, argv), flags_parser=parse_flags)
