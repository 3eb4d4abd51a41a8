"""What one clip sidecar can make recovery do (dbaf_jax/video/sidecar.py): bounded by the
clip's pixels with the photos' rules (faces per frame by area, no two overlapping, none
tiny or outside the frame), and refused by its size against what the clip can hold
before it is parsed; a tag that inflates to 1 GiB costs a few hundred MB at most."""

import base64
import json
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

from dbaf_jax import keys, metadata
from dbaf_jax.errors import InputError
from dbaf_jax.video import clip, runner, sidecar
from dbaf_jax.video.settings import ClipRunSettings
from tests.invertible_double import double_with_mtcnn
from tests.video_clips import HEIGHT, WIDTH, pan_frames, reencode, write_clip

SIZE = 64
FRAMES = 6
BATCH = ClipRunSettings(batch_size=4)


def at(x, y, side=40.0):
    """The transform of a ``side`` px face centred at (x, y) (crops of SIZE)."""
    scale = SIZE / side
    return np.array([[scale, 0, SIZE / 2 - scale * x], [0, scale, SIZE / 2 - scale * y]])


def data(tracks, frames=FRAMES):
    """Sidecar content for a WIDTH x HEIGHT clip; ``tracks`` as (number, first, transforms)."""
    made = metadata.anonymization(keys.KeyRecord(salt="ab" * keys.SALT_BYTES), "0123456789abcdef")
    return sidecar.content(
        made,
        (HEIGHT, WIDTH),
        frames,
        SIZE,
        [(n, first, np.stack(stack)) for n, first, stack in tracks],
    )


def grid():
    """The most faces `metadata.max_recorded_faces` lets one frame hold (one per 32x32 px):
    32 px faces 30 px apart, the first of them in rows."""
    cells = [(x + 16, y + 16) for y in range(0, HEIGHT - 16, 30) for x in range(0, WIDTH - 16, 30)]
    return cells[: metadata.max_recorded_faces((HEIGHT, WIDTH))]


def test_the_densest_sidecar_the_area_allows_is_accepted_and_one_more_face_is_not():
    cells = grid()
    dense = data([(i, 0, [at(x, y, 32.0)] * FRAMES) for i, (x, y) in enumerate(cells)])
    assert len(sidecar.check(dense).tracks) == len(cells) == WIDTH * HEIGHT // 32**2
    one_more = data(
        [(i, 0, [at(x, y, 32.0)] * FRAMES) for i, (x, y) in enumerate(cells)]
        + [(len(cells), 2, [at(300, 220, 32.0)])]
    )
    with pytest.raises(
        ValueError,
        match=rf"frame 2 holds {len(cells) + 1} faces, more than the {len(cells)} a 320x240 frame can",
    ):
        sidecar.check(one_more)


@pytest.mark.parametrize(
    "tracks, words",
    [
        (
            [(0, 0, [at(100, 100)] * FRAMES), (1, 3, [at(105, 100)] * 3), (2, 4, [at(100, 104)])],
            r"track 0 overlaps 2 other tracks on frame 4, track 1 among them \(at most 2 faces at one place",
        ),
        (
            [(n, 0, [at(100, 100)] * FRAMES) for n in range(1000)],
            "holds 1000 faces",
        ),  # the hostile trial's sidecar, per frame
        ([(0, 0, [at(100, 100, side=4.0)])], "track 0 on frame 0 is 4.0 px, below the 8 px"),
        ([(0, 0, [at(100, 100), at(400, 100)])], "track 0 on frame 1 is centred outside the frame"),
        ([(0, 0, [at(100, 100) * 1e10])], r"within \+-1e\+09"),
    ],
)
def test_a_crafted_sidecar_is_refused_naming_the_track_and_frame(tracks, words):
    with pytest.raises(ValueError, match=words):
        sidecar.check(data(tracks))


def test_two_tracks_on_one_face_are_accepted():
    """What honest clips hold: a track's interpolated frames under another track's
    one-frame detection of the same face (a pan over office5.jpg)."""
    assert (
        len(sidecar.check(data([(0, 0, [at(100, 100)] * FRAMES), (1, 3, [at(105, 100)])])).tracks)
        == 2
    )


def test_a_sidecar_file_longer_than_the_clip_can_hold_is_refused_before_it_is_read(
    tmp_path, monkeypatch
):
    limit = sidecar.max_bytes((HEIGHT, WIDTH), FRAMES)
    assert limit == sidecar.FIXED_BYTES + FRAMES * 75 * sidecar.BYTES_PER_FACE
    honest = data([(0, 0, [at(100, 100)] * FRAMES)])
    path = sidecar.write(tmp_path / "a.mp4.dbaf.json", honest, overwrite=False)
    assert sidecar.read(path, limit).tracks[0][0] == 0
    dense = data([(i, 0, [at(x, y, 32.0)] * FRAMES) for i, (x, y) in enumerate(grid())])
    assert (
        len(json.dumps(dense, separators=(",", ":"))) < limit
    )  # the densest honest sidecar fits its bound
    path.write_bytes(path.read_bytes() + b" " * limit)
    monkeypatch.setattr(
        json, "loads", lambda *a, **k: pytest.fail("parsed before its size was checked")
    )
    with pytest.raises(
        InputError,
        match=rf"a sidecar of {limit + len(json.dumps(honest, separators=(',', ':')))} bytes is more than",
    ):
        sidecar.read(path, limit)


def bomb(inflated: int) -> str:
    """A tag of zlib-compressed JSON whitespace that inflates to ``inflated`` bytes."""
    pack, chunk = zlib.compressobj(9), b" " * (1 << 20)
    parts = [pack.compress(chunk) for _ in range(inflated // len(chunk))] + [pack.flush()]
    return base64.b64encode(b"".join(parts)).decode()


def test_a_tag_is_refused_by_its_compressed_then_its_inflated_size():
    limit = sidecar.max_bytes((HEIGHT, WIDTH), FRAMES)
    big = base64.b64encode(np.random.default_rng(0).bytes(limit + 2 * sidecar.ZLIB_SLACK)).decode()
    with pytest.raises(InputError, match="more than a sidecar this clip can hold"):
        sidecar.from_tag(big, "x.mp4", limit)
    with pytest.raises(InputError, match=f"over {limit} bytes once decompressed"):
        sidecar.from_tag(bomb(64 << 20), "x.mp4", limit)


PEAK = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    from dbaf_jax.errors import InputError
    from dbaf_jax.video import runner
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        runner.recover_video(None, None, "pw", Path(sys.argv[1]), Path(sys.argv[2]))
    except InputError as err:
        print(err)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
""")


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_clip_whose_tag_inflates_to_a_gib_is_refused_within_a_few_hundred_mb(tmp_path, suffix):
    """The hostile trial's clip: a 1.4 MB tag of zlib-compressed JSON whitespace that
    inflates to 1 GiB, in a short clip without a sidecar file; recover_video refuses it
    before parsing, its peak memory growing by at most 200 MB (it grew 6.6 GB before)."""
    source = write_clip(tmp_path / "pan.mp4", pan_frames(FRAMES), audio_streams=0)
    tagged = reencode(source, tmp_path / f"hostile{suffix}", tags={sidecar.TAG: bomb(1 << 30)})
    assert (
        len(clip.read_tag(tagged, sidecar.TAG)) > 1_000_000 and clip.packet_count(tagged) == FRAMES
    )
    result = subprocess.run(
        [sys.executable, "-c", PEAK, str(tagged), str(tmp_path / f"out{suffix}")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    message, grown_mb = result.stdout.splitlines()
    assert (
        message.startswith(f"{tagged}: the sidecar in the container's metadata cannot be decoded")
        and "can hold" in message
    ), message
    assert int(grown_mb) < 200, grown_mb
    assert not (tmp_path / f"out{suffix}").exists()


def test_anonymize_says_when_its_own_sidecar_breaks_the_bounds(tmp_path, monkeypatch):
    """A crowd denser than the bounds allow (here: a bound of one face per frame, and a
    clip with several) is anonymized, and the run says that recover_video will refuse
    its sidecar, naming why."""
    double, faces = double_with_mtcnn(tmp_path)
    source = write_clip(tmp_path / "pan.mp4", pan_frames(3, travel=0.3), audio_streams=0)
    monkeypatch.setattr(metadata, "max_recorded_faces", lambda shape: 1)
    report = runner.anonymize_video(double, faces, "pw", source, tmp_path / "anon.mp4", BATCH)
    assert report.tracks >= 2 and (tmp_path / "anon.mp4").exists()
    (note,) = [note for note in report.notes if "breaks the bounds" in note]
    assert "more than the 1 a 320x240 frame can" in note and "cannot be recovered" in note, note
