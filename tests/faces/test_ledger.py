"""The face ledger (dbaf_jax/faces/ledger.py): what recovery without metadata matches
re-detected faces against, read as untrusted input."""

import dataclasses
import json

import numpy as np
import pytest

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import ledger, ledger_match


def face(seed):
    """A (64, 64, 3) crop in [-1, 1]: 8 x 8 blocks of random colours."""
    return np.kron(np.random.default_rng(seed).uniform(-1, 1, (8, 8, 3)), np.ones((8, 8, 1)))


def entry(index=0, centre=(0.5, 0.3), side=0.1, aspect=1.5, seed=0, separation=0.3):
    return ledger.Entry(index, aspect, centre, side, ledger_match.signature(face(seed)), separation)


def test_round_trip_and_match_by_place_size_and_signature(tmp_path):
    path = ledger.ledger_path(tmp_path / "me.key")
    assert path.name == "me.key.faces.jsonl"
    faces = [entry(0, seed=1), entry(1, centre=(0.8, 0.3), seed=2)]
    ledger.append(path, faces)
    read = ledger.read(path)
    assert [e.index for e in read] == [0, 1]
    np.testing.assert_allclose(read[1].signature, faces[1].signature, atol=1e-4)
    assert ledger_match.match(read, faces[1]) == 1
    assert ledger_match.match(read, faces[1], taken={1}) is None  # one detection per entry
    moved = entry(1, centre=(0.8 + 0.05, 0.3), seed=2)  # half a face's side away
    assert ledger_match.match(read, moved) is None
    other_face = entry(1, centre=(0.8, 0.3), seed=3)  # the same place, another face
    assert ledger_match.match(read, other_face) is None
    cropped = entry(1, centre=(0.8, 0.3), aspect=1.0, seed=2)  # another photo's shape
    assert ledger_match.match(read, cropped) is None


def test_only_a_face_nearer_the_published_one_than_the_original_was_matches():
    """The original face at the anonymized one's place fails (an anonymization that kept
    its likeness), a slightly changed copy of the published face (JPEG) matches."""
    published, original = face(1), face(1) * 0.9 + 0.05  # an anonymization that changed little
    (anonymized,) = ledger_match.entries(
        (100, 150), [3], [np.eye(2, 3) * 0.64], published[None], original[None]
    )
    assert anonymized.index == 3 and anonymized.separation > 0

    def candidate(crop):
        return ledger_match.entries((100, 150), [0], [np.eye(2, 3) * 0.64], crop[None])[0]

    assert ledger_match.match([anonymized], candidate(original)) is None
    noisy = np.clip(published + np.random.default_rng(0).normal(0, 0.02, published.shape), -1, 1)
    assert ledger_match.match([anonymized], candidate(noisy)) == 0


GOOD = {
    "index": 0,
    "aspect": 1,
    "centre": [0, 0],
    "side": 1,
    "signature": [0] * 192,
    "separation": 0.1,
}


def line_of(**changed) -> str:
    """A ledger line of one entry: `GOOD` with ``changed`` fields (None: left out)."""
    entry = {**GOOD, **changed}
    return json.dumps([{k: v for k, v in entry.items() if v is not None}])


@pytest.mark.parametrize(
    "line, words",
    [
        ("{not json", "line 1"),
        (json.dumps({"index": 0}), "list of entries"),
        (line_of(index=-1), "index"),
        (line_of(signature=[0] * 3), "signature"),
        (line_of(centre=[0, "x"]), "finite"),
        (line_of(separation=-1), "finite"),
        (line_of(extra=1), "exactly"),
        (line_of(clip="ab"), "exactly"),
        (line_of(clip="../x", frame=0), "run id"),
        (line_of(clip="ab", frame=-3), "frame"),
    ],
)
def test_a_damaged_ledger_is_one_error_naming_the_file_and_line(tmp_path, line, words):
    path = tmp_path / "me.key.faces.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=words) as error:
        ledger.read(path)
    assert str(path) in str(error.value)


def test_a_clips_entry_reads_back_with_its_run_and_frame(tmp_path):
    (entry,) = ledger_match.entries(
        (100, 150), [3], [np.eye(2, 3) * 0.64], face(1)[None], face(2)[None]
    )
    path = tmp_path / "me.key.faces.jsonl"
    ledger.append(path, [entry, dataclasses.replace(entry, clip="0f1e", frame=17)])
    photo, clip = ledger.read(path)
    assert (photo.clip, photo.frame, clip.clip, clip.frame) == (None, None, "0f1e", 17)
    assert ledger.read_for_key_file(tmp_path / "me.key")[1].frame == 17
    assert ledger.read_for_key_file(tmp_path / "other.key") is None
