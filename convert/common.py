"""Shared machinery of the converters: reading a PyTorch checkpoint and mapping its keys.

A converter states its mapping as rules, one per leaf of the Flax variable tree:
``{('params', 'mapping', 'dense_1', 'kernel'): Rule('style.1.weight', linear)}``.
`map_state_dict` applies them against the tree the Flax module expects and refuses the
file, key by key, when anything does not fit: a torch key the rules need but the file
lacks (missing), a key of the file that no rule reads (unexpected), or a tensor whose
shape after the transform differs from the Flax leaf (mis-shaped).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
from flax import traverse_util

# A converter's entry point: a ConversionError (any DbafError) becomes one `error:` line, exit 1.
from dbaf_jax.commands import run_main as run  # noqa: F401
from dbaf_jax.core.errors import DbafError

Array = np.ndarray
Path_ = tuple[str, ...]


class ConversionError(DbafError):
    """A checkpoint that cannot be converted; the message names the file and the keys."""


def identity(x: Array) -> Array:
    return x


def conv_kernel(x: Array) -> Array:
    """PyTorch Conv2d weight (O, I, kh, kw) -> Flax kernel (kh, kw, I, O)."""
    return x.transpose(2, 3, 1, 0)


def linear_kernel(x: Array) -> Array:
    """PyTorch Linear weight (out, in) -> Flax kernel (in, out)."""
    return x.T


def flatten(x: Array) -> Array:
    """Drops singleton axes: (1, C, 1, 1) biases, (1,) scalars."""
    return x.reshape(-1) if x.size > 1 else x.reshape(())


@dataclasses.dataclass(frozen=True)
class Rule:
    """Where a Flax leaf comes from: a torch key and how to lay its tensor out."""

    key: str
    transform: Callable[[Array], Array] = identity


# How torch.load(weights_only=True) begins its refusal of a pickle holding more than tensors.
_WEIGHTS_ONLY_REFUSAL = "Weights only load failed"


def load_torch_checkpoint(path: str | Path) -> Any:
    """Loads a PyTorch checkpoint on the CPU, or raises ConversionError in one line.

    Only tensors and plain containers are unpickled (``weights_only=True``): a file that
    holds other objects, whose unpickling could run code, is refused."""
    import torch  # converter-time dependency only

    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as first:  # noqa: BLE001 - any failure is reported, never a traceback
        # rosinality and pSp training checkpoints pickle an argparse.Namespace of options.
        if "Namespace" in str(first):
            try:
                with torch.serialization.safe_globals([argparse.Namespace]):
                    return torch.load(path, map_location="cpu", weights_only=True)
            except Exception as second:  # noqa: BLE001
                first = second
        text = str(first).strip()
        if _WEIGHTS_ONLY_REFUSAL in text:
            # torch's message is several lines of advice to load unsafely; keep only the facts.
            pickled = re.search(r"Unsupported global: GLOBAL (\S+)", text)
            if pickled:
                raise ConversionError(
                    f"{path}: holds objects other than tensors (pickled {pickled.group(1)}) and is refused for safety"
                ) from None
            detail = re.search(
                r"WeightsUnpickler error:(.*?)(?:Check the documentation|$)", text, re.S
            )
            reason = " ".join(detail.group(1).split()) if detail else ""
            reason = f"unpickling stopped: {reason}" if reason else "not a pickle of tensors"
        else:
            reason = text.splitlines()[0] if text else type(first).__name__
        raise ConversionError(f"{path}: not a readable PyTorch checkpoint ({reason})") from None


def to_numpy(state_dict: Mapping[str, Any], source: str) -> dict[str, Array]:
    """A state_dict of tensors -> float32/int numpy arrays; refuses anything that is not one."""
    if not isinstance(state_dict, Mapping):
        raise ConversionError(f"{source}: expected a state_dict, found {type(state_dict).__name__}")
    out = {}
    for key, value in state_dict.items():
        if not hasattr(value, "detach"):
            raise ConversionError(
                f"{source}: entry {key!r} is a {type(value).__name__}, not a tensor"
            )
        out[key] = value.detach().cpu().numpy()
    return out


def sub_dict(state_dict: Mapping[str, Array], prefix: str) -> dict[str, Array]:
    """The entries under ``prefix`` with the prefix removed (``'encoder.'`` etc.)."""
    return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}


def map_state_dict(
    state_dict: Mapping[str, Array],
    rules: Mapping[Path_, Rule | str],
    expected: Mapping[str, Any],
    source: str,
    ignore: Iterable[str] = (),
) -> dict[str, Any]:
    """Builds the Flax variable tree from ``state_dict`` following ``rules``.

    Args:
      state_dict: torch key -> numpy array.
      rules: Flax leaf path -> Rule (a bare string is a Rule with no transform).
      expected: the variable tree the module expects (arrays or ShapeDtypeStructs),
        e.g. ``jax.eval_shape(module.init, ...)``.
      source: the file name, used in messages.
      ignore: fnmatch patterns of torch keys that are deliberately not converted.

    Returns:
      The nested variable tree of numpy arrays, in the dtypes of ``expected``.

    Raises:
      ConversionError listing every missing, unexpected and mis-shaped key.
    """
    flat_expected = traverse_util.flatten_dict(dict(expected))
    unmapped = sorted(set(flat_expected) - set(rules))
    if unmapped:
        raise ConversionError(
            f"{source}: converter has no rule for {['/'.join(p) for p in unmapped]}"
        )
    missing, misshaped, used, flat = [], [], set(), {}
    for path, leaf in flat_expected.items():
        rule = rules[path]
        rule = Rule(rule) if isinstance(rule, str) else rule
        used.add(rule.key)
        if rule.key not in state_dict:
            missing.append(rule.key)
            continue
        tensor = np.asarray(state_dict[rule.key])
        value = np.asarray(rule.transform(tensor))
        if tuple(value.shape) != tuple(leaf.shape):
            misshaped.append(
                f"{rule.key} {list(tensor.shape)} (gives {list(value.shape)} for "
                f"{'/'.join(path)}, which needs {list(leaf.shape)})"
            )
            continue
        flat[path] = value.astype(leaf.dtype)
    ignore = tuple(ignore)
    unexpected = sorted(
        k
        for k in state_dict
        if k not in used and not any(fnmatch.fnmatchcase(k, p) for p in ignore)
    )
    if missing or unexpected or misshaped:
        lines = [f"{source}: refusing to convert, the layout does not match"]
        for label, keys in (
            ("missing", sorted(set(missing))),
            ("unexpected", unexpected),
            ("mis-shaped", misshaped),
        ):
            if keys:
                lines.append(f"  {label} ({len(keys)}): " + ", ".join(keys))
        raise ConversionError("\n".join(lines))
    return traverse_util.unflatten_dict(flat)


Arguments = Mapping[str, Mapping[str, Any]]  # option name -> argparse.add_argument's keywords


def converter_parser(
    prog: str,
    description: str,
    inputs: Arguments,
    options: Arguments | None = None,
    out: Mapping[str, Any] = {"help": "model directory"},
    overwrite: Mapping[str, Any] = {},
    **parser_keywords: Any,
) -> argparse.ArgumentParser:
    """A converter's command line: its ``inputs`` (the files it reads), ``--out`` (the
    model directory; ``out``: its keywords), its other ``options``, then ``--overwrite``
    (``overwrite``: its keywords); ``parser_keywords`` go to the ArgumentParser."""
    parser = argparse.ArgumentParser(prog=prog, description=description, **parser_keywords)
    for name, keywords in inputs.items():
        parser.add_argument(name, **keywords)
    parser.add_argument("--out", required=True, **out)
    for name, keywords in (options or {}).items():
        parser.add_argument(name, **keywords)
    parser.add_argument("--overwrite", action="store_true", **overwrite)
    return parser


def width_scale_option(help: str) -> dict[str, Any]:
    """``--width-scale``'s keywords: a channel multiplier, 1.0 by default."""
    return {"type": float, "default": 1.0, "help": help}


def refuse_existing(target: Path, overwrite: bool) -> Path:
    """``target``, unless it exists and ``overwrite`` is not given: then ConversionError."""
    if target.exists() and not overwrite:
        raise ConversionError(f"{target} exists; pass --overwrite to replace it")
    return target
