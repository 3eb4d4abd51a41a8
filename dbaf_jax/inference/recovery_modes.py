"""Which recovery a run uses: the mode asked for (aligned crops: image or latent), else
the one the model was trained for (``model.json``); photos and clips recover from the
image. A mode the model was not trained for gives faces that are not the originals, so
every recovering command (recover, recover_video, the web page) runs it only when asked
(``--untrained-mode``), with a warning.
"""

from __future__ import annotations

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.inference.anonymizer import FaceAnonymizer

RECOVERY_MODES = ("image", "latent")
UNTRAINED_FLAG = "--untrained-mode"


def recovery_mode(
    anonymizer: FaceAnonymizer, asked: str | None, aligned: bool, untrained: bool
) -> tuple[str, str, str | None]:
    """(mode, a note saying which and why, a warning or None): the mode asked for, else
    the one the model was trained for (aligned crops; photos and clips: image). A mode
    the model was not trained for runs only with ``untrained`` (and the warning), else
    ConfigError naming `UNTRAINED_FLAG`."""
    trained = anonymizer.trained_recovery
    mode = asked or (trained if aligned and trained in RECOVERY_MODES else "image")
    warning = None
    if trained is not None and mode != trained:
        what = "no recovery" if trained == "none" else f"{trained} recovery"
        message = f"{anonymizer.model_dir} was trained for {what}, not {mode} recovery"
        if not untrained:
            raise ConfigError(
                f"{message}; its {mode} recoveries would not be the original faces (pass {UNTRAINED_FLAG} to run it anyway)"
            )
        warning = f"{message}: {UNTRAINED_FLAG} runs it anyway, and its results will not be the original faces"
    source = (
        "as asked"
        if asked
        else "the mode the model was trained for"
        if mode == trained
        else "photos and clips recover from the image"
    )
    return mode, f"recovery mode: {mode} ({source})", warning
