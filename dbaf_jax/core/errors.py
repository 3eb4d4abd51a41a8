"""The errors a user can cause, as types.

Library functions raise these; only each command's ``main`` turns one into a single
``error: ...`` line and a non-zero exit status (`dbaf_jax.commands.run_main`), so a
Python caller keeps its interpreter and can catch what it expects. Every message
names the file, key or value at fault; `printable` is how a command prints one.
"""

import unicodedata


class DbafError(Exception):
    """Base class: a problem with the user's input, not a bug. The message is one line."""


class OutputExistsError(DbafError, FileExistsError):
    """An output exists already and replacing it was not asked for."""


class OutputWriteError(DbafError, OSError):
    """An output could not be written (permission, read-only or full file system)."""


class PasswordFileError(DbafError):
    """The password file is missing, unreadable, not UTF-8 or empty."""


class ModelDirectoryError(DbafError):
    """A model directory (or one network in it) is missing, damaged or of another kind."""


class NetworkNotFoundError(ModelDirectoryError, FileNotFoundError):
    """A network a model directory should hold is not there."""


class InputError(DbafError):
    """An input file or folder named by the user is missing or unusable."""


class DatasetError(DbafError):
    """A dataset is missing, empty or does not fit the run (size, batch)."""


class ConfigError(DbafError, ValueError):
    """A configuration value is out of range or names something that does not exist."""


class ModelMismatchError(InputError):
    """Images to recover were anonymized by another model than the one given."""


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (a file name may hold an
    escape sequence that rewrites the lines above it, or a newline that forges one),
    invisible format characters (bidirectional overrides reorder what is shown) and line
    separators are written as Python escapes, and the bytes of a name that is not
    UTF-8 (held as surrogates, ``os.fsdecode``) as ``\\xNN``; all else is unchanged."""
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if unicodedata.category(char) not in _UNSHOWN:
        return char
    if code < 0x100:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# Unicode categories never printed as they are: controls, format characters (bidi
# overrides, zero-width), line and paragraph separators, surrogates.
_UNSHOWN = {"Cc", "Cf", "Zl", "Zp", "Cs"}
