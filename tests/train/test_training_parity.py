"""Training parity (issue 8, point 9): one train step of each stage against the reference
scripts' composition (`tests.torch_reference.training`) on the same random networks.

Module parity alone would not catch a swapped wiring (which embeddings enter an identity
term, which images LPIPS, the parser and the reconstruction compare, the order of stage
2's outputs, stage 1's pairing, which images are "real" for D and R1), so each test runs
one step of ours and one of the reference from the same weights and batch, and compares
every loss term, g_total and d_total (as our step names them), and every trained
parameter after the update (the reference's Ranger against ours).

Networks: the reduced references of `tests.torch_reference.dbaf_pipeline` (64 px
generator and D at width 1/16, style_dim 32, 10 latents in groups 4/4/2, CID depth 2),
e4e and ArcFace at width 1/4, full-width LPIPS (AlexNet) and U-Net parser; batch 4.
The run attends across the batch in CID (the ``reference`` variant, as the reference trains) with
dropout 0 ("dropout off"): the reference's dropout masks cannot be reproduced.

Two differences of our step are intended (docs/decisions.md, "One forward pass per step"): it runs
the generator side once per step where the reference runs it twice, so MAAR's BatchNorm
running statistics take one update per step instead of two (compared here with the
reference's statistics after its first forward pass, i.e. after ONE update; that
``two_pass`` then gives the reference's second update is checked in tests/train/test_train.py),
and D's fakes and the generator loss share one dropout mask (moot at dropout 0).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from configs.dbaf import stage1, stage2
from convert.arcface import main as convert_arcface
from convert.common import run, to_numpy
from convert.dbaf_stages import cid_variables, kria_variables, maar_variables
from convert.e4e import encoder_variables
from convert.lpips import main as convert_lpips
from convert.parser import main as convert_parser
from convert.stylegan2 import discriminator_variables, generator_variables
from dbaf_jax.models.dbaf.dbaf import KEY_GENERATOR
from dbaf_jax.storage.model_directory import load_network
from dbaf_jax.train import initialization, stages
from dbaf_jax.train.dbaf import stage2 as stage2_lib
from dbaf_jax.train.dbaf.networks import PRETRAINED
from tests.parity import leaves_by_path, matching_leaves, nchw, random_reference, randomize_
from tests.torch_reference import training
from tests.torch_reference.arcface import Backbone
from tests.torch_reference.dbaf import AttrBlock, DisentanglementId
from tests.torch_reference.dbaf_pipeline import (
    CID_SIZE,
    ENC_WIDTH,
    ENCODER_MAP_CHANNELS,
    GEN_WIDTH,
    GROUPS,
    MAAR_CHANNELS,
    N_MLP,
    SIZE,
    STYLE_DIM,
    reduced_generator,
    reduced_kria,
)
from tests.torch_reference.e4e import Encoder4Editing
from tests.torch_reference.irse import randomize_irse_
from tests.torch_reference.metric_networks import reference_lpips, torchvision_trunk_state_dict
from tests.torch_reference.parsers import UNet
from tests.torch_reference.stylegan2 import Discriminator, reset_fixed_kernels_

pytestmark = pytest.mark.slow  # a step of each stage in both frameworks: minutes

BATCH = 4
# Ranger's first step moves a parameter by exactly lr times its centralised gradient (no
# rectification yet). At the reference's 1e-4 most displacements would drown in the
# float32 rounding of their parameters; at 1 they stand above it, while D's update stays
# moderate (the generator loss is computed with the updated D: at lr 1e3 D's logits grow
# and the adversarial term keeps only 4e-4 of relative precision).
LEARNING_RATE = 1.0
TOL = 1e-4
# Gradients and updates are held to NETWORK_TOL per network (largest difference over the
# largest value, test_train's measure) and to LEAF_TOL per leaf. Measured per leaf: up to 3.6e-2
# on scalar leaves whose gradient is one sum over every activation of a layer that nearly
# cancels (the generator's noise weights at 16-64 px, MAAR's one-channel BatchNorm
# scale, 5.7e-3), up to 2e-3 elsewhere; the PyTorch reference itself moves by up to 3e-3
# on those noise weights between float32 and float64. A miswired leaf is off by O(1).
LEAF_TOL = 5e-2
# The generator's noise weights are such sums at their worst: convs_5's gradient at the
# self-pairing step differs by 0.165 of itself (measured; the same before and after the
# bfloat16/sharding changes, deterministic for these seeds) while the decoder as a whole
# agrees to 7e-5. Its own bound still catches a missing or sign-flipped gradient (>= 1).
NOISE_WEIGHT_TOL = 0.5
# Per network, measured up to 5.7e-5, except MAAR at the self-pairing step: 2.6e-4, where
# its largest gradient is that of one-channel BatchNorm scale (one cancelling sum).
NETWORK_TOL = 5e-4
# Stage 2 per network: 5.7e-5 with the first step implementation, 1.2e-3 (KRIA; CID and
# the decoder 8.5e-4) since the stage-2 forward runs DBAF's own anonymize/recover methods,
# while every loss term still agrees to 8e-6 and every leaf to 1e-2. Decoding the five
# outputs in one generator call or per key gives the same figures; the cause is not
# established (summation order in the backward pass is the suspect), so this bound is
# the measured value with margin, not a derived one.
STAGE2_NETWORK_TOL = 2e-3


def reduced_config(stage: int):
    """``configs/dbaf/stage{stage}.py:reference`` at the reduced references' sizes, dropout 0."""
    config = (stage1 if stage == 1 else stage2).get_config("reference,tiny")
    m = config.model
    m.size, m.style_dim, m.n_mlp = SIZE, STYLE_DIM, N_MLP
    m.width_scale, m.encoder_width_scale = GEN_WIDTH, ENC_WIDTH
    m.latent_groups = GROUPS
    m.cid.depth, m.cid.heads = CID_SIZE["depth"], CID_SIZE["heads"]
    m.cid.head_dim, m.cid.mlp_dim = CID_SIZE["dim_head"], CID_SIZE["mlp_dim"]
    m.cid.dropout = 0.0
    config.batch_size = BATCH
    config.optimizer.learning_rate = LEARNING_RATE
    return config


# ----------------------------------------------------------------------------------
# The one call into our train step


class OurStep(NamedTuple):
    metrics: dict
    params: dict  # after the update, {network: params} (the generator side's and D's)
    model_state: dict  # {network: collections}
    first_moments: dict  # Ranger's first moments after the step, {network: tree like params}


# The jitted step of each config, kept for the file: both stage-1 tests run the same
# program (the index in the epoch is an argument), compiled once (30 s on 2 cores).
_JITTED_STEPS: dict[str, Any] = {}


def run_our_step(config, variables, images, rng, index_in_epoch: int = 0) -> OurStep:
    """One step of ours from a fresh train state."""
    networks = stages.build_networks(config)
    run = initialization.setup(config, networks, variables, rng)
    step = _JITTED_STEPS.setdefault(config.to_json_best_effort(), jax.jit(run.stage.step))
    state, metrics = step(run.state, run.frozen, images, jnp.asarray(index_in_epoch, jnp.int32))
    trained = {**state.generator_params.fast, "discriminator": state.discriminator_params.fast}
    ours = run.stage.optimizers
    moments = {
        **ours.generator.leaves(state.generator_opt_state.mu, state.generator_params.fast),
        "discriminator": ours.discriminator.leaves(
            state.discriminator_opt_state.mu, state.discriminator_params.fast
        ),
    }
    return OurStep(*jax.device_get((metrics, trained, state.model_state, moments)))


def our_stage2_key_latents(config, rng) -> np.ndarray:
    """The z (4, B, 3, style_dim) behind our stage-2 step's keys p1, p2, wrong 1, wrong 2,
    drawn from the state's rng as `AdversarialStage.step` and `stage2.sample_keys` draw them."""
    _, prepare_rng, _, _ = jax.random.split(rng, 4)
    shape = (
        stage2_lib.KEYS_PER_STEP,
        config.batch_size,
        len(config.model.latent_groups),
        config.model.style_dim,
    )
    return np.asarray(jax.random.normal(prepare_rng, shape))


# ----------------------------------------------------------------------------------
# Reference networks and their conversion


def torch_critics(seed: int) -> training.Critics:
    critics = training.Critics(
        arcface=randomize_irse_(Backbone(50, width_scale=ENC_WIDTH), seed=seed),
        lpips=reference_lpips("alex", seed + 1),
        parser=random_reference(UNet(), seed + 2),
    )
    training.set_requires_grad([critics.arcface, critics.lpips, critics.parser], False)
    return critics


def convert_critics(critics: training.Critics, directory) -> dict:
    """The critics through their converter commands -> {network: variables}."""
    out = directory / "models"
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(critics.arcface.state_dict(), directory / "model_ir_se50.pth")
    run(
        convert_arcface,
        [
            "--ckpt",
            str(directory / "model_ir_se50.pth"),
            "--out",
            str(out),
            "--width-scale",
            str(ENC_WIDTH),
        ],
    )
    torch.save(torchvision_trunk_state_dict(critics.lpips), directory / "alexnet.pth")
    run(
        convert_lpips,
        ["--net", "alex", "--trunk", str(directory / "alexnet.pth"), "--out", str(out)],
    )
    torch.save(critics.parser.state_dict(), directory / "parsenet.pth")
    run(
        convert_parser,
        ["--kind", "unet", "--ckpt", str(directory / "parsenet.pth"), "--out", str(out)],
    )
    return {
        name: load_network(out / sub).variables
        for name, sub in PRETRAINED.items()
        if name in ("arcface", "lpips", "parser")
    }


def torch_generator_side(stage: int, seed: int) -> training.GeneratorSide:
    """The reference's networks at the start of a stage, random weights, in train mode.

    Stage 1 starts its generator from the base g_ema (also the key network here); stage 2
    continues stage-1 networks and starts KRIA. CID's dropout is off (p = 0).
    """
    encoder = randomize_irse_(
        Encoder4Editing(SIZE, STYLE_DIM, ENC_WIDTH, input_size=SIZE), seed=seed
    )
    training.set_requires_grad([encoder], False)
    cid = randomize_(
        DisentanglementId(dim=STYLE_DIM, n_latent=sum(GROUPS), groups=GROUPS, **CID_SIZE), seed + 1
    )
    for module in cid.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    discriminator = reset_fixed_kernels_(
        randomize_(Discriminator(SIZE, width_scale=GEN_WIDTH), seed=seed + 4)
    )
    nets = training.GeneratorSide(
        encoder=encoder,
        latent_avg=torch.randn(
            sum(GROUPS), STYLE_DIM, generator=torch.Generator().manual_seed(seed + 2)
        ),
        cid=cid.train(),
        maar=randomize_(AttrBlock(ENCODER_MAP_CHANNELS, MAAR_CHANNELS), seed + 3).train(),
        decoder=reduced_generator(seed + 5).train(),
        discriminator=discriminator.train(),
    )
    if stage == 2:
        nets.kria = reduced_kria(seed + 6).train()
        nets.base_generator = reduced_generator(seed + 7)
    return at_training_scale_(nets)


def at_training_scale_(nets: training.GeneratorSide) -> training.GeneratorSide:
    """Rescales random weights so that images, codes, logits and losses are of order one,
    as with trained networks.

    With every weight N(0, 1), MAAR's maps (injected as noise) grow the images to
    magnitudes of ~300 and D's logits to ~1e8: one term then dominates every gradient
    and the others could be miswired unseen. So: CID's and MAAR's layers get
    N(0, 1 / fan_in) weights, the generator's noise weights x0.1 and ToRGB weights x0.05
    and biases x0.1 (stage 1 then measures rec 2.1, adv 3.0, reg 7.0, D's logits ~1),
    KRIA's last (plain) Linear N(0, 1 / fan_in) weights and x0.1 biases.
    """
    with torch.no_grad():
        for layer in [*nets.cid.modules(), *nets.maar.modules()]:
            if isinstance(layer, (torch.nn.Linear, torch.nn.Conv2d)):
                layer.weight.div_(layer.weight[0].numel() ** 0.5)
        for name, p in nets.decoder.named_parameters():
            if name.endswith("noise.weight"):
                p.mul_(0.1)
            elif name.startswith("to_rgb") and name.endswith("conv.weight"):
                p.mul_(0.05)
            elif (
                name.startswith("to_rgb") and name.endswith(".bias") and ".modulation." not in name
            ):
                p.mul_(0.1)
        if nets.kria is not None:
            for cmlp in nets.kria.mapper:
                last = cmlp.model[-1]
                last.weight.div_(last.weight.shape[1] ** 0.5)
                last.bias.mul_(0.1)
    return nets


def state_dict_with(module: torch.nn.Module, values: dict | None = None) -> dict:
    """The module's state_dict as numpy, with entries replaced by ``values`` (name -> tensor)."""
    state = {**module.state_dict(), **(values or {})}
    return to_numpy(state, type(module).__name__)


def our_variables(networks, nets: training.GeneratorSide, replace: dict | None = None) -> dict:
    """The reference networks in our layout, by the mappings of the converter commands.

    `python -m convert.dbaf` reads e4e files for 256 px inputs only; a run at 64 px
    encodes 64 px images, so each network goes through the mapping function that
    command runs for its file (the same functions the module parity tests check).
    ``replace``: {network: {torch name: tensor}} replacing entries of its state_dict.
    """
    model = networks.model
    replace = replace or {}
    encoder_state = state_dict_with(nets.encoder, {"latent_avg": nets.latent_avg})
    variables = {
        "e4e": encoder_variables(encoder_state, model.e4e, "e4e"),
        "cid": cid_variables(state_dict_with(nets.cid, replace.get("cid")), model.cid, "cid"),
        "maar": maar_variables(
            state_dict_with(nets.maar, replace.get("maar")),
            model.maar,
            "maar",
            ENCODER_MAP_CHANNELS,
        ),
        "decoder": generator_variables(
            state_dict_with(nets.decoder, replace.get("decoder")), model.decoder, "decoder"
        ),
        "discriminator": discriminator_variables(
            state_dict_with(nets.discriminator, replace.get("discriminator")),
            networks.discriminator,
            "d",
        ),
    }
    base = nets.base_generator if nets.base_generator is not None else nets.decoder
    variables[KEY_GENERATOR] = generator_variables(
        state_dict_with(base), model.key_generator, "g_ema"
    )
    if nets.kria is not None:
        variables["kria"] = kria_variables(
            state_dict_with(nets.kria, replace.get("kria")), model.kria, "kria"
        )
    return variables


def reference_first_moments(nets: training.GeneratorSide, g_opt, d_opt) -> dict:
    """{network: {torch name: Ranger's exp_avg}} (zeros where Ranger skipped a parameter)."""
    modules = {**nets.trained(), "discriminator": nets.discriminator}
    moments = {}
    for name, module in modules.items():
        opt = d_opt if name == "discriminator" else g_opt
        moments[name] = {
            n: opt.state[p]["exp_avg"] if p in opt.state else torch.zeros_like(p)
            for n, p in module.named_parameters()
        }
    return moments


def reference_optimizers(nets: training.GeneratorSide):
    """Ranger over the generator side's parameter groups and over D, as the scripts build them."""
    groups = [{"params": module.parameters()} for module in nets.trained().values()]
    return training.Ranger(groups, lr=LEARNING_RATE), training.Ranger(
        nets.discriminator.parameters(), lr=LEARNING_RATE
    )


# ----------------------------------------------------------------------------------
# Comparisons


def leaves(tree) -> dict[str, np.ndarray]:
    return leaves_by_path(tree, np.float64)


def relative_errors(ours, reference) -> dict[str, float]:
    """Per leaf: max |ours - reference| / max |reference|; a zero reference leaf must be zero."""
    ours, reference = matching_leaves(ours, reference, dtype=np.float64)
    errors = {}
    for name, expected in reference.items():
        scale = np.abs(expected).max()
        if scale == 0:
            np.testing.assert_array_equal(
                ours[name], 0.0, err_msg=f"{name}: the reference's is zero"
            )
            errors[name] = 0.0
        else:
            errors[name] = float(np.abs(ours[name] - expected).max() / scale)
    return errors


def update_errors(ours, reference, start) -> dict[str, float]:
    """Per leaf: the displacement's error max |ours - reference| / max |reference - start|,
    less one float32 spacing of the parameter.

    The displacement, not the parameter, is measured: a parameter barely moves in one
    step. Both sides add their update to the same float32 parameter, and two updates
    equal to 1e-7 may round to neighbouring floats: that spacing is allowed.
    """
    ours, reference, start = matching_leaves(ours, reference, start, dtype=np.float64)
    errors = {}
    for name, s in start.items():
        expected = reference[name] - s
        scale = np.abs(expected).max()
        excess = np.abs(ours[name] - reference[name]) - np.spacing(
            np.abs(reference[name]).astype(np.float32)
        )
        if scale == 0:
            np.testing.assert_array_equal(
                ours[name], s, err_msg=f"{name} moved; the reference's did not"
            )
            errors[name] = 0.0
        else:
            errors[name] = float(max(excess.max(), 0.0) / scale)
    return errors


def metric_errors(ours: dict, reference: dict) -> dict[str, float]:
    assert set(ours) == set(reference), (sorted(ours), sorted(reference))
    errors = {}
    for name, expected in reference.items():
        assert expected != 0.0, f"{name} is 0: the term would not test its wiring"
        errors[name] = abs(float(ours[name]) - expected) / abs(expected)
    return errors


def network_errors(ours, reference, start=None) -> dict[str, float]:
    """Per network: max |ours - reference| over its leaves / max |reference - start| over them
    (test_train's measure of a state part)."""
    ours, reference = leaves(ours), leaves(reference)
    start = leaves(start) if start is not None else {k: 0.0 for k in reference}
    difference, scale = {}, {}
    for name, expected in reference.items():
        network = name.split("'")[1]
        difference[network] = max(
            difference.get(network, 0.0), float(np.abs(ours[name] - expected).max())
        )
        scale[network] = max(scale.get(network, 0.0), float(np.abs(expected - start[name]).max()))
    return {n: difference[n] / scale[n] if scale[n] else difference[n] for n in difference}


def assert_below(errors: dict[str, float], tol: float, what: str) -> None:
    failures = {k: f"{v:.2e}" for k, v in errors.items() if not v < tol}
    assert not failures, f"{what} (tolerance {tol:g}): {failures}"


def assert_leaves_below(errors: dict[str, float], what: str) -> None:
    """Per-leaf errors below LEAF_TOL, the noise weights' below NOISE_WEIGHT_TOL."""
    noise = {k: v for k, v in errors.items() if k.endswith("['noise_weight']")}
    assert_below({k: v for k, v in errors.items() if k not in noise}, LEAF_TOL, what)
    assert_below(noise, NOISE_WEIGHT_TOL, f"{what} (noise weights)")


def assert_step_matches(
    config, nets, critics, images, run_reference, our_step_args, network_tol=NETWORK_TOL
):
    """Runs our step and the reference's from the same weights and compares every metric,
    the gradients (Ranger's first moments), the parameters after the update and MAAR's
    running statistics (after ONE update: see the module docstring). ``critics``: the
    `critics` fixture's (reference critics, their converted variables)."""
    critics, critic_variables = critics
    networks = stages.build_networks(config)
    start = {**our_variables(networks, nets), **critic_variables}
    ours = run_our_step(config, start, images, *our_step_args)
    g_opt, d_opt = reference_optimizers(nets)
    result = run_reference(nets, critics, g_opt, d_opt)
    after = our_variables(networks, nets, replace={"maar": result.maar_stats_one_update})
    moments = our_variables(networks, nets, replace=reference_first_moments(nets, g_opt, d_opt))

    names = [*nets.trained(), "discriminator"]
    # (ours, the reference's): the gradients; (ours, the reference's, before): the updates
    gradients = (
        {n: ours.first_moments[n] for n in names},
        {n: moments[n]["params"] for n in names},
    )
    updates = (
        {n: ours.params[n] for n in names},
        {n: after[n]["params"] for n in names},
        {n: start[n]["params"] for n in names},
    )
    errors = {
        "terms": metric_errors(ours.metrics, result.metrics),
        "gradients (first moments)": relative_errors(*gradients),
        "parameter updates": update_errors(*updates),
        "MAAR running statistics": update_errors(
            ours.model_state["maar"],
            *({k: v["maar"][k] for k in ours.model_state["maar"]} for v in (after, start)),
        ),
    }
    for (
        name,
        collections,
    ) in ours.model_state.items():  # the rest (the generator's noise buffers) is constant
        if name != "maar":
            for leaf, value in leaves(collections).items():
                np.testing.assert_array_equal(
                    value, leaves({k: start[name][k] for k in collections})[leaf], err_msg=leaf
                )

    per_network = {
        "gradients": network_errors(*gradients),
        "parameter updates": network_errors(*updates),
    }
    for what, values in {
        **errors,
        **{f"{k} per network": v for k, v in per_network.items()},
    }.items():
        print(
            f"{what}: max {max(values.values()):.1e}",
            {k: f"{v:.1e}" for k, v in sorted(values.items(), key=lambda kv: -kv[1])[:6]},
        )
    assert_below(errors["terms"], TOL, "loss terms")
    assert_below(errors["MAAR running statistics"], TOL, "MAAR running statistics")
    for what, values in per_network.items():
        assert_below(values, network_tol, f"{what} per network")
        assert_leaves_below(
            errors[what if what == "parameter updates" else "gradients (first moments)"],
            f"{what} per leaf",
        )
    return result


@pytest.fixture(scope="module")
def critics(tmp_path_factory):
    reference = torch_critics(seed=20)
    return reference, convert_critics(reference, tmp_path_factory.mktemp("critics"))


@pytest.fixture(scope="module")
def images():
    return np.tanh(np.random.default_rng(3).standard_normal((BATCH, SIZE, SIZE, 3))).astype(
        np.float32
    )


@pytest.mark.parametrize("index_in_epoch, pairing", [(1, "different"), (3, "self")])
def test_stage1_step_matches_reference_script(critics, images, index_in_epoch, pairing):
    """Stage 1 at an index whose attribute images are the batch rolled by one, and at one
    whose attribute images are the identity images themselves (every third)."""
    nets = torch_generator_side(stage=1, seed=0)

    def run_reference(nets, critics, g_opt, d_opt):
        return training.stage1_step(nets, critics, g_opt, d_opt, nchw(images), index_in_epoch)

    config = reduced_config(1)
    assert (index_in_epoch % config.pair_self_every == 0) == (pairing == "self")
    assert_step_matches(
        config, nets, critics, images, run_reference, (jax.random.key(0), index_in_epoch)
    )


def test_stage2_step_matches_reference_script(critics, images):
    """Stage 2 with the four keys our step draws from its rng, given to the reference."""
    nets = torch_generator_side(stage=2, seed=10)
    config = reduced_config(2)
    rng = jax.random.key(1)
    z = torch.from_numpy(our_stage2_key_latents(config, rng))

    def run_reference(nets, critics, g_opt, d_opt):
        return training.stage2_step(nets, critics, g_opt, d_opt, nchw(images), z, GROUPS)

    assert_step_matches(config, nets, critics, images, run_reference, (rng,), STAGE2_NETWORK_TOL)
