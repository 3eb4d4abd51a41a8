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

from dbaf_jax import __version__
from dbaf_jax.core.errors import DatasetError, ModelDirectoryError
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
from dbaf_jax.storage import images, keys

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


@dataclasses.dataclass(frozen=True)
class EvaluationKeys:
    """The keys of an evaluation, all under the fixed salt: the test password's, the wrong
    password's, the attacker's guessed passwords' and the one-bit changes' (of the test
    password, of the salt)."""

    record: keys.KeyRecord
    key: jax.Array
    wrong_key: jax.Array
    guess_keys: list[jax.Array]
    flip_keys: dict[str, jax.Array]


def evaluation_keys(anonymizer: FaceAnonymizer, options: EvaluationOptions) -> EvaluationKeys:
    record = keys.KeyRecord(salt=TEST_SALT)
    key, wrong_key = (
        anonymizer.key_for(TEST_PASSWORD, record),
        anonymizer.key_for(WRONG_PASSWORD, record),
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
    return EvaluationKeys(record, key, wrong_key, guess_keys, flip_keys)


@dataclasses.dataclass
class Collected:
    """What the pass over the images collects: the measures' per-image values
    (``totals``), the detection utility per detector (dlib's skipped with the reason
    ``dlib_missing``), the unreadable images and the first faces for the diversity study."""

    totals: measures.Accumulator
    utility: dict[str, DetectionUtility]
    dlib_missing: str | None
    skipped: list[images.Skipped] = dataclasses.field(default_factory=list)
    diversity_faces: list[np.ndarray] = dataclasses.field(default_factory=list)


def image_set_outputs(
    anonymizer: FaceAnonymizer,
    batch: np.ndarray,
    n: int,
    credentials: EvaluationKeys,
    batch_size: int,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The image sets of one batch (the anonymization and every recovery, at the output
    size, as stored: (n, s, s, 3) each) and the anonymization as stored at the input size
    (the padded batch), which the recoveries in image mode read."""
    key, wrong_key = credentials.key, credentials.wrong_key
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
    output_size = anonymizer.output_size
    return {name: as_stored(x[:n], output_size) for name, x in outputs.items()}, stored


def attack_outputs(
    anonymizer: FaceAnonymizer,
    batch: np.ndarray,
    stored: np.ndarray,
    n: int,
    credentials: EvaluationKeys,
    batch_size: int,
) -> dict[str, np.ndarray]:
    """The attacks' images of one batch (padded): the same faces' second views under the
    same key (linkability), recoveries with the attacker's guessed passwords and of
    transformed images (robustness), anonymizations under one-bit-changed keys."""
    key = credentials.key
    views = pad_batch(calibration.augmented_views(batch), batch_size)
    outputs = {"linked_view": anonymizer.anonymize(views, key)[0]}
    outputs.update(
        {f"guess{g}": anonymizer.recover(stored, k) for g, k in enumerate(credentials.guess_keys)}
    )
    for name, transform in robustness.TRANSFORMS.items():
        outputs[f"robust_{name}"] = anonymizer.recover(
            pad_batch(transform(stored[:n]), batch_size), key
        )
    outputs.update(
        {
            name: anonymizer.anonymize(pad_batch(batch, batch_size), k)[0]
            for name, k in credentials.flip_keys.items()
        }
    )
    return outputs


def accumulate_attacks(
    totals: measures.Accumulator,
    networks: MetricNetworks,
    attacks: dict[str, np.ndarray],
    originals: np.ndarray,
    anonymization: np.ndarray,
    batch_size: int,
) -> None:
    """Adds one batch's attack images (`attack_outputs`) to ``totals``: every recogniser's
    embeddings, and the robustness recoveries' PSNR against the ``originals``
    (n, s, s, 3) or the one-bit changes' difference from the right key's ``anonymization``."""
    n, output_size = len(originals), originals.shape[1]
    for name, x in attacks.items():
        x = as_stored(x[:n], output_size)
        embedded = {r: recogniser(x) for r, recogniser in networks.recognisers.items()}
        for r, e in embedded.items():
            totals.extra_embeddings[r].setdefault(name, []).append(e)
        if name.startswith("robust_"):
            _, psnr, _ = measures.pixel_metrics(
                pad_batch(originals, batch_size), pad_batch(x, batch_size)
            )
            totals.extra_pixels.setdefault(name, []).append(np.asarray(psnr)[:n])
        elif name.startswith("flip_"):
            levels = np.abs(x - anonymization).mean(axis=(1, 2, 3)) * 127.5
            totals.extra_pixels.setdefault(name, []).append(levels)
            for r, recogniser in networks.recognisers.items():
                distance = calibration.pair_distances(
                    recogniser(anonymization), embedded[r], r not in recognition.RAW_L2
                )
                totals.flip_distances[r].setdefault(name, []).append(distance)


def utility_measures(networks: MetricNetworks) -> tuple[dict[str, DetectionUtility], str | None]:
    """Table III's detectors: MTCNN, and dlib's HOG with 68 landmarks when dlib is
    installed (else why not, also said on stderr)."""
    utility = {"mtcnn": DetectionUtility(networks.detector)}
    dlib_missing = DlibDetector.unavailable()
    if dlib_missing is None:
        utility["dlib"] = DetectionUtility(DlibDetector("hog", upsample=1, all_68=True))
    else:
        print(f"Dlib utility skipped: {dlib_missing}", file=sys.stderr)
    return utility, dlib_missing


def collect(
    anonymizer: FaceAnonymizer,
    networks: MetricNetworks,
    credentials: EvaluationKeys,
    image_paths: list[Path],
    out_dir: Path,
    options: EvaluationOptions,
) -> Collected:
    """One pass over the images, batch by batch: anonymized, recovered and attacked, each
    batch measured into a `Collected`; the first batch's sample grid written into ``out_dir``."""
    totals = measures.Accumulator(
        list(networks.recognisers), *image_sets(anonymizer.latent_recovery)
    )
    collected = Collected(totals, *utility_measures(networks))
    out_dir.mkdir(parents=True, exist_ok=True)
    batch_size, output_size = options.batch_size, anonymizer.output_size
    with tqdm(total=len(image_paths), unit="img", desc="evaluate") as bar:
        for paths, batch, bad in images.iter_batches(
            image_paths, anonymizer.input_size, batch_size
        ):
            collected.skipped += bad
            if not paths:
                bar.update(len(bad))
                continue
            n = len(paths)
            originals = np.stack([images.read_image(p, output_size) for p in paths])
            outputs, stored = image_set_outputs(anonymizer, batch, n, credentials, batch_size)
            measures.accumulate(totals, networks, originals, outputs, batch_size)
            if options.inversion_steps:
                totals.pairs["original"].append(originals)
                totals.pairs["anonymization"].append(outputs["anonymization"])
            attacks = attack_outputs(anonymizer, batch, stored, n, credentials, batch_size)
            accumulate_attacks(
                totals, networks, attacks, originals, outputs["anonymization"], batch_size
            )
            for measure in collected.utility.values():
                measure.update(originals, outputs["anonymization"])
            if not collected.diversity_faces:
                rows = np.stack([originals] + [outputs[s] for s in totals.identity_sets], axis=1)
                grid = images.make_grid(rows.reshape(-1, *originals.shape[1:]), rows=n)
                images.write_png(
                    out_dir / SAMPLES_FILE, grid, {"columns": ["original", *totals.identity_sets]}
                )
            wanted = options.diversity_faces - len(collected.diversity_faces)
            collected.diversity_faces += list(batch[:wanted])
            bar.update(len(paths) + len(bad))
    return collected


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
    credentials = evaluation_keys(anonymizer, options)
    collected = collect(anonymizer, networks, credentials, image_paths, out_dir, options)
    if not collected.diversity_faces:
        raise DatasetError(f"no readable image among the {len(image_paths)} given")
    return results_of(
        model_dir, out_dir, options, anonymizer, networks, credentials.record, collected
    )


def results_of(
    model_dir: Path,
    out_dir: Path,
    options: EvaluationOptions,
    anonymizer: FaceAnonymizer,
    networks: MetricNetworks,
    record: keys.KeyRecord,
    collected: Collected,
) -> dict[str, Any]:
    """Every number of the evaluation from what the pass collected; runs what needs all
    the images at once (the identity measures, the learned inversion, the diversity study)."""
    totals, utility, dlib_missing = collected.totals, collected.utility, collected.dlib_missing
    output_size = anonymizer.output_size
    return {
        "options": dataclasses.asdict(options),
        "versions": {
            "dbaf_jax": __version__,
            "jax": jax.__version__,
            "flax": flax.__version__,
            "numpy": np.__version__,
        },
        "images": utility["mtcnn"].images,
        "skipped": [s.reason for s in collected.skipped],
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
            anonymizer, networks, np.stack(collected.diversity_faces), output_size, out_dir, options
        ),
    }


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
