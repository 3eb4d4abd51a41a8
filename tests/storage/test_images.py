"""Image folder reading, corrupt-file skipping and PNG metadata."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from dbaf_jax.core.errors import OutputExistsError
from dbaf_jax.storage import atomic_files, images
from tests.paths import DATA


def _write(path, size, seed):
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return pixels


def test_list_and_batches_skip_corrupt_files(tmp_path):
    a = _write(tmp_path / "a.png", 8, 0)
    _write(tmp_path / "nested" / "b.jpg", 16, 1)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    (tmp_path / "notes.txt").write_text("ignored: not an image suffix")
    paths = images.list_images(tmp_path)
    assert [p.name for p in paths] == ["a.png", "broken.png", "b.jpg"]
    batches = list(images.iter_batches(paths, size=8, batch_size=2))
    done = [p.name for b in batches for p in b[0]]
    skipped = [s for b in batches for s in b[2]]
    assert done == ["a.png", "b.jpg"]
    assert [s.path.name for s in skipped] == ["broken.png"] and "broken.png" in skipped[0].reason
    first = batches[0][1][0]
    np.testing.assert_allclose(first, a / 127.5 - 1.0, atol=1e-6)
    assert batches[-1][1][-1].shape == (8, 8, 3)  # the 16x16 jpeg was resized


def test_png_round_trip_keeps_pixels_and_metadata(tmp_path):
    image = np.random.default_rng(0).uniform(-1, 1, (8, 8, 3)).astype(np.float32)
    meta = {"salt": "00ff", "model": "m"}
    images.write_png(tmp_path / "out" / "x.png", image, meta)
    assert images.read_metadata(tmp_path / "out" / "x.png") == meta
    back = images.read_image(tmp_path / "out" / "x.png", 8)
    np.testing.assert_allclose(back, images.to_uint8(image) / 127.5 - 1.0, atol=1e-6)
    assert not list((tmp_path / "out").glob("*.partial"))


def test_metadata_missing_is_named(tmp_path):
    _write(tmp_path / "plain.png", 4, 0)
    with pytest.raises(ValueError, match="plain.png"):
        images.read_metadata(tmp_path / "plain.png")


def test_exclusive_write_never_replaces_a_file_made_meanwhile(tmp_path):
    """Another run creates the output between this run's check and its write: the
    write is refused, the other run's file is intact, no temporary file is left."""
    target = tmp_path / "out" / "x.png"
    image = np.full((4, 4, 3), -1.0, np.float32)

    def racing(tmp):
        target.write_bytes(b"the other run's output")
        Image.fromarray(images.to_uint8(image)).save(tmp, format="PNG")

    with pytest.raises(OutputExistsError, match="x.png"):
        atomic_files.write_file(target, racing)
    assert target.read_bytes() == b"the other run's output"
    assert [p.name for p in target.parent.iterdir()] == ["x.png"]
    # Without the race the file is created; again, it is refused; with overwrite, replaced.
    images.write_png(tmp_path / "y.png", image, {}, overwrite=False)
    with pytest.raises(OutputExistsError):
        images.write_png(tmp_path / "y.png", image + 2, {}, overwrite=False)
    assert images.read_image(tmp_path / "y.png", 4).max() == -1.0
    images.write_png(tmp_path / "y.png", image + 2, {}, overwrite=True)
    assert images.read_image(tmp_path / "y.png", 4).min() == 1.0


def test_failed_write_leaves_nothing(tmp_path):
    def failing(tmp):
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_files.write_file(tmp_path / "x.png", failing)
    assert list(tmp_path.iterdir()) == []


def _modes_of_a_photo(tmp_path):
    """A real photo (tests/data/jf.jpg, reduced) saved in each mode PIL reads, in a
    format that keeps that mode: (mode, path, the 8-bit grey or RGB it must read as)."""
    with Image.open(DATA / "jf.jpg") as img:
        rgb = img.convert("RGB").resize((96, 72))
    grey = rgb.convert("L")
    wide = np.asarray(grey, np.uint16) * 257  # the same picture at 16 bits
    alpha = Image.fromarray(np.linspace(0, 255, 96 * 72).reshape(72, 96).astype(np.uint8))
    cases = {
        "L": (grey, "png", grey),
        "P": (
            rgb.convert("P", palette=Image.ADAPTIVE),
            "png",
            rgb.convert("P", palette=Image.ADAPTIVE).convert("RGB"),
        ),
        "RGBA": (Image.merge("RGBA", (*rgb.split(), alpha)), "png", rgb),
        "LA": (Image.merge("LA", (grey, alpha)), "png", grey),
        "CMYK": (rgb.convert("CMYK"), "tiff", rgb),
        "I;16": (Image.fromarray(wide), "png", grey),
        "I": (Image.fromarray(wide.astype(np.int32)), "tiff", grey),
        "F": (Image.fromarray(np.asarray(grey, np.float32) / 255), "tiff", grey),
        "1": (grey.convert("1"), "png", grey.convert("1").convert("L")),
    }
    for mode, (image, suffix, expected) in cases.items():
        path = tmp_path / f"{mode.replace(';', '_')}.{suffix}"
        image.save(path)
        yield mode, path, np.asarray(expected.convert("RGB"), np.int16)


def test_every_mode_reads_as_8_bit_rgb_with_its_range(tmp_path):
    """16-bit greyscale used to read as almost all white (PIL clips at 255), so its face
    was never looked at; RGBA lost its alpha without a word."""
    seen = set()
    for mode, path, expected in _modes_of_a_photo(tmp_path):
        with Image.open(path) as img:
            seen.add(img.mode)
        photo, note = images.read_photo_noted(path)
        assert photo.dtype == np.uint8 and photo.shape == expected.shape, mode
        assert np.abs(photo.astype(np.int16) - expected).max() <= 1, mode
        has_alpha = mode in ("RGBA", "LA")
        assert (note is not None and "alpha" in note and str(path) in note) == has_alpha, (
            mode,
            note,
        )
        assert np.abs(images.read_image(path, 32).astype(np.float32)).max() <= 1.0
    assert {"I;16", "I", "F", "RGBA", "LA", "CMYK", "P", "1", "L"} <= seen


def test_label_columns_names_each_column_above_an_unchanged_grid():
    grid = images.make_grid(np.zeros((6, 16, 16, 3), np.float32), rows=2)
    labelled = images.label_columns(
        grid, ("original", "anonymized", "right password"), cell_width=16
    )
    strip = labelled[: labelled.shape[0] - grid.shape[0]]
    np.testing.assert_array_equal(labelled[strip.shape[0] :], grid)
    # Each column's part of the strip holds dark text pixels; long labels wrap to more lines.
    columns = [strip[:, 2 + c * 18 : 2 + c * 18 + 16] for c in range(3)]
    assert all((column < 128).any() for column in columns)
    single = images.label_columns(grid, ("a", "b", "c"), cell_width=16)
    assert single.shape[0] < labelled.shape[0]


def test_tiff_and_gif_are_read_and_animations_refused(tmp_path):
    """Single-frame TIFF and GIF read as photos; an animated GIF or a multi-page TIFF is
    refused by name (only one frame would be anonymized); a camera's multi-picture JPEG
    (MPO) reads its first picture, with a note."""
    face = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    Image.fromarray(face).save(tmp_path / "one.tif")
    Image.fromarray(face).save(tmp_path / "one.gif")
    assert np.array_equal(images.read_photo(tmp_path / "one.tif"), face)
    assert images.read_photo(tmp_path / "one.gif").shape == (24, 32, 3)
    frames = [Image.fromarray(np.full((24, 32, 3), level, np.uint8)) for level in (0, 120, 240)]
    frames[0].save(tmp_path / "moving.gif", save_all=True, append_images=frames[1:])
    frames[0].save(tmp_path / "pages.tif", save_all=True, append_images=frames[1:])
    for name in ("moving.gif", "pages.tif"):
        with pytest.raises(
            ValueError, match=f"{name}: holds 3 frames .* only one would be anonymized"
        ):
            images.read_photo_noted(tmp_path / name)
        with pytest.raises(ValueError, match="holds 3 frames"):
            images.read_image(tmp_path / name, 16)
    Image.fromarray(face).save(
        tmp_path / "camera.mpo", format="MPO", save_all=True, append_images=[frames[1]]
    )
    photo, note = images.read_photo_noted(tmp_path / "camera.mpo")
    assert photo.shape == (24, 32, 3) and "1 other picture(s)" in note


def declared_png(path, width, height):
    """A PNG file of a few bytes whose header declares ``width`` x ``height`` RGB pixels
    (a 164 KB PNG really holds 13000 x 13000): its pixel data is not there, so reading
    is refused by the header or fails in the decoder."""

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\0" * (3 * min(width, 64) + 1))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )
    return path


@pytest.mark.parametrize("width, height", [(13000, 13000), (50000, 50000), (16000, 15626)])
def test_a_photo_over_the_pixel_limit_is_refused_by_its_header(tmp_path, width, height):
    """One line naming the file, its size and the limit, before any pixel is decoded (the
    file has none to decode): under PIL's own limit, over it and by a few pixels over ours
    (the numbers are exact, not rounded to the limit's)."""
    path = declared_png(tmp_path / "huge.png", width, height)
    limit = 250_000_000 if width == 16000 else 120_000_000
    with pytest.raises(ValueError) as refused:
        images.read_photo_noted(path, max_pixels=limit)
    line = str(refused.value)
    assert line.startswith(f"{path}: ") and "\n" not in line
    assert f"over the limit of {limit:,} (--max-pixels): not decoded" in line
    if width * height <= 2 * images.MAX_PIXELS:  # PIL opens it: the size is named
        assert f"{width} x {height} = {width * height:,} pixels" in line
    with pytest.raises(ValueError, match="over the limit"):
        images.read_image(path, 16, max_pixels=limit)
    assert images.size_refusal(path, limit) == line[len(f"{path}: ") :]
    with open(path, "rb") as whole:  # the web page's check: the upload's first bytes
        first = io.BytesIO(whole.read(64))
    assert images.size_refusal(first, limit, "the page's limit").endswith(
        "(the page's limit): not decoded"
    )


def test_a_photo_within_the_limit_is_read_into_an_array_of_its_own(tmp_path):
    """A photo of exactly the limit is read; its pixels are PIL's, in a writable array
    (pasted into in place), over several decode bands; its header passes the check."""
    pixels = np.random.default_rng(1).integers(
        0, 256, (2 * images.DECODE_BAND + 7, 40, 3), np.uint8
    )
    path = tmp_path / "tall.png"
    Image.fromarray(pixels).save(path)
    photo = images.read_photo(path, max_pixels=pixels.shape[0] * pixels.shape[1])
    np.testing.assert_array_equal(photo, pixels)
    assert photo.flags.writeable and photo.flags.owndata
    assert images.size_refusal(path, pixels.shape[0] * pixels.shape[1]) is None
    assert images.declared_pixels(path) == pixels.shape[0] * pixels.shape[1]
    assert images.declared_pixels(declared_png(tmp_path / "big.png", 13000, 13000)) == 169_000_000
    (tmp_path / "not.png").write_bytes(b"not a png")
    assert images.declared_pixels(tmp_path / "not.png") == 0
    with pytest.raises(ValueError, match="cannot read image"):
        images.size_refusal(tmp_path / "not.png")
