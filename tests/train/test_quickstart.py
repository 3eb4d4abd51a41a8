"""The quick start's data: the real face crops the repository ships, prepared as the
README says, feed the ``:quickstart`` configs with 16 faces held out."""

from configs.dbaf import stage1, stage2
from dbaf_jax.train import evaluation, loop, prepare
from tests.paths import REPO

FACES = REPO / "quickstart" / "faces"


def test_shipped_faces_are_small_real_crops_with_their_licence():
    crops = sorted(FACES.glob("*.png"))
    assert len(crops) == 49
    assert sum(p.stat().st_size for p in crops) < 1_000_000
    licence = (FACES / "LICENSE.md").read_text()
    for prefix in {p.stem.rsplit("_", 1)[0] for p in crops}:
        assert f"`{prefix}_" in licence, prefix  # every source photo is named with its licence


def test_quickstart_configs_train_on_the_prepared_faces_with_16_held_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prepare.prepare(FACES, stage1.get_config("quickstart").data.dir, size=64)  # README's command
    for module in (stage1, stage2):
        config = module.get_config("quickstart")
        source = loop.data_source(config)
        training, held_out = evaluation.split_held_out(config, source)
        assert (len(training), held_out.shape) == (33, (16, 64, 64, 3))
        assert (
            -1 <= held_out.min() < held_out.max() <= 1 and held_out.std() > 0.2
        )  # photos, not a flat image
    assert stage2.get_config("quickstart").recovery == "latent"
    # Stage 2 warms KRIA up in latent space first (a generator trained from scratch
    # for 30 steps cannot teach it reversibility through images); stage 1 has no KRIA.
    assert (
        stage2.get_config("quickstart").kria_warmup.steps
        > 0
        == stage1.get_config("quickstart").kria_warmup.steps
    )
    assert (
        stage2.get_config("tiny").kria_warmup.steps
        == stage2.get_config("reference").kria_warmup.steps
        == 0
    )
