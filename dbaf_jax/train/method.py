"""What the training loop (`dbaf_jax.train.loop`) needs of a method's stage or phase
(`TrainingStage`) and of its train state (`MethodState`). DBAF's stages (`dbaf_jax.train.dbaf.adversarial.AdversarialStage`) and
iFADIT's phases (`dbaf_jax.train.ifadit.phases.Phase`) both satisfy it; the loop, the
benchmarks and the exports are typed against it, never against one method's class.
docs/methods.md says how a method plugs in.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, TypeVar

import jax
import ml_collections

from dbaf_jax.train.shared import Metrics

Variables = dict[str, Any]  # {network: flax variables}


class MethodNetworks(Protocol):
    """A method's networks: the modules of a run, described by its networks table
    (`dbaf_jax.train.networks.NetworkSpec` rows). DBAF's is
    `dbaf_jax.train.dbaf.networks.Networks`, iFADIT's
    `dbaf_jax.train.ifadit.networks.IFADITNetworks`."""

    @property
    def model(self) -> Any:
        """The composition (`dbaf_jax.models.composition.Anonymizer`) the export names by its FAMILY."""
        ...

    @property
    def table(self) -> tuple:
        """The method's networks table (name, pretrained sub-directory, initialiser, exported)."""
        ...

    @property
    def pretrained(self) -> dict[str, str]:
        """Network name -> sub-directory of a converted model directory (from the table)."""
        ...

    def modules(self) -> dict:
        """Network name -> module, for every network of the run."""
        ...

    def with_compute_dtype(self, dtype: str | None) -> "MethodNetworks": ...

    def examples(self, size: int) -> Any:
        """The zero inputs (`dbaf_jax.train.networks.Examples`) the networks are initialised on."""
        ...


class MethodState(Protocol):
    """A method's train state: a pytree (checkpointed, placed on the mesh and donated
    whole) holding what the steps change. DBAF's is `dbaf_jax.train.dbaf.state.TrainState`
    (Ranger's Lookahead pairs and a discriminator), iFADIT's
    `dbaf_jax.train.ifadit.state.PhaseState` (Adam)."""

    @property
    def step(self) -> jax.Array:
        """int32 scalar, steps done."""
        ...

    @property
    def rng(self) -> jax.Array:
        """PRNG key data (uint32)."""
        ...

    def variables(self, frozen: Variables) -> Variables:
        """{network: variables} for the forward pass: the trained networks' plus ``frozen``."""
        ...


# A stage takes its own method's networks (DBAF's stages DBAF's table), hence generic.
NetworksT = TypeVar("NetworksT", bound=MethodNetworks)


class TrainingStage(Protocol[NetworksT]):
    """One stage (or phase) of a method's training, built from a config.

    ``networks`` is the method's networks table (its ``model`` is the composition the
    export names by ``FAMILY``); images are (B, H, W, 3) in [-1, 1].
    """

    @property
    def sample_columns(self) -> tuple[str, ...]:
        """What each column of a sample grid shows (a class attribute of each stage)."""
        ...

    @property
    def networks(self) -> NetworksT: ...

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, networks: NetworksT, optimizers: Any, /
    ) -> "TrainingStage[NetworksT]":
        """The stage with ``optimizers`` as its method's state creation made them (None:
        a stage built only to sample, evaluate or export)."""
        ...

    @property
    def step(self) -> Callable[..., tuple[Any, Metrics]]:
        """One pure training step ``step(state, frozen, images, index_in_epoch, **variant)``
        on the method's `MethodState` (jitted by the loop with a donated state); ``variant``
        is `step_variant`'s, whose keywords each stage defines (a property, so that they
        may differ)."""
        ...

    def step_variant(self, step: int) -> dict:
        """The static arguments of ``step`` at the 0-based step ``step`` (e.g. lazy R1)."""
        ...

    def sample(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> list[jax.Array]:
        """One image batch (B, H, W, 3) per entry of ``sample_columns``."""
        ...

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> Metrics:
        """Scalar measures on held-out images."""
        ...

    def evaluation_summary(self, evaluated: dict[str, float], count: int) -> str | None:
        """One line for the log about an evaluation, or None."""
        ...

    def warm_up(self, state: Any, frozen: Variables, source: Any) -> Any:
        """A fresh state (never a resumed one) changed once before the first step, from
        the training images ``source`` (`dbaf_jax.train.data.ImageSource`); most stages return
        it unchanged (DBAF's stage 2 may warm KRIA up, `dbaf_jax.train.dbaf.kria_warmup`)."""
        ...

    @property
    def trained_recovery(self) -> str:
        """What recovery the export's model directory was trained for (`model_directory.RECOVERY`)."""
        ...

    def exported_networks(self) -> tuple[str, ...]:
        """The networks the stage's model directory holds."""
        ...
