"""One stage-1 training step as one of several processes (run by tests/train/test_multiprocess.py).

    python -m tests.multiprocess_step --processes N --process-id I --port P --out FILE

Each process has 8 / N forced CPU devices; with N > 1 they join through
``jax.distributed.initialize`` on localhost (the several-hosts path of launch.py
--distributed) and exchange collectives with gloo. The data-parallel mesh spans all 8
devices, each process feeds its own rows of the global batch (`dbaf_jax.train.data.batches`),
and process 0 writes the step's metrics and updated parameters to FILE (.npz).
"""

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={8 // args.processes}"

    import jax
    import numpy as np

    if args.processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(f"localhost:{args.port}", args.processes, args.process_id)

    from configs.dbaf import stage1
    from dbaf_jax.core import sharding
    from dbaf_jax.train import data, initialization, loop, stages

    config = stage1.get_config("tiny")
    config.batch_size = 8
    config.data.synthetic_size = 16
    network = stages.build_networks(config)
    init_rng, state_rng, _ = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    mesh = sharding.make_mesh(8, 1)
    run = initialization.setup(
        config,
        network,
        initialization.initial_variables(config, network, init_rng),
        state_rng,
        mesh,
    )
    state, frozen = run.state, run.frozen
    step = loop.make_step(run.stage, mesh, state, frozen)
    images = next(data.batches(loop.data_source(config), config.batch_size, config.seed))
    state, metrics = step(state, frozen, sharding.put_batch(mesh, images), jax.numpy.asarray(1))
    # Replicated outputs: every process holds them whole.
    trained = {
        "metrics": metrics,
        "generator": state.generator_params.fast,
        "discriminator": state.discriminator_params.fast,
    }
    leaves = jax.tree_util.tree_leaves_with_path(trained)
    if jax.process_index() == 0:
        np.savez(
            args.out, **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}
        )


if __name__ == "__main__":
    main()
