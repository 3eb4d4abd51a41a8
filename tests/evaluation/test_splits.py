"""Seeded split lists: reproducible, disjoint, the protocol's counts, and a checked reader."""

import pytest

from dbaf_jax.commands import make_splits
from dbaf_jax.core.errors import ConfigError, DatasetError, OutputExistsError
from dbaf_jax.evaluation import splits


def _image_folder(root, count, nested=True):
    """``count`` empty files with image suffixes (the lists only look at names)."""
    root.mkdir()
    for i in range(count):
        folder = root / f"{i // 300:02d}" if nested else root
        folder.mkdir(exist_ok=True)
        (folder / f"{i:05d}.png").touch()
    (root / "notes.txt").touch()
    return root


def test_shuffled_order_is_a_fixed_function_of_seed_and_names():
    names = ["a.png", "b.png", "c.png", "d/e.png"]
    # Pinned: sha256("<seed>:<path>") order, so later versions keep today's lists.
    assert splits.shuffled(names, 0) == ["d/e.png", "c.png", "b.png", "a.png"]
    assert splits.shuffled(names, 1) == ["b.png", "a.png", "d/e.png", "c.png"]


def test_celebahq_counts_subsets_and_determinism(tmp_path):
    folder = _image_folder(tmp_path / "celeba", 1010)
    first = splits.make_splits(folder, "celebahq", seed=0)
    lists = first.lists
    assert {name: len(paths) for name, paths in lists.items()} == {
        "test": 1000,
        "rates200": 200,
        "diversity5": 5,
    }
    assert (first.images_found, first.images_unused) == (1010, 10)
    assert set(lists["diversity5"]) <= set(lists["rates200"]) <= set(lists["test"])
    assert all(path.endswith(".png") and "/" in path for path in lists["test"])
    assert lists == splits.make_splits(folder, "celebahq", seed=0).lists
    other = splits.make_splits(folder, "celebahq", seed=1).lists
    assert set(other["test"]) != set(lists["test"])
    assert set(other["rates200"]) != set(lists["rates200"])


def test_ffhq_refuses_too_few_images_unless_allowed(tmp_path):
    folder = _image_folder(tmp_path / "ffhq", 700)
    with pytest.raises(DatasetError, match="700 images, the ffhq protocol needs 70000"):
        splits.make_splits(folder, "ffhq")
    lists = splits.make_splits(folder, "ffhq", seed=0, allow_fewer=True).lists
    # Scaled by 700 / 70000, rounded down, at least 1.
    assert {name: len(paths) for name, paths in lists.items()} == {
        "test": 10,
        "train": 690,
        "rates200": 2,
        "diversity5": 1,
    }
    assert set(lists["train"]).isdisjoint(lists["test"])
    assert set(lists["rates200"]) <= set(lists["test"])


def test_unknown_protocol_and_missing_folder_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="lfw"):
        splits.make_splits(tmp_path, "lfw")
    with pytest.raises(DatasetError, match="not a directory"):
        splits.make_splits(tmp_path / "absent", "ffhq")


def test_command_writes_lists_the_reader_loads(tmp_path, capsys):
    folder = _image_folder(tmp_path / "faces", 140)
    out = tmp_path / "lists"
    arguments = ["--images", str(folder), "--out", str(out), "--protocol", "ffhq", "--allow-fewer"]
    make_splits.main([*arguments, "--seed", "7"])
    assert "wrote" in capsys.readouterr().out
    expected = splits.make_splits(folder, "ffhq", seed=7, allow_fewer=True).lists
    for name, relative in expected.items():
        text = (out / f"{name}.txt").read_text()
        assert text.startswith("# dbaf_jax.evaluation.splits protocol=ffhq seed=7")
        assert splits.read_split(out / f"{name}.txt", folder) == [
            folder / path for path in relative
        ]

    with pytest.raises(OutputExistsError, match="test.txt"):
        make_splits.main(arguments)
    make_splits.main([*arguments, "--overwrite"])
    assert "seed=0" in (out / "test.txt").read_text()


def test_reader_names_missing_files(tmp_path):
    folder = _image_folder(tmp_path / "faces", 20, nested=False)
    listing = tmp_path / "test.txt"
    listing.write_text("# header\n00001.png\ngone.png\n00002.png\n")
    with pytest.raises(DatasetError, match=r"1 of 3 listed images do not exist .*gone\.png"):
        splits.read_split(listing, folder)
    with pytest.raises(DatasetError, match="cannot read"):
        splits.read_split(tmp_path / "absent.txt", folder)
    listing.write_text("# only a header\n")
    with pytest.raises(DatasetError, match="names no images"):
        splits.read_split(listing, folder)
