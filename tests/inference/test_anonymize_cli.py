"""The user commands end to end: ``python -m dbaf_jax.commands.anonymize`` then
``python -m dbaf_jax.commands.recover`` with the right and a wrong password, on a model
directory converted by ``python -m convert.dbaf`` from random reference weights
(reduced width). Random weights mean recovered faces look like nothing, so the tests
assert exact properties: metadata, keys re-derived from it, latent recovery equal to
`DBAF.recover_latent` computed directly, no password anywhere, refusals (typed errors
from the Python API, one ``error:`` line and exit status 1 from the commands)."""

import dataclasses
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from PIL import Image

from convert.common import run
from convert.dbaf import main as convert_main
from dbaf_jax import commands
from dbaf_jax.commands import anonymize, recover
from dbaf_jax.core.errors import (
    InputError,
    ModelDirectoryError,
    OutputExistsError,
    PasswordFileError,
)
from dbaf_jax.evaluation.protocol import as_stored
from dbaf_jax.inference.aligned_folders import anonymize_folder, recover_folder
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.planning import LATENTS_SUFFIX
from dbaf_jax.inference.programs import pad_batch
from dbaf_jax.inference.report import EXIT_SKIPPED
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FolderRunSettings
from dbaf_jax.models.dbaf import dbaf
from dbaf_jax.storage import images, keys, model_directory, model_families, network_kinds
from tests.cli_helpers import PASSWORD, WRONG_PASSWORD, pixels, temper_
from tests.paths import can_mount_tmpfs
from tests.torch_reference.dbaf_pipeline import (
    SIZE,
    convert_args,
    reduced_reference,
    save_reference_files,
)

BATCH = 2
SETTINGS = FolderRunSettings(batch_size=BATCH)
# How far (mean 8-bit levels) a wrong password's image must be from the right one's.
# The run's salt is random, so the two keys, and how far apart their images fall on this
# random test model, change from run to run: over 40 salts the anonymized a.png differed
# by 10.5 to 54.7 levels, and one CI run saw 4.95. The right password stays within 1
# level of what it wrote, so 2 still tells the two apart.
WRONG_KEY_MEAN_LEVELS = 2.0


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A converted model, a folder of faces (nested, PNG and JPEG, one corrupt file, one
    text file) and two password files."""
    tmp = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    ref = reduced_reference(seed=20)
    temper_(ref, rng)
    files = save_reference_files(tmp / "reference", ref, seed=20)
    run(convert_main, convert_args(files, tmp / "model"))
    faces = tmp / "faces"
    (faces / "sub").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(faces / "a.png")
    Image.fromarray(rng.integers(0, 256, (200, 200, 3), dtype=np.uint8)).save(
        faces / "b.jpg", quality=90
    )
    Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(
        faces / "sub" / "c.png"
    )
    (faces / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    (faces / "notes.txt").write_text("not an image\n")
    (tmp / "password.txt").write_text(PASSWORD + "\n", encoding="utf-8")
    (tmp / "wrong.txt").write_text(WRONG_PASSWORD + "\n", encoding="utf-8")
    return tmp


def aligned_args(workspace, in_dir, out_dir, *extra, password="password.txt"):
    """The command line of anonymize or recover --aligned with the workspace's model."""
    return [
        *("--model", str(workspace / "model"), "--password-file", str(workspace / password)),
        *(str(in_dir), str(out_dir), "--aligned", *extra),
    ]


def run_anonymize(ws, out, *extra):
    return anonymize.main(aligned_args(ws, ws / "faces", out, "--batch-size", str(BATCH), *extra))


def run_recover(ws, in_dir, out, password_file="password.txt", *extra):
    batch = ("--batch-size", str(BATCH))
    return recover.main(aligned_args(ws, in_dir, out, *batch, *extra, password=password_file))


@pytest.fixture(scope="module")
def anonymizer(workspace):
    return FaceAnonymizer(workspace / "model")


@pytest.fixture(scope="module")
def anonymized(workspace):
    report = run_anonymize(workspace, workspace / "anonymized", "--save-latents")
    return report


@pytest.fixture(scope="module")
def recovered(workspace, anonymized):
    """Recovery of the anonymized folder: image mode with both passwords, latent mode."""
    ws = workspace
    return {
        # The converted reference model records latent recovery: image mode is asked for.
        "right": run_recover(
            ws,
            ws / "anonymized",
            ws / "recovered_right",
            "password.txt",
            "--mode",
            "image",
            "--untrained-mode",
        ),
        "wrong": run_recover(
            ws,
            ws / "anonymized",
            ws / "recovered_wrong",
            "wrong.txt",
            "--mode",
            "image",
            "--untrained-mode",
        ),
        "latent": run_recover(
            ws, ws / "anonymized", ws / "recovered_latent", "password.txt", "--mode", "latent"
        ),
    }


def test_anonymize_writes_outputs_with_metadata(workspace, anonymized, anonymizer):
    out = workspace / "anonymized"
    names = ["a.png", "b.png", "sub/c.png"]
    assert sorted(str(p.relative_to(out)) for p in anonymized.written) == names
    for name in names:
        assert pixels(out / name).shape == (SIZE, SIZE, 3)
        assert (out / name).with_name((out / name).stem + LATENTS_SUFFIX).is_file()
    # The corrupt file and the text file are each named with why (every file of the folder is accounted for).
    why = {s.path.name: s.reason for s in anonymized.skipped}
    assert sorted(why) == ["broken.jpg", "notes.txt"]
    assert "cannot read image" in why["broken.jpg"] and "unknown type" in why["notes.txt"]
    assert not any("notes" in p.name for p in out.rglob("*"))

    metas = [images.read_metadata(out / name) for name in names]
    for meta in metas:
        assert meta["operation"] == "anonymize"
        assert meta["model"]["fingerprint"] == anonymizer.fingerprint
        record = keys.KeyRecord.from_dict(meta["key"])
        assert (record.kdf, record.version) == ("scrypt", keys.DERIVATION_VERSION)
        assert (record.n, record.r, record.p) == (
            keys.DEFAULT_SCRYPT["n"],
            keys.DEFAULT_SCRYPT["r"],
            keys.DEFAULT_SCRYPT["p"],
        )
        assert len(bytes.fromhex(record.salt)) == keys.SALT_BYTES
    assert len({m["key"]["salt"] for m in metas}) == 1  # one run, one salt


def test_stored_record_rederives_the_key(workspace, anonymized, anonymizer):
    """The key re-derived from an output's record (and the password) made that output."""
    meta = images.read_metadata(workspace / "anonymized" / "a.png")
    record = keys.KeyRecord.from_dict(meta["key"])
    face = images.read_image(workspace / "faces" / "a.png", anonymizer.input_size)[None]
    stored = pixels(workspace / "anonymized" / "a.png")
    right, _ = anonymizer.anonymize(pad_batch(face, BATCH), anonymizer.key_for(PASSWORD, record))
    wrong, _ = anonymizer.anonymize(
        pad_batch(face, BATCH), anonymizer.key_for(WRONG_PASSWORD, record)
    )
    assert np.abs(images.to_uint8(right[0]).astype(np.int16) - stored).max() <= 1
    assert (
        np.abs(images.to_uint8(wrong[0]).astype(np.int16) - stored).mean() > WRONG_KEY_MEAN_LEVELS
    )


def test_recovery_with_right_and_wrong_password(workspace, recovered):
    right_dir, wrong_dir = workspace / "recovered_right", workspace / "recovered_wrong"
    for name in ("right", "wrong"):
        assert len(recovered[name].written) == 3 and not recovered[name].skipped
    for name in ("a.png", "b.png", "sub/c.png"):
        meta = images.read_metadata(right_dir / name)
        assert (meta["operation"], meta["mode"]) == ("recover", "image")
        # A wrong password is no error: it gives another face.
        assert (
            np.abs(pixels(right_dir / name) - pixels(wrong_dir / name)).mean()
            > WRONG_KEY_MEAN_LEVELS
        )


def test_latent_recovery_equals_recover_latent(workspace, recovered, anonymizer):
    """--mode latent from the saved latents = the in-memory path = DBAF.recover_latent itself."""
    out = workspace / "recovered_latent"
    assert len(recovered["latent"].written) == 3
    assert images.read_metadata(out / "a.png")["mode"] == "latent"
    record = keys.KeyRecord.from_dict(
        images.read_metadata(workspace / "anonymized" / "a.png")["key"]
    )
    key = anonymizer.key_for(PASSWORD, record)
    face = pad_batch(
        images.read_image(workspace / "faces" / "a.png", anonymizer.input_size)[None], BATCH
    )

    _, latents = anonymizer.anonymize(face, key, with_latents=True)
    in_memory = anonymizer.recover_from_latents(latents, key)[0]
    with np.load(workspace / "anonymized" / f"a{LATENTS_SUFFIX}") as saved:
        for name in saved.files:
            np.testing.assert_array_equal(saved[name], latents[name][0])

    model, variables = anonymizer.model, anonymizer.variables

    @jax.jit
    def direct(variables, batch, key):
        encoding, _ = model.encode(variables, batch)
        anonymized_identity = model.transform_identity(
            variables, encoding.identity_code, key[None, None]
        )[0]
        return model.recover_latent(variables, encoding, anonymized_identity, key[None, None])[0][0]

    directly = np.asarray(direct(variables, face, key))[0]
    np.testing.assert_allclose(in_memory, directly, rtol=1e-5, atol=1e-5 * np.abs(directly).max())
    assert np.abs(pixels(out / "a.png") - images.to_uint8(in_memory).astype(np.int16)).max() <= 1


def test_password_appears_nowhere(workspace, anonymized, recovered, capsys):
    secrets = [p.encode("utf-8") for p in (PASSWORD, WRONG_PASSWORD)]
    secrets += [p.encode("utf-16-le") for p in (PASSWORD, WRONG_PASSWORD)]
    outputs = [
        p
        for d in ("anonymized", "recovered_right", "recovered_wrong", "recovered_latent", "model")
        for p in (workspace / d).rglob("*")
    ]
    assert len(outputs) > 10
    for path in outputs:
        assert PASSWORD not in str(path) and WRONG_PASSWORD not in str(path)
        if path.is_file():
            data = path.read_bytes()
            assert not any(s in data for s in secrets), path
    # Nor in what the commands print.
    anonymized.print()
    for report in recovered.values():
        report.print()
    printed = capsys.readouterr()
    assert (
        PASSWORD not in printed.err + printed.out
        and WRONG_PASSWORD not in printed.err + printed.out
    )


def snapshot(folder):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_existing_outputs_are_not_overwritten(workspace, anonymized):
    """The command: one `error:` line, exit status 1, nothing written."""
    out = workspace / "anonymized"
    before = snapshot(out)
    args = aligned_args(workspace, workspace / "faces", out)
    result = subprocess.run(
        [sys.executable, "-m", "dbaf_jax.commands.anonymize", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "exist already" in lines[0] and "--overwrite" in lines[0]
    assert PASSWORD not in result.stderr + result.stdout
    assert snapshot(out) == before


def test_anonymized_crops_are_refused_unless_asked(workspace, anonymized, anonymizer, tmp_path):
    """--aligned anonymize, as the photo runs do, skips crops that are already its outputs
    (their copies would lose the recovery record), each named with the flag that allows it;
    --allow-anonymized-input anonymizes them again."""
    run = Run("anonymize", anonymizer, None, PASSWORD, settings=SETTINGS)
    again = anonymize_folder(run, workspace / "anonymized", tmp_path / "again")
    assert again.written == [] and not list((tmp_path / "again").rglob("*.png"))
    outputs = sorted((workspace / "anonymized").rglob("*.png"))
    assert sorted(item.path for item in again.skipped) == outputs
    assert all(
        "already an output of anonymize" in item.reason
        and "--allow-anonymized-input" in item.reason
        for item in again.skipped
    )
    settings = FolderRunSettings(batch_size=BATCH, allow_anonymized_input=True)
    allowed = anonymize_folder(
        dataclasses.replace(run, settings=settings), workspace / "anonymized", tmp_path / "allowed"
    )
    assert len(allowed.written) == len(outputs) and not allowed.skipped


def test_python_api_raises_output_exists(workspace, anonymized, anonymizer):
    """The library raises a catchable OutputExistsError (the interpreter goes on), before writing."""
    out = workspace / "anonymized"
    before = snapshot(out)
    with pytest.raises(OutputExistsError, match="exist already") as err:
        anonymize_folder(
            Run("anonymize", anonymizer, None, PASSWORD, settings=SETTINGS),
            workspace / "faces",
            out,
        )
    assert isinstance(err.value, FileExistsError)
    assert snapshot(out) == before


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty first line"),
        (b"\n\nsecond line\n", "empty first line"),
        (b"caf\xe9 latin-1\n", "not UTF-8"),
    ],
)
def test_unusable_password_file(workspace, tmp_path, capsys, content, reason):
    path = tmp_path / "pw.txt"
    path.write_bytes(content)
    with pytest.raises(PasswordFileError, match=reason):
        keys.read_password(path)
    # The command says so in one line and exits 1, before loading the model or writing anything.
    args = [
        "--model",
        str(workspace / "model"),
        "--password-file",
        str(path),
        str(workspace / "faces"),
        str(tmp_path / "out"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        commands.run_main(anonymize.main, args)
    assert exit_info.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("error: ")
        and str(path) in lines[0]
        and reason in lines[0]
    )
    assert not (tmp_path / "out").exists()


def test_missing_password_file_model_or_input(anonymizer, tmp_path):
    with pytest.raises(PasswordFileError, match="cannot read"):
        keys.read_password(tmp_path / "no_such_file")
    with pytest.raises(ModelDirectoryError, match="no_model"):
        FaceAnonymizer(tmp_path / "no_model")
    with pytest.raises(InputError, match="no_faces"):
        anonymize_folder(
            Run("anonymize", anonymizer, None, PASSWORD), tmp_path / "no_faces", tmp_path / "out"
        )
    assert not (tmp_path / "out").exists()


def test_recover_skips_images_without_metadata(workspace, anonymized, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.png").write_bytes((workspace / "anonymized" / "a.png").read_bytes())
    (folder / "plain.png").write_bytes((workspace / "faces" / "a.png").read_bytes())
    report = run_recover(
        workspace, folder, tmp_path / "out", "password.txt", "--mode", "image", "--untrained-mode"
    )
    assert [p.name for p in report.written] == ["a.png"]
    assert [s.path.name for s in report.skipped] == ["plain.png"]
    assert "no dbaf_jax metadata" in report.skipped[0].reason


def test_fingerprint_follows_the_weights_not_the_files(workspace, anonymizer, tmp_path):
    """Re-saving the same weights keeps the fingerprint; other weights change it."""
    model, variables = model_families.load_family(dbaf.FAMILY, workspace / "model")
    for name in dbaf.NETWORKS:
        network = model_directory.load_network(workspace / "model" / name)
        model_directory.save_network(tmp_path / name, network.module, network.variables)
    copy_model, copy_variables = model_families.load_family(
        dbaf.FAMILY, tmp_path, without_manifest=True
    )
    assert (
        network_kinds.model_fingerprint(copy_model.networks(), copy_variables)
        == anonymizer.fingerprint
    )
    changed = jax.tree.map(lambda x: x, copy_variables)
    changed["kria"] = jax.tree.map(lambda x: x * 1.01, copy_variables["kria"])
    assert network_kinds.model_fingerprint(copy_model.networks(), changed) != anonymizer.fingerprint


@pytest.fixture(scope="module")
def other_model(workspace):
    """The same architecture with other KRIA weights: another fingerprint."""
    model, variables = model_families.load_family(dbaf.FAMILY, workspace / "model")
    networks = {name: (module, variables[name]) for name, module in model.networks().items()}
    networks["kria"] = (model.kria, jax.tree.map(lambda x: x * 1.01, variables["kria"]))
    folder = workspace / "other_model"
    model_directory.save_model(folder, dbaf.FAMILY, networks, {name: None for name in networks})
    return folder


def cli(module, args):
    """A command in a fresh interpreter: (exit status, stderr lines)."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    return result.returncode, result.stderr.strip().splitlines()


def test_recover_runs_the_mode_the_model_was_trained_for_and_refuses_another(
    workspace, anonymized, recovered, tmp_path, capsys
):
    """The converted reference model records latent recovery (model.json): recover
    --aligned runs it without --mode and says so; image mode is refused in one line
    unless --untrained-mode, which warns."""
    assert model_directory.trained_recovery(workspace / "model") == "latent"
    report = run_recover(workspace, workspace / "anonymized", tmp_path / "default")
    assert report.notes[0] == "recovery mode: latent (the mode the model was trained for)"
    latent = [
        path for path in report.written if (workspace / "recovered_latent" / path.name).exists()
    ]
    assert latent  # the same files as the module's latent run, bit for bit
    for path in latent:
        np.testing.assert_array_equal(
            pixels(path), pixels(workspace / "recovered_latent" / path.name)
        )
    capsys.readouterr()
    args = aligned_args(workspace, workspace / "anonymized", tmp_path / "image", "--mode", "image")
    assert commands.exit_status(recover.main, args) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        len(lines) == 1
        and "trained for latent recovery, not image recovery" in lines[0]
        and "--untrained-mode" in lines[0]
    )
    assert not (tmp_path / "image").exists()
    assert [w for w in recovered["right"].warnings if "--untrained-mode runs it anyway" in w]


def test_recovery_with_another_model_is_refused(
    workspace, anonymized, anonymizer, other_model, tmp_path, capsys
):
    """Refused before anything is written, naming both fingerprints; with
    --ignore-model-mismatch it runs and warns."""
    other = FaceAnonymizer(other_model)
    assert other.fingerprint != anonymizer.fingerprint
    args = [
        "--model",
        str(other_model),
        "--password-file",
        str(workspace / "password.txt"),
        str(workspace / "anonymized"),
        str(tmp_path / "out"),
        "--aligned",
        "--batch-size",
        str(BATCH),
    ]
    assert commands.exit_status(recover.main, args) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert (
        anonymizer.fingerprint in lines[0]
        and other.fingerprint in lines[0]
        and "--ignore-model-mismatch" in lines[0]
    )
    assert not (tmp_path / "out").exists()
    report = recover.main(args + ["--ignore-model-mismatch"])
    assert len(report.written) == 3
    assert any(anonymizer.fingerprint in w and other.fingerprint in w for w in report.warnings)


@pytest.mark.parametrize("case", ["input is a file", "output is a file", "output below a file"])
def test_unusable_folders_are_one_line(workspace, tmp_path, capsys, case):
    a_file = tmp_path / "file.png"
    a_file.write_bytes((workspace / "faces" / "a.png").read_bytes())
    in_dir, out_dir = {
        "input is a file": (a_file, tmp_path / "out"),
        "output is a file": (workspace / "faces", a_file),
        "output below a file": (workspace / "faces", a_file / "out"),
    }[case]
    before = snapshot(tmp_path)
    for command in (anonymize.main, recover.main):
        args = aligned_args(workspace, in_dir, out_dir)
        assert commands.exit_status(command, args) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "file" in lines[0], lines
        assert str(a_file) in lines[0] or str(out_dir) in lines[0]
        assert snapshot(tmp_path) == before


def test_a_read_only_file_system_is_refused_before_work(workspace, tmp_path):
    """The output folder on a real read-only file system (a tmpfs mounted read-only in a
    private mount namespace): both commands stop with one line naming the folder and the
    system's reason, exit 1, no traceback, before any image is processed."""
    out = tmp_path / "read-only"
    out.mkdir()
    if not can_mount_tmpfs(out, "ro"):
        pytest.skip(
            "this machine does not let a process mount a private file system (unshare --user --mount)"
        )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for module in ("dbaf_jax.commands.anonymize", "dbaf_jax.commands.recover"):
        command = (
            f"mount -t tmpfs -o ro tmpfs '{out}' && exec '{sys.executable}' -m {module} --aligned"
            f" --model '{workspace / 'model'}' --password-file '{workspace / 'password.txt'}' '{workspace / 'faces'}' '{out}'"
        )
        result = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", command],
            capture_output=True,
            text=True,
            env=env,
        )
        assert result.returncode == 1, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert (
            len(errors) == 1 and str(out) in errors[0] and "Read-only file system" in errors[0]
        ), result.stderr
        assert "Traceback" not in result.stderr and "processed" not in result.stderr, result.stderr
    assert list(out.iterdir()) == []


@pytest.mark.slow  # two whole anonymize runs
def test_two_runs_into_one_folder_never_replace_each_other(workspace, tmp_path):
    """Two anonymize processes started together into one output folder: at most one
    succeeds; a run that meets a file the other made stops with one error line;
    every output is one whole PNG from a single run and nothing is left half-written."""
    out = tmp_path / "out"
    args = aligned_args(workspace, workspace / "faces", out, "--batch-size", "1")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "dbaf_jax.commands.anonymize", *args],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    results = [(run.wait(), run.stderr.read()) for run in runs]
    # The folder holds a broken image, so a run that finishes exits EXIT_SKIPPED, not 0.
    finished = [code == EXIT_SKIPPED for code, _ in results]
    assert sum(finished) <= 1, results
    for (_, stderr), done in zip(results, finished):
        if not done:
            errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
            assert len(errors) == 1 and "exist" in errors[0] and "--overwrite" in errors[0], stderr
    outputs = sorted(p for p in out.rglob("*") if p.is_file())
    assert [str(p.relative_to(out)) for p in outputs] == ["a.png", "b.png", "sub/c.png"]
    salts = {images.read_metadata(p)["key"]["salt"] for p in outputs}
    for path in outputs:
        assert pixels(path).shape == (SIZE, SIZE, 3)
    if any(finished):
        assert len(salts) == 1  # the successful run's outputs are all its own


def test_batches_are_padded_with_copies_of_their_last_image():
    """Padding repeats the last entry (an all-zero image would be a degenerate input)
    and leaves the real entries first and unchanged; an empty batch is refused."""
    batch = np.arange(2 * 3, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(pad_batch(batch, 4), batch[[0, 1, 1, 1]])
    np.testing.assert_array_equal(pad_batch(batch, 2), batch)
    with pytest.raises(ValueError, match="empty batch"):
        pad_batch(batch[:0], 2)


def psnr(a, b):
    return 10 * np.log10(
        4.0 / np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    )


@pytest.mark.slow
def test_bfloat16_inference_stays_close_to_float32(workspace, anonymizer):
    """Every network in bfloat16 (8-bit mantissa) against float32 on the same faces and
    key: the anonymized and recovered images' PSNR between the two, and the cosine
    similarity of the identity codes the model reads from the two anonymized images.
    Measured on this tempered random model: 35.3 dB, 27.4 dB (two passes compound),
    cosine 0.9937; the bounds leave room for other CPUs' rounding."""
    half = FaceAnonymizer(workspace / "model", dtype="bfloat16")
    assert half.fingerprint == anonymizer.fingerprint  # the weights are the same
    faces = np.stack(
        [images.read_image(workspace / "faces" / n, 256) for n in ("a.png", "sub/c.png")]
    )
    key = anonymizer.key_for(PASSWORD, keys.KeyRecord(salt="00" * keys.SALT_BYTES, n=2**10))
    full_anonymized, _ = anonymizer.anonymize(faces, key)
    half_anonymized, _ = half.anonymize(faces, key)
    assert half_anonymized.dtype == np.float32
    stored = [as_stored(x, 256) for x in (full_anonymized, half_anonymized)]
    full_recovered = anonymizer.recover(stored[0], key)
    half_recovered = half.recover(stored[1], key)
    model, variables = anonymizer.model, anonymizer.variables
    codes = [
        np.asarray(model.encode(variables, x)[0].identity_code).reshape(len(x), -1) for x in stored
    ]
    cosine = (
        np.sum(codes[0] * codes[1], -1)
        / np.linalg.norm(codes[0], axis=-1)
        / np.linalg.norm(codes[1], axis=-1)
    )
    print(
        f"bf16 vs f32: anonymized {psnr(full_anonymized, half_anonymized):.1f} dB, "
        f"recovered {psnr(full_recovered, half_recovered):.1f} dB, identity cosine {cosine.min():.4f}"
    )
    assert psnr(full_anonymized, half_anonymized) > 30
    assert psnr(full_recovered, half_recovered) > 25
    assert cosine.min() > 0.99


@pytest.mark.slow
def test_batch_split_over_devices_equals_one_device(workspace, anonymizer):
    """Weights replicated on 4 devices, a batch of 3 padded to 4 and split over them:
    the same outputs as on one device (the default on a CPU host)."""
    assert anonymizer.batch_multiple == 1
    spread = FaceAnonymizer(workspace / "model", devices=jax.local_devices()[:4])
    assert spread.batch_multiple == 4 and spread.padded_size(3) == 4
    faces = np.stack(
        [images.read_image(workspace / "faces" / n, 256) for n in ("a.png", "b.jpg", "sub/c.png")]
    )
    key = anonymizer.key_for(PASSWORD, keys.KeyRecord(salt="00" * keys.SALT_BYTES, n=2**10))
    one, one_latents = anonymizer.anonymize(faces, key, with_latents=True)
    four, four_latents = spread.anonymize(faces, key, with_latents=True)
    assert four.shape == one.shape == (3, SIZE, SIZE, 3)
    np.testing.assert_allclose(four, one, rtol=1e-5, atol=1e-5)
    for name in one_latents:
        # Split over devices, XLA's CPU convolutions sum in another order: a few
        # attribute-map entries that are large differences move by ~3e-5 of the map's
        # largest value (measured), so the bound is the usual 1e-4 of it.
        scale = np.abs(one_latents[name]).max()
        assert np.abs(four_latents[name] - one_latents[name]).max() < 1e-4 * scale, name
    np.testing.assert_allclose(
        spread.recover_from_latents(four_latents, key),
        anonymizer.recover_from_latents(one_latents, key),
        rtol=1e-5,
        atol=1e-5,
    )


# Issue 21 (docs/reliability.md): the output location, write failures, temporaries.


@pytest.mark.parametrize("where", ["the input folder", "inside the input folder"])
def test_output_in_the_input_folder_is_refused_before_work(workspace, tmp_path, capsys, where):
    faces = tmp_path / "faces"
    shutil.copytree(workspace / "faces", faces)
    out = faces if where == "the input folder" else faces / "sub" / "out"
    before = snapshot(faces)
    for command in (anonymize.main, recover.main):
        assert (
            commands.exit_status(command, aligned_args(workspace, faces, out, "--overwrite")) == 1
        )
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {out}: the output folder is") and str(faces) in line, line
        assert snapshot(faces) == before  # the originals are untouched


def test_a_failed_write_is_one_line_naming_the_file_and_cause(
    workspace, anonymizer, tmp_path, capsys
):
    """A file-size limit makes every PNG write fail the way a full disk does: after the
    check of the folder (which writes a byte), during the run."""
    out = tmp_path / "out"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    run = Run("anonymize", anonymizer, None, PASSWORD, settings=SETTINGS)
    try:
        status = commands.exit_status(lambda argv: anonymize_folder(run, workspace / "faces", out))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert status == 1
    stderr = capsys.readouterr().err
    [line] = [
        line for line in stderr.splitlines() if line.startswith("error: ")
    ]  # the rest is the progress bar
    assert "Traceback" not in stderr and re.fullmatch(
        rf"error: {re.escape(str(out))}/\S+\.png: cannot write it \(File too large\)", line
    ), line
    assert [p for p in out.rglob("*") if p.is_file()] == []  # nothing torn, no temporary left


NOBODY = 65534  # the unprivileged user and group of Linux distributions


def _as_unprivileged_user(run):
    """``run()``'s InputError message, or its other fault, computed without the right to
    write where only the owner may: as this user when it is not root (root writes
    everywhere), else in a forked child that became the user nobody."""
    if os.geteuid() != 0:
        try:
            run()
        except InputError as err:
            return str(err)
        return "no error"
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child only checks the folder: it exits before any JAX work
        code = 1
        signal.alarm(120)  # were the check gone, the run's JAX work after fork() could hang
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            run()
            message = "no error"
        except InputError as err:
            message, code = str(err), 0
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            message = f"{type(err).__name__}: {err}"
        os.write(writer, message.encode())
        os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(child, 0)
    return message


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # see _as_unprivileged_user
@pytest.mark.parametrize("case", ["folder not writable", "parent not writable"])
def test_a_folder_the_user_cannot_write_is_refused_before_work(
    workspace, anonymizer, tmp_path, case
):
    """Permission denied, as an unprivileged user: one InputError naming the folder and
    the system's reason, before any image is read or written."""
    shared = Path(
        tempfile.mkdtemp(prefix="dbaf-unprivileged-")
    )  # readable by nobody, unlike tmp_path
    try:
        shutil.copytree(workspace / "faces", shared / "faces")
        locked = shared / "locked"
        locked.mkdir()
        out = locked if case == "folder not writable" else locked / "out"
        for path in (shared, *(p for p in shared.rglob("*"))):
            path.chmod(0o755 if path.is_dir() else 0o644)
        locked.chmod(0o555)
        run = Run("anonymize", anonymizer, None, PASSWORD, settings=SETTINGS)
        message = _as_unprivileged_user(lambda: anonymize_folder(run, shared / "faces", out))
        assert message == f"{out}: cannot write to the output folder (Permission denied)", message
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(shared)


def test_stale_temporaries_are_removed_and_reported(workspace, anonymized, anonymizer, tmp_path):
    """Named temporaries of a killed run (its process gone, or an older version's name
    without a process) hold face pixels: the next run into the folder removes them and
    says so. A running process's temporary is left alone."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    pixels_of_a_face = (workspace / "anonymized" / "a.png").read_bytes()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = [out / f".a.png.{dead}.0123abcd.partial", out / "sub" / ".c.png.89abcdef.partial"]
    running = out / f".b.png.{os.getpid()}.00000000.partial"
    for path in stale + [running]:
        path.write_bytes(pixels_of_a_face)
    run = Run("recover", anonymizer, None, PASSWORD, settings=SETTINGS)
    report = recover_folder(run, workspace / "anonymized", out)
    assert not any(path.exists() for path in stale) and running.exists()
    assert sorted(report.notes) == sorted(
        f"removed {path}, a temporary file an interrupted run left (it may hold face pixels)"
        for path in stale
    )


@pytest.mark.slow
def test_recover_killed_while_writing_leaves_nothing_readable(workspace, anonymized, tmp_path):
    """kill -9 of `recover` once its first output exists: every file left is a complete
    output; no temporary with recovered pixels, hidden or not."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(48):
        shutil.copy(workspace / "anonymized" / "a.png", many / f"{i:02d}.png")
    out = tmp_path / "out"
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dbaf_jax.commands.recover",
            *aligned_args(
                workspace, many, out, "--batch-size", "1", "--mode", "image", "--untrained-mode"
            ),
        ],
        stderr=subprocess.DEVNULL,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    try:
        while run.poll() is None and not any(p.suffix == ".png" for p in out.glob("*")):
            time.sleep(0.01)
        run.kill()
    finally:
        run.wait()
    left = [p for p in out.rglob("*") if p.is_file()]
    assert left and len(left) < 48, "the run was not killed while writing"
    for path in left:
        assert not path.name.startswith(".") and path.suffix == ".png", path
        assert pixels(path).shape == (SIZE, SIZE, 3)


def damaged_sidecars(good: dict[str, np.ndarray]) -> dict[str, tuple[object, str]]:
    """fault -> (what the sidecar holds: arrays, or bytes for a non-archive; words the
    refusal must contain)."""
    maps = sorted(name for name in good if name.startswith("attribute_map_"))
    return {
        "missing_map": (
            {k: v for k, v in good.items() if k != maps[-1]},
            f"missing ['{maps[-1]}']",
        ),
        "extra_array": ({**good, "extra": np.zeros(3, np.float32)}, "unexpected ['extra']"),
        "wrong_shape": (
            {**good, "attribute_code": good["attribute_code"][..., :-1]},
            "attribute_code is float32",
        ),
        "extra_row": (
            {**good, "attribute_code": good["attribute_code"][None]},
            "attribute_code is float32",
        ),
        "nan": (
            {**good, maps[0]: np.full_like(good[maps[0]], np.nan)},
            f"{maps[0]} holds NaN or infinite values",
        ),
        "integer": (
            {**good, "attribute_code": good["attribute_code"].astype(np.int32)},
            "attribute_code is int32",
        ),
        "text": (b"not an archive\n", "not a NumPy .npz archive"),
    }


def test_a_damaged_sidecar_skips_only_its_own_image(
    workspace, anonymized, recovered, anonymizer, tmp_path
):
    """One latent recovery run over three intact images and one per kind of damaged
    sidecar: each damaged one is skipped naming its sidecar and the fault; the intact
    ones are recovered as in a run without the damaged ones."""
    source = tmp_path / "anonymized"
    shutil.copytree(workspace / "anonymized", source)
    with np.load(source / f"a{LATENTS_SUFFIX}") as saved:
        good = {name: saved[name] for name in saved.files}
    faults = damaged_sidecars(good)
    for fault, (content, _) in faults.items():
        shutil.copy(source / "a.png", source / f"{fault}.png")
        side = source / f"{fault}{LATENTS_SUFFIX}"
        if isinstance(content, bytes):
            side.write_bytes(content)
        else:
            with open(side, "wb") as file:
                np.savez(file, **content)
    out = tmp_path / "out"
    run = Run("recover", anonymizer, None, PASSWORD, settings=SETTINGS, recovery="latent")
    report = recover_folder(run, source, out)
    reasons = {item.path.stem: item.reason for item in report.skipped}
    assert sorted(reasons) == sorted(faults)
    for fault, (_, words) in faults.items():
        assert (
            reasons[fault].startswith(f"{source / fault}{LATENTS_SUFFIX}: ")
            and words in reasons[fault]
        ), reasons[fault]
    assert sorted(str(p.relative_to(out)) for p in report.written) == [
        "a.png",
        "b.png",
        "sub/c.png",
    ]
    for name in ("a.png", "b.png", "sub/c.png"):
        assert np.abs(pixels(out / name) - pixels(workspace / "recovered_latent" / name)).max() <= 1
