"""Password -> key: fixed vectors, an independent re-derivation, statistics, the stored record."""

import hashlib
import json
import math
import struct
import unicodedata

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dbaf_jax.commands import new_key
from dbaf_jax.core.errors import InputError, OutputExistsError
from dbaf_jax.models.composition import latents_to_key
from dbaf_jax.models.stylegan2 import Generator
from dbaf_jax.storage import keys as keys_module
from dbaf_jax.storage.keys import (
    DEFAULT_SCRYPT,
    KeyRecord,
    derive_seed,
    key_latents,
    new_key_record,
)

# Derivation version 1, computed once and frozen: (password, salt, seed, indices, z values).
VECTORS = [
    (
        "correct horse battery staple",
        "000102030405060708090a0b0c0d0e0f",
        "7a8e34241db898d59175c696538c417467a975ffe569068425f16188d3159c58",
        [0, 1, 2, 3, 4, 5],
        [
            -0.8059826986092248,
            -0.8136771205407357,
            1.48184924018823,
            1.7899985664858755,
            -0.5999947525369619,
            -0.9789830731258853,
        ],
    ),
    (
        "pässwörd ✓",
        "f0e1d2c3b4a5968778695a4b3c2d1e0f",
        "2f69e7478a3cc38c82cf786a87d32b282c7059b49ff585cf2fe124743c9fa4dd",
        [1532, 1533, 1534, 1535],
        [0.20569950485489383, 0.4681825139331266, -0.7420267137770621, 0.6307239774512752],
    ),
]


def straightforward_derivation(
    password: str, salt_hex: str, count: int
) -> tuple[bytes, list[float]]:
    """The documented steps written out plainly with the standard library, value by value."""
    seed = hashlib.scrypt(
        unicodedata.normalize("NFC", password).encode("utf-8"),
        salt=bytes.fromhex(salt_hex),
        n=2**15,
        r=8,
        p=1,
        dklen=32,
        maxmem=64 * 2**20,
    )
    stream = hashlib.shake_256(b"dbaf-jax key latents v1\x00" + seed).digest(
        8 * (count + count % 2)
    )
    words = [w >> 11 for (w,) in struct.iter_unpack(">Q", stream)]
    z = []
    for k1, k2 in zip(words[0::2], words[1::2]):
        u1, u2 = (k1 + 1) / 2**53, k2 / 2**53
        radius = math.sqrt(-2.0 * math.log(u1))
        z += [radius * math.cos(2 * math.pi * u2), radius * math.sin(2 * math.pi * u2)]
    return seed, z[:count]


@pytest.mark.parametrize("password, salt, seed_hex, indices, values", VECTORS)
def test_fixed_vectors(password, salt, seed_hex, indices, values):
    record = KeyRecord(salt=salt)
    assert (record.n, record.r, record.p) == (2**15, 8, 1)
    seed = derive_seed(password, record)
    assert seed.hex() == seed_hex
    z = key_latents(seed)
    assert z.shape == (3, 512) and z.dtype == np.float32
    flat = z.reshape(-1)
    # key_latents is float32: exactly the float32 rounding of the float64 vector values.
    np.testing.assert_array_equal(flat[indices], np.asarray(values, np.float64).astype(np.float32))
    independent_seed, independent = straightforward_derivation(password, salt, 3 * 512)
    assert independent_seed.hex() == seed_hex
    np.testing.assert_allclose(np.asarray(independent)[indices], values, rtol=0, atol=1e-12)
    np.testing.assert_allclose(flat, np.asarray(independent, np.float32), rtol=0, atol=0)


def test_deterministic_and_normalised():
    record = KeyRecord(salt="00" * 16)
    composed = "pässwörd"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    assert (
        derive_seed(composed, record)
        == derive_seed(decomposed, record)
        == derive_seed(composed, record)
    )
    z = key_latents(derive_seed(composed, record))
    np.testing.assert_array_equal(z, key_latents(derive_seed(composed, record)))
    with pytest.raises(ValueError):
        derive_seed("", record)


def test_different_passwords_and_salts_give_unrelated_latents():
    salt_a, salt_b = "11" * 16, "22" * 16
    base = key_latents(derive_seed("password one", KeyRecord(salt=salt_a))).reshape(-1)
    others = [
        key_latents(derive_seed("password two", KeyRecord(salt=salt_a))).reshape(-1),
        key_latents(derive_seed("password one", KeyRecord(salt=salt_b))).reshape(-1),
        key_latents(derive_seed("password one", KeyRecord(salt=salt_a, n=2**14))).reshape(-1),
    ]
    for other in others:
        # 1536 pairs: an unrelated pair's correlation has standard deviation 1/sqrt(1536) = 0.026.
        assert abs(np.corrcoef(base, other)[0, 1]) < 0.1


def test_latents_are_standard_normal():
    seeds = [hashlib.sha256(bytes([i])).digest() for i in range(200)]
    z = np.concatenate([key_latents(seed).reshape(-1) for seed in seeds])
    assert z.size == 200 * 1536
    assert abs(z.mean()) < 0.01
    assert abs(z.std() - 1) < 0.01
    assert stats.kstest(z, "norm").pvalue > 0.01
    # The three vectors of one key are not copies of each other.
    one = key_latents(bytes(32))
    assert abs(np.corrcoef(one[0], one[1])[0, 1]) < 0.15


def test_record_is_json_and_never_holds_the_password():
    password = "hunter2-secret-phrase"
    record = new_key_record()
    assert record != new_key_record()  # fresh salt every time
    derive_seed(password, record)
    text = record.to_json()
    assert password not in text and password not in repr(record)
    data = json.loads(text)
    assert data == {
        "version": 1,
        "kdf": "scrypt",
        "kdf_params": dict(DEFAULT_SCRYPT),
        "salt": record.salt,
    }
    assert len(bytes.fromhex(data["salt"])) == 16
    assert KeyRecord.from_json(text) == record
    for bad in ({"version": 2}, {"kdf": "argon2id"}, {"salt": "abcd"}):
        with pytest.raises(ValueError):
            KeyRecord.from_dict({**data, **bad})


def derive_key(password, record, generator, variables, groups):
    """Password -> key the way the models make it: seed -> z -> the mapping network."""
    z = key_latents(derive_seed(password, record), len(groups), generator.style_dim)
    return latents_to_key(generator, variables, z, groups)


def test_derive_key_through_the_mapping_network():
    generator = Generator(size=32, style_dim=32, n_mlp=2, width_scale=1 / 16)
    # Only the mapping network is needed: initialise through `map`.
    init = jax.jit(lambda rng: generator.init(rng, jnp.zeros((1, 32)), method=Generator.map))
    variables = init(jax.random.key(0, impl="rbg"))
    record = KeyRecord(salt="ab" * 16)
    groups = (2, 2, 4)
    key = derive_key("tiny password", record, generator, variables, groups=groups)
    assert key.shape == (8, 32)
    z = key_latents(derive_seed("tiny password", record), n_groups=3, style_dim=32)
    w = generator.apply(variables, jnp.asarray(z), method=Generator.map)
    np.testing.assert_array_equal(key, np.repeat(np.asarray(w), groups, axis=0))
    np.testing.assert_array_equal(
        key, derive_key("tiny password", record, generator, variables, groups=groups)
    )
    other = derive_key("other password", record, generator, variables, groups=groups)
    assert np.abs(np.asarray(other - key)).max() > 1e-3
    # Batched z (the training's random keys) go through the same function.
    batch = latents_to_key(generator, variables, jnp.stack([z, z]), groups)
    assert batch.shape == (2, 8, 32)
    np.testing.assert_allclose(batch[1], key, rtol=0, atol=1e-6)


def test_full_size_key_shape():
    generator = Generator()
    z = jax.ShapeDtypeStruct((3, 512), jnp.float32)
    variables = jax.eval_shape(
        generator.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 14, 512), jnp.float32)
    )
    key = jax.eval_shape(lambda v, z: latents_to_key(generator, v, z), variables, z)
    assert key.shape == (14, 512)


# Face seeds, version 1, computed once and frozen: SHAKE-256(domain || seed || index).
FACE_SEED_VECTORS = [
    (0, "8466dbbbbcb4c9e65a11d84b1ce74fc0f10ee0edd12be4892557f57f7d2c0ec4"),
    (1, "57899a952e9b298e073ec83c580120d1d0f92d1ed77e6c94249bd471e0bb2ce1"),
    (65536, "d348d7d1844d7d65a08473f4156b15d9f92e728d046e1f4f94351c935a79e190"),
]


@pytest.mark.parametrize("index, expected", FACE_SEED_VECTORS)
def test_face_seed_fixed_vectors(index, expected):
    seed = bytes(range(32))
    assert keys_module.face_seed(seed, index).hex() == expected
    written_out = hashlib.shake_256(
        b"dbaf-jax face seed v1\x00" + seed + index.to_bytes(4, "big")
    ).digest(32)
    assert written_out.hex() == expected


def test_face_seed_refusals():
    with pytest.raises(ValueError, match="32 bytes"):
        keys_module.face_seed(b"short", 0)
    with pytest.raises(ValueError, match="face index"):
        keys_module.face_seed(bytes(32), -1)


def test_key_file_round_trip_and_refusals(tmp_path, capsys):
    path = new_key.main(["--out", str(tmp_path / "me.key")])
    record = keys_module.read_key_file(path)
    assert (
        len(bytes.fromhex(record.salt)) == keys_module.SALT_BYTES
        and record.n == DEFAULT_SCRYPT["n"]
    )
    assert "salt" in path.read_text() and "password" not in path.read_text()
    with pytest.raises(OutputExistsError):
        new_key.main(["--out", str(path)])
    assert keys_module.read_key_file(new_key.main(["--out", str(path), "--overwrite"])) != record
    (tmp_path / "text.key").write_text("not json")
    (tmp_path / "other.key").write_text(json.dumps({"format": "something else"}))
    (tmp_path / "bad.key").write_text(
        json.dumps({"format": keys_module.KEY_FILE_FORMAT, "version": 1, "key": {"salt": "00"}})
    )
    (tmp_path / "v_string.key").write_text(
        json.dumps({"format": keys_module.KEY_FILE_FORMAT, "version": "1", "key": {}})
    )
    (tmp_path / "huge.key").write_text('{"format": "x", "version": ' + "9" * 5000 + "}")
    for name, reason in (
        ("missing.key", "cannot read"),
        ("text.key", "not JSON"),
        ("other.key", "not a key file"),
        ("bad.key", "invalid key record"),
        ("v_string.key", "version '1' is not supported \\(this dbaf_jax reads the integer 1\\)"),
        ("huge.key", "huge.key is not a key file \\(not JSON, or a number too long"),
    ):
        with pytest.raises(InputError, match=reason):
            keys_module.read_key_file(tmp_path / name)
