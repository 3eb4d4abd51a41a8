"""The training loop of both stages: `train_and_evaluate(config, workdir)`.

One code path for 1 CPU, forced host devices, one GPU or a multi-host pod: the state
is placed on a ('data', 'fsdp') mesh (`dbaf_jax.core.sharding`), batches arrive as
global arrays split over the mesh, and the step is one ``jax.jit`` with explicit
shardings and a donated state. Inside the step every array keeps its global
meaning, so CID's reference attention across the batch spans the GLOBAL batch
exactly as an unsharded run would (never just a device's shard).

Outputs in the workdir: ``checkpoints/`` (resumable: re-running the same command
continues from the latest one, data position and RNG included), ``metrics/``
(TensorBoard events and ``metrics.jsonl``, evaluations on held-out images included),
``samples/`` (PNG grids), ``best/`` (`dbaf_jax.train.evaluation`) and, at the end,
``model/``: a model directory (`dbaf_jax.storage.model_directory`) that stage 2 starts from
(``init_from``) and, after stage 2, that `dbaf_jax.commands.anonymize` runs. iFADIT's two phases
(``configs/ifadit/phases.py``, `dbaf_jax.train.ifadit`) run through the same loop and export
an iFADIT model directory.
"""

from __future__ import annotations

import dataclasses
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

from dbaf_jax.core import sharding
from dbaf_jax.core.errors import DatasetError
from dbaf_jax.storage import images as images_lib
from dbaf_jax.storage import model_directory
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
    if not config.data.dir:  # unset: the path would read as the working folder
        raise DatasetError(
            "no training data: set --config.data.dir to a folder written by "
            "`python -m dbaf_jax.commands.prepare_data` (or --config.data.synthetic=True for a smoke run)"
        )
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


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """A run's fixed parts (`start_run`): its config and workdir, the mesh, the stage with
    its frozen networks (as placed, and as exported), the training images and the
    held-out ones (None when nothing is held out), the step counts and whether this is
    the primary process (the one that writes files and prints)."""

    config: ml_collections.ConfigDict
    workdir: Path
    mesh: Any
    stage: TrainingStage
    frozen: Any
    exported_frozen: Any
    source: Any
    held_out: np.ndarray | None
    steps_per_epoch: int
    total_steps: int
    primary: bool


def step_counts(config: ml_collections.ConfigDict, examples: int) -> tuple[int, int]:
    """(steps per epoch, total steps) of a run over ``examples`` training images."""
    steps_per_epoch = examples // config.batch_size
    if steps_per_epoch == 0:
        raise DatasetError(f"{examples} images are fewer than one batch of {config.batch_size}")
    total_steps = config.num_steps if config.num_steps > 0 else config.num_epochs * steps_per_epoch
    return steps_per_epoch, total_steps


def start_run(
    config: ml_collections.ConfigDict, workdir: Path
) -> tuple[TrainingRun, MethodState, jax.Array, jax.Array]:
    """The run, its initial state (before any checkpoint is restored) and the random keys
    of its sample grids and its evaluation."""
    workdir.mkdir(parents=True, exist_ok=True)
    mesh = sharding.make_mesh(
        None if config.mesh.data == -1 else config.mesh.data, config.mesh.fsdp
    )
    nets = stages.build_networks(config)
    init_rng, state_rng, sample_rng, eval_rng = jax.random.split(jax.random.PRNGKey(config.seed), 4)
    source, held_out = evaluation.split_held_out(config, data_source(config))
    steps_per_epoch, total_steps = step_counts(config, len(source))
    stage, state, frozen, exported_frozen = setup(
        config, nets, initial_variables(config, nets, init_rng), state_rng, mesh
    )
    run = TrainingRun(
        config=config,
        workdir=workdir,
        mesh=mesh,
        stage=stage,
        frozen=frozen,
        exported_frozen=exported_frozen,
        source=source,
        held_out=held_out,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        primary=jax.process_index() == 0,
    )
    return run, state, sample_rng, eval_rng


def open_checkpoints(
    run: TrainingRun, state: MethodState
) -> tuple[checkpoints.TrainingCheckpointer, checkpoints.Restored | None]:
    """The run's checkpointer and its latest checkpoint (None when it has none)."""
    config = run.config
    # A method whose train state changed its layout names the layout, so that a checkpoint
    # of the old one is refused with the field named rather than failing inside Orbax.
    meta = {"stage": config.stage, **architecture(config), **getattr(run.stage, "state_layout", {})}
    checkpointer = checkpoints.TrainingCheckpointer(
        run.workdir, config.checkpoint_every, config.keep_checkpoints, meta
    )
    return checkpointer, checkpointer.restore_latest(
        checkpoints.abstract_like(state), expected=meta
    )


def progress_bar(run: TrainingRun, start: int) -> tqdm.tqdm:
    return tqdm.tqdm(
        total=run.total_steps,
        initial=start,
        unit="step",
        desc=stages.name(run.config),
        disable=not run.primary,
        # tqdm's own rate would count compiling, evaluation and checkpoints as steps.
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}]{postfix}",
    )


def warmed_up(
    run: TrainingRun,
    state: MethodState,
    clock: progress_lib.StepClock,
    announce: Callable[[str], Any],
) -> MethodState:
    """The state after the stage's warm-up before the first step (the same state when it
    has none), its time counted and announced when it had one."""
    started = time.perf_counter()
    warmed = jax.block_until_ready(run.stage.warm_up(state, run.frozen, run.source))
    if warmed is not state:
        clock.add("warm-up", time.perf_counter() - started)
        announce(f"warmed up before the first step in {clock.other_seconds['warm-up']:.1f} s")
    return warmed


def due(every: int, done: int, total_steps: int) -> bool:
    """Whether a periodic output falls after step ``done``: every ``every`` steps and after the last."""
    return done % every == 0 or done == total_steps


class SampleGrids:
    """The sample grids: one fixed batch through the stage's sampler every
    ``config.sample_every`` steps and after the last, written with the metrics."""

    def __init__(self, run: TrainingRun, rng: jax.Array, announce: Callable[[str], Any]):
        config, held_out = run.config, run.held_out
        # Held-out faces when there are enough: a grid of faces the model trained on flatters it.
        local = config.batch_size // jax.process_count()  # put_batch takes each process's part
        first = jax.process_index() * local
        shown = (
            held_out[first : first + local]
            if held_out is not None and len(held_out) >= config.batch_size
            else None
        )
        shown = (
            next(data.batches(run.source, config.batch_size, config.seed + 1))
            if shown is None
            else shown
        )
        self.images = sharding.put_batch(run.mesh, shown)
        sampler = make_sampler(run.stage, rng)
        self._sampler = FirstCallAnnounced(sampler, "the sample grid", announce)
        self._every, self._labels = config.sample_every, run.stage.sample_columns
        self._name = f"{stages.name(config).replace(' ', '')}_samples"

    def due(self, done: int, total_steps: int) -> bool:
        return due(self._every, done, total_steps)

    def write(self, writer: metrics_lib.MetricsWriter, done: int, state, frozen) -> None:
        grid = sample_grid(self._sampler(state, frozen, self.images), self._labels)
        writer.write_images(done, {self._name: grid})


class HeldOutEvaluation:
    """The evaluation on the held-out images every ``config.eval_every`` steps and after
    the last, and with ``config.best_metric`` the best model so far, exported as
    ``W/best`` (`evaluation.BestModel`) by the primary process."""

    def __init__(self, run: TrainingRun, rng: jax.Array, announce: Callable[[str], Any]):
        config = run.config
        self._run = run
        self._images = jax.device_put(run.held_out, sharding.replicated(run.mesh))
        evaluator = make_evaluator(run.stage, rng)
        self._evaluator = FirstCallAnnounced(evaluator, "the evaluation", announce)
        self._best = (
            evaluation.BestModel(run.workdir, config.best_metric, config.best_mode)
            if config.best_metric
            else None
        )

    def due(self, done: int, total_steps: int) -> bool:
        return due(self._run.config.eval_every, done, total_steps)

    def __call__(self, done: int, state) -> dict[str, float]:
        """{metric: value} of the state after step ``done``."""
        run = self._run
        measured = jax.device_get(self._evaluator(state, run.frozen, self._images))
        evaluated = {k: float(v) for k, v in measured.items()}
        if self._best is not None and self._best.improves(evaluated) and run.primary:
            variables = state_lib.exported_variables(state, run.exported_frozen)
            export(run.workdir, run.stage, variables, evaluation.BEST_EXPORT)
            self._best.record(done, evaluated)
        return evaluated


class StepOutputs:
    """What follows a step, each when due: its logged metrics, the held-out evaluation,
    the sample grids, the checkpoint and the progress bar. ``evaluated``: the latest
    evaluation's {metric: value} (None before the first)."""

    def __init__(
        self,
        run: TrainingRun,
        checkpointer: checkpoints.TrainingCheckpointer,
        clock: progress_lib.StepClock,
        progress: tqdm.tqdm,
        rngs: tuple[jax.Array, jax.Array],
    ):
        """``rngs``: the random keys of the sample grids and of the evaluation."""
        announce = announcer(run, progress)
        self._run, self.checkpointer, self.clock, self.progress = run, checkpointer, clock, progress
        sample_rng, eval_rng = rngs
        self.grids = SampleGrids(run, sample_rng, announce) if run.config.sample_every > 0 else None
        self.held_out = (
            HeldOutEvaluation(run, eval_rng, announce) if run.held_out is not None else None
        )
        self.writer = metrics_lib.MetricsWriter(
            run.workdir / "metrics", clock, print_fn=progress.write
        )
        self.evaluated: dict[str, float] | None = None

    def _due(self, done: int) -> tuple[bool, bool, bool]:
        """(logging, evaluating, sampling) after step ``done``."""
        total = self._run.total_steps
        return (
            due(self._run.config.log_every, done, total),
            self.held_out is not None and self.held_out.due(done, total),
            self.grids is not None and self.grids.due(done, total),
        )

    def wait_for(self, done: int) -> bool:
        """Whether anything after step ``done`` reads its result (else the next step is
        dispatched without waiting for it)."""
        return any(self._due(done)) or self.checkpointer.due(done)

    def after(self, done: int, state, step_metrics) -> None:
        logging_now, evaluating, sampling_now = self._due(done)
        clock, writer = self.clock, self.writer
        scalars = {}
        if logging_now:
            scalars.update(jax.device_get(step_metrics))
        if evaluating:
            with clock.other("evaluation"):
                self.evaluated = self.held_out(done, state)
                scalars.update({f"eval/{k}": v for k, v in self.evaluated.items()})
        if scalars:
            metrics_file = self._run.workdir / "metrics" / METRICS_FILE
            append_metrics(metrics_file, done, writer.write_scalars(done, scalars))
        if sampling_now:
            with clock.other("sample grids"):
                self.grids.write(writer, done, state, self._run.frozen)
        with clock.other("checkpoints"):
            self.checkpointer.save(done, state, jax.random.wrap_key_data(state.rng))
        rate = clock.steps_per_sec()
        if np.isfinite(rate):
            self.progress.set_postfix_str(
                f"{rate:.3g} steps/s, ETA {metrics_lib.format_duration(clock.eta_seconds(done))}",
                refresh=False,
            )
        self.progress.update(1)


def announcer(run: TrainingRun, progress: tqdm.tqdm) -> Callable[[str], Any]:
    """How the run says what it compiles or warms up: above the progress bar, on the
    primary process only."""
    return progress.write if run.primary else (lambda message: None)


def finish(run: TrainingRun, state: MethodState, outputs: StepOutputs) -> None:
    """Exports the trained model (``W/model``) and prints the run's last lines: the
    evaluation's summary, the time and where the outputs are (primary process)."""
    workdir, clock, evaluated = run.workdir, outputs.clock, outputs.evaluated
    out = export(workdir, run.stage, state_lib.exported_variables(state, run.exported_frozen))
    line = (
        run.stage.evaluation_summary(evaluated, len(run.held_out))
        if evaluated is not None
        else None
    )
    if line:
        print(line)
    print(f"done in {metrics_lib.format_duration(clock.elapsed())}: {clock.summary()}")
    print(
        f"outputs in {workdir}: the model directory {out}, sample grids in {workdir / 'metrics' / metrics_lib.SAMPLES_DIR}, "
        f"TensorBoard events in {workdir / 'metrics'} (tensorboard --logdir {workdir / 'metrics'})"
    )


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path) -> MethodState:
    # The final line's total includes building and initialising the networks.
    started = time.perf_counter()
    run, state, sample_rng, eval_rng = start_run(config, Path(workdir))
    checkpointer, restored = open_checkpoints(run, state)
    start = 0
    if restored is not None:
        state, start = restored.state, restored.step
        print(f"resumed from {checkpointer.directory / str(start)}")
    progress = progress_bar(run, start)
    announce = announcer(run, progress)
    clock = progress_lib.StepClock(run.total_steps, started)
    if restored is None:
        state = warmed_up(run, state, clock, announce)
    mesh, frozen = run.mesh, run.frozen
    step_fn = StepPrograms(run.stage, mesh, state, frozen, announce)
    profile = profiling.StepProfile(run.workdir, start, config.profile_steps if run.primary else 0)
    batches = data.batches(
        run.source, config.batch_size, config.seed, start_step=start, num_epochs=None
    )
    outputs = StepOutputs(run, checkpointer, clock, progress, (sample_rng, eval_rng))
    step = start
    try:
        with checkpoints.catch_sigterm():
            for step in range(start, run.total_steps):
                images = sharding.put_batch(mesh, next(batches))
                index_in_epoch = jnp.asarray(step % run.steps_per_epoch, jnp.int32)
                profile.before(step)
                with clock.other("compiling"):  # announced and timed apart; a lookup once compiled
                    program = step_fn.compile(step, state, frozen, images, index_in_epoch)
                done = step + 1
                with clock.training():
                    state, step_metrics = program(state, frozen, images, index_in_epoch)
                    if outputs.wait_for(done):
                        # Wait for the step here, so that its time is not counted as the evaluation's.
                        jax.block_until_ready(step_metrics)
                profile.after(done, state)
                outputs.after(done, state, step_metrics)
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
        outputs.writer.close()
        progress.close()
    if run.primary:
        finish(run, state, outputs)
    return state
