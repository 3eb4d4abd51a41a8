"""What one clip sidecar can make recovery do (dbaf_jax/video/sidecar.py): bounded by the
clip's pixels with the photos' rules (faces per frame by area, no two overlapping, none
tiny or outside the frame), and refused by its size against what the clip's pixels can
hold before it is parsed; a tag that inflates to 1 GiB costs a few MB, also in a clip
of thousands of cheap black frames; our own honest sidecars fit their bounds."""

import base64
import json
import subprocess
import sys
import textwrap
import zlib

import av
import numpy as np
import pytest

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import metadata, places
from dbaf_jax.storage import keys
from dbaf_jax.video import clip, sidecar
from tests.video_clips import HEIGHT, WIDTH, pan_frames, reencode, write_clip

SIZE = 64
FRAMES = 6


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
    """The most faces `places.max_recorded_faces` lets one frame hold (one per 32x32 px):
    32 px faces 30 px apart, the first of them in rows."""
    cells = [(x + 16, y + 16) for y in range(0, HEIGHT - 16, 30) for x in range(0, WIDTH - 16, 30)]
    return cells[: places.max_recorded_faces((HEIGHT, WIDTH))]


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
            [
                (0, 0, [at(100, 100)] * FRAMES),
                (1, 3, [at(105, 100)] * 3),
                (2, 4, [at(100, 104)]),
                (3, 4, [at(97, 98)]),
            ],
            r"track 0 overlaps 3 other tracks on frame 4, track 1 among them \(at most 3 faces at one place",
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


def test_three_tracks_at_one_place_are_accepted():
    """What honest clips hold: a track's interpolated frames crossing another face, a
    crowd's faces partly behind each other (tests/video/test_recoverable.py)."""
    tracks = [(0, 0, [at(100, 100)] * FRAMES), (1, 3, [at(105, 100)]), (2, 3, [at(100, 104)])]
    assert len(sidecar.check(data(tracks)).tracks) == 3


def test_a_sidecar_file_longer_than_the_clip_can_hold_is_refused_before_it_is_read(
    tmp_path, monkeypatch
):
    limit = sidecar.max_bytes((HEIGHT, WIDTH), FRAMES)
    faces = FRAMES * HEIGHT * WIDTH // places.FACE_AREA_PER_FACE
    assert faces == FRAMES * 75
    assert limit == sidecar.FIXED_BYTES + faces * (sidecar.BYTES_PER_FACE + sidecar.BYTES_PER_TRACK)
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
    from dbaf_jax.core.errors import InputError
    from dbaf_jax.inference.run import Run
    from dbaf_jax.video import runner
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        runner.recover_video(Run("recover", None, None, "pw"), Path(sys.argv[1]), Path(sys.argv[2]))
    except InputError as err:
        print(err)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
""")


@pytest.mark.slow  # inflates a GiB tag chunk by chunk: 13-14 s per container
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


def test_the_densest_sidecar_of_one_face_tracks_fits_its_bound():
    """The longest sidecar `check` takes for a clip: every face the area allows on every
    frame, each a track of its own, every number at its longest: its JSON fits
    `max_bytes` (the bound refuses nothing honest)."""
    most = places.max_recorded_faces((HEIGHT, WIDTH))
    cells = grid()
    worst = -123456789.123456  # 17 characters, near the transforms' bound
    tracks = [
        (first * most + i, first, [at(x, y, 32.0)])
        for first in range(FRAMES)
        for i, (x, y) in enumerate(cells)
    ]
    content = data(tracks)
    for track in content["tracks"]:
        track["transforms"] = [[worst] * 6 for _ in track["transforms"]]
    text = sidecar.text(content)
    assert len(sidecar.check(data(tracks)).tracks) == FRAMES * most
    assert len(text) <= sidecar.max_bytes((HEIGHT, WIDTH), FRAMES), (
        len(text),
        sidecar.max_bytes((HEIGHT, WIDTH), FRAMES),
    )


def cheap_clip(path, frames: int, tag: str) -> None:
    """``frames`` black 1024x1024 frames (a few dozen bytes each in H.264) in an MP4
    carrying ``tag`` as its sidecar."""
    with av.open(str(path), "w", format="mp4", options={"movflags": "use_metadata_tags"}) as out:
        out.metadata[sidecar.TAG] = tag
        video = out.add_stream("libx264", rate=25)
        video.width = video.height = 1024
        video.pix_fmt = "yuv420p"
        video.options = {"preset": "ultrafast"}
        black = av.VideoFrame(1024, 1024, "yuv420p")
        for plane, value in zip(black.planes, (16, 128, 128)):
            plane.update(bytes([value]) * plane.buffer_size)
        for pts in range(frames):
            black.pts = pts
            out.mux(video.encode(black))
        out.mux(video.encode(None))


@pytest.mark.slow  # encodes 5500 frames of 1024x1024 (about 20 s)
def test_a_gib_tag_in_a_clip_of_cheap_frames_is_refused_before_it_is_inflated(tmp_path):
    """The hostile trial's second clip: 5500 black 1024x1024 frames (1.6 MB) carrying a
    1.4 MB tag that inflates to 1 GiB. The clip's pixels hold at most a
    `sidecar.max_bytes` sidecar, under 1 GiB; the tag's length is counted as it inflates,
    without holding it, and refused before it is parsed: peak memory grows by a few MB
    (it grew 2 GB and took 27 s before, the whole GiB parsed)."""
    clip_path = tmp_path / "cheap.mp4"
    cheap_clip(clip_path, 5500, bomb(1 << 30))
    assert clip_path.stat().st_size < 2_000_000 and clip.packet_count(clip_path) == 5500
    limit = sidecar.max_bytes((1024, 1024), 5500)
    assert limit < 1 << 30
    result = subprocess.run(
        [sys.executable, "-c", PEAK, str(clip_path), str(tmp_path / "out.mp4")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    message, grown_mb = result.stdout.splitlines()
    assert message == (
        f"{clip_path}: the sidecar in the container's metadata cannot be decoded (over {limit} bytes once "
        "decompressed, more than this clip's sidecar can take)"
    ), message
    assert int(grown_mb) < 100, grown_mb
