"""MTCNN's P-, R- and O-net (facenet-pytorch's `pnet.pt`, `rnet.pt`, `onet.pt`) -> DIR/mtcnn.

    python -m convert.mtcnn --out models/
    python -m convert.mtcnn --pnet pnet.pt --rnet rnet.pt --onet onet.pt --out models/

Without file arguments it reads the trained weights that the facenet-pytorch wheel
bundles in its `data/` folder (located without importing the package). It writes one
detector directory, DIR/mtcnn, holding three network directories, `pnet`, `rnet` and
`onet` (each loadable with `dbaf_jax.storage.model_directory.load_network`);
`dbaf_jax.faces.detectors.mtcnn.MTCNN.load(DIR/mtcnn)` loads all three.

Keys: each file is a plain state_dict whose names are the layer names of
dbaf_jax.models.mtcnn: `convN.{weight,bias}` (Conv2d), `preluN.weight` (per-channel
slopes), `denseN.{weight,bias}` (Linear).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

from convert import common
from dbaf_jax.models.mtcnn import ONet, PNet, RNet
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

DETECTOR_NAME = model_directory.MTCNN_DIR
PACKAGE = "facenet_pytorch"

# network name -> (module, input side used to build its variable tree, layers by kind)
NETWORKS = {
    "pnet": (
        PNet(),
        12,
        {
            "conv": ("conv1", "conv2", "conv3", "conv4_1", "conv4_2"),
            "prelu": ("prelu1", "prelu2", "prelu3"),
            "dense": (),
        },
    ),
    "rnet": (
        RNet(),
        24,
        {
            "conv": ("conv1", "conv2", "conv3"),
            "prelu": ("prelu1", "prelu2", "prelu3", "prelu4"),
            "dense": ("dense4", "dense5_1", "dense5_2"),
        },
    ),
    "onet": (
        ONet(),
        48,
        {
            "conv": ("conv1", "conv2", "conv3", "conv4"),
            "prelu": ("prelu1", "prelu2", "prelu3", "prelu4", "prelu5"),
            "dense": ("dense5", "dense6_1", "dense6_2", "dense6_3"),
        },
    ),
}


def network_rules(layers: dict[str, tuple[str, ...]]) -> dict:
    """Flax leaf -> torch key for one network's conv, PReLU and dense layers."""
    rules = {}
    for kind, transform in (("conv", common.conv_kernel), ("dense", common.linear_kernel)):
        for name in layers[kind]:
            rules[("params", name, "kernel")] = common.Rule(f"{name}.weight", transform)
            rules[("params", name, "bias")] = common.Rule(f"{name}.bias")
    for name in layers["prelu"]:
        rules[("params", name, "slope")] = common.Rule(f"{name}.weight")
    return rules


def network_variables(
    state_dict: dict, module: nn.Module, side: int, layers: dict, source: str
) -> dict:
    """The Flax variables of one MTCNN network from its state_dict (numpy arrays)."""
    dummy = jnp.zeros((1, side, side, 3), jnp.float32)
    expected = jax.eval_shape(module.init, jax.random.key(0), dummy)
    return common.map_state_dict(state_dict, network_rules(layers), expected, source)


def bundled_weights(name: str) -> Path:
    """``facenet_pytorch/data/<name>.pt`` of the installed wheel, found without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise common.ConversionError(
            f"no --{name} file given and {PACKAGE} is not installed (its wheel bundles data/{name}.pt); "
            f"pass --pnet, --rnet and --onet"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.pt"
    if not path.is_file():
        raise common.ConversionError(
            f"no --{name} file given and the installed {PACKAGE} has no {path}; pass --{name}"
        )
    return path


def convert_mtcnn(
    out_dir: str | Path, files: dict[str, str | Path | None] | None = None, overwrite: bool = False
) -> Path:
    """Converts the three networks and writes ``out_dir/mtcnn``; returns that path.

    ``files`` maps 'pnet'/'rnet'/'onet' to a checkpoint; a name left out or None uses
    the weights bundled with facenet-pytorch.
    """
    files = files or {}
    target = common.refuse_existing(Path(out_dir).absolute() / DETECTOR_NAME, overwrite)
    sources = {name: Path(files.get(name) or bundled_weights(name)) for name in NETWORKS}
    converted = {}
    for name, (module, side, layers) in NETWORKS.items():
        label = f"{sources[name]} (given as {name})"
        state_dict = common.to_numpy(common.load_torch_checkpoint(sources[name]), label)
        converted[name] = network_variables(state_dict, module, side, layers, label)
    # Written beside the target and renamed into place, so a reader never sees a partial detector.
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for name, (module, _, _) in NETWORKS.items():
        save_network(partial / name, module, converted[name], source=str(sources[name]))
    if target.exists():
        shutil.rmtree(target)
    partial.rename(target)
    return target


def main(argv: list[str] | None = None) -> None:
    inputs = {
        f"--{name}": {"help": f"{name}.pt (default: the one bundled with facenet-pytorch)"}
        for name in NETWORKS
    }
    parser = common.converter_parser("python -m convert.mtcnn", __doc__.split("\n\n")[0], inputs)
    args = parser.parse_args(argv)
    files = {name: getattr(args, name) for name in NETWORKS}
    print(f"wrote {convert_mtcnn(args.out, files, args.overwrite)}")


if __name__ == "__main__":
    common.run(main)
