"""Every entry below an input folder is accounted for (`dbaf_jax.storage.input_folder`): images
of every format PIL opens, clips, the companions our runs write, and each kind of entry
that is refused (unknown type, not a regular file, dangling links, link loops, links to
folders and out of the folder), with its reason."""

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dbaf_jax.storage import images, input_folder


def reasons(listing):
    return {item.path.name: item.reason for item in listing.refused}


def test_every_entry_is_an_input_a_companion_or_refused_with_why(tmp_path):
    folder, outside = tmp_path / "in", tmp_path / "elsewhere"
    (folder / "sub").mkdir(parents=True)
    outside.mkdir()
    pixels = np.zeros((8, 8, 3), np.uint8)
    for name in ("a.jpg", "b.TIF", "c.gif", "sub/d.png", "e.webp"):
        Image.fromarray(pixels).save(folder / name)
    Image.fromarray(pixels).save(folder / "no_suffix", format="PNG")  # recognised by its header
    Image.fromarray(pixels).save(outside / "far.png")
    (folder / "clip.mp4").write_bytes(b"not read here")
    (folder / "clip.mp4.dbaf.json").write_text("{}")
    (folder / "orphan.dbaf.json").write_text("{}")  # no clip of that name: not a companion
    (folder / "d.latents.npz").write_bytes(b"")  # sub/d.png is not beside it
    (folder / "sub" / "d.latents.npz").write_bytes(b"")
    (folder / "notes.txt").write_text("text")
    os.mkfifo(folder / "pipe.jpg")  # reading it would block: refused before it is opened
    (folder / "dangling.jpg").symlink_to(folder / "gone.jpg")
    (folder / "loop1.jpg").symlink_to(folder / "loop2.jpg")
    (folder / "loop2.jpg").symlink_to(folder / "loop1.jpg")
    (folder / "to_folder").symlink_to(outside)
    (folder / "out.png").symlink_to(outside / "far.png")
    (folder / "in.png").symlink_to(folder / "a.jpg")  # a link to a file inside is read as that file

    listing = input_folder.list_inputs(folder)

    assert [p.relative_to(folder).as_posix() for p in listing.images] == [
        "a.jpg",
        "b.TIF",
        "c.gif",
        "e.webp",
        "in.png",
        "no_suffix",
        "sub/d.png",
    ]
    assert listing.videos == [folder / "clip.mp4"]
    assert [item.path.relative_to(folder).as_posix() for item in listing.companions] == [
        "clip.mp4.dbaf.json",
        "sub/d.latents.npz",
    ]
    why = reasons(listing)
    assert sorted(why) == [
        "d.latents.npz",
        "dangling.jpg",
        "loop1.jpg",
        "loop2.jpg",
        "notes.txt",
        "orphan.dbaf.json",
        "out.png",
        "pipe.jpg",
        "to_folder",
    ]
    assert all(
        reason.startswith(f"{folder / name}: ")
        for name, reason in why.items()
        if name != "to_folder"
    )
    assert (
        "dangling link" in why["dangling.jpg"]
        and "link loop" in why["loop1.jpg"]
        and "link loop" in why["loop2.jpg"]
    )
    assert "link to a folder" in why["to_folder"] and "outside the input folder" in why["out.png"]
    assert "not a regular file" in why["pipe.jpg"] and "unknown type" in why["notes.txt"]


NOBODY = 65534  # the unprivileged user of Linux distributions


def _listed_without_rights(folder: Path) -> dict:
    """What ``folder`` lists as and how its locked photo reads, for a user who may not
    read what only the owner may: this user when it is not root (root reads
    everything), else a forked child that became nobody (no JAX work after the fork)."""

    def look() -> dict:
        listing = input_folder.list_inputs(folder)
        try:
            images.read_photo_noted(folder / "locked.jpg")
            read = "read"
        except ValueError as err:
            read = str(err)
        return {
            "images": [p.name for p in listing.images],
            "refused": {i.path.name: i.reason for i in listing.refused},
            "read": read,
        }

    if os.geteuid() != 0:
        return look()
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        signal.alarm(60)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(writer, json.dumps(look()).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        found = pipe.read().decode()
    os.waitpid(child, 0)
    return json.loads(found)


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # see _listed_without_rights
def test_unreadable_files_and_folders_are_named(tmp_path):
    folder = Path(
        tempfile.mkdtemp(prefix="dbaf-unreadable-")
    )  # reachable by nobody, unlike tmp_path
    try:
        os.chmod(folder, 0o755)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "locked.jpg")
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "locked_photo", format="PNG")
        (folder / "shut").mkdir()
        (folder / "shut" / "inside.jpg").write_bytes(b"")
        for path in (folder / "locked.jpg", folder / "locked_photo", folder / "shut"):
            os.chmod(path, 0)
        found = _listed_without_rights(folder)
    finally:
        os.chmod(folder / "shut", 0o700)
        shutil.rmtree(folder)
    assert found["images"] == ["locked.jpg"]  # by its suffix; reading it says why it fails
    assert "cannot read image" in found["read"] and "Permission denied" in found["read"]
    assert sorted(found["refused"]) == ["locked_photo", "shut"]
    assert "cannot be read (Permission denied)" in found["refused"]["locked_photo"]
    assert "a folder that cannot be listed (Permission denied)" in found["refused"]["shut"]
