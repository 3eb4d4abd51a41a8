"""Recovery of a clip that lost its sidecar (dbaf_jax/video/track_ledger.py), end to end
with the real MTCNN: the invertible test double (tests/invertible_double.py) anonymizes
a pan over a group photo with a key file, the clip is shared re-encoded (no tags, no
sidecar file), and recovery with the key file alone restores the tracks the face ledger
verifies and changes nothing outside the anonymized faces; the never-anonymized clip
is left as it was."""

import dataclasses

import numpy as np
import pytest
from scipy.ndimage import binary_dilation

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import ledger, ledger_match, paste
from dbaf_jax.inference.run import Model, Run
from dbaf_jax.storage import keys
from dbaf_jax.video import clip, runner, sidecar, track_ledger
from dbaf_jax.video.settings import ClipRunSettings
from tests.invertible_double import double_with_mtcnn
from tests.video_clips import pan_frames, reencode, write_clip

PASSWORD = "clip ledger"
FRAMES = 10
BATCHED = ClipRunSettings(batch_size=4)
LOSSLESS = clip.Encoding(
    crf=0
)  # the recovered clip's pixels are compared, not the encoder's choices
MARGIN = 4  # pixels: how far a changed pixel reaches through yuv420p's chroma


def decoded(path):
    return np.stack([f.pixels.astype(np.float64) for f in clip.frames(path, clip.probe(path))])


def as_recovery_encodes(source, target):
    """``source``'s frames through the recovery's encoder and nothing else: what a frame
    whose pixels recovery did not change decodes to."""
    return decoded(reencode(source, target, LOSSLESS))


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clip_ledger")
    double, faces = double_with_mtcnn(tmp)
    write_clip(tmp / "pan.mp4", pan_frames(FRAMES, travel=0.5), audio_streams=0)
    record = keys.KeyRecord(salt="6b" * keys.SALT_BYTES)
    keys.write_key_file(tmp / "me.key", record)
    anonymize = Run.start(
        "anonymize", PASSWORD, Model(double, {"anonymize": faces}), BATCHED, tmp / "me.key"
    )
    anonymized = runner.anonymize_video(anonymize, tmp / "pan.mp4", tmp / "anon.mp4")
    shared = write_clip(
        tmp / "shared.mp4", decoded(tmp / "anon.mp4").astype(np.uint8), audio_streams=0
    )
    entries = ledger.read(ledger.ledger_path(tmp / "me.key"))
    lossless = dataclasses.replace(BATCHED, encoding=LOSSLESS)
    recover = Run(
        "recover", double, faces, PASSWORD, record, face_ledger=entries, settings=lossless
    )
    recovered = runner.recover_video(recover, shared, tmp / "back.mkv")
    control = runner.recover_video(recover, tmp / "pan.mp4", tmp / "control.mkv")
    return tmp, anonymized, recovered, control, entries


def test_anonymize_with_a_key_file_writes_the_tracks_entries(ws):
    tmp, anonymized, _, _, entries = ws
    side = sidecar.read(sidecar.path_for(tmp / "anon.mp4"))
    assert anonymized.tracks >= 2 and len({entry.clip for entry in entries}) == 1
    expected = {
        (number, first + offset)
        for number, first, stack in side.tracks
        for offset in track_ledger.sampled_offsets(
            len(stack), float(clip.probe(tmp / "pan.mp4").rate)
        )
    }
    assert {(entry.index, entry.frame) for entry in entries} == expected
    assert all(entry.separation > 0 for entry in entries)


def test_the_shared_copy_is_recovered_where_it_was_anonymized_only(ws):
    """Verified tracks are restored (error to the original at least halved within the
    discs the ledger lets recovery change; measured 39.4 -> 15.4); away from the
    anonymized faces every pixel is the shared copy's."""
    tmp, anonymized, recovered, _, _ = ws
    assert clip.read_tag(tmp / "shared.mp4", sidecar.TAG) is None
    assert recovered.faces > 0 and recovered.tracks - recovered.unverified >= 2
    side = sidecar.read(sidecar.path_for(tmp / "anon.mp4"))
    inside = np.zeros((FRAMES, *side.shape), bool)
    for _, first, stack in side.tracks:
        for offset, transform in enumerate(stack):
            inside[first + offset] |= _covered(side.shape, transform, side.size)
    original, shared, back = (
        decoded(tmp / "pan.mp4"),
        decoded(tmp / "shared.mp4"),
        decoded(tmp / "back.mkv"),
    )
    discs = np.zeros_like(inside)  # what the ledger lets recovery change
    yy, xx = np.mgrid[: side.shape[0], : side.shape[1]]
    for _, first, stack in side.tracks:
        for offset, transform in enumerate(stack):
            _, (cx, cy), width = ledger_match.place(side.shape, transform, side.size)
            discs[first + offset] |= (
                np.hypot(xx - cx * side.shape[1], yy - cy * side.shape[1])
                <= ledger_match.RECOVERY_RADIUS * width * side.shape[1]
            )
    assert np.abs(back - original)[discs].mean() < 0.5 * np.abs(shared - original)[discs].mean()
    # Outside (with a margin for yuv420p's chroma filter) the frames are the shared copy's exactly.
    near = binary_dilation(inside, np.ones((1, 2 * MARGIN + 1, 2 * MARGIN + 1), bool))
    unchanged = as_recovery_encodes(tmp / "shared.mp4", tmp / "shared_lossless.mkv")
    np.testing.assert_array_equal(back[~near], unchanged[~near])


def _covered(shape, transform, size):
    """(H, W) bool: the pixels a face's paste at ``transform`` may change (its box mask's support)."""
    layer = paste.paste(
        np.zeros((*shape, 3), np.uint8),
        np.ones((size, size, 3), np.float32),
        paste.box_mask(size),
        transform,
    )
    return layer[..., 0] > 0


def test_a_clip_never_anonymized_is_left_as_it_was(ws):
    """The original clip, recovered with the key file and its ledger: its faces are found
    and tracked, none matches the ledger, and no face is touched."""
    tmp, _, _, control, _ = ws
    assert control.tracks >= 2 and control.unverified == control.tracks and control.faces == 0
    assert control.notes == [
        f"{tmp / 'pan.mp4'}: no face found again matched the key file's face ledger; the clip was re-encoded unchanged"
    ]
    np.testing.assert_array_equal(
        decoded(tmp / "control.mkv"), as_recovery_encodes(tmp / "pan.mp4", tmp / "pan_lossless.mkv")
    )


def test_the_anonymized_place_is_exact_at_entries_and_follows_the_redetected_motion_between():
    """A re-detected track (here pure translation by 1 px a frame, 10 px right of the
    ledger's places) is moved onto the entries at their frames, and between them by the
    offset interpolated: the motion is the re-detection's, the bias removed."""
    size, shape = 64, (120, 200)
    stack = np.stack(
        [np.array([[1.0, 0, -(40 + f)], [0, 1, -30]]) for f in range(12)]
    )  # crops at x = 40 + f
    _, (cx, cy), side = ledger_match.place(shape, stack[0], size)
    sig = np.zeros(ledger.GRID * ledger.GRID * 3)

    def entry(frame, shift):
        return ledger.Entry(
            1,
            shape[1] / shape[0],
            (cx + (frame + shift) / shape[1], cy),
            side,
            sig,
            0.2,
            "ab",
            frame,
        )

    places = track_ledger._anchored([entry(2, -10), entry(8, -12)], 0, stack, 0, 11, size, shape)
    x = [round(place.centre[0] * shape[1] - cx * shape[1], 6) for place in places]
    assert x == [-10, -9, -8, -7.333333, -6.666667, -6, -5.333333, -4.666667, -4, -3, -2, -1]
    assert all(np.isclose(place.side, side) and place.frame == f for f, place in enumerate(places))
    assert track_ledger.sampled_offsets(1, 12) == [0]
    assert track_ledger.sampled_offsets(14, 12) == [0, 6, 12, 13]


def _entry(index, x, frame=3, run="ab", side=0.1):
    return ledger.Entry(index, 4 / 3, (x, 0.3), side, np.zeros(ledger.GRID**2 * 3), 0.2, run, frame)


@pytest.mark.parametrize(
    "entries, words",
    [
        (
            [_entry(i, 0.5) for i in range(1000)],
            "run ab, frame 3: 1000 faces, more than the 75 a 320x240 frame can hold",
        ),
        (
            [_entry(0, 0.2), _entry(1, 0.21), _entry(2, 0.205), _entry(3, 0.195)],
            "key index 0 overlaps 3 other entries, key index 1 among them",
        ),
        ([_entry(0, 0.2), _entry(0, 0.6)], "a track \\(key index\\) has two entries"),
        ([_entry(0, 0.2, side=0.01)], "below the 8 px"),
        ([_entry(0, 1.5)], "centred outside the frame"),
    ],
)
def test_a_crafted_clip_ledger_is_refused_by_the_sidecars_rules(entries, words):
    """The clip entries of a face ledger buy crops and signatures: one run's entries on
    one frame are held to the frame's area, no overlaps and one per track."""
    with pytest.raises(InputError, match=words):
        track_ledger.check_entries(entries, (240, 320))
    honest = [
        _entry(0, 0.2),
        _entry(1, 0.6),
        _entry(2, 0.61),
        _entry(0, 0.2, run="cd"),
        _entry(0, 0.2, frame=4),
    ]
    track_ledger.check_entries(honest, (240, 320))  # other runs and frames may repeat a place
