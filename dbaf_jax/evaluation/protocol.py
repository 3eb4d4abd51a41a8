"""The DBAF paper's evaluation of one model on one set of faces, as a library function.

`evaluate` anonymizes every image with a fixed test password under a fixed salt (so
two runs of the same model on the same images give the same numbers), stores each
output as an 8-bit image would be stored (what a user's files hold), recovers it in
both modes (``image``: re-encoding the anonymized image; ``latent``: from the latents
anonymization returned) with the right and a wrong password, and measures:

- identity (Table I): every recogniser's embedding distances to the original's, in
  every distance form of `recognition.DISTANCE_FORMS`, and the rate within the
  paper's tau, for the anonymized, the recovered and the wrong-key recovered images;
- image quality (Table II): MSE, PSNR, SSIM and LPIPS (AlexNet) of the anonymized and
  the recovered images against the originals, per image then averaged; FID between
  the originals and each set;
- utility (Table III): MTCNN detection rate and box and landmark distances (`utility`);
- diversity: the first few faces under N keys: pairwise cosine and angle (KFFA for
  ArcFace) per recogniser, a key grid and a t-SNE plot per recogniser (given at
  least `TSNE_MIN_POINTS` faces x keys).

Quality and utility compare images at the generator's output size: originals are
read from their files at that size (resized bilinearly when it differs).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import flax
import jax
import numpy as np
from PIL import Image
from tqdm import tqdm

from dbaf_jax import __version__, images, keys
from dbaf_jax.errors import DatasetError, ModelDirectoryError
from dbaf_jax.evaluation import (
    calibration,
    diversity,
    inversion,
    measures,
    recognition,
    robustness,
)
from dbaf_jax.evaluation.metric_networks import MetricNetworks, network_provenance
from dbaf_jax.evaluation.utility import DetectionUtility
from dbaf_jax.faces.detectors.dlib_detectors import DlibDetector
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.programs import pad_batch

# Fixed test credentials: results must not depend on a random salt.
TEST_PASSWORD = "dbaf-jax evaluation password"
WRONG_PASSWORD = "dbaf-jax evaluation wrong password"
TEST_SALT = b"dbaf-jax evalkey".hex()  # 16 bytes, `keys.SALT_BYTES`
# The image sets compared with the originals; "wrong_key_*" only for identity.
QUALITY_SETS = ("anonymization", "recovery_image", "recovery_latent")
IDENTITY_SETS = QUALITY_SETS + ("wrong_key_image", "wrong_key_latent")
SAMPLES_FILE = "samples.png"
KEY_GRID_FILE = "key_grid.png"
# Fewer points than this make no t-SNE map worth drawing (its perplexity must stay below the count).
TSNE_MIN_POINTS = 4


@dataclasses.dataclass(frozen=True)
class EvaluationOptions:
    """batch_size: images per network call; keys and diversity_faces: the diversity
    study's N keys and how many of the first faces it uses; seed: its passwords and t-SNE;
    guesses: wrong passwords of the password-guessing attack (`attacks`); inversion_steps:
    training steps of the learned-inversion attack (0: not run)."""

    batch_size: int = 8
    keys: int = 5
    diversity_faces: int = 5
    seed: int = 0
    guesses: int = 8
    inversion_steps: int = inversion.DEFAULT_STEPS


def as_stored(batch: np.ndarray, size: int) -> np.ndarray:
    """Images in [-1, 1] -> what reading them back from 8-bit PNGs at ``size`` gives."""
    pixels = images.to_uint8(batch)
    if pixels.shape[1] != size:
        # Bilinear, as `images.read_image` resizes a file of another size.
        pixels = np.stack(
            [np.asarray(Image.fromarray(p).resize((size, size), Image.BILINEAR)) for p in pixels]
        )
    return images.to_float(pixels)


def tsne_file(recogniser: str) -> str:
    return f"tsne_{recogniser}.png"


def image_sets(latent_recovery: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(quality sets, identity sets) of a model: the latent ones only for a family with
    latent-space recovery (DBAF's)."""
    keep = lambda names: tuple(n for n in names if latent_recovery or not n.endswith("_latent"))  # noqa: E731
    return keep(QUALITY_SETS), keep(IDENTITY_SETS)


def evaluate(
    model_dir: str | Path,
    image_paths: list[Path],
    metrics_models: str | Path,
    out_dir: str | Path,
    options: EvaluationOptions = EvaluationOptions(),
) -> dict[str, Any]:
    """Runs the evaluation (module docstring); writes the sample grid, the key grid and
    the t-SNE plots into ``out_dir`` and returns every number as a JSON-ready dict.

    Raises ModelDirectoryError (the model), NetworkNotFoundError naming the converter
    command (a metric network), DatasetError (no readable image).
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if not model_dir.is_dir():
        raise ModelDirectoryError(
            f"{model_dir} missing: run python -m convert.dbaf ... --out {model_dir} (docs/converting.md) "
            "or use a training run's W/model"
        )
    networks = MetricNetworks.load(metrics_models, options.batch_size)
    anonymizer = FaceAnonymizer(model_dir)
    output_size = anonymizer.output_size
    record = keys.KeyRecord(salt=TEST_SALT)
    key, wrong_key = (
        anonymizer.key_for(TEST_PASSWORD, record),
        anonymizer.key_for(WRONG_PASSWORD, record),
    )
    totals = measures.Accumulator(
        list(networks.recognisers), *image_sets(anonymizer.latent_recovery)
    )
    # The attacker's wrong passwords: distinct from the test and wrong-key ones, fixed by the seed.
    guess_keys = [
        anonymizer.key_for(p, record)
        for p in diversity.key_passwords(options.guesses, options.seed + 1)
    ]
    flip_keys = {
        "flip_password": anonymizer.key_for(robustness.flip_bit(TEST_PASSWORD), record),
        "flip_salt": anonymizer.key_for(
            TEST_PASSWORD, keys.KeyRecord(salt=robustness.flip_salt_bit(TEST_SALT))
        ),
    }
    utility = {"mtcnn": DetectionUtility(networks.detector)}
    dlib_missing = DlibDetector.unavailable()
    if dlib_missing is None:
        utility["dlib"] = DetectionUtility(DlibDetector("hog", upsample=1, all_68=True))
    else:
        print(f"Dlib utility skipped: {dlib_missing}", file=sys.stderr)
    skipped: list[images.Skipped] = []
    diversity_faces: list[np.ndarray] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    batch_size = options.batch_size

    with tqdm(total=len(image_paths), unit="img", desc="evaluate") as bar:
        for paths, batch, bad in images.iter_batches(
            image_paths, anonymizer.input_size, batch_size
        ):
            skipped += bad
            if not paths:
                bar.update(len(bad))
                continue
            n = len(paths)
            originals = np.stack([images.read_image(p, output_size) for p in paths])
            anonymized, latents = anonymizer.anonymize(
                pad_batch(batch, batch_size), key, anonymizer.latent_recovery
            )
            stored = as_stored(anonymized, anonymizer.input_size)
            outputs = {
                "anonymization": anonymized,
                "recovery_image": anonymizer.recover(stored, key),
                "wrong_key_image": anonymizer.recover(stored, wrong_key),
            }
            if anonymizer.latent_recovery:
                outputs["recovery_latent"] = anonymizer.recover_from_latents(latents, key)
                outputs["wrong_key_latent"] = anonymizer.recover_from_latents(latents, wrong_key)
            outputs = {name: as_stored(x[:n], output_size) for name, x in outputs.items()}
            measures.accumulate(totals, networks, originals, outputs, batch_size)
            if options.inversion_steps:
                totals.pairs["original"].append(originals)
                totals.pairs["anonymization"].append(outputs["anonymization"])
            # Attacks: the same faces' second views under the same key (linkability), and
            # recoveries with the attacker's guessed passwords.
            views = pad_batch(calibration.augmented_views(batch), batch_size)
            attack_outputs = {"linked_view": anonymizer.anonymize(views, key)[0]}
            attack_outputs.update(
                {f"guess{g}": anonymizer.recover(stored, k) for g, k in enumerate(guess_keys)}
            )
            for name, transform in robustness.TRANSFORMS.items():
                attack_outputs[f"robust_{name}"] = anonymizer.recover(
                    pad_batch(transform(stored[:n]), batch_size), key
                )
            attack_outputs.update(
                {
                    name: anonymizer.anonymize(pad_batch(batch, batch_size), k)[0]
                    for name, k in flip_keys.items()
                }
            )
            for name, x in attack_outputs.items():
                x = as_stored(x[:n], output_size)
                embedded = {r: recogniser(x) for r, recogniser in networks.recognisers.items()}
                for r, e in embedded.items():
                    totals.extra_embeddings[r].setdefault(name, []).append(e)
                if name.startswith("robust_"):
                    psnr = np.asarray(
                        measures.pixel_metrics(
                            pad_batch(originals, batch_size), pad_batch(x, batch_size)
                        )[1]
                    )[:n]
                    totals.extra_pixels.setdefault(name, []).append(psnr)
                elif name.startswith("flip_"):
                    levels = np.abs(x - outputs["anonymization"]).mean(axis=(1, 2, 3)) * 127.5
                    totals.extra_pixels.setdefault(name, []).append(levels)
                    for r, recogniser in networks.recognisers.items():
                        distance = calibration.pair_distances(
                            recogniser(outputs["anonymization"]),
                            embedded[r],
                            r not in recognition.RAW_L2,
                        )
                        totals.flip_distances[r].setdefault(name, []).append(distance)
            for measure in utility.values():
                measure.update(originals, outputs["anonymization"])
            if not diversity_faces:
                rows = np.stack([originals] + [outputs[s] for s in totals.identity_sets], axis=1)
                grid = images.make_grid(rows.reshape(-1, *originals.shape[1:]), rows=n)
                images.write_png(
                    out_dir / SAMPLES_FILE, grid, {"columns": ["original", *totals.identity_sets]}
                )
            diversity_faces += list(batch[: options.diversity_faces - len(diversity_faces)])
            bar.update(len(paths) + len(bad))
    if not diversity_faces:
        raise DatasetError(f"no readable image among the {len(image_paths)} given")

    results = {
        "options": dataclasses.asdict(options),
        "versions": {
            "dbaf_jax": __version__,
            "jax": jax.__version__,
            "flax": flax.__version__,
            "numpy": np.__version__,
        },
        "images": utility["mtcnn"].images,
        "skipped": [s.reason for s in skipped],
        "model": {
            "path": str(model_dir),
            "fingerprint": anonymizer.fingerprint,
            "output_size": output_size,
        },
        "key": record.to_dict(),
        "test_password": TEST_PASSWORD,
        "wrong_password": WRONG_PASSWORD,
        "provenance": {"model": network_provenance(model_dir), **networks.provenance},
        "metric_networks_record": networks.record,
        "identity": (
            identity := measures.identity(
                totals,
                out_dir,
                measures.inverted(
                    totals, networks, options.inversion_steps, options.seed, options.batch_size
                ),
            )
        ),
        "robustness": measures.robustness_report(totals, identity),
        "missing_recognisers": networks.missing_recognisers,
        "quality": measures.quality(totals),
        "utility": {
            **{name: measure.result() for name, measure in utility.items()},
            **({"dlib": {"skipped": dlib_missing}} if dlib_missing else {}),
        },
        "diversity": _diversity(
            anonymizer, networks, np.stack(diversity_faces), output_size, out_dir, options
        ),
    }
    return results


def _diversity(anonymizer, networks, faces, output_size, out_dir, options) -> dict[str, Any]:
    """Anonymizes ``faces`` (F, input, input, 3) under ``options.keys`` keys; writes the key
    grid and one t-SNE plot per recogniser."""
    count = len(faces)
    record = keys.KeyRecord(salt=TEST_SALT)
    passwords = diversity.key_passwords(options.keys, options.seed)
    anonymized = []
    for password in tqdm(passwords, unit="key", desc="diversity"):
        key = anonymizer.key_for(password, record)
        chunks = [
            anonymizer.anonymize(
                pad_batch(faces[i : i + options.batch_size], options.batch_size), key
            )[0]
            for i in range(0, count, options.batch_size)
        ]
        anonymized.append(as_stored(np.concatenate(chunks)[:count], output_size))
    anonymized = np.stack(anonymized, axis=1)  # (F, K, size, size, 3)
    originals = as_stored(faces, output_size)
    images.write_png(
        out_dir / KEY_GRID_FILE, diversity.key_grid(originals, anonymized), {"keys": options.keys}
    )
    report = {"faces": count, "keys": options.keys, "plots": [KEY_GRID_FILE]}
    if options.keys < 2:
        return report
    flat = anonymized.reshape(-1, *anonymized.shape[2:])
    for name, recogniser in networks.recognisers.items():
        embeddings = np.concatenate(
            [
                recogniser(flat[i : i + options.batch_size])
                for i in range(0, len(flat), options.batch_size)
            ]
        ).reshape(count, options.keys, -1)
        report[name] = diversity.pairwise_identity_diversity(embeddings)
        if count * options.keys >= TSNE_MIN_POINTS:
            diversity.write_tsne_plot(out_dir / tsne_file(name), embeddings, options.seed)
            report["plots"].append(tsne_file(name))
    return report
