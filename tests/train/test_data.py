"""Dataset preparation (ArrayRecord via tfds, no TensorFlow) and the resumable, host-split loader."""

import json
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

from dbaf_jax import commands
from dbaf_jax.commands import prepare_data
from dbaf_jax.core.errors import DatasetError
from dbaf_jax.train import data, prepare


def make_loader(data_dir, *args, **kwargs):
    """`data.batches` (its arguments after the source) of a dataset prepared by `prepare.prepare`."""
    return data.batches(data.PreparedImages(data_dir), *args, **kwargs)


def make_synthetic_loader(num_images: int, size: int, global_batch_size: int, seed: int, **kwargs):
    """`data.batches` of `data.SyntheticFaces` drawn from ``seed``, the stream's seed too."""
    return data.batches(
        data.SyntheticFaces(num_images, size, seed), global_batch_size, seed, **kwargs
    )


SIZE = 16


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """9 good images (PNG, JPEG, WebP, upper-case suffix; nested), a corrupt JPEG, a truncated PNG, a text file."""
    root = tmp_path_factory.mktemp("faces")
    (root / "a" / "b").mkdir(parents=True)
    rng = np.random.default_rng(0)
    pixels = {}
    names = [
        "a/b/p0.png",
        "a/b/p1.png",
        "a/p2.png",
        "a/j3.jpg",
        "p4.png",
        "j5.jpeg",
        "p6.PNG",
        "a/b/w7.webp",
        "p8.png",
    ]
    for name in names:
        img = rng.integers(0, 256, (20 + len(name), 24, 3), dtype=np.uint8)
        pixels[name] = img
        fmt = {"jpg": "JPEG", "jpeg": "JPEG", "webp": "WEBP"}.get(name.rsplit(".", 1)[1], "PNG")
        Image.fromarray(img).save(
            root / name, format=fmt, **({"lossless": True} if fmt == "WEBP" else {})
        )
    (root / "a" / "corrupt.jpg").write_bytes(b"not a jpeg" * 20)
    full = (root / "p4.png").read_bytes()
    (root / "a" / "b" / "truncated.png").write_bytes(full[: len(full) // 2])
    (root / "a" / "notes.txt").write_text("not an image")
    return root, pixels


@pytest.fixture(scope="module")
def prepared(image_folder, tmp_path_factory):
    root, _ = image_folder
    out = tmp_path_factory.mktemp("prepared") / "dataset"
    return out, prepare.prepare(root, out, size=SIZE)


def test_prepare_counts_and_skips(prepared):
    out, summary = prepared
    assert summary.written == 9
    assert summary.skipped == ("a/b/truncated.png", "a/corrupt.jpg")
    assert summary.ignored == ("a/notes.txt",)
    assert json.loads((out / data.SUMMARY_FILE).read_text())["skipped"] == list(summary.skipped)
    assert "a/corrupt.jpg" in summary.report()
    assert "tensorflow" not in sys.modules


def test_prepared_images_read_back_with_tfds(image_folder, prepared):
    import tensorflow_datasets as tfds

    root, pixels = image_folder
    out, _ = prepared
    source = tfds.data_source(data.DATASET_NAME, data_dir=str(out), split=data.SPLIT)
    assert len(source) == 9
    for record in (source[i] for i in range(len(source))):
        name = record["file_name"].decode()
        expected = np.asarray(
            Image.open(root / name).convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
        )
        np.testing.assert_array_equal(record["image"], expected)  # PNG storage is lossless
        if not name.endswith(("jpg", "jpeg")):  # lossless sources: the pixels we generated
            expected = np.asarray(
                Image.fromarray(pixels[name]).resize((SIZE, SIZE), Image.BILINEAR)
            )
            np.testing.assert_array_equal(record["image"], expected)


def test_prepare_refuses_existing_output(image_folder, prepared):
    root, _ = image_folder
    out, _ = prepared
    with pytest.raises(FileExistsError, match="not empty"):
        prepare.prepare(root, out, size=SIZE)
    assert (
        commands.exit_status(
            prepare_data.main, ["--images", str(root), "--out", str(out), "--size", str(SIZE)]
        )
        == 1
    )


def test_cli_writes_dataset(image_folder, tmp_path, capsys):
    root, _ = image_folder
    assert (
        commands.exit_status(
            prepare_data.main, ["--images", str(root), "--out", str(tmp_path / "d"), "--size", "8"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "9 images written" in printed and "2 unreadable image files skipped" in printed
    assert data.PreparedImages(tmp_path / "d").size == 8


def test_prepare_with_only_unreadable_files_writes_nothing(tmp_path, capsys):
    """tfds refuses to finish a split without examples; the user sees one line, no staging."""
    images = tmp_path / "bad"
    images.mkdir()
    (images / "a.png").write_bytes(b"not a png" * 10)
    (images / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    (images / "notes.txt").write_text("not an image")
    assert (
        commands.exit_status(
            prepare_data.main,
            ["--images", str(images), "--out", str(tmp_path / "out"), "--size", "8"],
        )
        == 1
    )
    err = capsys.readouterr().err  # after tfds's progress bars
    assert err.endswith(f"error: {images}: no readable images (2 unreadable, 1 other files)\n"), err
    assert err.count("error") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


def test_prepare_without_image_files(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not an image")
    assert (
        commands.exit_status(
            prepare_data.main, ["--images", str(tmp_path / "empty"), "--out", str(tmp_path / "out")]
        )
        == 1
    )
    assert (
        capsys.readouterr().err == f"error: {tmp_path / 'empty'}: no image files (1 other files)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


@pytest.mark.parametrize("size", ["0", "-3"])
def test_prepare_refuses_a_size_below_1(image_folder, tmp_path, capsys, size):
    root, _ = image_folder
    out = tmp_path / "out"
    assert (
        commands.exit_status(
            prepare_data.main, ["--images", str(root), "--out", str(out), "--size", size]
        )
        == 1
    )
    assert (
        capsys.readouterr().err
        == f"error: {out}: image size (--size) must be at least 1, got {size}\n"
    )
    assert not any(tmp_path.iterdir())


def take(iterator, n):
    return np.stack([next(iterator) for _ in range(n)])


def test_loader_shapes_range_and_epochs(prepared):
    out, _ = prepared
    # 9 images, global batch 3: each epoch is 3 batches holding every image once.
    batches = take(make_loader(out, 3, seed=7, process_index=0, process_count=1), 6)
    assert batches.shape == (6, 3, SIZE, SIZE, 3) and batches.dtype == np.float32
    assert batches.min() >= -1.0 and batches.max() <= 1.0
    source = data.PreparedImages(out)
    every_image = sorted(data.to_float(source[i]).tobytes() for i in range(len(source)))
    epoch0, epoch1 = batches[:3].reshape(9, SIZE, SIZE, 3), batches[3:].reshape(9, SIZE, SIZE, 3)
    assert sorted(x.tobytes() for x in epoch0) == every_image
    assert sorted(x.tobytes() for x in epoch1) == every_image
    assert not np.array_equal(epoch0, epoch1), "each epoch is reshuffled"


def test_loader_is_deterministic_and_seeded(prepared):
    out, _ = prepared
    first = take(make_loader(out, 4, seed=3, process_index=0, process_count=1), 5)
    again = take(make_loader(out, 4, seed=3, process_index=0, process_count=1), 5)
    other = take(make_loader(out, 4, seed=4, process_index=0, process_count=1), 5)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_loader_resumes_exactly(prepared):
    out, _ = prepared
    uninterrupted = take(make_loader(out, 4, seed=5, process_index=0, process_count=1), 8)
    for k in (1, 3, 5):  # 9 images, batch 4: batches straddle epochs
        resumed = take(
            make_loader(out, 4, seed=5, start_step=k, process_index=0, process_count=1), 8 - k
        )
        np.testing.assert_array_equal(resumed, uninterrupted[k:])


def test_loader_splits_global_batch_over_hosts(prepared):
    out, _ = prepared
    whole = take(make_loader(out, 4, seed=2, start_step=2, process_index=0, process_count=1), 4)
    host0 = take(make_loader(out, 4, seed=2, start_step=2, process_index=0, process_count=2), 4)
    host1 = take(make_loader(out, 4, seed=2, start_step=2, process_index=1, process_count=2), 4)
    assert host0.shape == (4, 2, SIZE, SIZE, 3)
    np.testing.assert_array_equal(np.concatenate([host0, host1], axis=1), whole)
    with pytest.raises(ValueError, match="does not split"):
        make_loader(out, 5, seed=2, process_index=0, process_count=2)


def test_loader_num_epochs_ends_the_stream(prepared):
    out, _ = prepared
    assert (
        len(list(make_loader(out, 4, seed=0, num_epochs=2, process_index=0, process_count=1))) == 4
    )  # 18 // 4


def test_synthetic_loader():
    source = data.SyntheticFaces(6, 24, seed=1)
    np.testing.assert_array_equal(source[2], data.SyntheticFaces(6, 24, seed=1)[2])
    assert not np.array_equal(source[2], source[3])
    assert source[0].dtype == np.uint8 and source[0].std() > 10
    loader = make_synthetic_loader(6, 24, 4, seed=1, process_index=0, process_count=1)
    batches = take(loader, 3)
    assert batches.shape == (3, 4, 24, 24, 3) and -1.0 <= batches.min() and batches.max() <= 1.0
    resumed = take(
        make_synthetic_loader(6, 24, 4, seed=1, start_step=1, process_index=0, process_count=1), 2
    )
    np.testing.assert_array_equal(resumed, batches[1:])


def test_a_damaged_record_is_one_error_naming_dataset_and_record(prepared, tmp_path):
    """Issue 21: bytes flipped inside the ArrayRecord file ended training in the
    reader's traceback; now a DatasetError names the dataset and the record, also when
    the record is read on the loader's worker threads."""
    out, _ = prepared
    damaged = tmp_path / "dataset"
    shutil.copytree(out, damaged)
    [records] = [p for p in damaged.rglob("*array_record*") if p.is_file()]
    raw = bytearray(records.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 64] = bytes(b ^ 0xFF for b in raw[middle : middle + 64])
    records.write_bytes(bytes(raw))
    source = data.PreparedImages(damaged)
    failures = []
    for index in range(len(source)):
        try:
            source[index]
        except DatasetError as err:
            failures.append(str(err))
    assert failures and all(
        f.startswith(f"{damaged}: record ") and "is damaged" in f for f in failures
    ), failures
    with pytest.raises(DatasetError, match=f"{damaged}: record \\d+ is damaged"):
        take(data.batches(source, 3, seed=0, process_index=0, process_count=1, num_epochs=1), 3)


def test_a_run_without_data_names_the_setting_to_give():
    """The design card's command with no data folder (configs/stage2.py leaves data.dir
    empty) stops naming --config.data.dir, not an empty path read as the working folder."""
    from configs.dbaf.stage2 import get_config
    from dbaf_jax.train import loop

    with pytest.raises(DatasetError, match=r"no training data: set --config.data.dir"):
        loop.data_source(get_config())
