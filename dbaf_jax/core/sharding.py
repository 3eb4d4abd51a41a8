"""The device mesh and every sharding rule of the project, in one place.

One `jax.sharding.Mesh` with axes ('data', 'fsdp') spans all devices of all
processes (after ``jax.distributed.initialize()`` on a pod). The same code runs on
one CPU, 8 forced host devices, one GPU or a pod:

- batches: the leading (batch) axis is split over both axes together, so every
  device holds a different slice of the global batch (`batch_sharding`);
- parameters and optimizer state: replicated when fsdp is 1; otherwise each array
  with at least ``min_size`` elements is split along its largest axis whose length
  is divisible by the fsdp size (the later axis on a tie), and replicated over
  'data' (`param_sharding`). Smaller arrays and arrays with no divisible axis are
  replicated. XLA inserts the all-gathers in the forward pass and reduce-scatters
  the gradients;
- activations: inside a step traced `within` a mesh, `constrain_batch` pins the
  batch axis of the values networks take and give to the batch sharding, so every
  image is computed on the device that holds it. Without these pins XLA's sharding
  propagation, which starts from the parameters' fsdp splits as much as from the
  batch, may pick other layouts for the activations and move whole-batch
  activations between devices to reconcile them.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

DATA = "data"
FSDP = "fsdp"
AXES = (DATA, FSDP)
# 2**18 floats (1 MiB): below this, gathering costs more than the memory it saves.
DEFAULT_MIN_SHARD_SIZE = 2**18


def make_mesh(data: int | None = None, fsdp: int = 1, devices: list | None = None) -> Mesh:
    """A ('data', 'fsdp') mesh over ``devices`` (default: every device of every process).

    ``data=None`` (or -1) uses all devices not taken by fsdp; data * fsdp must equal
    the number of devices.
    """
    devices = list(jax.devices() if devices is None else devices)
    if fsdp < 1 or len(devices) % fsdp:
        raise ValueError(f"fsdp={fsdp} does not divide the {len(devices)} devices")
    if data is None or data == -1:
        data = len(devices) // fsdp
    if data * fsdp != len(devices):
        raise ValueError(f"mesh data={data} x fsdp={fsdp} != {len(devices)} devices")
    # create_device_mesh orders devices so that neighbouring mesh positions are close
    # on the interconnect (TPU torus, GPU NVLink islands); on CPUs it is plain order.
    return Mesh(mesh_utils.create_device_mesh((data, fsdp), devices), AXES)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split over ('data', 'fsdp'); the other axes whole."""
    return NamedSharding(mesh, P(AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    """A full copy on every device."""
    return NamedSharding(mesh, P())


def param_spec(shape: tuple[int, ...], fsdp: int, min_size: int = DEFAULT_MIN_SHARD_SIZE) -> P:
    """The PartitionSpec of one parameter-like array (see the module docstring)."""
    if fsdp == 1 or int(np.prod(shape, dtype=np.int64)) < min_size:
        return P()
    candidates = [axis for axis, length in enumerate(shape) if length % fsdp == 0]
    if not candidates:
        return P()
    axis = max(candidates, key=lambda a: (shape[a], a))
    return P(*([None] * axis + [FSDP]))


def param_sharding(mesh: Mesh, tree: Any, min_size: int = DEFAULT_MIN_SHARD_SIZE) -> Any:
    """A NamedSharding per leaf of ``tree`` (arrays or ShapeDtypeStructs): the fsdp rule."""
    fsdp = mesh.shape[FSDP]
    return jax.tree.map(
        lambda leaf: NamedSharding(mesh, param_spec(tuple(leaf.shape), fsdp, min_size)), tree
    )


def put_batch(mesh: Mesh, local_batch: Any) -> Any:
    """This process's rows of a global batch (a numpy array or pytree of them) -> global jax.Arrays.

    Every process passes its own (B_local, ...) slice, as `dbaf_jax.train.data` yields it;
    the result has the global leading size B_local * process_count, sharded by
    `batch_sharding`.
    """
    sharding = batch_sharding(mesh)
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local_batch
    )


def within(mesh: Mesh, fn: Callable) -> Callable:
    """``fn`` traced with ``mesh`` as the ambient mesh, so that `constrain_batch` applies.

    On a one-device mesh ``fn`` itself: there is nothing to pin, and the constraints
    would only add thousands of ops for the compiler to read (5% of stage 2's step).
    """
    if mesh.size == 1:
        return fn

    def traced(*args, **kwargs):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args, **kwargs)

    return traced


def replicate(tree: Any) -> Any:
    """``tree`` with every array leaf whole on every device (for a computation that needs
    the whole batch at once); without an ambient mesh (`within`), unchanged."""
    if jax.sharding.get_abstract_mesh().empty:
        return tree
    return jax.tree.map(lambda leaf: jax.lax.with_sharding_constraint(leaf, P()), tree)


def constrain_batch(tree: Any, axis: int = 0) -> Any:
    """Every array leaf of ``tree`` with axis ``axis`` split as `batch_sharding` splits a
    batch, the other axes whole.

    Leaves with fewer axes, or whose ``axis`` does not divide by the number of
    devices (a key shared by the whole batch, a batch smaller than the mesh), are left
    to XLA. Without an ambient mesh (`within`), ``tree`` unchanged.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not set(AXES) <= set(mesh.axis_names):
        return tree
    devices = mesh.shape[DATA] * mesh.shape[FSDP]
    spec = P(*([None] * axis), AXES)

    def constrain(leaf):
        if not isinstance(leaf, jax.Array) or leaf.ndim <= axis or leaf.shape[axis] % devices:
            return leaf
        return jax.lax.with_sharding_constraint(leaf, spec)

    return jax.tree.map(constrain, tree)


def merge_into_batch(x: jax.Array) -> jax.Array:
    """(K, B, ...) -> (B * K, ...), image-major: row ``b * K + k`` is ``x[k, b]``.

    With B split over the devices, each device keeps the K rows of its own images;
    a K-major merge (``x.reshape(K * B, ...)``, or a vmap over K of a convolution)
    interleaves the devices' rows and makes XLA move whole activations.
    """
    return x.swapaxes(0, 1).reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def split_from_batch(x: jax.Array, count: int) -> jax.Array:
    """The inverse of `merge_into_batch`: (B * K, ...) -> (K, B, ...) for K = ``count``."""
    return x.reshape(x.shape[0] // count, count, *x.shape[1:]).swapaxes(0, 1)
