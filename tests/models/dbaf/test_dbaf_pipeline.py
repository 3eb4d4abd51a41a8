"""The whole DBAF inference pipeline against the reference's composition, through
``python -m convert.dbaf``: files written as the reference writes them (pSp-layout e4e,
rosinality StyleGAN2 with g_ema, plain state_dicts of CID, MAAR, the fine-tuned
generator, the discriminator and KRIA), converted into one model directory, loaded with
`FaceAnonymizer`, and compared image by image; plus the converter's refusals and the
full-size layout."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from configs.dbaf import stage1, stage2
from convert.common import run
from convert.dbaf import compatibility_problems, encoder_map_channels, infer_encoder, main
from convert.dbaf_stages import infer_cid, infer_kria, infer_maar
from convert.stylegan2 import infer_discriminator, infer_generator
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.models.dbaf import dbaf
from dbaf_jax.models.dbaf.cid import CID
from dbaf_jax.models.dbaf.kria import KRIA
from dbaf_jax.models.dbaf.maar import MAAR
from dbaf_jax.models.e4e import Encoder4Editing
from dbaf_jax.models.stylegan2 import Generator
from dbaf_jax.storage import keys, model_families, network_kinds
from dbaf_jax.train import networks, stages
from tests.conversion import (
    assert_not_a_checkpoint_message,
    command_refusal,
    edited,
    not_a_checkpoint,
    refusal,
    save,
)
from tests.parity import assert_parity, nchw, nhwc, relative_error
from tests.torch_reference import e4e as torch_e4e
from tests.torch_reference import stylegan2 as torch_stylegan2
from tests.torch_reference.dbaf import AnonymizationNet, AttrBlock, DisentanglementId
from tests.torch_reference.dbaf_pipeline import (
    ENC_WIDTH,
    ENCODER_MAP_CHANNELS,
    GROUPS,
    MAAR_CHANNELS,
    N_LATENT,
    SIZE,
    STYLE_DIM,
    convert_args,
    reduced_reference,
    save_reference_files,
)

PASSWORD = "tr0ub4dor & 3"
RECORD = keys.KeyRecord(
    salt="00112233445566778899aabbccddeeff", n=2**10
)  # cheap scrypt for the test


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dbaf")
    ref = reduced_reference()
    files = save_reference_files(tmp / "reference", ref)
    run(main, convert_args(files, tmp / "model"))
    return ref, files, tmp / "model"


@pytest.fixture(scope="module")
def images():
    return np.tanh(np.random.default_rng(11).standard_normal((3, 256, 256, 3))).astype(np.float32)


def test_directory_holds_every_network(converted):
    _, _, model_dir = converted
    for name in dbaf.NETWORKS + ("discriminator",):
        info = json.loads((model_dir / name / "network.json").read_text())
        assert info["source"].endswith((".pt", ".pth")), info
    model, variables = model_families.load_family(dbaf.FAMILY, model_dir)
    assert model.cid.attention == "batch" and model.for_inference().cid.attention == "single"
    assert (model.cid.heads, model.cid.head_dim, model.cid.depth) == (2, 8, 2)
    assert model.kria.groups == GROUPS and model.cid.groups == GROUPS
    assert model.maar.channels == MAAR_CHANNELS and model.maar.reduction == 16
    assert model.e4e.width_scale == ENC_WIDTH and model.e4e.input_size == 256
    assert model.decoder.size == SIZE and model.key_generator.size == SIZE
    assert "kria" in variables and dbaf.KEY_GENERATOR in variables


@pytest.mark.slow
def test_anonymize_and_latent_recovery_match_reference(converted, images):
    ref, _, model_dir = converted
    anonymizer = FaceAnonymizer(model_dir)
    assert anonymizer.input_size == 256

    # The key: password -> seed -> z -> the ORIGINAL generator's mapping, repeated 4/4/2.
    key = anonymizer.key_for(PASSWORD, RECORD)
    z = torch.from_numpy(
        keys.key_latents(keys.derive_seed(PASSWORD, RECORD), len(GROUPS), STYLE_DIM)
    )
    with torch.no_grad():
        key_t = ref.key(z)
    assert key.shape == (N_LATENT, STYLE_DIM)
    assert_parity(key, key_t[0].numpy(), name="key")

    # JAX: the three images in one batch; the reference: one image at a time (its test.py).
    anonymized, latents = anonymizer.anonymize(images, key, with_latents=True)
    recovered = anonymizer.recover_from_latents(latents, key)
    # The recovered latents themselves, from the same saved latents: with random weights
    # MAAR's maps dominate the images, so a wrong latent could hide behind a similar image.
    maps = tuple(latents[f"attribute_map_{k}"] for k in range(len(ENCODER_MAP_CHANNELS)))
    original = dbaf.Encoding(
        None, latents["attribute_code"], None, maps
    )  # what latent recovery reads
    recover = jax.jit(anonymizer.model.recover_latent)
    _, recovered_latents = recover(
        anonymizer.variables, original, latents["anonymized_identity"], key[None, None]
    )
    errors = {}
    for i in range(len(images)):
        with torch.no_grad():
            anon_t, anon_id_t, attr_t, _, maps_t = ref.anonymize(nchw(images[i : i + 1]), key_t)
            rec_t, rec_latents_t = ref.recover_latent(anon_id_t, attr_t, maps_t, key_t)
        pairs = {
            "attribute_code": (latents["attribute_code"][i], attr_t[0].numpy()),
            "anonymized_identity": (latents["anonymized_identity"][i], anon_id_t[0].numpy()),
            **{
                f"attribute_map_{k}": (latents[f"attribute_map_{k}"][i], nhwc(m)[0])
                for k, m in enumerate(maps_t)
            },
            "anonymized": (anonymized[i], nhwc(anon_t)[0]),
            "recovered_latents": (recovered_latents[0, i], rec_latents_t[0].numpy()),
            "recovered": (recovered[i], nhwc(rec_t)[0]),
        }
        for name, (actual, expected) in pairs.items():
            assert_parity(actual, expected, name=f"{name}[{i}]")
            errors[name] = max(errors.get(name, 0.0), relative_error(actual, expected))
    assert anonymized.shape == recovered.shape == (3, SIZE, SIZE, 3)
    assert [m.shape[2] for m in maps_t] == [16, 32, 64]  # replacing noise inputs 3-4, 5-6, 7-8
    print("pipeline relative errors:", {k: f"{v:.2e}" for k, v in errors.items()})

    # Another password's key recovers another face: far beyond the parity tolerance (random
    # weights let MAAR's maps dominate these images, so the key moves them by a few percent).
    wrong = anonymizer.recover_from_latents(latents, anonymizer.key_for(PASSWORD + "!", RECORD))
    assert relative_error(wrong, recovered) > 1e-2


def test_stage1_result_without_kria(converted, tmp_path):
    _, files, _ = converted
    run(main, convert_args(files, tmp_path / "stage1", kria=None, discriminator=None))
    written = sorted(p.name for p in (tmp_path / "stage1").iterdir())
    assert written == ["cid", "decoder", "e4e", "key_generator", "maar", "model.json"]
    with pytest.raises(FileNotFoundError, match="kria"):
        model_families.load_family(dbaf.FAMILY, tmp_path / "stage1")


def test_discriminator_from_a_training_checkpoint(converted, tmp_path):
    """--discriminator also takes a rosinality checkpoint (its d): stage 2 can start from the base D."""
    _, files, model_dir = converted
    run(main, convert_args(files, tmp_path / "m", discriminator=files["stylegan"]))
    for name in ("discriminator", "kria"):
        a = (tmp_path / "m" / name / "network.json").read_text()
        b = (model_dir / name / "network.json").read_text()
        assert json.loads(a)["config"] == json.loads(b)["config"]


def error_of(files, out, extra=(), **replace):
    """The refusal of ``python -m convert.dbaf`` with ``files`` (options replaced as in
    `convert_args`) writing to ``out``."""
    return refusal(main, convert_args(files, out, **replace) + list(extra))


def edited_file(tmp_path, files, name, **edits):
    """A copy of reference file ``name`` with its state_dict edited (see `edited`)."""
    return save(
        edited(torch.load(files[name], weights_only=True), **edits), tmp_path / f"edited_{name}.pth"
    )


def test_refuses_missing_unexpected_and_misshaped_keys(converted, tmp_path):
    _, files, _ = converted
    kria = edited_file(tmp_path, files, "kria", drop=["mapper.1.model.3.bias"])
    cid = edited_file(tmp_path, files, "cid", add={"layers.0.extra.weight": torch.zeros(2)})
    maar = edited_file(tmp_path, files, "maar", add={"conv_c2.bias": torch.zeros(7)})
    message = error_of(files, tmp_path / "out", kria=kria, cid=cid, maar=maar)
    assert "missing (1): mapper.1.model.3.bias" in message
    assert "unexpected (1): layers.0.extra.weight" in message
    assert "conv_c2.bias [7]" in message
    assert not (tmp_path / "out").exists()  # nothing written


def test_refuses_networks_that_do_not_fit(converted, tmp_path):
    _, files, _ = converted
    kria = tmp_path / "wide_id_mlp.pth"
    torch.save(AnonymizationNet(dim=2 * STYLE_DIM, groups=GROUPS).state_dict(), kria)
    maar = tmp_path / "narrow_attr_block.pth"
    torch.save(AttrBlock(ENCODER_MAP_CHANNELS, MAAR_CHANNELS // 2).state_dict(), maar)
    message = error_of(files, tmp_path / "out", kria=kria, maar=maar)
    assert "style_dim differs" in message and "'kria': 64" in message
    assert "maar's 16-channel maps" in message
    assert not (tmp_path / "out").exists()


def test_refuses_latent_groups_that_do_not_add_up(converted, tmp_path):
    _, files, _ = converted
    assert "do not add up to its 10 latents" in error_of(
        files, tmp_path / "out", extra=["--latent-groups", "4,4,6"]
    )


def test_refuses_to_overwrite_or_mix(converted, tmp_path):
    _, files, model_dir = converted
    before = sorted((p.relative_to(model_dir), p.stat().st_mtime_ns) for p in model_dir.rglob("*"))
    assert "pass --overwrite" in error_of(files, model_dir)
    # A stage-1 conversion over a directory with a KRIA would leave a mix of two models.
    assert "another conversion" in error_of(files, model_dir, extra=["--overwrite"], kria=None)
    after = sorted((p.relative_to(model_dir), p.stat().st_mtime_ns) for p in model_dir.rglob("*"))
    assert before == after


@pytest.mark.slow
def test_non_checkpoint_file_exits_1_with_one_line(converted, tmp_path):
    _, files, _ = converted
    bogus = not_a_checkpoint(tmp_path / "best_model_id_mlp.pth")
    args = convert_args(files, tmp_path / "out", kria=bogus)
    assert_not_a_checkpoint_message(
        command_refusal("convert.dbaf", args, unwritten=tmp_path / "out"), bogus
    )


def shapes_of(module: torch.nn.Module) -> dict:
    """A state_dict of shape-only stand-ins (no memory) for a module built on the meta device."""
    return {
        k: np.broadcast_to(np.float32(0), tuple(v.shape)) for k, v in module.state_dict().items()
    }


@pytest.mark.slow
def test_full_size_layout():
    with torch.device("meta"):
        cid_sd = shapes_of(DisentanglementId())
        maar_sd = shapes_of(AttrBlock())
        kria_sd = shapes_of(AnonymizationNet())
    cid = infer_cid(cid_sd, "cid", None, heads=14)
    maar, maar_in = infer_maar(maar_sd, "maar")
    kria = infer_kria(kria_sd, "kria", cid.groups)
    assert cid == CID(
        attention="batch"
    )  # the reference's CID: 14 latents 4/4/6, depth 6, 14 x 64 heads
    assert maar == MAAR() and maar_in == (512, 256, 128)
    assert kria == KRIA()
    e4e, generator = Encoder4Editing(), Generator()
    assert encoder_map_channels(e4e) == (512, 256, 128)
    modules = {
        "e4e": e4e,
        "generator": generator,
        "decoder": generator,
        "cid": cid,
        "maar": maar,
        "kria": kria,
    }
    assert compatibility_problems(modules, maar_in) == []

    # The pipeline at 256 px, shapes only.
    model = dbaf.DBAF(
        e4e=e4e, cid=cid, maar=maar, decoder=generator, kria=kria, key_generator=generator
    ).for_inference()
    images = jax.ShapeDtypeStruct((2, 256, 256, 3), jnp.float32)
    codes = jax.ShapeDtypeStruct((2, 14, 512), jnp.float32)
    variables = {
        "e4e": jax.eval_shape(e4e.init, jax.random.key(0), images),
        "cid": jax.eval_shape(cid.init, jax.random.key(0), codes),
        "decoder": jax.eval_shape(generator.init, jax.random.key(0), codes),
        "kria": jax.eval_shape(kria.init, jax.random.key(0), codes, codes),
    }
    variables[dbaf.KEY_GENERATOR] = variables["decoder"]
    features = jax.eval_shape(e4e.apply, variables["e4e"], images)
    variables["maar"] = jax.eval_shape(
        maar.init, jax.random.key(0), features.c3, features.c2, features.c1
    )

    def anonymize_and_recover(variables, images, z):
        key = model.key_from_z(variables, z)
        encoding, _ = model.encode(variables, images)
        anonymized = model.anonymize(variables, encoding, key[None])
        recovered, _ = model.recover_latent(
            variables, encoding, anonymized.identity_code[0], key[None]
        )
        return anonymized.images[0], recovered[0], encoding.attribute_maps

    z = jax.ShapeDtypeStruct((1, 3, 512), jnp.float32)
    anonymized, recovered, maps = jax.eval_shape(anonymize_and_recover, variables, images, z)
    assert anonymized.shape == recovered.shape == (2, 256, 256, 3)
    assert [m.shape for m in maps] == [(2, 16, 16, 512), (2, 32, 32, 512), (2, 64, 64, 512)]


def test_full_size_conversion_fits_stage2():
    """What the converter infers from full-size reference files is, field for field, what
    stage 2 builds from its reference config: a converted stage-1 directory loads as
    ``init_from`` (networks.load_pretrained compares exactly these fields)."""
    with torch.device("meta"):
        encoder_sd = shapes_of(torch_e4e.Encoder4Editing())
        generator_sd = shapes_of(torch_stylegan2.Generator(256, 512, 8))
        discriminator_sd = shapes_of(torch_stylegan2.Discriminator(256))
        cid_sd, maar_sd = shapes_of(DisentanglementId()), shapes_of(AttrBlock())
    encoder_sd["latent_avg"] = np.broadcast_to(np.float32(0), (14, 512))
    opts = {"encoder_type": "Encoder4Editing", "stylegan_size": 256, "start_from_latent_avg": True}
    generator = infer_generator(generator_sd, "g")
    inferred = {
        "e4e": infer_encoder(encoder_sd, opts, "e4e"),
        "cid": infer_cid(cid_sd, "cid", None, heads=14),
        "maar": infer_maar(maar_sd, "maar")[0],
        "decoder": generator,
        dbaf.KEY_GENERATOR: generator,
        "discriminator": infer_discriminator(discriminator_sd, "d"),
    }
    stage1_config = stage1.get_config("reference")
    stage1_exports = stages.build(
        stage1_config, stages.build_networks(stage1_config), optimizers=None
    ).exported_networks()
    assert set(inferred) == set(stage1_exports)
    built = networks.modules(stages.build_networks(stage2.get_config("reference")))
    for name, module in inferred.items():
        expected = {
            k: v for k, v in network_kinds.module_config(built[name]).items() if k != "dtype"
        }
        found = {k: v for k, v in network_kinds.module_config(module).items() if k != "dtype"}
        assert found == expected, name
