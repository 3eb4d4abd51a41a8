"""A run's starting point: its networks' variables (converted, ``init_from`` or random,
`initial_variables`), and the train state and frozen networks made from them and placed
on the mesh (`setup`), as the training loop, the benchmarks and the FLOP counter start.

Both steps are one jitted program each, not one dispatch per leaf: random networks come
from one program per architecture (`dbaf_jax.train.networks.init_variables`), and the
state (Ranger's grouped slow weights and zero moments, the frozen networks cast to the
compute dtype) from one program per run (`created_state`), whose values are the eager
computation's, bit for bit (tests/train/test_initialization.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import jax
import ml_collections

from dbaf_jax.core import sharding
from dbaf_jax.core.errors import ModelDirectoryError
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages
from dbaf_jax.train.method import MethodNetworks, MethodState, TrainingStage

MODEL_EXPORT = "model"  # the model directory a finished run writes into its workdir


def initial_variables(
    config: ml_collections.ConfigDict, nets: MethodNetworks, rng: jax.Array
) -> dict:
    """The converted base networks (``model_dir``), then every network of the run that
    ``init_from`` holds (e.g. stage 1's export for stage 2); the rest random.

    Each network is read from the last of those that holds it, and each stored network
    once (stage 2's decoder and key generator start from the same ``generator``): no
    weights are read only to be replaced. No random program runs when every network
    is loaded."""
    built = networks_lib.modules(nets)
    sources = []  # (directory, {network: sub-directory}), later ones override earlier ones
    if config.model_dir:
        sources.append((Path(config.model_dir), nets.pretrained))
    if config.init_from:
        source = Path(config.init_from)
        source = source / MODEL_EXPORT if (source / MODEL_EXPORT).is_dir() else source
        held = {n: n for n in built if (source / n).is_dir()}
        if not held:
            raise ModelDirectoryError(
                f"{config.init_from}: init_from holds none of this run's networks {sorted(built)}"
            )
        sources.append((source, held))
    # network -> (directory, sub-directory) of the last source that holds it
    chosen: dict[str, tuple[Path, str]] = {}
    for directory, names in sources:
        chosen.update({name: (directory, sub_dir) for name, sub_dir in names.items()})
    variables: dict = {}
    for directory in dict.fromkeys(d for d, _ in sources):  # first: a missing file fails at once
        names = {name: sub_dir for name, (d, sub_dir) in chosen.items() if d == directory}
        if names:
            variables = networks_lib.load_pretrained(nets, variables, directory, names)
    random_names = [n for n in built if n not in variables]
    if not random_names:
        return variables
    return {**networks_lib.init_variables(nets, rng, config.model.size, random_names), **variables}


class Setup(NamedTuple):
    """What a run trains with: the stage, its state and the frozen networks (both placed
    on the mesh, the frozen ones in the compute dtype), and the frozen networks as loaded
    (float32, on the host) for the exports."""

    stage: TrainingStage
    state: MethodState
    frozen: dict
    exported_frozen: dict


def created_state(
    config: ml_collections.ConfigDict, nets: MethodNetworks, variables: dict, rng: jax.Array
) -> tuple[MethodState, dict, dict, Any]:
    """(train state, frozen variables (float32), the same in the compute dtype, optimizers)
    from ``variables``: `stages.create_state` and the cast as one jitted program, so
    that a full-size run does not dispatch (and, on a GPU, compile) an operation per
    leaf or group. Inside a caller's trace (``jax.eval_shape``) it traces inline."""
    made = {}

    def create(variables, rng):
        state, frozen, made["optimizers"] = stages.create_state(config, variables, rng)
        return state, frozen, nets.model.compute_variables(frozen)

    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((variables, rng)))
    state, frozen, computed = (create if traced else jax.jit(create))(variables, rng)
    return state, frozen, computed, made["optimizers"]


def setup(
    config: ml_collections.ConfigDict,
    nets: MethodNetworks,
    variables: dict,
    rng: jax.Array,
    mesh=None,
) -> Setup:
    """The one training setup of the loop, the benchmarks and the FLOP counter:
    ``variables`` ({network: variables}, float32) split into the train state and the
    frozen networks, which the step takes in the compute dtype (cast once here), both
    placed on ``mesh`` by the sharding rules. Without a mesh nothing is placed, so the
    setup can be traced (``jax.eval_shape``) to build a step's abstract inputs."""
    state, exported_frozen, frozen, txs = created_state(config, nets, variables, rng)
    stage = stages.build(config, nets, txs)
    if mesh is not None:
        state = jax.device_put(
            state, sharding.param_sharding(mesh, state, config.mesh.min_shard_size)
        )
        exported_frozen = jax.device_get(exported_frozen)
        frozen = jax.device_put(frozen, sharding.replicated(mesh))
    return Setup(stage, state, frozen, exported_frozen)


def random_setup(config: ml_collections.ConfigDict, rng: jax.Array, mesh=None) -> tuple[Any, Setup]:
    """(networks, `setup`) of ``config`` with every network random (no ``model_dir`` or
    ``init_from``): what the benchmarks and the FLOP counter measure. ``rng`` splits
    into the networks' and the state's keys. Without a mesh it can be traced
    (``jax.eval_shape``) like `setup`."""
    nets = stages.build_networks(config)
    init_rng, state_rng = jax.random.split(rng)
    variables = networks_lib.init_variables(nets, init_rng, config.model.size)
    return nets, setup(config, nets, variables, state_rng, mesh)
