"""What a user sets for a clip's run (the video commands' options, and a folder run's
clips with the video commands' defaults for tracking and encoding): one frozen object,
built once from the command line (`dbaf_jax.commands`) and carried whole in the run
(`inference.run.Run`) that `runner.anonymize_video` and `runner.recover_video` take.
"""

from __future__ import annotations

import dataclasses

from dbaf_jax.inference.settings import RunSettings
from dbaf_jax.video import clip, tracks


@dataclasses.dataclass(frozen=True)
class ClipRunSettings(RunSettings):
    """`RunSettings` and the output's encoding, the sigma in frames of the landmarks'
    smoothing along each track (0: none), and, for recovery with a key file but neither
    sidecar nor face ledger, whether every face found again is recovered (``redetect``)."""

    encoding: clip.Encoding = clip.Encoding()
    sigma: float = tracks.DEFAULT_SIGMA
    redetect: bool = False

    @classmethod
    def of_run(cls, settings: RunSettings) -> ClipRunSettings:
        """A clip run's settings: ``settings`` when they are a clip run's, else (a folder
        run's clips, the web page's) their common part with the video commands' defaults
        for the rest."""
        return settings if isinstance(settings, cls) else cls(**settings.common())
