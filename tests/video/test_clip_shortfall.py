"""A clip that decodes fewer frames than its container declares (cut off: the decoder
ends it quietly) is noticed (`clip.shortfall`), by frame count or by duration."""

from dbaf_jax.video import clip
from tests.video_clips import pan_frames, write_clip


def decoded(path):
    info = clip.probe(path)
    frames = list(clip.frames(path, info))
    return info, len(frames), frames[0].pts, frames[-1].pts


def test_whole_clips_are_not_short_and_a_cut_one_is(tmp_path):
    frames = pan_frames(24)
    mp4 = write_clip(tmp_path / "whole.mp4", frames, audio_streams=0)
    mkv = write_clip(tmp_path / "whole.mkv", frames, audio_streams=0, format="matroska")
    for path in (mp4, mkv):
        info, count, first, last = decoded(path)
        assert count == 24 and clip.shortfall(path, info, count, first, last) is None
    assert (
        clip.probe(mp4).declared_frames == 24 and clip.probe(mkv).declared_frames is None
    )  # Matroska gives a duration
    cut = tmp_path / "cut.mkv"
    data = mkv.read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    info, count, first, last = decoded(cut)
    assert 0 < count < 24
    note = clip.shortfall(cut, info, count, first, last)
    assert (
        note.startswith(f"{cut}: decoded {count} frame(s)")
        and "2.00 s its container declares" in note
    )
    # By count: a container that declares 24 frames of which 20 decoded.
    assert "of the 24 its container declares" in clip.shortfall(mp4, clip.probe(mp4), 20, 0, 19)
