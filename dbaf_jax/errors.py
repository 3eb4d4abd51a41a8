"""The errors a user can cause, as types.

Library functions raise these; only each command's ``main`` turns one into a single
``error: ...`` line and a non-zero exit status (`dbaf_jax.commands.run_main`), so a
Python caller keeps its interpreter and can catch what it expects. Every message
names the file, key or value at fault.
"""


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
