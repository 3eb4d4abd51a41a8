"""Password -> KRIA key, reproducible for years and across library versions.

Derivation version 1: scrypt turns the NFC-normalised UTF-8 password and a random salt
into a 32-byte seed (`derive_seed`); SHAKE-256 of the seed, read through a fixed
Box-Muller formula, gives the three z vectors (`key_latents`); the frozen generator's
mapping network turns them into w, repeated 4/4/6 into the (14, 512) key
(`latents_to_key`). No library random stream is involved, so NumPy or JAX upgrades
cannot change a key. docs/decisions.md ("Keys from passwords") gives the exact
byte-level rules and why; the tests pin them with fixed vectors.

What is stored beside an output is a `KeyRecord` (salt, KDF name and parameters,
derivation version): never the password, which also never appears in logs or names.

Faces in photos each get their own key: `face_seed` turns the seed and the face's index
into that face's seed (SHAKE-256, docs/photos.md). A key file (`write_key_file`, the
command ``python -m dbaf_jax.commands.new_key --out me.key``) holds one record, so that images
stripped of their metadata can still be recovered with the password and the file.
Passwords are read from the first line of a file (`read_password`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import secrets
import unicodedata
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dbaf_jax.core.errors import InputError, PasswordFileError
from dbaf_jax.storage import atomic_files

DERIVATION_VERSION = 1
KDF_NAME = "scrypt"
SALT_BYTES = 16
SEED_BYTES = 32
# Go's x/crypto and most guides name N = 2**15, r = 8, p = 1 for interactive use.
DEFAULT_SCRYPT = {"n": 2**15, "r": 8, "p": 1}
# A record arrives with every image, from whoever sent it: its cost is bounded so that
# one image can cost at most 16x the default's work (~128 MiB, about a second), never
# the minutes or gigabytes a raised parameter would ask for (docs/decisions.md).
SCRYPT_LIMITS = {"n": (2**10, 2**17), "r": (1, 8), "p": (1, 4)}
RECORD_FIELDS = {"version", "kdf", "kdf_params", "salt"}
# Domain separation: this stream is for key latents, version 1, and nothing else.
DOMAIN = b"dbaf-jax key latents v1\x00"
# ... and this one for the seeds of the faces of a photo.
FACE_DOMAIN = b"dbaf-jax face seed v1\x00"
FACE_INDEX_BYTES = 4
KEY_FILE_FORMAT = "dbaf_jax key file"
KEY_FILE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KeyRecord:
    """How a key was derived, minus the password: what is stored beside the outputs.

    ``salt`` is hex; ``n``, ``r``, ``p`` are scrypt's cost parameters. JSON layout:
    ``{"version": 1, "kdf": "scrypt", "kdf_params": {"n": .., "r": .., "p": ..},
    "salt": "<32 hex digits>"}``.
    """

    salt: str
    n: int = DEFAULT_SCRYPT["n"]
    r: int = DEFAULT_SCRYPT["r"]
    p: int = DEFAULT_SCRYPT["p"]
    kdf: str = KDF_NAME
    version: int = DERIVATION_VERSION

    def __post_init__(self):
        if type(self.version) is not int or self.version != DERIVATION_VERSION:
            raise ValueError(
                f"key derivation version {self.version!r} is not supported (this dbaf_jax reads the integer {DERIVATION_VERSION})"
            )
        if self.kdf != KDF_NAME:
            raise ValueError(
                f"key derivation function {self.kdf!r} is not supported (only {KDF_NAME!r})"
            )
        try:
            salt = bytes.fromhex(self.salt)
        except (TypeError, ValueError):
            raise ValueError("key record salt must be a hex string") from None
        if len(salt) != SALT_BYTES:
            raise ValueError(f"key record salt must be {SALT_BYTES} bytes, got {len(salt)}")
        for name, (low, high) in SCRYPT_LIMITS.items():
            value = getattr(self, name)
            if type(value) is not int or not low <= value <= high:
                raise ValueError(
                    f"scrypt parameter {name}={value!r} is outside the accepted range [{low}, {high}]"
                )
        if self.n & (self.n - 1):
            raise ValueError(f"scrypt parameter n={self.n} is not a power of two")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "kdf": self.kdf,
            "kdf_params": {"n": self.n, "r": self.r, "p": self.p},
            "salt": self.salt,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> "KeyRecord":
        """The record of ``data`` (`to_dict`'s layout exactly, JSON types as written);
        ValueError saying what is wrong otherwise: a record is untrusted input."""
        if not isinstance(data, Mapping) or set(data) != RECORD_FIELDS:
            raise ValueError(f"a key record must be an object with exactly {sorted(RECORD_FIELDS)}")
        params = data["kdf_params"]
        if not isinstance(params, Mapping) or set(params) != set(SCRYPT_LIMITS):
            raise ValueError(f"kdf_params must be an object with exactly {sorted(SCRYPT_LIMITS)}")
        if (
            type(data["version"]) is not int
            or not isinstance(data["kdf"], str)
            or not isinstance(data["salt"], str)
        ):
            raise ValueError("a key record's version must be an integer, its kdf and salt strings")
        return cls(
            salt=data["salt"],
            n=params["n"],
            r=params["r"],
            p=params["p"],
            kdf=data["kdf"],
            version=data["version"],
        )

    @classmethod
    def from_json(cls, text: str) -> "KeyRecord":
        try:
            return cls.from_dict(json.loads(text))
        except (json.JSONDecodeError, RecursionError):
            raise ValueError("a key record must be JSON") from None


def new_key_record(
    n: int = DEFAULT_SCRYPT["n"], r: int = DEFAULT_SCRYPT["r"], p: int = DEFAULT_SCRYPT["p"]
) -> KeyRecord:
    """A record with a fresh random salt (from the OS's CSPRNG)."""
    return KeyRecord(salt=secrets.token_bytes(SALT_BYTES).hex(), n=n, r=r, p=p)


def derive_seed(password: str, record: KeyRecord) -> bytes:
    """scrypt(NFC-normalised UTF-8 password, salt) -> the 32-byte seed."""
    if not isinstance(password, str) or not password:
        raise ValueError("the password must be a non-empty string")
    secret = unicodedata.normalize("NFC", password).encode("utf-8")
    # OpenSSL refuses scrypt above 32 MiB unless told how much memory it may use.
    maxmem = 128 * record.r * (record.n + record.p + 2) + (1 << 20)
    return hashlib.scrypt(
        secret,
        salt=bytes.fromhex(record.salt),
        n=record.n,
        r=record.r,
        p=record.p,
        maxmem=maxmem,
        dklen=SEED_BYTES,
    )


def key_latents(seed: bytes, n_groups: int = 3, style_dim: int = 512) -> np.ndarray:
    """Seed -> z (n_groups, style_dim) float32 standard normals.

    SHAKE-256 words -> 53-bit uniforms -> Box-Muller in float64 (docs/decisions.md, step 2).
    """
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seed must be {SEED_BYTES} bytes, got {len(seed)}")
    count = n_groups * style_dim
    pairs = (count + 1) // 2
    stream = hashlib.shake_256(DOMAIN + seed).digest(16 * pairs)
    words = (
        (np.frombuffer(stream, dtype=">u8") >> np.uint64(11)).astype(np.float64).reshape(pairs, 2)
    )
    u1 = (words[:, 0] + 1.0) / 2.0**53
    u2 = words[:, 1] / 2.0**53
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = 2.0 * math.pi * u2
    z = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1).reshape(-1)[:count]
    return z.reshape(n_groups, style_dim).astype(np.float32)


def face_seed(seed: bytes, index: int) -> bytes:
    """The 32-byte seed of face ``index`` of a photo: SHAKE-256(FACE_DOMAIN || seed ||
    index as 4 big-endian bytes). Face seeds of one password and salt are unrelated to
    each other and to ``seed`` itself (which aligned crops use)."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seed must be {SEED_BYTES} bytes, got {len(seed)}")
    if not 0 <= index < 2 ** (8 * FACE_INDEX_BYTES):
        raise ValueError(f"face index must lie in [0, 2**{8 * FACE_INDEX_BYTES}), got {index}")
    return hashlib.shake_256(FACE_DOMAIN + seed + index.to_bytes(FACE_INDEX_BYTES, "big")).digest(
        SEED_BYTES
    )


def write_key_file(path: str | Path, record: KeyRecord, overwrite: bool = False) -> Path:
    """Writes ``record`` (salt and KDF parameters, no password) as a key file, atomically.

    Raises OutputExistsError if ``path`` exists and ``overwrite`` is not set.
    """
    content = {"format": KEY_FILE_FORMAT, "version": KEY_FILE_VERSION, "key": record.to_dict()}
    text = json.dumps(content, indent=1, sort_keys=True) + "\n"
    return atomic_files.write_file(
        path, lambda tmp: tmp.write_text(text, encoding="utf-8"), overwrite
    )


def read_key_file(path: str | Path) -> KeyRecord:
    """The record of a key file written by `write_key_file`; InputError naming the file
    when it is missing, not a key file, or its record is invalid."""
    path = Path(path)
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"cannot read the key file {path}: {err.strerror}") from None
    except (
        UnicodeDecodeError,
        ValueError,
        RecursionError,
    ):  # ValueError: also a number of over 4300 digits
        raise InputError(
            f"{path} is not a key file (not JSON, or a number too long to be one)"
        ) from None
    if not isinstance(content, dict) or content.get("format") != KEY_FILE_FORMAT:
        raise InputError(f"{path} is not a key file (no format {KEY_FILE_FORMAT!r})")
    if type(content.get("version")) is not int or content.get("version") != KEY_FILE_VERSION:
        raise InputError(
            f"{path}: key file version {content.get('version')!r} is not supported (this dbaf_jax reads the integer {KEY_FILE_VERSION})"
        )
    try:
        return KeyRecord.from_dict(content.get("key"))
    except ValueError as err:
        raise InputError(f"{path}: invalid key record ({err})") from None


def read_password(path: str | Path) -> str:
    """The first line of the UTF-8 file ``path``, without its line ending.

    Raises PasswordFileError for a missing or unreadable file, one that is not UTF-8,
    or an empty password.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PasswordFileError(f"cannot read the password file {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise PasswordFileError(f"the password file {path} is not UTF-8 text") from None
    password = text.splitlines()[0] if text else ""
    if not password:
        raise PasswordFileError(f"the password file {path} has an empty first line")
    return password
