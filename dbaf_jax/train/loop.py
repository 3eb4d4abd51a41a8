"""The training loop of both stages: `train_and_evaluate(config, workdir)`.

One code path for 1 CPU, forced host devices, one GPU or a multi-host pod: the state
is placed on a ('data', 'fsdp') mesh (`dbaf_jax.sharding`), batches arrive as
global arrays split over the mesh, and the step is one ``jax.jit`` with explicit
shardings and a donated state. Inside the step every array keeps its global
meaning, so CID's reference attention across the batch spans the GLOBAL batch
exactly as an unsharded run would (never just a device's shard).

Outputs in the workdir: ``checkpoints/`` (resumable: re-running the same command
continues from the latest one, data position and RNG included), ``metrics/``
(TensorBoard events and ``metrics.jsonl``, evaluations on held-out images included),
``samples/`` (PNG grids), ``best/`` (`dbaf_jax.train.evaluation`) and, at the end,
``model/``: a model directory (`dbaf_jax.model_directory`) that stage 2 starts from
(``init_from``) and, after stage 2, that `dbaf_jax.commands.anonymize` runs. iFADIT's two phases
(``configs/ifadit/phases.py``, `dbaf_jax.train.ifadit`) run through the same loop and export
an iFADIT model directory.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import tqdm

from dbaf_jax import images as images_lib
from dbaf_jax import model_directory, sharding
from dbaf_jax.errors import DatasetError
from dbaf_jax.train import checkpoints, data, evaluation, profiling, stages
from dbaf_jax.train import metrics as metrics_lib
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import progress as progress_lib
from dbaf_jax.train import state as state_lib
from dbaf_jax.train.initialization import MODEL_EXPORT, initial_variables, setup
from dbaf_jax.train.method import MethodState, TrainingStage

METRICS_FILE = "metrics.jsonl"


def architecture(config: ml_collections.ConfigDict) -> dict:
    """What must agree between a checkpoint and the run that resumes or continues it."""
    return {"architecture": json.loads(config.model.to_json())}


def append_metrics(path: Path, step: int, scalars: dict[str, float]) -> None:
    """One JSON line {"step": step, name: value, ...} per logged step (primary process only)."""
    if jax.process_index() == 0 and scalars:
        with path.open("a") as f:
            f.write(json.dumps({"step": step, **scalars}) + "\n")


def data_source(config: ml_collections.ConfigDict):
    if config.data.synthetic:
        return data.SyntheticFaces(config.data.synthetic_size, config.model.size, config.seed)
    source = data.PreparedImages(config.data.dir)
    if source.size != config.model.size:
        raise DatasetError(
            f"{config.data.dir}: images are {source.size}px, the model is {config.model.size}px"
        )
    return source


def make_step(stage: TrainingStage, mesh, state, frozen, **variant):
    """The jitted step: (state, frozen, images, index_in_epoch) -> (state, metrics), with
    the static arguments ``variant`` (`stage.step_variant`; default: the step's own)."""
    state_sharding = jax.tree.map(lambda x: x.sharding, state)
    frozen_sharding = jax.tree.map(lambda x: x.sharding, frozen)
    replicated = sharding.replicated(mesh)
    return jax.jit(
        sharding.within(mesh, functools.partial(stage.step, **variant)),
        in_shardings=(state_sharding, frozen_sharding, sharding.batch_sharding(mesh), replicated),
        out_shardings=(state_sharding, replicated),
        donate_argnums=(0,),
    )


class StepPrograms:
    """A stage's jitted steps, one per `stage.step_variant` (lazy R1: with and without
    the penalty), each compiled on first use, saying so through ``announce``:
    ``(step_number, state, frozen, images, index_in_epoch) -> (state, metrics)``."""

    def __init__(
        self, stage: TrainingStage, mesh, state, frozen, announce: Callable[[str], Any] = print
    ):
        self._make = functools.partial(make_step, stage, mesh, state, frozen)
        self._variant = stage.step_variant
        self._announce = announce
        self._programs = {}

    def compile(self, step: int, state, frozen, images: jax.Array, index_in_epoch: jax.Array):
        """The program of ``step`` (compiled now, and announced, if it was not yet)."""
        variant = self._variant(step)
        key = tuple(sorted(variant.items()))
        if key in self._programs:
            return self._programs[key]
        what = "the training step" + (
            "" if variant.get("take_r1", True) else " without R1 (lazy R1)"
        )
        args = (state, frozen, images, index_in_epoch)
        self._programs[key] = progress_lib.compile_announced(
            self._make(**variant), what, self._announce, *args
        )
        return self._programs[key]

    def __call__(self, step: int, state, frozen, images: jax.Array, index_in_epoch: jax.Array):
        return self.compile(step, state, frozen, images, index_in_epoch)(
            state, frozen, images, index_in_epoch
        )


class FirstCallAnnounced:
    """A jitted function whose first call (its compile) is announced and timed: the
    sampler and the evaluator."""

    def __init__(self, jitted, what: str, announce: Callable[[str], Any]):
        self._jitted, self._what, self._announce = jitted, what, announce
        self._program = None

    def __call__(self, *args):
        if self._program is None:
            self._program = progress_lib.compile_announced(
                self._jitted, self._what, self._announce, *args
            )
        return self._program(*args)


def make_sampler(stage: TrainingStage, rng: jax.Array):
    """A jitted function (state, frozen, images) -> list of image batches (B, H, W, 3),
    one per grid column (``stage.sample_columns``). The loop passes one fixed batch and
    the random keys are fixed, so successive grids show the same faces. The frozen
    networks and images are arguments, not constants of the program: XLA would spend
    minutes folding constants that large."""
    return jax.jit(
        lambda state, frozen, images: stage.sample(state.variables(frozen), frozen, images, rng)
    )


def sample_grid(columns: list[jax.Array], labels: tuple[str, ...]) -> np.ndarray:
    """One row per face, one column per output, each column named by ``labels`` -> a uint8 grid."""
    stacked = np.stack(
        [np.asarray(c) for c in jax.device_get(columns)], axis=1
    )  # (B, columns, H, W, 3)
    grid = images_lib.make_grid(stacked.reshape(-1, *stacked.shape[2:]), rows=stacked.shape[0])
    return images_lib.label_columns(grid, labels, cell_width=stacked.shape[3])


def make_evaluator(stage: TrainingStage, rng: jax.Array):
    """A jitted function (state, frozen, held-out images (replicated)) -> {metric: scalar}
    (arguments rather than constants, as in `make_sampler`)."""
    return jax.jit(
        lambda state, frozen, images: stage.evaluate(state.variables(frozen), frozen, images, rng)
    )


def export(workdir: Path, stage: TrainingStage, variables: dict, name: str = MODEL_EXPORT) -> Path:
    """Writes the stage's trained networks as a model directory ``workdir/name``.

    ``variables`` are float32 (the train state's and the frozen networks' as loaded).
    The modules are written as float32 ones whatever the run computed in: the compute
    dtype is how a network runs, not what it is, so a bfloat16 run exports the same
    architecture (and fingerprint) as a float32 run with the same weights.
    """
    named = networks_lib.modules(stage.networks.with_compute_dtype(None))
    exported = {n: (named[n], variables[n]) for n in stage.exported_networks()}
    sources = dict.fromkeys(exported, f"{type(stage).__name__} training")
    family = stage.networks.model.FAMILY  # 'dbaf' or 'ifadit': what model.json names
    return model_directory.save_model(
        workdir / name, family, exported, sources, overwrite=True, recovery=stage.trained_recovery
    )


def save_interrupted(checkpointer: checkpoints.TrainingCheckpointer, state: MethodState) -> None:
    """Saves the state of the last completed step, if an interrupt left it intact.

    An interrupt that lands after a step was dispatched (which donates the old state)
    but before its result is bound leaves no intact state: the latest checkpoint stands.
    """
    if any(leaf.is_deleted() for leaf in jax.tree.leaves(state)):
        logging.warning(
            "the interrupted step's state was donated; resume from the latest checkpoint"
        )
        return
    checkpointer.save(int(state.step), state, jax.random.wrap_key_data(state.rng), force=True)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path) -> MethodState:
    started = (
        time.perf_counter()
    )  # the final line's total includes building and initialising the networks
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    mesh = sharding.make_mesh(
        None if config.mesh.data == -1 else config.mesh.data, config.mesh.fsdp
    )
    nets = stages.build_networks(config)
    init_rng, state_rng, sample_rng, eval_rng = jax.random.split(jax.random.PRNGKey(config.seed), 4)

    source, held_out = evaluation.split_held_out(config, data_source(config))
    steps_per_epoch = len(source) // config.batch_size
    if steps_per_epoch == 0:
        raise DatasetError(f"{len(source)} images are fewer than one batch of {config.batch_size}")
    total_steps = config.num_steps if config.num_steps > 0 else config.num_epochs * steps_per_epoch

    stage, state, frozen, exported_frozen = setup(
        config, nets, initial_variables(config, nets, init_rng), state_rng, mesh
    )

    # A method whose train state changed its layout names the layout, so that a checkpoint
    # of the old one is refused with the field named rather than failing inside Orbax.
    meta = {"stage": config.stage, **architecture(config), **getattr(stage, "state_layout", {})}
    checkpointer = checkpoints.TrainingCheckpointer(
        workdir, config.checkpoint_every, config.keep_checkpoints, meta
    )
    restored = checkpointer.restore_latest(checkpoints.abstract_like(state), expected=meta)
    start = 0
    if restored is not None:
        state, start = restored.state, restored.step
        print(f"resumed from {checkpointer.directory / str(start)}")

    primary = jax.process_index() == 0
    progress = tqdm.tqdm(
        total=total_steps,
        initial=start,
        unit="step",
        desc=stages.name(config),
        disable=not primary,
        # tqdm's own rate would count compiling, evaluation and checkpoints as steps.
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}]{postfix}",
    )
    announce = progress.write if primary else (lambda message: None)
    clock = progress_lib.StepClock(total_steps, started)
    if restored is None:
        warm_up_started = time.perf_counter()
        warmed = jax.block_until_ready(stage.warm_up(state, frozen, source))
        if warmed is not state:
            clock.add("warm-up", time.perf_counter() - warm_up_started)
            announce(f"warmed up before the first step in {clock.other_seconds['warm-up']:.1f} s")
            state = warmed
    step_fn = StepPrograms(stage, mesh, state, frozen, announce)
    profile = profiling.StepProfile(workdir, start, config.profile_steps if primary else 0)
    batches = data.batches(
        source, config.batch_size, config.seed, start_step=start, num_epochs=None
    )
    sampling = config.sample_every > 0
    if sampling:
        # Held-out faces when there are enough: a grid of faces the model trained on flatters it.
        local = config.batch_size // jax.process_count()  # put_batch takes each process's part
        first = jax.process_index() * local
        shown = (
            held_out[first : first + local]
            if held_out is not None and len(held_out) >= config.batch_size
            else None
        )
        shown = (
            next(data.batches(source, config.batch_size, config.seed + 1))
            if shown is None
            else shown
        )
        sample_images = sharding.put_batch(mesh, shown)
        sampler = FirstCallAnnounced(make_sampler(stage, sample_rng), "the sample grid", announce)
    if held_out is not None:
        held_out_images = jax.device_put(held_out, sharding.replicated(mesh))
        evaluator = FirstCallAnnounced(make_evaluator(stage, eval_rng), "the evaluation", announce)
        best = (
            evaluation.BestModel(workdir, config.best_metric, config.best_mode)
            if config.best_metric
            else None
        )
    writer = metrics_lib.MetricsWriter(workdir / "metrics", clock, print_fn=progress.write)
    step = start
    evaluated = None
    try:
        with checkpoints.catch_sigterm():
            for step in range(start, total_steps):
                images = sharding.put_batch(mesh, next(batches))
                index_in_epoch = jnp.asarray(step % steps_per_epoch, jnp.int32)
                profile.before(step)
                with clock.other("compiling"):  # announced and timed apart; a lookup once compiled
                    program = step_fn.compile(step, state, frozen, images, index_in_epoch)
                done = step + 1
                logging_now = done % config.log_every == 0 or done == total_steps
                evaluating = held_out is not None and (
                    done % config.eval_every == 0 or done == total_steps
                )
                sampling_now = sampling and (done % config.sample_every == 0 or done == total_steps)
                with clock.training():
                    state, step_metrics = program(state, frozen, images, index_in_epoch)
                    if logging_now or evaluating or sampling_now or checkpointer.due(done):
                        # Wait for the step here, so that its time is not counted as the evaluation's.
                        jax.block_until_ready(step_metrics)
                profile.after(done, state)
                scalars = {}
                if logging_now:
                    scalars.update(jax.device_get(step_metrics))
                if evaluating:
                    with clock.other("evaluation"):
                        evaluated = {
                            k: float(v)
                            for k, v in jax.device_get(
                                evaluator(state, frozen, held_out_images)
                            ).items()
                        }
                        scalars.update({f"eval/{k}": v for k, v in evaluated.items()})
                        if best is not None and best.improves(evaluated) and primary:
                            export(
                                workdir,
                                stage,
                                state_lib.exported_variables(state, exported_frozen),
                                evaluation.BEST_EXPORT,
                            )
                            best.record(done, evaluated)
                if scalars:
                    append_metrics(
                        workdir / "metrics" / METRICS_FILE,
                        done,
                        writer.write_scalars(done, scalars),
                    )
                if sampling_now:
                    with clock.other("sample grids"):
                        writer.write_images(
                            done,
                            {
                                f"{stages.name(config).replace(' ', '')}_samples": sample_grid(
                                    sampler(state, frozen, sample_images), stage.sample_columns
                                )
                            },
                        )
                with clock.other("checkpoints"):
                    checkpointer.save(done, state, jax.random.wrap_key_data(state.rng))
                rate = clock.steps_per_sec()
                if np.isfinite(rate):
                    progress.set_postfix_str(
                        f"{rate:.3g} steps/s, ETA {metrics_lib.format_duration(clock.eta_seconds(done))}",
                        refresh=False,
                    )
                progress.update(1)
                step = done
            with clock.other("checkpoints"):
                checkpointer.save(
                    int(state.step), state, jax.random.wrap_key_data(state.rng), force=True
                )
    except KeyboardInterrupt:
        logging.warning("interrupted at step %d: saving a checkpoint", step)
        save_interrupted(checkpointer, state)
        raise
    finally:
        profile.stop()
        checkpointer.close()  # waits for the asynchronous writes
        writer.close()
        progress.close()
    if primary:
        out = export(workdir, stage, state_lib.exported_variables(state, exported_frozen))
        line = stage.evaluation_summary(evaluated, len(held_out)) if evaluated is not None else None
        if line:
            print(line)
        print(f"done in {metrics_lib.format_duration(clock.elapsed())}: {clock.summary()}")
        print(
            f"outputs in {workdir}: the model directory {out}, sample grids in {workdir / 'metrics' / metrics_lib.SAMPLES_DIR}, "
            f"TensorBoard events in {workdir / 'metrics'} (tensorboard --logdir {workdir / 'metrics'})"
        )
    return state
