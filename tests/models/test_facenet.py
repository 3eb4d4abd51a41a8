"""FaceNet InceptionResnetV1 against facenet-pytorch's own model through `python -m convert.facenet`:
both published layouts (vggface2, casia-webface), the input mapping, full-size shapes and
the converter's refusals. The reference comes from tests/torch_reference/metric_networks.py
(how facenet-pytorch imports here, how its random weights are made).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from facenet_pytorch.models.inception_resnet_v1 import InceptionResnetV1 as TorchInceptionResnetV1

from convert.facenet import main
from dbaf_jax.models.facenet import InceptionResnetV1
from tests import conversion
from tests.parity import assert_parity, relative_error
from tests.torch_reference.metric_networks import (
    FACENET_IDENTITIES,
    facenet_input,
    random_facenet,
    random_images,
)

FILES = {
    "vggface2": "20180402-114759-vggface2.pt",
    "casia_webface": "20180408-102900-casia-webface.pt",
}


def torch_embedding_and_features(
    net: TorchInceptionResnetV1, x: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """The L2-normalised embedding and last_bn's output before the normalisation."""
    captured = []
    hook = net.last_bn.register_forward_hook(lambda module, args, out: captured.append(out))
    with torch.no_grad():
        embedding = net(x)
    hook.remove()
    return embedding.numpy(), captured[0].numpy()


# One compiled function for every converted variant (same shapes, so compiled once).
embed_jax = jax.jit(
    lambda variables, images: (
        InceptionResnetV1().apply(variables, images),
        InceptionResnetV1().apply(variables, images, normalize=False),
    )
)


@pytest.fixture(scope="module")
def vggface2(tmp_path_factory):
    """A random facenet-pytorch network in the vggface2 file's layout, the file, the converted network."""
    net = random_facenet(FACENET_IDENTITIES["vggface2"], seed=0)
    tmp = tmp_path_factory.mktemp("facenet")
    ckpt = conversion.save(net.state_dict(), tmp / FILES["vggface2"])
    return (
        net,
        ckpt,
        conversion.convert(main, ["--ckpt", str(ckpt)], tmp / "models", "facenet_vggface2"),
    )


@pytest.mark.parametrize("size", [160, 224])  # 224 is area-resized to 160 first
def test_embedding_matches_facenet_pytorch(vggface2, size):
    net, _, converted = vggface2
    images = random_images(size, seed=size)
    expected_embedding, expected_features = torch_embedding_and_features(net, facenet_input(images))
    embedding, features = embed_jax(converted.variables, images)
    assert_parity(features, expected_features, name="last_bn features")
    assert_parity(embedding, expected_embedding, name="embedding")
    np.testing.assert_allclose(np.linalg.norm(embedding, axis=-1), 1.0, rtol=1e-5)
    # The two faces' embeddings differ at order one: the parity above checks the path from the image.
    assert relative_error(expected_embedding[0], expected_embedding[1]) > 0.1
    print(
        f"relative error ({size}): features {relative_error(features, expected_features):.2e}, "
        f"embedding {relative_error(embedding, expected_embedding):.2e}"
    )


def test_casia_webface_layout_converts_to_its_own_directory(tmp_path):
    net = random_facenet(FACENET_IDENTITIES["casia_webface"], seed=1)
    ckpt = conversion.save(net.state_dict(), tmp_path / FILES["casia_webface"])
    converted = conversion.convert(
        main, ["--ckpt", str(ckpt)], tmp_path / "models", "facenet_casia_webface"
    )
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["facenet_casia_webface"]
    images = random_images(160, seed=2)
    expected_embedding, expected_features = torch_embedding_and_features(net, facenet_input(images))
    embedding, features = embed_jax(converted.variables, images)
    assert_parity(features, expected_features, name="last_bn features")
    assert_parity(embedding, expected_embedding, name="embedding")


def test_network_record_drops_the_classifier(vggface2):
    _, ckpt, converted = vggface2
    assert converted.info["kind"] == "facenet:InceptionResnetV1"
    assert converted.info["config"] == {}
    assert set(converted.variables) == {"params", "batch_stats"}
    assert not any(
        "logits" in "/".join(str(k) for k in path)
        for path, _ in jax.tree_util.tree_leaves_with_path(converted.variables)
    )


def test_variants_differ_only_in_the_classifier():
    layouts = {
        name: {
            k: tuple(v.shape)
            for k, v in TorchInceptionResnetV1(classify=True, num_classes=n).state_dict().items()
        }
        for name, n in FACENET_IDENTITIES.items()
    }
    vgg, casia = layouts["vggface2"], layouts["casia_webface"]
    assert set(vgg) == set(casia)
    assert {k for k in vgg if vgg[k] != casia[k]} == {"logits.weight", "logits.bias"}


def test_full_size_layout():
    state_dict = TorchInceptionResnetV1().state_dict()  # the embedding network only
    tracked = [k for k in state_dict if k.endswith("num_batches_tracked")]
    variables = jax.eval_shape(
        InceptionResnetV1().init, jax.random.key(0), jnp.zeros((1, 160, 160, 3))
    )
    leaves = jax.tree.leaves(variables)
    assert len(leaves) == len(state_dict) - len(tracked)
    assert sum(x.size for x in leaves) == sum(
        v.numel() for k, v in state_dict.items() if k not in tracked
    )
    out = jax.eval_shape(InceptionResnetV1().apply, variables, jnp.zeros((2, 250, 250, 3)))
    assert out.shape == (2, 512)


def _refusal(vggface2, tmp_path, **edits):
    net, _, _ = vggface2
    bad = conversion.save(conversion.edited(net.state_dict(), **edits), tmp_path / "bad.pt")
    return conversion.refusal(
        main, ["--ckpt", str(bad), "--out", str(tmp_path / "models")], unwritten=tmp_path / "models"
    )


def test_refuses_an_unknown_classifier(vggface2, tmp_path):
    err = _refusal(
        vggface2,
        tmp_path,
        add={"logits.weight": torch.zeros(100, 512), "logits.bias": torch.zeros(100)},
    )
    assert (
        "logits.weight [100, 512]" in err
        and "8631 (vggface2)" in err
        and "10575 (casia_webface)" in err
    )


def test_refuses_a_file_without_classifier(vggface2, tmp_path):
    err = _refusal(vggface2, tmp_path, drop=["logits.weight", "logits.bias"])
    assert "no logits.weight/logits.bias" in err


@pytest.mark.slow  # a converter process (torch and JAX imported); test_e4e's stays quick
def test_refuses_a_file_that_is_not_a_checkpoint(tmp_path):
    conversion.assert_command_refuses_a_non_checkpoint(
        "convert.facenet", tmp_path / FILES["vggface2"], tmp_path / "models"
    )
