"""Seeded, reproducible split lists of a folder of face images.

    python -m dbaf_jax.commands.make_splits --images DIR --out LISTS_DIR --protocol ffhq|celebahq [--seed 0]

Protocols (the DBAF paper's):
- ``ffhq``: test.txt (1000) and train.txt (69000) of FFHQ's 70000 images;
- ``celebahq``: test.txt (1000 images of CelebA-HQ).
Both also get rates200.txt (the 200 test images the recognition rates are measured
on) and diversity5.txt (the 5 test faces of the t-SNE figure), each drawn from
test.txt (diversity5 is inside rates200).

The order is version-stable: every image's path relative to DIR (with '/') is keyed
by sha256("<seed>:<path>") and the images are sorted by that key; test takes the
first images in this order, train the next, and each subset the first of its
parent. No library random stream is involved, so the lists depend only on the file
names and the seed. Each file holds one relative path per line, sorted, after one
'#' header line naming the protocol, seed and counts.

A folder with more images than the protocol uses leaves the rest out (and says
how many). With fewer it is refused, unless --allow-fewer: then every count is
multiplied by (images found / images the protocol needs), rounded down, at least 1,
and a subset never exceeds its parent (a smoke-test mode; such lists are not the
paper's protocol).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

from dbaf_jax.core.errors import ConfigError, DatasetError, OutputExistsError
from dbaf_jax.storage.images import list_images

HEADER_PREFIX = "#"


@dataclasses.dataclass(frozen=True)
class Subset:
    """``count`` images drawn from the list ``parent``."""

    parent: str
    count: int


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Disjoint partitions (name -> count, taken in this order) and subsets of them."""

    partitions: dict[str, int]
    subsets: dict[str, Subset]

    @property
    def needed(self) -> int:
        return sum(self.partitions.values())


_SUBSETS = {"rates200": Subset("test", 200), "diversity5": Subset("rates200", 5)}
PROTOCOLS = {
    "ffhq": Protocol({"test": 1000, "train": 69000}, _SUBSETS),
    "celebahq": Protocol({"test": 1000}, _SUBSETS),
}


def shuffled(relative_paths: list[str], seed: int) -> list[str]:
    """``relative_paths`` sorted by sha256("<seed>:<path>"): a seeded order stable across versions."""
    return sorted(
        relative_paths, key=lambda path: hashlib.sha256(f"{seed}:{path}".encode()).digest()
    )


def _scaled(count: int, scale: float) -> int:
    return max(1, math.floor(count * scale))


@dataclasses.dataclass(frozen=True)
class Splits:
    """The lists of one protocol ({name: relative paths, sorted}) and how many images the folder had."""

    lists: dict[str, list[str]]
    images_found: int
    images_unused: int


def make_splits(
    images_dir: str | Path, protocol: str, seed: int = 0, allow_fewer: bool = False
) -> Splits:
    """The protocol's lists for the images below ``images_dir`` (see the module docstring).

    Raises ConfigError for an unknown protocol, DatasetError when the folder is
    missing or has too few images (unless ``allow_fewer``).
    """
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    spec = PROTOCOLS[protocol]
    images_dir = Path(images_dir)
    if not images_dir.is_dir():
        raise DatasetError(f"{images_dir}: not a directory")
    relative = [path.relative_to(images_dir).as_posix() for path in list_images(images_dir)]
    found = len(relative)

    counts = dict(spec.partitions)
    subset_counts = {name: subset.count for name, subset in spec.subsets.items()}
    if found < spec.needed:
        if not allow_fewer:
            parts = " + ".join(f"{count} {name}" for name, count in spec.partitions.items())
            raise DatasetError(
                f"{images_dir}: {found} images, the {protocol} protocol needs {spec.needed} ({parts}); "
                "--allow-fewer scales the counts down"
            )
        if found < len(counts):
            raise DatasetError(
                f"{images_dir}: {found} images, fewer than the {protocol} protocol's {len(counts)} lists"
            )
        scale = found / spec.needed
        counts = {name: _scaled(count, scale) for name, count in counts.items()}
        subset_counts = {name: _scaled(count, scale) for name, count in subset_counts.items()}

    order = shuffled(relative, seed)
    ordered_lists, start = {}, 0
    for name, count in counts.items():
        ordered_lists[name] = order[start : start + count]
        start += count
    for name, subset in spec.subsets.items():
        ordered_lists[name] = ordered_lists[subset.parent][: subset_counts[name]]
    lists = {name: sorted(paths) for name, paths in ordered_lists.items()}
    return Splits(lists, found, found - start)


def write_splits(
    lists: dict[str, list[str]], out_dir: str | Path, header: str, overwrite: bool = False
) -> list[Path]:
    """Writes each list to ``out_dir/<name>.txt`` after a '# <header>' line; returns the files.

    Refuses (OutputExistsError) to replace an existing list unless ``overwrite``.
    """
    out_dir = Path(out_dir)
    targets = {name: out_dir / f"{name}.txt" for name in lists}
    existing = [str(path) for path in targets.values() if path.exists()]
    if existing and not overwrite:
        raise OutputExistsError(
            f"{', '.join(existing)} exist already (pass --overwrite to replace)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, path in targets.items():
        tmp = path.with_name(path.name + ".partial")
        lines = [f"{HEADER_PREFIX} {header} list={name} count={len(lists[name])}", *lists[name]]
        tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        tmp.replace(path)
    return list(targets.values())


def read_split(list_file: str | Path, images_dir: str | Path) -> list[Path]:
    """The image paths of a split list, under ``images_dir``, in the file's order.

    One path relative to ``images_dir`` per line; blank lines and lines starting with
    '#' are skipped.

    Raises DatasetError when the list is missing or empty, or names files that do
    not exist (the message names the first few and the count).
    """
    list_file, images_dir = Path(list_file), Path(images_dir)
    try:
        lines = list_file.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DatasetError(f"{list_file}: cannot read split list ({err.strerror})") from None
    paths = [
        images_dir / line for line in lines if line.strip() and not line.startswith(HEADER_PREFIX)
    ]
    if not paths:
        raise DatasetError(f"{list_file}: the split list names no images")
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise DatasetError(
            f"{list_file}: {len(missing)} of {len(paths)} listed images do not exist under {images_dir}: {shown}"
        )
    return paths
