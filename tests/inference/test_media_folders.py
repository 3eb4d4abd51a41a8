"""Every input of a folder accounted for, end to end: ``python -m dbaf_jax.commands.anonymize``
and ``recover`` on a folder of real photos (JPEG, TIFF, GIF) and a short clip, with the
real MTCNN and the tempered tiny DBAF model of the photo tests. Clips go through the
video path; an animated GIF, files of unknown type, damaged files, each kind of link,
inputs that are already anonymized outputs and a clip cut short are named and counted;
a name with control characters is printed escaped."""

import shutil

import numpy as np
import pytest
from PIL import Image

from dbaf_jax.commands import anonymize, recover
from dbaf_jax.inference.report import EXIT_SKIPPED
from dbaf_jax.storage import images
from dbaf_jax.video import clip, sidecar
from tests.cli_helpers import photo_model, pixels, run_command
from tests.paths import DATA
from tests.video_clips import pan_frames, write_clip

pytestmark = (
    pytest.mark.slow
)  # a model conversion, MTCNN on photos and clips, and their compiles: minutes
CONTROL_NAME = "flat\x1b[2Kname.png"


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("media")
    photo_model(tmp)
    plain = tmp / "plain"  # a folder of real photos plus a clip: everything is processed
    plain.mkdir()
    shutil.copy(DATA / "office3.jpg", plain / "office3.jpg")
    write_clip(plain / "pan.mp4", pan_frames(6), audio_streams=0)
    mixed = tmp / "mixed"  # every kind of entry that is not processed, beside what is
    (mixed / "sub").mkdir(parents=True)
    with Image.open(DATA / "jf.jpg") as img:
        img.convert("RGB").reduce(2).save(mixed / "jf.tif")
    with Image.open(DATA / "face0.jpg") as img:
        img.convert("RGB").save(mixed / "face0.gif")
        frames = [img.convert("RGB"), img.convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    frames[0].save(mixed / "moving.gif", save_all=True, append_images=frames[1:])
    Image.fromarray(np.full((60, 80, 3), 90, np.uint8)).save(mixed / CONTROL_NAME)
    (mixed / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    (mixed / "notes.txt").write_text("not an image\n")
    (tmp / "elsewhere").mkdir()
    shutil.copy(DATA / "office3.jpg", tmp / "elsewhere" / "far.jpg")
    (mixed / "out.jpg").symlink_to(tmp / "elsewhere" / "far.jpg")
    (mixed / "to_folder").symlink_to(tmp / "elsewhere")
    (mixed / "dangling.jpg").symlink_to(mixed / "gone.jpg")
    (mixed / "loop1.jpg").symlink_to(mixed / "loop2.jpg")
    (mixed / "loop2.jpg").symlink_to(mixed / "loop1.jpg")
    return tmp


def cli(command, ws, in_dir, out, *extra):
    untrained = (
        ["--untrained-mode"] if command is recover else []
    )  # the converted reference model records latent recovery
    return run_command(
        command, ws, in_dir, out, "password.txt", "--batch-size", "4", *untrained, *extra
    )


@pytest.fixture(scope="module")
def plain_run(ws):
    return cli(anonymize, ws, ws / "plain", ws / "plain_out")


def test_one_command_anonymizes_the_photos_and_the_clip_of_a_folder(ws, plain_run):
    out = ws / "plain_out"
    assert sorted(p.name for p in plain_run.written) == [
        "office3.png",
        "pan.mp4",
        "pan.mp4.dbaf.json",
    ]
    assert plain_run.status == 0 and not plain_run.skipped and plain_run.faces >= 1
    (outcome,) = plain_run.clips
    assert outcome.frames == 6 and outcome.faces >= 1
    recorded = sidecar.read(out / "pan.mp4.dbaf.json")
    assert recorded.frames == 6 and recorded.tracks
    source = np.stack(
        [
            f.pixels
            for f in clip.frames(ws / "plain" / "pan.mp4", clip.probe(ws / "plain" / "pan.mp4"))
        ]
    ).astype(int)
    made = np.stack(
        [f.pixels for f in clip.frames(out / "pan.mp4", clip.probe(out / "pan.mp4"))]
    ).astype(int)
    assert np.abs(made - source).max() > 40  # the faces changed


def test_recover_takes_the_clip_with_its_sidecar_and_names_what_it_passes_over(
    ws, plain_run, capsys
):
    report = cli(recover, ws, ws / "plain_out", ws / "plain_back")
    assert sorted(p.name for p in report.written) == ["office3.png", "pan.mp4"]
    assert [item.path.name for item in report.passed_over] == ["pan.mp4.dbaf.json"]
    assert (
        report.status == 0
        and len(report.clips) == 1
        and report.clips[0].faces == plain_run.clips[0].faces
    )
    assert (
        "pan.mp4.dbaf.json: the sidecar of the clip pan.mp4: read with it"
        in capsys.readouterr().err
    )


def test_anonymized_inputs_are_refused_unless_asked(ws, plain_run):
    report = cli(anonymize, ws, ws / "plain_out", ws / "again")
    assert report.status == EXIT_SKIPPED and not report.written
    why = {item.path.name: item.reason for item in report.skipped}
    assert sorted(why) == ["office3.png", "pan.mp4"]
    assert (
        "already an output of anonymize" in why["office3.png"]
        and "--allow-anonymized-input" in why["office3.png"]
    )
    assert "already an output of anonymize (it has a sidecar)" in why["pan.mp4"]
    single = ws / "one_anonymized"
    single.mkdir()
    shutil.copy(ws / "plain_out" / "office3.png", single / "office3.png")
    again = cli(anonymize, ws, single, ws / "again_allowed", "--allow-anonymized-input")
    assert again.status == 0 and [p.name for p in again.written] == ["office3.png"]


def test_every_file_not_processed_is_named_and_counted(ws, capsys):
    report = cli(anonymize, ws, ws / "mixed", ws / "mixed_out")
    err = capsys.readouterr().err
    assert sorted(p.name for p in report.written) == ["face0.png", "flat\x1b[2Kname.png", "jf.png"]
    why = {item.path.name: item.reason for item in report.skipped}
    assert sorted(why) == [
        "broken.jpg",
        "dangling.jpg",
        "loop1.jpg",
        "loop2.jpg",
        "moving.gif",
        "notes.txt",
        "out.jpg",
        "to_folder",
    ]
    assert "holds 2 frames" in why["moving.gif"] and "cannot read image" in why["broken.jpg"]
    assert report.status == EXIT_SKIPPED
    for name in why:  # each named in the summary
        assert f"{name}: " in err or f"{name}:" in err
    assert (
        "\x1b" not in err and "flat\\x1b[2Kname" in err
    )  # the control character escaped wherever the name is printed
    # TIFF and GIF photos: their faces found and anonymized, written as PNGs that carry the recovery record.
    for name, source in (("jf.png", "jf.tif"), ("face0.png", "face0.gif")):
        meta = images.read_metadata(ws / "mixed_out" / name)
        assert meta["operation"] == "anonymize" and meta["faces"], name
        assert pixels(ws / "mixed_out" / name).shape == pixels(ws / "mixed" / source).shape
        assert np.abs(pixels(ws / "mixed_out" / name) - pixels(ws / "mixed" / source)).max() > 40


def test_a_folder_with_files_but_nothing_written_is_not_success(ws):
    only = ws / "only_text"
    only.mkdir()
    (only / "readme.txt").write_text("hello\n")
    report = cli(anonymize, ws, only, ws / "only_text_out")
    assert (
        report.status == EXIT_SKIPPED
        and not report.written
        and [i.path.name for i in report.skipped] == ["readme.txt"]
    )


def test_a_clip_cut_short_is_noted_and_not_success(ws):
    folder = ws / "cut"
    folder.mkdir()
    whole = write_clip(ws / "whole.mkv", pan_frames(12), audio_streams=0, format="matroska")
    data = whole.read_bytes()
    (folder / "cut.mkv").write_bytes(data[: len(data) * 2 // 3])
    report = cli(anonymize, ws, folder, ws / "cut_out")
    (outcome,) = report.clips
    assert 0 < outcome.frames < 12 and report.status == EXIT_SKIPPED
    assert any("its container declares (truncated or damaged?)" in note for note in report.notes)
    assert (ws / "cut_out" / "cut.mkv").is_file()


def test_resume_keeps_complete_clips_and_makes_one_without_its_sidecar_again(ws, plain_run):
    out = ws / "resumed"
    shutil.copytree(ws / "plain_out", out)
    report = cli(anonymize, ws, ws / "plain", out, "--resume")
    assert (
        report.status == 0
        and not report.written
        and sorted(p.name for p in report.kept) == ["office3.png", "pan.mp4"]
    )
    (out / "pan.mp4.dbaf.json").unlink()  # killed between the clip and its sidecar
    report = cli(anonymize, ws, ws / "plain", out, "--resume")
    assert sorted(p.name for p in report.written) == ["pan.mp4", "pan.mp4.dbaf.json"] and [
        p.name for p in report.kept
    ] == ["office3.png"]
    assert (
        sidecar.read(out / "pan.mp4.dbaf.json").made.record
        == sidecar.read(ws / "plain_out" / "pan.mp4.dbaf.json").made.record
    )
