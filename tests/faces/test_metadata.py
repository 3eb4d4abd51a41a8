"""An image's ``dbaf_jax`` metadata is untrusted input: a corpus of hostile and
careless chunks (wrong types, missing or extra fields, raised KDF costs, non-JSON,
nesting deeper than Python's stack) plus seeded random mutations of a valid chunk.
Each must either be accepted exactly as written or refused with an `InputError` that
names the file; none may start the KDF or end in another exception."""

import copy
import json

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import metadata, photos
from dbaf_jax.storage import images, keys

FINGERPRINT = "0123456789abcdef"
SIZE = 64


def valid_photo_meta() -> dict:
    meta = metadata.anonymization(keys.KeyRecord(salt="ab" * keys.SALT_BYTES), FINGERPRINT)
    face = photos.AlignedFace(0, np.array([[0.5, 0.1, 3.0], [-0.1, 0.5, 4.0]]), SIZE)
    return {**meta, **metadata.photo_fields((40, 30, 3), [face])}


def write_chunk(path, text: str):
    info = PngImagePlugin.PngInfo()
    info.add_text(images.METADATA_CHUNK, text)
    Image.fromarray(np.zeros((40, 30, 3), np.uint8)).save(path, format="PNG", pnginfo=info)
    return path


def set_path(meta: dict, path: tuple, value) -> dict:
    meta = copy.deepcopy(meta)
    target = meta
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return meta


def drop_path(meta: dict, path: tuple) -> dict:
    meta = copy.deepcopy(meta)
    target = meta
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    return meta


BASE = valid_photo_meta()
# (name, chunk text, words the refusal must contain)
CORPUS = [
    (
        "raised p",
        json.dumps(set_path(BASE, ("key", "kdf_params", "p"), 100000)),
        ["p=100000", "range"],
    ),
    (
        "raised n",
        json.dumps(set_path(BASE, ("key", "kdf_params", "n"), 2**22)),
        ["n=4194304", "range"],
    ),
    ("raised r", json.dumps(set_path(BASE, ("key", "kdf_params", "r"), 1024)), ["r=1024"]),
    ("tiny n", json.dumps(set_path(BASE, ("key", "kdf_params", "n"), 2)), ["n=2"]),
    (
        "n not a power of two",
        json.dumps(set_path(BASE, ("key", "kdf_params", "n"), 2**15 + 1)),
        ["power of two"],
    ),
    (
        "n as a string",
        json.dumps(set_path(BASE, ("key", "kdf_params", "n"), "32768")),
        ["n='32768'"],
    ),
    (
        "n as a float",
        json.dumps(set_path(BASE, ("key", "kdf_params", "n"), 32768.0)),
        ["n=32768.0"],
    ),
    ("n as a boolean", json.dumps(set_path(BASE, ("key", "kdf_params", "p"), True)), ["p=True"]),
    ("n infinite", json.dumps(BASE).replace('"n": 32768', '"n": 1e999'), ["n=inf"]),
    (
        "extra KDF parameter",
        json.dumps(set_path(BASE, ("key", "kdf_params", "maxmem"), 1)),
        ["kdf_params"],
    ),
    (
        "kdf params a list",
        json.dumps(set_path(BASE, ("key", "kdf_params"), [1, 2, 3])),
        ["kdf_params"],
    ),
    ("other KDF", json.dumps(set_path(BASE, ("key", "kdf"), "argon2id")), ["argon2id"]),
    ("other version", json.dumps(set_path(BASE, ("key", "version"), 2)), ["version 2"]),
    ("version a string", json.dumps(set_path(BASE, ("key", "version"), "1")), ["version"]),
    ("salt not hex", json.dumps(set_path(BASE, ("key", "salt"), "zz" * 16)), ["salt"]),
    ("salt short", json.dumps(set_path(BASE, ("key", "salt"), "ab")), ["salt"]),
    ("salt a number", json.dumps(set_path(BASE, ("key", "salt"), 12)), ["salt"]),
    ("no key", json.dumps(drop_path(BASE, ("key",))), ["missing", "key"]),
    ("key a string", json.dumps(set_path(BASE, ("key",), "secret")), ["key record"]),
    ("no model", json.dumps(drop_path(BASE, ("model",))), ["missing", "model"]),
    ("model a string", json.dumps(set_path(BASE, ("model",), "x")), ["model"]),
    (
        "fingerprint a number",
        json.dumps(set_path(BASE, ("model", "fingerprint"), 7)),
        ["fingerprint"],
    ),
    (
        "fingerprint long",
        json.dumps(set_path(BASE, ("model", "fingerprint"), "a" * 10000)),
        ["fingerprint"],
    ),
    (
        "model path huge",
        json.dumps(set_path(BASE, ("model", "path"), "p" * 100000)),
        ["model.path"],
    ),
    ("model with another field", json.dumps(set_path(BASE, ("model", "user"), "jdoe")), ["model"]),
    ("version an object", json.dumps(set_path(BASE, ("dbaf_jax",), {"a": 1})), ["version"]),
    (
        "operation a list",
        json.dumps(set_path(BASE, ("operation",), ["anonymize"])),
        ["not an anonymized image"],
    ),
    (
        "operation recover",
        json.dumps(set_path(BASE, ("operation",), "recover")),
        ["not an anonymized image"],
    ),
    ("extra field", json.dumps(set_path(BASE, ("password",), "x")), ["unexpected", "password"]),
    ("photo without faces", json.dumps(drop_path(BASE, ("faces",))), ["photo"]),
    ("not JSON", "{not json", ["not JSON"]),
    ("a JSON list", "[1, 2]", ["not a JSON object"]),
    ("a JSON string", '"anonymize"', ["not a JSON object"]),
    ("nested too deep", "[" * 100000 + "]" * 100000, ["not JSON"]),
    ("empty", "", ["not JSON"]),
    (
        "a 5000-digit number",
        json.dumps(BASE).replace('"n": 32768', '"n": ' + "9" * 5000),
        ["not JSON", "number too long"],
    ),
]


@pytest.mark.parametrize("name, text, words", CORPUS, ids=[c[0] for c in CORPUS])
def test_hostile_chunk_is_refused_naming_the_file(tmp_path, name, text, words):
    path = write_chunk(tmp_path / "hostile.png", text)
    with pytest.raises(InputError) as err:
        metadata.read_anonymization(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_valid_chunk_is_read_back(tmp_path):
    made = metadata.read_anonymization(write_chunk(tmp_path / "ok.png", json.dumps(BASE)))
    assert made.record == keys.KeyRecord(salt="ab" * keys.SALT_BYTES)
    assert made.fingerprint == FINGERPRINT and made.is_photo and made.fields == BASE
    assert metadata.read_anonymization(tmp_path / "ok.png") == made
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "plain.png")
    assert metadata.read_anonymization(tmp_path / "plain.png") is None


def test_key_record_bounds_are_the_documented_ones():
    low, high = keys.SCRYPT_LIMITS["n"]
    assert keys.DEFAULT_SCRYPT["n"] * 4 == high and low <= keys.DEFAULT_SCRYPT["n"]
    for name, value in keys.DEFAULT_SCRYPT.items():
        assert keys.SCRYPT_LIMITS[name][0] <= value <= keys.SCRYPT_LIMITS[name][1]
    # The most one record may ask for: 128 * r * n bytes of memory.
    assert 128 * keys.SCRYPT_LIMITS["r"][1] * high == 128 * 2**20


JSON_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    2**64,
    "",
    "x" * 5000,
    [],
    [1, "a"],
    {},
    {"a": None},
    float("nan"),
]


def leaf_paths(tree, prefix=()):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield prefix + (k,)
            yield from leaf_paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield prefix + (i,)
            yield from leaf_paths(v, prefix + (i,))


def test_random_mutations_are_accepted_as_written_or_refused(tmp_path):
    """500 seeded mutations (replace or delete a field anywhere, 1-3 at a time): each
    chunk is either refused with InputError naming the file, or accepted and then equal
    to what was written, with faces that pass `metadata.recorded_faces` or are refused by it."""
    rng = np.random.default_rng(12)
    paths = list(leaf_paths(BASE))
    refused = 0
    for trial in range(500):
        meta = BASE
        for _ in range(rng.integers(1, 4)):
            path = paths[rng.integers(len(paths))]
            try:
                if rng.random() < 0.2:
                    meta = drop_path(meta, path)
                else:
                    meta = set_path(meta, path, JSON_VALUES[rng.integers(len(JSON_VALUES))])
            except (KeyError, IndexError, TypeError):
                continue  # an earlier mutation removed this path's parent
        file = write_chunk(tmp_path / f"m{trial}.png", json.dumps(meta))
        try:
            made = metadata.read_anonymization(file)
        except InputError as err:
            assert str(file) in str(err) and "\n" not in str(err)
            refused += 1
            continue
        assert made.fields == json.loads(json.dumps(meta))
        try:
            faces = metadata.recorded_faces(made.fields, (40, 30, 3), SIZE)
        except InputError:
            refused += 1
            continue
        assert all(np.isfinite(face.transform).all() for face in faces)
    assert refused > 400  # most single mutations of this schema break it


def test_a_legacy_model_path_is_read_and_dropped(tmp_path):
    """Earlier versions recorded the model's path; such files still recover, and the
    path is not carried into what recovery writes."""
    legacy = set_path(BASE, ("model", "path"), "/home/jdoe/models/dbaf")
    made = metadata.read_anonymization(write_chunk(tmp_path / "old.png", json.dumps(legacy)))
    assert made.fingerprint == FINGERPRINT and made.fields["model"] == {"fingerprint": FINGERPRINT}
    assert "jdoe" not in json.dumps(made.fields)
    assert "path" not in json.dumps(metadata.anonymization(made.record, FINGERPRINT))
