"""Random metric networks (`dbaf_jax.evaluation.random_networks`, the command
``python -m dbaf_jax.commands.make_metric_networks``): BatchNorm statistics calibrated so that
every layer works at order one, a folder that says its weights are random, the report's
bold smoke-test line read from that record, and the refusals."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dbaf_jax import commands
from dbaf_jax.commands import make_metric_networks
from dbaf_jax.core.errors import ModelDirectoryError
from dbaf_jax.evaluation import metric_networks, random_networks, report
from dbaf_jax.models.facenet import InceptionResnetV1
from dbaf_jax.storage import model_directory


class TwoNorms(nn.Module):
    """Dense -> BatchNorm -> tanh -> Dense -> BatchNorm: (B, 8) -> (B, 4)."""

    @nn.compact
    def __call__(self, x):
        x = nn.BatchNorm(use_running_average=True)(nn.Dense(16)(x))
        return nn.BatchNorm(use_running_average=True)(nn.Dense(4)(jnp.tanh(x)))


def test_calibration_gives_each_batch_norm_its_inputs_statistics():
    x = 5.0 + 3.0 * jax.random.normal(jax.random.key(1), (64, 8))
    module = TwoNorms()
    variables = module.init(jax.random.key(0), x)
    before = module.apply(variables, x)
    out = module.apply(random_networks.calibrated(module, variables, x), x)
    # The last layer sees the first layer's calibrated output: both normalise what they see.
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(out.var(0), 1.0, rtol=1e-3)
    assert np.abs(np.asarray(before.mean(0))).max() > 0.5  # Flax's initial statistics do not


@pytest.mark.slow  # FaceNet's init, calibration and two applies compile: minutes on 2 cores
def test_an_uncalibrated_facenet_hardly_tells_faces_apart_and_a_calibrated_one_does():
    module = InceptionResnetV1()
    faces = random_networks.random_images(160, 4, seed=3)
    # Op by op, as random_networks.initialised: jitted, this init compiles for a minute.
    variables = module.init(jax.random.key(0), faces)
    spread = {}
    for name, v in (
        ("init", variables),
        ("calibrated", random_networks.calibrated(module, variables, faces)),
    ):
        embeddings = np.asarray(
            jax.jit(module.apply)(v, random_networks.random_images(160, 4, seed=4))
        )
        spread[name] = float(np.linalg.norm(embeddings - embeddings.mean(0), axis=1).mean())
    # Unit embeddings: images apart by a good fraction of the unit sphere once calibrated.
    assert spread["calibrated"] > 0.3 and spread["calibrated"] > 5 * spread["init"]


@pytest.mark.long  # initialises and calibrates the four full-size networks: 248 s in CI
def test_the_command_writes_a_folder_every_reader_knows_is_random(tmp_path, capsys):
    out = tmp_path / "metrics"
    assert commands.exit_status(make_metric_networks.main, ["--out", str(out)]) == 0
    assert "smoke test" in capsys.readouterr().err
    record = metric_networks.folder_record(out)
    assert record["random_weights"] is True and record["mtcnn"] == "random"
    for name in metric_networks.REQUIRED + (metric_networks.FACENET_VGGFACE2,):
        provenance = metric_networks.network_provenance(out / name)
        assert provenance["random"] and provenance["parts"], name
    networks = metric_networks.MetricNetworks.load(out, batch_size=2)
    assert (
        networks.record == record
        and networks.missing_recognisers[0] == metric_networks.FACENET_CASIA
    )
    faces = np.tanh(np.random.default_rng(0).standard_normal((2, 256, 256, 3))).astype(np.float32)
    features = networks.inception(faces)
    assert np.isfinite(features).all() and np.abs(features[0] - features[1]).mean() > 1e-2
    # A second run refuses the folder and leaves it as it was.
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert commands.exit_status(make_metric_networks.main, ["--out", str(out)]) == 1
    assert "exists" in capsys.readouterr().err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_folder_that_is_not_a_detector_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "not_mtcnn" / "pnet").mkdir(parents=True)
    argv = ["--out", str(tmp_path / "metrics"), "--mtcnn", str(tmp_path / "not_mtcnn")]
    assert commands.exit_status(make_metric_networks.main, argv) == 1
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and err.startswith("error: ") and "not_mtcnn" in err and "pnet" in err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not_mtcnn"]


@pytest.mark.parametrize("text", ["{", "[]", '{"random_weights": "yes"}', "{}"])
def test_an_unreadable_folder_record_is_refused_naming_the_file(tmp_path, text):
    (tmp_path / metric_networks.FOLDER_FILE).write_text(text)
    with pytest.raises(ModelDirectoryError, match=metric_networks.FOLDER_FILE):
        metric_networks.folder_record(tmp_path)


def test_converted_networks_have_no_record(tmp_path):
    assert metric_networks.folder_record(tmp_path) is None


def results_with(record, random_network: bool) -> dict:
    part = {
        "part": "",
        "source": "random (test)" if random_network else "model_ir_se50.pth",
        "sha256": "00",
        "random": random_network,
    }
    return {
        "provenance": {"arcface": {"parts": [part], "random": random_network}},
        "metric_networks_record": record,
        "key": {"salt": "00"},
        "test_password": "p",
        "wrong_password": "q",
    }


def test_the_report_opens_with_a_bold_smoke_test_line_when_the_folder_says_random():
    lines = report.provenance_lines(results_with({"random_weights": True}, random_network=True))
    assert lines[0].startswith("**Smoke test: the metric networks have random weights**")
    assert metric_networks.FOLDER_FILE in lines[0]
    # Converted networks: no such line (and no per-network warning either).
    assert not any(
        "Smoke test" in line or metric_networks.RANDOM_WEIGHTS in line
        for line in report.provenance_lines(results_with(None, random_network=False))
    )


@pytest.mark.slow  # initialises MTCNN's three stages
def test_the_recorded_sources_say_random(tmp_path):
    module = random_networks.MTCNN_STAGES["onet"][0]
    random_networks.write_mtcnn(tmp_path / "mtcnn", None, seed=0)
    info = json.loads((tmp_path / "mtcnn" / "onet" / model_directory.NETWORK_FILE).read_text())
    assert info["source"] == random_networks.SOURCE
    assert metric_networks.network_provenance(tmp_path / "mtcnn")["random"]
    assert model_directory.load_network(tmp_path / "mtcnn" / "onet").module == module
