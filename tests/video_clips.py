"""The clips of the video tests (fixtures/clips.py, one home for them and the video benchmarks),
and `reencode`, a clip's frames through the runner's encoder unchanged."""

from pathlib import Path

from dbaf_jax.video import clip
from fixtures.clips import HEIGHT, WIDTH, pan_frames, write_clip

__all__ = ["HEIGHT", "WIDTH", "pan_frames", "reencode", "write_clip"]


def reencode(
    source: Path, target: Path, encoding: clip.Encoding = clip.Encoding(), tags=None
) -> Path:
    """Writes every frame of ``source`` unchanged into ``target`` through `clip.Writer`
    (``encoding``, the container tags ``tags``), as the runner writes its outputs."""
    info = clip.probe(source)
    writer = clip.Writer(
        source, target, clip.muxer(target), info, encoding, encoding.codec_for(target), tags
    )
    for frame in clip.frames(source, info):
        writer.write(frame.pixels, frame.pts)
    writer.finish()
    return target
