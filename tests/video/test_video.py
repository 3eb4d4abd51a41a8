"""Reversible video (dbaf_jax/video, the anonymize_video and recover_video commands) on
a short clip panning and zooming over a group photo (tests/video_clips.py), with the
real MTCNN and the tempered tiny DBAF model of the photo tests. The end-to-end tests
share one anonymization and its recoveries (module fixtures); the tracker, smoothing,
sidecar and I/O tests need no model."""

import base64
import os
import subprocess
import sys
import time
import types
import zlib
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from dbaf_jax import commands
from dbaf_jax.commands import anonymize_video, recover_video
from dbaf_jax.core.errors import InputError, OutputExistsError
from dbaf_jax.faces import align, ledger, paste
from dbaf_jax.faces.detectors.base import Detections
from dbaf_jax.inference.anonymizer import FaceAnonymizer, load_photo_faces
from dbaf_jax.inference.programs import pad_batch
from dbaf_jax.inference.run import Run
from dbaf_jax.storage import keys
from dbaf_jax.video import clip, passes, runner, sidecar, tracks
from dbaf_jax.video.settings import ClipRunSettings
from tests.cli_helpers import PASSWORD, photo_model, run_command
from tests.video_clips import HEIGHT, WIDTH, pan_frames, reencode, write_clip

FRAMES = 12
GAP = 6  # a blank frame: every track misses it
BATCH = 4
CRF = 10  # the encoder's changes stay under a mean of 2 levels outside the faces


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("video")
    photo_model(tmp)
    frames = pan_frames(
        FRAMES, travel=0.5
    )  # faces move ~10 px a frame: ByteTrack links them across the gap
    frames[GAP] = np.full_like(frames[GAP], 128)
    write_clip(tmp / "pan.mp4", frames)
    keys.write_key_file(tmp / "fixed.key", keys.KeyRecord(salt="5a" * keys.SALT_BYTES))
    return tmp


def cli(command, ws, source, target, password="password.txt", *extra):
    # The tiny model records latent recovery; clips recover from the image (recover_video --untrained-mode).
    untrained = ("--untrained-mode",) if command is recover_video else ()
    return run_command(
        command, ws, source, target, password, "--batch-size", str(BATCH), *untrained, *extra
    )


@pytest.fixture(scope="module")
def anonymized(ws):
    return cli(
        anonymize_video,
        ws,
        ws / "pan.mp4",
        ws / "anon.mp4",
        "password.txt",
        "--key-file",
        str(ws / "fixed.key"),
        "--crf",
        str(CRF),
    )


@pytest.fixture(scope="module")
def recovered(ws, anonymized):
    return cli(
        recover_video, ws, ws / "anon.mp4", ws / "right.mkv", "password.txt", "--crf", str(CRF)
    )


def decoded(path):
    info = clip.probe(path)
    return np.stack([f.pixels.astype(np.float64) for f in clip.frames(path, info)])


def face_masks(side: sidecar.Sidecar) -> np.ndarray:
    """(F, H, W) weight of the pasted faces in each frame, from the sidecar's transforms."""
    masks = np.zeros((side.frames, *side.shape))
    box = paste.box_mask(side.size)
    ones = np.ones((side.size, side.size, 3), np.float32)
    for _, first, stack in side.tracks:
        for offset, transform in enumerate(stack):
            layer = (
                paste.paste(np.zeros((*side.shape, 3), np.uint8), ones, box, transform)[..., 0]
                / 255.0
            )
            masks[first + offset] = np.maximum(masks[first + offset], layer)
    return masks


def audio_packets(path):
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(container.streams.audio[0]) if p.size]


@pytest.mark.slow  # shares the module's ~2 min of model conversion, detection and compilation
def test_anonymize_keeps_the_clip_and_changes_only_faces(ws, anonymized):
    source, out = clip.probe(ws / "pan.mp4"), clip.probe(ws / "anon.mp4")
    assert (out.width, out.height, out.rate, out.audio_streams) == (WIDTH, HEIGHT, source.rate, 1)
    assert audio_packets(ws / "anon.mp4") == audio_packets(ws / "pan.mp4")  # copied, not re-encoded
    with av.open(str(ws / "anon.mp4")) as container:
        assert container.streams.video[0].codec_context.name == "h264"
        assert container.streams.video[0].codec_context.pix_fmt == "yuv420p"
    side = sidecar.read(sidecar.path_for(ws / "anon.mp4"))
    assert side.frames == FRAMES and anonymized.frames == FRAMES
    assert anonymized.tracks >= 2 and len(side.tracks) == anonymized.tracks
    masks = face_masks(side)
    before, after = decoded(ws / "pan.mp4"), decoded(ws / "anon.mp4")
    assert len(after) == FRAMES
    diff = np.abs(after - before).mean(axis=-1)
    assert diff[masks > 0.9].mean() > 20  # faces changed
    assert diff[masks == 0].mean() < 2  # the rest only by the encoder


@pytest.mark.slow  # shares the module's ~2 min of model conversion, detection and compilation
def test_tracks_bridge_a_missed_frame(ws, anonymized):
    """The blank frame has no detection; tracks seen on both sides keep their number
    (and key) across it and are still anonymized there."""
    side = sidecar.read(sidecar.path_for(ws / "anon.mp4"))
    spanning = [n for n, first, stack in side.tracks if first < GAP < first + len(stack) - 1]
    assert spanning, "no track spans the blank frame"
    assert anonymized.interpolated >= len(spanning)
    assert len(side.tracks) == anonymized.tracks  # no new track after the gap


@pytest.mark.slow  # shares the module's ~2 min of model conversion, detection and compilation
def test_recover_with_the_password(ws, anonymized, recovered):
    """Each face is recovered with its own track's key at the recorded place (checked
    against the Python API on one frame per track; random weights do not give the
    original back; a wrong key would give another face there), and nothing outside the
    masks changes but the encoder's rounding."""
    side = sidecar.read(sidecar.path_for(ws / "anon.mp4"))
    masks = face_masks(side)
    after = decoded(ws / "anon.mp4")
    right = decoded(ws / "right.mkv")
    assert np.abs(right - after).mean(axis=-1)[masks > 0.9].mean() > 5  # faces changed
    assert np.abs(right - after).mean(axis=-1)[masks == 0].mean() < 2
    assert recovered.faces == anonymized.faces
    anonymizer = FaceAnonymizer(ws / "model")
    seed = keys.derive_seed(PASSWORD, side.made.record)
    for number, first, stack in side.tracks:
        frame = after[first].astype(np.uint8)
        crop = (
            align.crop(frame, stack[0], side.size)[None].astype(np.float32) / np.float32(127.5) - 1
        )
        face = anonymizer.recover(
            pad_batch(crop, BATCH),
            pad_batch(np.asarray(anonymizer.face_keys(seed, [number])), BATCH),
        )[:1]
        alone = paste.paste(
            np.zeros_like(frame),
            face[0],
            paste.box_mask(face.shape[1]),
            align.scaled(stack[0], face.shape[1] / side.size),
        )
        weight = (
            paste.paste(
                np.zeros_like(frame),
                np.ones_like(face[0]),
                paste.box_mask(face.shape[1]),
                align.scaled(stack[0], face.shape[1] / side.size),
            )[..., 0]
            >= 254
        )
        assert np.abs(right[first][weight] - alone[weight]).mean() < 4, f"track {number}"


@pytest.mark.slow  # needs the module's model
def test_a_model_trained_for_latent_recovery_recovers_clips_only_when_asked(
    ws, anonymized, recovered, tmp_path, capsys
):
    """Clips recover from the image; the tiny model records latent recovery (as converted
    DBAF checkpoints do), so recover_video refuses it in one line naming --untrained-mode,
    as recover does for photos, and with the flag runs it with a warning (`cli` adds it)."""
    capsys.readouterr()
    args = [
        "--model",
        str(ws / "model"),
        "--password-file",
        str(ws / "password.txt"),
        str(ws / "anon.mp4"),
        str(tmp_path / "back.mp4"),
    ]
    assert commands.exit_status(recover_video.main, args) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert (
        line.startswith("error: ") and "was trained for latent recovery, not image recovery" in line
    )
    assert (
        line.endswith("(pass --untrained-mode to run it anyway)")
        and not (tmp_path / "back.mp4").exists()
    )
    cli(recover_video, ws, ws / "anon.mp4", tmp_path / "back.mp4")
    err = capsys.readouterr().err
    assert "warning: " in err and "--untrained-mode runs it anyway" in err
    assert "note: recovery mode: image (photos and clips recover from the image)" in err


@pytest.mark.slow  # needs the module's model
def test_anonymize_video_refuses_its_own_output_unless_asked(ws, anonymized, tmp_path, capsys):
    """The command on its own output: one line naming the clip and the flag, exit 1,
    nothing written; with --allow-anonymized-input it anonymizes it again."""
    capsys.readouterr()
    args = [
        "--model",
        str(ws / "model"),
        "--password-file",
        str(ws / "password.txt"),
        str(ws / "anon.mp4"),
        str(tmp_path / "again.mp4"),
    ]
    assert commands.exit_status(anonymize_video.main, args) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {ws / 'anon.mp4'}: already an output of anonymize"), line
    assert line.endswith("(pass --allow-anonymized-input to anonymize it again)"), line
    assert not list(tmp_path.iterdir())
    report = cli(
        anonymize_video,
        ws,
        ws / "anon.mp4",
        tmp_path / "again.mp4",
        "password.txt",
        "--allow-anonymized-input",
    )
    assert report.written == [tmp_path / "again.mp4", sidecar.path_for(tmp_path / "again.mp4")]


@pytest.mark.slow  # needs the module's model
def test_outputs_are_not_replaced(ws, anonymized):
    with pytest.raises(OutputExistsError):
        cli(anonymize_video, ws, ws / "pan.mp4", ws / "anon.mp4")


@pytest.mark.slow  # needs the module's model
def test_clip_without_faces(ws, anonymized):
    write_clip(ws / "flat.mov", [np.full((HEIGHT, WIDTH, 3), 90, np.uint8)] * 3, audio_streams=0)
    report = cli(anonymize_video, ws, ws / "flat.mov", ws / "flat_out.mov")
    assert report.tracks == 0 and report.faces == 0 and report.notes
    assert clip.probe(ws / "flat_out.mov").audio_streams == 0
    assert len(decoded(ws / "flat_out.mov")) == 3


@pytest.mark.slow  # needs the module's model
def test_truncated_clip_fails_with_one_line(ws, tmp_path):
    data = (ws / "pan.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError, match="cut.mp4"):
        cli(anonymize_video, ws, tmp_path / "cut.mp4", tmp_path / "out.mp4")
    assert not (tmp_path / "out.mp4").exists()
    assert not list(tmp_path.glob(".out.mp4*"))  # no partial output left


# ------------------------------------------------------------------ without a model


def _detections(points_list):
    """Detections of faces given by their landmarks (5, 2), boxes around them."""
    if not points_list:
        return Detections(
            np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros((0, 5, 2), np.float32)
        )
    landmarks = np.asarray(points_list, np.float32)
    boxes = np.concatenate([landmarks.min(1) - 20, landmarks.max(1) + 20], axis=1)
    return Detections(boxes, np.full(len(landmarks), 0.99, np.float32), landmarks)


FACE = np.array([[30, 40], [60, 40], [45, 55], [33, 70], [57, 70]], np.float64)


def test_a_newcomer_changes_nobody_elses_track_and_gaps_are_filled():
    tracker = tracks.Tracker(frame_rate=12)
    for frame in range(10):
        moving = FACE + [2 * frame, 0]
        faces = [] if frame == 4 else [moving]  # frame 4: missed
        if frame >= 6:
            faces.append(FACE + [200, 30])  # someone enters
        tracker.add(_detections(faces))
    found = tracker.tracks()
    assert [t.number for t in found] == [0, 1]
    first, newcomer = found
    assert (first.first, first.last, newcomer.first) == (0, 9, 6)
    assert not first.detected[4] and first.detected.sum() == 9
    np.testing.assert_allclose(first.landmarks[4], FACE + [8, 0], atol=1e-6)  # interpolated


def test_faces_the_model_cannot_take_are_hidden_and_small_ones_counted():
    """As for photos: a detection with landmarks that cannot be aligned is not tracked but
    kept for the fallback, on its frame; one below min_face_size is counted as left."""
    tracker = tracks.Tracker(frame_rate=12, min_face_size=40)
    degenerate = np.full((5, 2), np.nan)
    tiny = FACE * 0.2  # a quad of about 7 px: usable, below the 40 px asked
    for frame in range(3):
        tracker.add(_detections([FACE * 2 + [frame, 0], degenerate if frame == 1 else tiny]))
    assert [t.number for t in tracker.tracks()] == [0]
    assert list(tracker.unusable) == [1] and len(tracker.unusable[1]) == 1
    assert tracker.left == 2


def test_the_fallback_hides_its_boxes_on_their_frames():
    """`passes.processed` pixelates each frame's unusable boxes (here with no face to
    anonymize) and changes nothing else."""

    class Faces:
        size = 64

        def crops(self, pixels, here):
            return np.zeros((0, 64, 64, 3), np.float32)

    rng = np.random.default_rng(0)
    frames = [
        clip.Frame(i, i, rng.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)) for i in range(3)
    ]
    box = np.array([100.0, 60.0, 160.0, 130.0])
    anonymizer = types.SimpleNamespace(padded_size=lambda size: size)
    out = list(
        passes.processed(
            anonymizer, Faces(), iter(frames), passes.FacePass([], {}, None, hidden={1: [box]}), 4
        )
    )
    assert (out[0] == frames[0].pixels).all() and (out[2] == frames[2].pixels).all()
    changed = (out[1] != frames[1].pixels).any(axis=-1)
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 0.5 * 60 * 70  # the face's box, pixelated
    margin = paste.HIDE_MARGIN * 70 + 1  # of the box's longer side
    assert (
        xs.min() >= 100 - margin
        and xs.max() <= 160 + margin
        and ys.min() >= 60 - margin
        and ys.max() <= 130 + margin
    )


def test_smoothing_steadies_a_still_face():
    rng = np.random.default_rng(0)
    jittered = FACE + rng.normal(0, 1.5, (40, 5, 2))
    track = tracks.Track(0, 0, jittered, np.ones(40, bool), np.zeros((40, 4)), np.ones(40, bool))
    raw = tracks.transforms(track, 64, sigma=0)
    smooth = tracks.transforms(track, 64, sigma=tracks.DEFAULT_SIGMA)

    def step(stack):
        return np.abs(np.diff(stack, axis=0)).mean()

    assert step(smooth) < step(raw) / 3


def _sidecar_data():
    made = {
        "dbaf_jax": "0",
        "operation": "anonymize",
        "key": keys.KeyRecord(salt="5a" * keys.SALT_BYTES).to_dict(),
        "model": {"path": "m", "fingerprint": "0" * 16},
    }
    stack = np.stack([align.alignment_transform(FACE, 64)] * 3)
    return sidecar.content(made, (HEIGHT, WIDTH), 5, 64, [(0, 1, stack)])


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda d: d.update(format="x"), "not a dbaf-jax-video"),
        (lambda d: d["tracks"][0].update(first=4), "runs past"),
        (lambda d: d["tracks"][0]["transforms"][0].__setitem__(0, float("nan")), "6 finite"),
        (lambda d: d["tracks"].append(dict(d["tracks"][0])), "repeats"),
        (
            lambda d: d["tracks"][0]["transforms"].__setitem__(1, [0, 0, 1, 0, 0, 1]),
            "not invertible",
        ),
        (lambda d: d["anonymization"]["key"].update(salt="zz"), "salt"),
        (lambda d: d["clip"].update(frames=-1), "clip.frames"),
    ],
)
def test_sidecar_is_checked(tmp_path, spoil, message):
    data = _sidecar_data()
    assert sidecar.check(data).tracks[0][0] == 0
    spoil(data)
    path = tmp_path / "x.mp4.dbaf.json"
    sidecar.write(path, data, overwrite=False)
    with pytest.raises(InputError, match=message):
        sidecar.read(path)


def test_rotation_frame_times_and_audio_streams_kept(tmp_path):
    """A portrait phone clip (stored turned, rotation flag), variable frame times, two
    audio streams: frames come out upright and the writer restores all three."""
    frames = pan_frames(4)
    pts = [0, 1, 3, 7]
    source = write_clip(tmp_path / "phone.mp4", frames, rotation=90, audio_streams=2, pts=pts)
    info = clip.probe(source)
    assert (info.rotation, info.upright_shape, info.audio_streams) == (90, (HEIGHT, WIDTH), 2)
    got = list(clip.frames(source, info))
    assert np.abs(got[1].pixels.astype(float) - frames[1]).mean() < 3
    target = tmp_path / "out.mkv"
    writer = clip.Writer(source, target, clip.muxer(target), info, clip.Encoding(), "libx264")
    for frame in got:
        writer.write(frame.pixels, frame.pts)
    writer.finish()
    out = clip.probe(target)
    assert (out.rotation, out.width, out.height, out.audio_streams) == (
        90,
        info.width,
        info.height,
        2,
    )
    times = [float(f.pts * out.time_base) for f in clip.frames(target, out)]
    # Matroska may start the clip later (the encoder's delay); the intervals are kept.
    np.testing.assert_allclose(np.diff(times), np.diff(pts) / 12, atol=1e-3)
    assert np.abs(decoded(target)[1] - frames[1]).mean() < 4


@pytest.mark.parametrize("suffix", [".mp4", ".mov", ".mkv", ".webm"])
def test_the_sidecar_travels_in_the_container(tmp_path, suffix):
    """The sidecar written as a container tag reads back equal to the file's content;
    AVI, which drops such tags, is known not to hold it."""
    source = write_clip(tmp_path / "in.mp4", pan_frames(2), audio_streams=0)
    data = _sidecar_data()
    target = reencode(source, tmp_path / f"out{suffix}", tags={sidecar.TAG: sidecar.as_tag(data)})
    assert clip.holds_tags(target)
    carried = sidecar.from_tag(clip.read_tag(target, sidecar.TAG), target)
    written = sidecar.check(data)
    assert (carried.made, carried.shape, carried.frames, carried.size) == (
        written.made,
        written.shape,
        written.frames,
        written.size,
    )
    for (n, first, stack), (n2, first2, stack2) in zip(carried.tracks, written.tracks, strict=True):
        assert (n, first) == (n2, first2)
        np.testing.assert_array_equal(stack, stack2)
    assert clip.read_tag(source, sidecar.TAG) is None
    assert not clip.holds_tags(tmp_path / "out.avi")


def test_a_spoiled_container_sidecar_is_one_error(tmp_path, monkeypatch):
    clip_path = tmp_path / "x.mp4"
    data = _sidecar_data()
    data["tracks"][0].update(first=4)
    with pytest.raises(
        InputError,
        match=r"x.mp4: the sidecar in the container's metadata is malformed: track 0 runs past",
    ):
        sidecar.from_tag(sidecar.as_tag(data), clip_path)
    with pytest.raises(InputError, match="cannot be decoded"):
        sidecar.from_tag("not base64 at all!", clip_path)
    monkeypatch.setattr(sidecar, "MAX_BYTES", 1000)  # a small tag that inflates past the bound
    with pytest.raises(InputError, match="once decompressed"):
        sidecar.from_tag(base64.b64encode(zlib.compress(b" " * 5000)).decode(), clip_path)


@pytest.mark.slow  # shares the module's ~2 min of model conversion, detection and compilation
def test_recover_without_the_sidecar_file_reads_the_container(ws, anonymized, recovered, tmp_path):
    """The clip shared alone (no .dbaf.json beside it) is recovered with the password
    alone, from the sidecar anonymize put in the MP4's metadata: as with the file.
    Both are encoded losslessly (CRF 0): x264's threads may choose differently from one
    run to the next, so two lossy encodes of the same frames can differ by a few levels."""
    assert [note for note in anonymized.notes if not note.startswith("detectors: ")] == []
    alone = tmp_path / "anon.mp4"
    alone.write_bytes((ws / "anon.mp4").read_bytes())
    report = cli(recover_video, ws, alone, tmp_path / "tag.mkv", "password.txt", "--crf", "0")
    assert (report.frames, report.tracks, report.faces) == (
        recovered.frames,
        recovered.tracks,
        recovered.faces,
    )
    cli(recover_video, ws, ws / "anon.mp4", tmp_path / "file.mkv", "password.txt", "--crf", "0")
    np.testing.assert_array_equal(decoded(tmp_path / "tag.mkv"), decoded(tmp_path / "file.mkv"))


@pytest.mark.slow  # shares the module's ~2 min of model conversion, detection and compilation
def test_redetection_without_any_sidecar_is_verified_or_asked_for(ws, anonymized, tmp_path, capsys):
    """A re-encoded copy (a sharing site's: no tags, no sidecar file) is recovered by
    re-detection against the key file's face ledger (tests/video/test_track_ledger.py);
    with a key file that has no ledger, only with --recover-redetected, since detection
    cannot tell an anonymized face from one never anonymized; without it, one error line."""
    shared = write_clip(
        tmp_path / "shared.mp4", decoded(ws / "anon.mp4").astype(np.uint8), audio_streams=0
    )
    assert clip.read_tag(shared, sidecar.TAG) is None
    assert ledger.ledger_path(ws / "fixed.key").is_file()  # anonymize with --key-file wrote it
    bare = tmp_path / "bare.key"
    bare.write_bytes((ws / "fixed.key").read_bytes())
    args = [
        "--model",
        str(ws / "model"),
        "--password-file",
        str(ws / "password.txt"),
        str(shared),
        str(tmp_path / "back.mp4"),
        "--batch-size",
        str(BATCH),
        "--untrained-mode",
    ]
    assert commands.exit_status(recover_video.main, [*args, "--key-file", str(bare)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {shared}: no sidecar") and "--recover-redetected" in line, line
    assert not (tmp_path / "back.mp4").exists()
    # The random model's faces are rarely faces to MTCNN: the runs are checked, not what they find.
    report = recover_video.main([*args, "--key-file", str(bare), "--recover-redetected"])
    assert report.frames == FRAMES and (tmp_path / "back.mp4").exists()
    verified = recover_video.main([*args, "--key-file", str(ws / "fixed.key"), "--overwrite"])
    assert verified.frames == FRAMES and verified.faces <= report.faces


def _writing_into(pid: int, folder: Path) -> bool:
    """Whether process ``pid`` holds a non-empty file open in ``folder`` (named or not)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith(f"{folder}/") and fd.stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow  # a separate process loads the model and compiles before it is killed
@pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="watches the process's open files in /proc"
)
def test_recover_killed_while_writing_leaves_nothing(ws, anonymized, tmp_path):
    """kill -9 of recover_video while it writes the recovered clip: no file is left in
    the output folder, neither a torn clip under the output's name nor a temporary
    with recovered pixels."""
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dbaf_jax.commands.recover_video",
            "--model",
            str(ws / "model"),
            "--password-file",
            str(ws / "password.txt"),
            str(ws / "anon.mp4"),
            str(out / "back.mp4"),
            "--batch-size",
            "1",
            "--untrained-mode",
        ],
        stderr=subprocess.DEVNULL,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        while run.poll() is None and not _writing_into(run.pid, out):
            time.sleep(0.005)
        assert run.poll() is None, "the run ended before it was seen writing"
        run.kill()
    finally:
        run.wait()
    assert list(out.iterdir()) == []


def test_the_input_is_never_an_output(tmp_path):
    """Even with --overwrite the clip cannot be anonymized into itself (the original would be gone)."""
    source = write_clip(tmp_path / "in.mp4", pan_frames(2), audio_streams=0)
    run = Run("anonymize", None, None, PASSWORD, settings=ClipRunSettings(BATCH, overwrite=True))
    for target in (source, tmp_path / "." / "in.mp4"):
        with pytest.raises(InputError, match="would replace the input"):
            runner.anonymize_video(run, source, target)
    assert clip.probe(source).width == WIDTH


def test_a_killed_runs_temporaries_of_the_output_are_removed(tmp_path):
    """Where temporaries have names, a later run into the same output removes those of a
    dead process (they may hold face pixels) with a note, and leaves other files' alone."""
    source = write_clip(tmp_path / "in.mp4", pan_frames(2), audio_streams=0)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    ours, other = (
        out / f".back.mp4.{dead}.0badf00d.partial",
        out / f".other.mp4.{dead}.0badf00d.partial",
    )
    ours.write_bytes(b"face pixels")
    other.write_bytes(b"face pixels")
    notes = runner._prepare_outputs(source, [out / "back.mp4"], overwrite=False)
    assert notes == [
        f"removed {ours}, a temporary file an interrupted run left (it may hold face pixels)"
    ]
    assert not ours.exists() and other.exists()


def test_not_a_video_name():
    with pytest.raises(Exception, match="not a video file name"):
        clip.muxer("out.png")


@pytest.mark.slow  # shares the module's ~2 min of model conversion, detection and compilation
def test_a_long_clip_streams(ws, anonymized):
    """Frames are encoded as their faces are done: however long the clip, no more than
    the runner's bound (two batches) waits at once."""
    anonymizer = FaceAnonymizer(ws / "model")
    faces = load_photo_faces(anonymizer)
    count, transform = 6 * BATCH, align.alignment_transform(FACE + [100, 60], faces.size)
    consumed = []

    def frames():
        for i in range(count):
            consumed.append(i)
            yield clip.Frame(i, i, np.full((HEIGHT, WIDTH, 3), i % 256, np.uint8))

    placed = [(0, 0, np.stack([transform] * count))]
    track_keys = passes.track_keys(anonymizer, bytes(32), placed)
    work = passes.FacePass(placed, track_keys, runner._anonymize_step(anonymizer))
    waiting = []
    for done, pixels in enumerate(passes.processed(anonymizer, faces, frames(), work, BATCH)):
        waiting.append(len(consumed) - done)
        assert pixels.shape == (HEIGHT, WIDTH, 3)
    assert len(waiting) == count
    assert (
        max(waiting) <= 2 * BATCH
    )  # one face a frame: a batch computing while the one before is pasted


@pytest.mark.slow  # shares the module's model; MTCNN and x264 on 4K frames take a few seconds each
def test_a_4k_clip_is_anonymized_and_recovered(ws, tmp_path):
    """3840x2160 frames go through both commands at their size, with at most
    `passes.FRAME_BYTES` of frames waiting at each stage (10 of 25 MB, not 16 or 32)."""
    frames = [
        np.asarray(Image.fromarray(f).resize((3840, 2160), Image.Resampling.BILINEAR))
        for f in pan_frames(3)
    ]
    source = write_clip(tmp_path / "4k.mp4", frames, audio_streams=0)
    info = clip.probe(source)
    assert passes.frames_within(passes.DECODE_AHEAD, info) == 10
    report = cli(
        anonymize_video, ws, source, tmp_path / "anon.mp4", "password.txt", "--crf", str(CRF)
    )
    assert report.frames == 3 and report.faces > 0
    back = cli(
        recover_video,
        ws,
        tmp_path / "anon.mp4",
        tmp_path / "back.mp4",
        "password.txt",
        "--crf",
        str(CRF),
    )
    assert back.faces == report.faces
    out = clip.probe(tmp_path / "back.mp4")
    assert (out.width, out.height) == (3840, 2160)
