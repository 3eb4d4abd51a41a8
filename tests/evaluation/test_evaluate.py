"""The evaluation command end to end, its known values, and its refusals.

A tiny DBAF model (the reduced reference of tests/torch_reference/dbaf_pipeline.py,
converted by ``python -m convert.dbaf``), metric networks with random weights
(ArcFace at 1/4 width; FaceNet, the FID Inception and LPIPS at their only size; see
tests/evaluation_models.py's `build_metrics_models`) and MTCNN's real weights; the faces are crops of the real photos in tests/data. Random
weights make the numbers meaningless, so the tests check the report's structure and
ranges, and exact values where the inputs fix them (identical images).
"""

import json
import math
from pathlib import Path

import jax
import numpy as np
import pytest
from PIL import Image

from configs.ifadit import phases as ifadit_config
from dbaf_jax import commands
from dbaf_jax.commands import evaluate
from dbaf_jax.evaluation import dlib_recognition, fid
from dbaf_jax.evaluation.measures import pixel_metrics
from dbaf_jax.evaluation.metric_networks import CONVERTER_COMMANDS, MetricNetworks
from dbaf_jax.evaluation.paper import ABLATION, QUALITY
from dbaf_jax.evaluation.protocol import IDENTITY_SETS, QUALITY_SETS
from dbaf_jax.evaluation.recognition import DISTANCE_FORMS
from dbaf_jax.evaluation.utility import DetectionUtility
from dbaf_jax.faces.detectors import registry
from dbaf_jax.models.ifadit import ifadit
from dbaf_jax.models.inception import FEATURES
from dbaf_jax.storage import model_directory
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages
from tests.evaluation_models import build_metrics_models, build_tiny_model, face_crops, write_faces

BATCH = 2
KEYS = 3
DIVERSITY_FACES = 2
GUESSES = 2
INVERSION_STEPS = 20  # the attack's path, not its strength (tests/evaluation/test_calibration.py holds its controls)


@pytest.fixture(scope="module")
def metrics_models(tmp_path_factory):
    return build_metrics_models(tmp_path_factory.mktemp("metrics_models"))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, metrics_models):
    """A converted tiny model and a folder of five faces."""
    tmp = tmp_path_factory.mktemp("evaluate")
    build_tiny_model(tmp)
    write_faces(tmp / "faces", registry.build(metrics_models, ["mtcnn"], low_band=False)[0], 5)
    return tmp


@pytest.fixture(scope="module")
def report(workspace, metrics_models):
    evaluate.main(
        evaluate_argv(workspace / "model", workspace, metrics_models)
        + ["--out", str(workspace / "report")]
    )
    return workspace / "report"


def evaluate_argv(model: Path, workspace: Path, metrics_models: Path) -> list[str]:
    """The evaluation's arguments in every test of this module, but --out."""
    return [
        "--model",
        str(model),
        "--images",
        str(workspace / "faces"),
        "--metrics-models",
        str(metrics_models),
        "--batch-size",
        str(BATCH),
        "--keys",
        str(KEYS),
        "--diversity-faces",
        str(DIVERSITY_FACES),
        "--guesses",
        str(GUESSES),
        "--inversion-steps",
        str(INVERSION_STEPS),
    ]


def numbers(tree, prefix=""):
    """(path, value) of every number in a JSON tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from numbers(value, f"{prefix}/{key}")
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from numbers(value, f"{prefix}/{i}")
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        yield prefix, tree


@pytest.mark.slow
def test_report_structure_and_ranges(report, workspace):
    results = json.loads((report / "report.json").read_text())
    assert results["images"] == 5 and results["skipped"] == []
    assert results["missing_recognisers"] == ["facenet_casia_webface"]
    assert results["options"] == {
        "batch_size": BATCH,
        "keys": KEYS,
        "diversity_faces": DIVERSITY_FACES,
        "seed": 0,
        "guesses": GUESSES,
        "inversion_steps": INVERSION_STEPS,
    }
    assert len(results["model"]["fingerprint"]) == 16 and results["model"]["output_size"] == 64
    assert set(results["versions"]) == {"dbaf_jax", "jax", "flax", "numpy"}
    for path, value in numbers(results):
        assert math.isfinite(value), path
    for recogniser, tau in (("arcface", 0.8), ("facenet_vggface2", 1.1)):
        identity = results["identity"][recogniser]
        assert identity["tau"] == tau
        for s in IDENTITY_SETS:
            assert set(identity[s]) == set(DISTANCE_FORMS)
            for form, value in identity[s].items():
                assert 0 <= value["rate"] <= 1 and 0 <= value["mean_distance"] <= 4, (
                    recogniser,
                    s,
                    form,
                )
    for s in QUALITY_SETS:
        quality = results["quality"][s]
        assert set(quality) == {"mse", "psnr", "ssim", "lpips", "fid"}
        assert 0 < quality["mse"] <= 4 and quality["psnr"] >= 0 and -1 <= quality["ssim"] <= 1
        assert quality["lpips"] > 0 and quality["fid"] > 0
        # The mean of per-image PSNRs is at least the PSNR of the mean MSE (Jensen: -log is convex).
        assert quality["psnr"] >= 10 * math.log10(4 / quality["mse"]) - 1e-4
    mtcnn = results["utility"]["mtcnn"]
    assert mtcnn["detection_rate_original"] == 1.0 and 0 <= mtcnn["detection_rate"] <= 1
    assert mtcnn["pairs"] == round(mtcnn["detection_rate"] * 5)
    for key in ("box_distance", "landmark_distance"):
        assert (mtcnn[key] is None) == (mtcnn["pairs"] == 0) and (
            mtcnn[key] is None or mtcnn[key] >= 0
        )
    diversity = results["diversity"]
    assert (diversity["faces"], diversity["keys"]) == (DIVERSITY_FACES, KEYS)
    for recogniser in ("arcface", "facenet_vggface2"):
        assert (
            -1 <= diversity[recogniser]["mean_cosine"] <= 1
            and 0 <= diversity[recogniser]["mean_angle_degrees"] <= 180
        )
    with Image.open(
        report / "key_grid.png"
    ) as grid:  # rows: faces; columns: original + keys, 64 px + padding 2
        assert grid.size == ((KEYS + 1) * 66 + 2, DIVERSITY_FACES * 66 + 2)
    with Image.open(report / "samples.png") as samples:  # first batch: original + the five sets
        assert samples.size == ((1 + len(IDENTITY_SETS)) * 66 + 2, BATCH * 66 + 2)
    assert diversity["plots"] == [
        "key_grid.png",
        "tsne_facenet_vggface2.png",
        "tsne_arcface.png",
        "tsne_dlib.png",
    ]
    for name in diversity["plots"]:
        assert (report / name).is_file()
    for recogniser in ("arcface", "facenet_vggface2", "dlib"):
        calibrated = results["identity"][recogniser]["calibrated"]
        assert calibrated["gallery_size"] == 5 and calibrated["impostor"]["pairs"] == 10
        assert calibrated["genuine"]["pairs"] == 5 and set(calibrated["rank1"]) == set(
            IDENTITY_SETS
        )
        for row in calibrated["at_far"].values():
            assert not row["resolvable"]  # 10 impostor pairs cannot measure FAR 1e-2
            assert row["protection_rate"] == pytest.approx(1 - row["anonymization_tar"])
        assert (report / calibrated["plot"]).is_file()
        attacks = results["identity"][recogniser]["attacks"]
        assert (
            attacks["password_guessing"]["guesses"] == GUESSES
            and attacks["linkability"]["faces"] == 5
        )
        assert 0 <= attacks["linkability"]["auc"] <= 1 and attacks["linkability"]["chance"] == 0.2
        inverted = attacks["learned_inversion"]  # trained on 2 faces' pairs, scored on the other 3
        assert inverted["test_faces"] == 3 and inverted["inverted_distance_mean"] > 0
        assert all(
            0 <= rate <= 1
            for rate in [
                *inverted["anonymized_accepted"].values(),
                *inverted["inverted_accepted"].values(),
            ]
        )
    robust = results["robustness"]
    assert set(robust["recovery"]) == {"jpeg95", "jpeg75", "jpeg50", "resize0.5", "blur1"}
    assert set(robust["key_sensitivity"]) == {"password", "salt"}
    for row in robust["key_sensitivity"].values():  # a one-bit change gives another anonymization
        assert row["mean_levels"] > 1 and set(row["identity"]) == {
            "arcface",
            "facenet_vggface2",
            "dlib",
        }
    provenance = results["provenance"]
    assert provenance["arcface"]["random"] and provenance["model"]["parts"]
    assert not provenance["dlib"]["random"] and all(
        len(p["sha256"]) == 64 for p in provenance["dlib"]["parts"]
    )
    assert (
        results["key"]["salt"] == "646261662d6a6178206576616c6b6579"
    )  # as published in docs/evaluation.md


@pytest.mark.slow
def test_markdown_has_the_four_tables_with_paper_values(report):
    text = (report / "report.md").read_text()
    for title in (
        "Table I: recognition rate",
        "Table II: image quality",
        "Table III: utility",
        "Table IV: ablation",
    ):
        assert f"## {title}" in text
    assert (
        f"Not measured (network not converted, or for dlib: {dlib_recognition.INSTALL_HINT}): FaceNet CASIA."
        in text
    )
    assert text.index("**random weights: a smoke test, not a measurement**") < text.index(
        "## Table I"
    )
    assert (
        "## Attacks" in text
        and "## Robustness and key sensitivity" in text
        and "## Provenance" in text
        and "## Identity at calibrated thresholds" in text
        and "`roc_dlib.png`" in text
    )
    assert "dlib (held out)" in text and "dbaf-jax evaluation password" in text
    # The paper's values sit beside ours: Table II's and Table IV's DBAF numbers appear.
    for value in (
        QUALITY["anonymization"]["psnr"],
        QUALITY["recovery"]["fid"],
        ABLATION["anonymization"]["fid"][0],
    ):
        assert f"{value:.3f}" in text


@pytest.mark.long  # three more whole evaluations: about 5 min on 2 cores
def test_same_run_gives_the_same_numbers_and_refuses_to_overwrite(
    report, workspace, metrics_models, capsys
):
    argv = evaluate_argv(workspace / "model", workspace, metrics_models)
    assert commands.exit_status(evaluate.main, argv + ["--out", str(report)]) == 1
    assert "report.json exists; pass --overwrite" in capsys.readouterr().err
    again = evaluate.main(argv + ["--out", str(workspace / "again")])
    first = json.loads((report / "report.json").read_text())
    assert (
        json.loads((workspace / "again" / "report.json").read_text())["identity"]
        == first["identity"]
    )
    assert again["quality"]["anonymization"]["mse"] == pytest.approx(
        first["quality"]["anonymization"]["mse"], rel=1e-6
    )
    # Two images: the fewest FID's covariance takes; one impostor pair.
    two = evaluate.main(argv + ["--out", str(workspace / "two"), "--limit", "2"])
    assert two["images"] == 2 and two["identity"]["arcface"]["calibrated"]["impostor"]["pairs"] == 1


@pytest.mark.slow
def test_identical_images_give_known_values(metrics_models):
    """PSNR +inf (documented, not capped), SSIM 1, LPIPS 0, FID ~0, and for MTCNN the
    same detection on both sides: rate 1, distances 0."""
    networks = MetricNetworks.load(metrics_models, BATCH)
    faces = np.stack(face_crops(networks.detector, 4)).astype(np.float32) / 127.5 - 1.0
    mse, psnr, ssim = (np.asarray(v) for v in pixel_metrics(faces, faces))
    assert np.all(mse == 0) and np.all(np.isinf(psnr)) and np.all(psnr > 0)
    np.testing.assert_allclose(ssim, 1.0, rtol=1e-6)
    np.testing.assert_allclose(networks.lpips(faces[:BATCH], faces[:BATCH]), 0.0, atol=1e-7)
    features = np.concatenate(
        [networks.inception(faces[i : i + BATCH]) for i in range(0, 4, BATCH)]
    )
    assert features.shape == (4, FEATURES)
    stats = fid.FeatureStatistics(FEATURES)
    stats.update(features)
    # Same statistics on both sides: 0 up to the matrix square root's rounding (float64, rank 3 of 2048).
    assert abs(fid.statistics_distance(stats, stats)) < 1e-2 * np.trace(stats.covariance())
    utility = DetectionUtility(networks.detector)
    utility.update(faces, faces)
    assert utility.result() == {
        "detection_rate": 1.0,
        "detection_rate_original": 1.0,
        "box_distance": 0.0,
        "landmark_distance": 0.0,
        "pairs": 4,
    }


def one_face_argv(model, metrics_models, tmp_path) -> list[str]:
    """evaluate's arguments: ``model`` on one black face (written to tmp_path/faces),
    the networks in ``metrics_models``, the report into tmp_path/r."""
    faces = tmp_path / "faces"
    faces.mkdir()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(faces / "a.png")
    return [
        *("--model", str(model), "--images", str(faces)),
        *("--metrics-models", str(metrics_models), "--out", str(tmp_path / "r")),
    ]


@pytest.mark.slow  # metrics_models: the quick suite's costliest fixture by --durations
@pytest.mark.parametrize("missing", ["inception_fid", "arcface", "lpips_alex", "mtcnn"])
def test_missing_metric_network_names_the_converter(metrics_models, tmp_path, missing, capsys):
    partial = tmp_path / "metrics"
    partial.mkdir()
    for entry in metrics_models.iterdir():
        if entry.name != missing:
            (partial / entry.name).symlink_to(entry)
    model = tmp_path / "model"
    model.mkdir()
    argv = one_face_argv(model, partial, tmp_path)
    assert commands.exit_status(evaluate.main, argv) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"error: {partial / missing} missing: run {CONVERTER_COMMANDS[missing].format(out=partial)}\n"
    )
    assert not (tmp_path / "r" / "report.json").exists()


@pytest.mark.slow  # metrics_models, as above
def test_missing_model_names_the_converter(metrics_models, tmp_path, capsys):
    argv = one_face_argv(tmp_path / "nowhere", metrics_models, tmp_path)
    assert commands.exit_status(evaluate.main, argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'nowhere'} missing: run python -m convert.dbaf")
    assert err.count("\n") == 1


@pytest.mark.long  # the tiny iFADIT model's programs compile for minutes on a CPU
@pytest.mark.filterwarnings(
    "error::RuntimeWarning"
)  # a NaN image cast to 8 bits warns: none may occur
def test_an_ifadit_model_is_evaluated_in_image_mode(workspace, metrics_models, tmp_path):
    """The evaluation takes any family: an iFADIT model directory (the tiny config,
    random weights) is measured on the image-mode sets, with no latent-mode ones (iFADIT
    recovers from the image alone), and its report writes every table."""
    nets = stages.build_networks(ifadit_config.get_config("phase2,tiny"))
    modules = nets.model.networks()
    variables = networks_lib.init_variables(nets, jax.random.PRNGKey(1), 64, tuple(modules))
    model_directory.save_model(
        tmp_path / "model", ifadit.FAMILY, {n: (m, variables[n]) for n, m in modules.items()}, {}
    )
    evaluate.main(
        evaluate_argv(tmp_path / "model", workspace, metrics_models)
        + ["--out", str(tmp_path / "report")]
    )
    results = json.loads((tmp_path / "report" / "report.json").read_text())
    image_sets, latent_sets = (
        [s for s in IDENTITY_SETS if "latent" not in s],
        [s for s in IDENTITY_SETS if "latent" in s],
    )
    assert set(results["identity"]["arcface"]) == {"tau", "calibrated", "attacks", *image_sets}
    assert set(results["quality"]) == {s for s in QUALITY_SETS if s not in latent_sets}
    for path, value in numbers(results):
        assert math.isfinite(value), path
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Recovery (image)" in markdown and "recovery (image) ours" in markdown
    assert "Recovery (latent)" not in markdown and "recovery (latent)" not in markdown
