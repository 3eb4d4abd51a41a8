"""What the model families' compositions (`dbaf.DBAF`, `ifadit.IFADIT`) share: an e4e
encoder in front, a StyleGAN2 decoder behind, and a model directory holding one
network per field."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from dbaf_jax import model_directory

Variables = dict[str, Any]
Model = TypeVar("Model")


class EncoderDecoder:
    """Sizes of a composition with ``e4e`` and ``decoder`` fields."""

    @property
    def input_size(self) -> int:
        return self.e4e.input_size

    @property
    def output_size(self) -> int:
        return self.decoder.size


def network_names(cls: type) -> tuple[str, ...]:
    """The networks of a composition class: its dataclass fields but ``compute_dtype``."""
    return tuple(field.name for field in dataclasses.fields(cls) if field.name != "compute_dtype")


def load(cls: type[Model], directory, optional: tuple[str, ...], without_manifest: bool = False) -> tuple[Model, Variables]:
    """(composition, {network: variables}) of a model directory of ``cls.FAMILY``; the
    ``optional`` networks are None when the directory has none. Raises ModelDirectoryError
    naming what is wrong (`model_directory.load_model`)."""
    names = network_names(cls)
    required = tuple(n for n in names if n not in optional)
    networks = model_directory.load_model(directory, cls.FAMILY, required, optional, without_manifest)
    model = cls(**{name: networks[name].module if name in networks else None for name in names})
    return model, {name: network.variables for name, network in networks.items()}
