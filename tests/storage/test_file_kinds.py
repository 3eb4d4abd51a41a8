"""Which files are photos and clips, in one place (`dbaf_jax.storage.file_kinds`): the suffixes
the video path writes, every format PIL opens, header sniffing, and the page's script,
which is served the lists instead of holding its own."""

import re

import numpy as np
from PIL import Image

from dbaf_jax.storage import file_kinds, images
from dbaf_jax.video import clip, sidecar
from tests.paths import REPO


def test_the_clip_suffixes_are_those_the_clips_are_written_in():
    assert set(file_kinds.CLIP_SUFFIXES) == set(clip.FORMATS)
    assert file_kinds.SIDECAR_SUFFIX == sidecar.SUFFIX


def test_every_format_pil_opens_is_a_photo_by_suffix_in_any_case():
    suffixes = file_kinds.photo_suffixes()
    assert {".tif", ".tiff", ".gif", ".png", ".jpg", ".jpeg", ".webp", ".bmp"} <= suffixes
    assert not suffixes & set(file_kinds.CLIP_SUFFIXES)
    kinds = {name: file_kinds.kind_by_name(name) for name in ("a.TIFF", "b.gif", "c.MOV", "d.txt")}
    assert kinds == {"a.TIFF": "photo", "b.gif": "photo", "c.MOV": "clip", "d.txt": None}


def test_a_photo_is_known_by_its_header_whatever_its_name(tmp_path):
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "no_suffix", format="TIFF")
    (tmp_path / "notes.txt").write_text("not a photo")
    assert file_kinds.sniffed(tmp_path / "no_suffix") is None
    assert file_kinds.sniffed(tmp_path / "notes.txt") == file_kinds.UNKNOWN_TYPE


def test_the_image_lists_take_the_same_photos(tmp_path):
    """`images.list_images` (training data, evaluation) takes what the folder commands take by suffix."""
    for name in ("a.tif", "b.GIF", "c.png", "d.txt", "e.mp4"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in images.list_images(tmp_path)] == ["a.tif", "b.GIF", "c.png"]


def test_the_page_is_served_the_lists_and_holds_none_of_its_own():
    told = file_kinds.for_page()
    assert told["clips"] == list(file_kinds.CLIP_SUFFIXES) and ".tif" in told["photos"]
    assert told["sidecar"] == file_kinds.SIDECAR_SUFFIX
    script = (REPO / "dbaf_jax" / "web" / "static" / "app.js").read_text()
    assert not re.search(r"\b(mp4|mov|mkv|webm|avi|png|jpe?g|tiff?|gif)\b", script, re.I)
