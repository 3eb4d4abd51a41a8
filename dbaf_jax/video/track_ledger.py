"""The face ledger for clips: which re-detected tracks recovery without a sidecar may touch.

A clip shared through a site loses its sidecar file and its container tags; recovery
then finds the faces again by detection and tracking (`passes.find_tracks`) and, as
for photos (`faces.ledger`), must not recover a face that was never anonymized. So
anonymizing a clip with a key file appends to the key file's ledger, for every track,
entries on sampled frames (its first and last frame and one every `SAMPLE_SECONDS`):
the face's place, the signature of the published face and its separation from the
original, with the run's id and the frame's number. Recovery matches each re-detected
face on a frame that holds entries against that frame's entries (`ledger_match.match`), its
signature read at the entry's place (`ledger_match.transform_at`: the re-detected face's
rotation, the entry's centre and side): re-detection of a small face in a moving clip
jitters by a fair part of its side, which moves the signature's cells, while at the
recorded place the published face reads back as it was and a face never anonymized
still lies its whole separation away. A re-detected track is verified when at least
`VERIFIED_FRACTION` of its faces on such frames match entries of one anonymized track
(one run id and key index); it is then recovered with that track's key, only on frames
within that track's span, at that track's place on each frame (`_anchored`: exact at
its entries, between them the re-detected motion; the rotation re-detected), and each
face changes pixels only within the disc `ledger_match.region` gives for that place. Every other re-detected track is left exactly as it is and counted. Frames
are matched by number, so a copy whose frames were dropped or added does not verify
and is left as it is.

The ledger is untrusted input, and its entries buy crops and signatures: before they
are matched, each run's entries on one frame are held to the sidecar's and photos'
rules against the clip's size (`places.max_recorded_faces`, `places.check_places`,
`places.overlapping`, at most `places.STACK` at one place) and to one entry per track
(key index) per frame.
"""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import ledger, ledger_match, places
from dbaf_jax.faces.photos import AlignedFace
from dbaf_jax.video import tracks
from dbaf_jax.video.clip import Frame

SAMPLE_SECONDS = 0.5
VERIFIED_FRACTION = 0.5

Placed = list[
    tuple[int, int, np.ndarray]
]  # (track number or key index, first frame, transforms (T, 2, 3))
Region = tuple[tuple[float, float], float]
Crop = Callable[
    [np.ndarray, Sequence[AlignedFace]], np.ndarray
]  # (frame, faces) -> crops (N, S, S, 3) in [-1, 1]


def sampled_offsets(length: int, rate: float) -> list[int]:
    """The frames of a track of ``length`` frames (offsets from its first) that get
    ledger entries, at ``rate`` frames per second."""
    stride = max(1, round(rate * SAMPLE_SECONDS))
    return sorted({*range(0, length, stride), length - 1})


class Recorder:
    """Collects one anonymization run's entries (its id `clip`) for the ledger at
    ``path`` as its frames are made: `observe` each frame with its faces, then `write`."""

    def __init__(self, placed: Placed, rate: float, crop: Crop, path: Path):
        self.clip = secrets.token_hex(8)
        self.crop = crop
        self.path = path
        self.wanted = {
            (number, first + offset)
            for number, first, stack in placed
            for offset in sampled_offsets(len(stack), rate)
        }
        self.entries: list[ledger.Entry] = []

    def observe(
        self, index: int, published: np.ndarray, faces: Sequence[AlignedFace], originals: np.ndarray
    ) -> None:
        """Frame ``index`` as published (H, W, 3) uint8, its ``faces`` and their crops
        (N, S, S, 3) in the source frame."""
        chosen = [i for i, face in enumerate(faces) if (face.index, index) in self.wanted]
        if not chosen:
            return
        picked = [faces[i] for i in chosen]
        made = ledger_match.entries(
            published.shape,
            [face.index for face in picked],
            [face.transform for face in picked],
            self.crop(published, picked),
            originals[chosen],
        )
        self.entries += [dataclasses.replace(entry, clip=self.clip, frame=index) for entry in made]

    def write(self) -> None:
        """Appends the run's entries to the ledger, all or none (`ledger.append`)."""
        ledger.append(self.path, self.entries)


@dataclasses.dataclass(frozen=True)
class Verified:
    """The re-detected tracks recovery may touch, as (key index, first frame,
    transforms at the anonymized track's places) trimmed to its span; each frame's regions
    (`ledger_match.region`) in the order of `tracks.by_frame`; tracks left as they were."""

    placed: Placed
    regions: dict[int, list[Region]]
    unverified: int


def _anchored(
    span: list[ledger.Entry],
    first: int,
    stack: np.ndarray,
    start: int,
    stop: int,
    size: int,
    shape: Sequence[int],
) -> list[ledger.Entry]:
    """The anonymized track's place on frames ``start`` .. ``stop`` of a re-detected
    track (transforms ``stack`` from frame ``first``), as entries: the re-detected place
    moved by its offset from the ledger's ``span`` (entries sorted by frame), which is
    exact at the entries inside the frames and linear between them (constant beyond).
    The re-detected track follows the motion between entries; the ledger removes
    re-detection's bias (where a generated face's landmarks fall)."""
    anchors = [entry for entry in span if start <= entry.frame <= stop]
    frames = np.array([entry.frame for entry in anchors], np.float64)
    offsets = []
    for entry in anchors:
        _, centre, side = ledger_match.place(shape, stack[entry.frame - first], size)
        offsets.append(
            (entry.centre[0] - centre[0], entry.centre[1] - centre[1], np.log(entry.side / side))
        )
    offsets = np.array(offsets)
    places = []
    for frame in range(start, stop + 1):
        dx, dy, dlog = (np.interp(frame, frames, offsets[:, k]) for k in range(3))
        _, centre, side = ledger_match.place(shape, stack[frame - first], size)
        places.append(
            dataclasses.replace(
                anchors[0],
                centre=(centre[0] + dx, centre[1] + dy),
                side=side * float(np.exp(dlog)),
                frame=frame,
            )
        )
    return places


def _match(
    entries: list[ledger.Entry], pixels: np.ndarray, face: AlignedFace, crop: Crop, taken: set[int]
) -> int | None:
    """The position among ``entries`` (one frame's) of the entry the re-detected ``face``
    of the frame ``pixels`` matches, its signature read at each entry's place (only for
    entries whose place and size it has, `ledger_match.in_place`); or None."""
    aspect, centre, side = ledger_match.place(pixels.shape, face.transform, face.size)
    best, best_distance = None, float("inf")
    for position, entry in enumerate(entries):
        if position in taken or not ledger_match.in_place(entry, aspect, centre, side):
            continue
        at = AlignedFace(
            face.index,
            ledger_match.transform_at(entry, face.transform, face.size, pixels.shape),
            face.size,
        )
        near = ledger_match.distance(ledger_match.signature(crop(pixels, [at])[0]), entry.signature)
        if ledger_match.near_enough(entry, near) and near < best_distance:
            best, best_distance = position, near
    return best


def check_entries(clip_entries: Sequence[ledger.Entry], shape: Sequence[int]) -> None:
    """InputError when one run's entries on one frame of a clip of upright ``shape``
    (H, W) break the module doc's bounds."""
    width = shape[1]
    groups: dict[tuple[str, int], list[ledger.Entry]] = {}
    for entry in clip_entries:
        groups.setdefault((entry.clip, entry.frame), []).append(entry)
    most = places.max_recorded_faces(shape)
    for (run, frame), group in groups.items():
        name = f"the key file's face ledger: run {run}, frame {frame}"
        if len(group) > most:
            raise InputError(
                f"{name}: {len(group)} faces, more than the {most} a {shape[1]}x{shape[0]} frame can hold"
            )
        if len({entry.index for entry in group}) != len(group):
            raise InputError(f"{name}: a track (key index) has two entries")
        sides = np.array([entry.side for entry in group]) * width
        centres = np.array([entry.centre for entry in group]) * width
        try:
            places.check_places(
                sides, centres, shape, lambda k, group=group: f"key index {group[k].index}"
            )
        except ValueError as err:
            raise InputError(f"{name}: {err}") from None
        found = (
            places.overlapping(sides[None], centres[None], places.STACK)
            if len(group) > places.STACK
            else None
        )
        if found is not None:
            raise InputError(
                f"{name}: key index {group[found[1]].index} overlaps {found[3]} other entries, key index "
                f"{group[found[2]].index} among them (at most {places.STACK} faces at one place)"
            )


def verify(
    face_ledger: Iterable[ledger.Entry],
    placed: Placed,
    frames: Iterable[Frame],
    crop: Crop,
    size: int,
    shape: Sequence[int],
) -> Verified:
    """Which re-detected tracks ``placed`` (track number, first frame, transforms for
    crops of ``size``) of the clip ``frames`` (upright ``shape`` (H, W)) match the
    ledger's clip entries (module doc)."""
    clip_entries = [entry for entry in face_ledger if entry.clip is not None]
    check_entries(clip_entries, shape)
    on_frame: dict[int, list[ledger.Entry]] = {}
    for entry in clip_entries:
        on_frame.setdefault(entry.frame, []).append(entry)
    found = tracks.by_frame(placed)
    checked: dict[int, int] = {}
    votes: dict[int, dict[tuple[str, int], int]] = {}
    for frame in frames:
        here, entries = found.get(frame.index, []), on_frame.get(frame.index, [])
        if not here or not entries:
            continue
        taken: set[int] = set()
        for number, transform in here:
            checked[number] = checked.get(number, 0) + 1
            position = _match(
                entries, frame.pixels, AlignedFace(number, transform, size), crop, taken
            )
            if position is not None:
                taken.add(position)
                track = (entries[position].clip, entries[position].index)
                votes.setdefault(number, {})[track] = votes.setdefault(number, {}).get(track, 0) + 1
    spans: dict[tuple[str, int], list[ledger.Entry]] = {}
    for entry in sorted(clip_entries, key=lambda entry: entry.frame):
        spans.setdefault((entry.clip, entry.index), []).append(entry)
    verified: Placed = []
    regions: dict[int, list[Region]] = {}
    for number, first, stack in placed:
        counted = votes.get(number, {})
        track, count = max(counted.items(), key=lambda item: item[1]) if counted else (None, 0)
        if track is None or count < VERIFIED_FRACTION * checked[number]:
            continue
        span = spans[track]
        start, stop = max(first, span[0].frame), min(first + len(stack) - 1, span[-1].frame)
        if start > stop:
            continue
        places = _anchored(span, first, stack, start, stop, size, shape)
        verified.append(
            (
                track[1],
                start,
                np.stack(
                    [
                        ledger_match.transform_at(entry, stack[entry.frame - first], size, shape)
                        for entry in places
                    ]
                ),
            )
        )
        for entry in places:
            regions.setdefault(entry.frame, []).append(ledger_match.region(entry, shape))
    return Verified(verified, regions, len(placed) - len(verified))
