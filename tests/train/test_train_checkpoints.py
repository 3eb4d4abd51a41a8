"""Orbax training checkpoints: sharded roundtrip, keep-N, half-written directories ignored, refusal."""

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dbaf_jax.core import sharding
from dbaf_jax.train import checkpoints
from dbaf_jax.train.checkpoints import IncompatibleCheckpointError, TrainingCheckpointer

META = {
    "stage": "stage1",
    "architecture": {"size": 32, "latent_groups": (2, 2, 4), "cid": {"depth": 1}},
}


def make_state(mesh, scale=1.0):
    """A nested train-state-like pytree: fsdp-sharded, replicated and scalar leaves, optax state."""
    params = {
        "generator": {
            "kernel": jnp.arange(64 * 32, dtype=jnp.float32).reshape(64, 32) * scale,
            "bias": jnp.ones(32) * scale,
        },
        "cid": {"pos": jnp.full((14, 1, 8), 2.0 * scale)},
    }
    params = jax.device_put(params, sharding.param_sharding(mesh, params, min_size=1024))
    tx = optax.adam(1e-3)
    return {"params": params, "opt_state": tx.init(params), "step": jnp.asarray(7, jnp.int32)}


@pytest.fixture
def mesh():
    return sharding.make_mesh(data=2, fsdp=4)


def test_roundtrip_sharded_state_rng_and_metadata(tmp_path, mesh):
    state = make_state(mesh)
    assert state["params"]["generator"]["kernel"].sharding.spec == jax.sharding.PartitionSpec(
        "fsdp"
    )
    rng = jax.random.fold_in(jax.random.key(3), 11)
    with TrainingCheckpointer(tmp_path, save_every=5, keep=3, metadata=META) as ckpt:
        assert ckpt.restore_latest(checkpoints.abstract_like(state)) is None
        assert ckpt.save(10, state, rng)
    with TrainingCheckpointer(tmp_path, save_every=5, keep=3, metadata=META) as ckpt:
        restored = ckpt.restore_latest(
            checkpoints.abstract_like(make_state(mesh, scale=0.0)), expected=META
        )
    assert restored.step == 10 and restored.data_position == 10
    assert restored.metadata["stage"] == "stage1"
    np.testing.assert_array_equal(jax.random.key_data(restored.rng), jax.random.key_data(rng))
    np.testing.assert_array_equal(
        jax.random.normal(restored.rng, (3,)), jax.random.normal(rng, (3,))
    )
    for (path, got), want in zip(
        jax.tree_util.tree_leaves_with_path(restored.state), jax.tree.leaves(state)
    ):
        np.testing.assert_array_equal(got, want, err_msg=jax.tree_util.keystr(path))
        assert got.sharding == want.sharding, jax.tree_util.keystr(path)


def test_raw_uint32_key_roundtrip(tmp_path, mesh):
    state = make_state(mesh)
    key = jax.random.PRNGKey(5)
    with TrainingCheckpointer(tmp_path, save_every=1, keep=1, metadata=META) as ckpt:
        ckpt.save(1, state, key)
        restored = ckpt.restore_latest(checkpoints.abstract_like(state))
    assert restored.rng.dtype == jnp.uint32
    np.testing.assert_array_equal(restored.rng, key)


def test_save_every_keep_n_and_forced_save(tmp_path, mesh):
    state, rng = make_state(mesh), jax.random.key(0)
    with TrainingCheckpointer(tmp_path, save_every=2, keep=2, metadata=META) as ckpt:
        saved = [step for step in range(8) if ckpt.save(step, state, rng)]
        ckpt.wait()
        assert saved == [0, 2, 4, 6]
        assert ckpt.all_steps() == [4, 6] and ckpt.latest_step() == 6
        assert ckpt.save(7, state, rng, force=True)  # at exit / on interrupt
        assert not ckpt.save(7, state, rng, force=True)  # already there
        ckpt.wait()
        assert ckpt.all_steps() == [6, 7] and ckpt.latest_step() == 7


def test_a_step_that_is_not_saved_reads_nothing_from_the_device(tmp_path, mesh, monkeypatch):
    """The loop calls save after every step: on the steps it skips, the RNG key (a device
    array) must not be fetched, or every step would wait for the device."""
    state, rng = make_state(mesh), jax.random.key(0)
    fetched = []
    to_json = checkpoints._key_to_json
    monkeypatch.setattr(
        checkpoints, "_key_to_json", lambda key: fetched.append(key) or to_json(key)
    )
    with TrainingCheckpointer(tmp_path, save_every=4, keep=2, metadata=META) as ckpt:
        saved = [step for step in range(1, 9) if ckpt.save(step, state, rng)]
    assert saved == [1, 4, 8]  # Orbax also keeps the first step of a run with no checkpoint yet
    assert len(fetched) == len(saved)


def test_a_replicated_state_on_cpu_devices_is_saved_without_compiling(tmp_path):
    """On 8 host devices, a state replicated on all of them (the stage-1 loop's layout)
    is written by one replica: no `slice` program per array (Orbax's replica-parallel
    split), no compile at all, and it reads back whole."""
    mesh = sharding.make_mesh(data=8, fsdp=1)
    state = {
        f"layer{i}": jax.device_put(jnp.full((16, 3 + i), float(i)), sharding.replicated(mesh))
        for i in range(4)
    }
    rng, compiles = jax.random.key(0), []

    def count(event, seconds, **_):
        compiles.extend([event] if event == "/jax/core/compile/backend_compile_duration" else [])

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        with TrainingCheckpointer(tmp_path, save_every=1, keep=1, metadata=META) as ckpt:
            assert ckpt.save(1, state, rng)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert compiles == []
    with TrainingCheckpointer(tmp_path, save_every=1, keep=1, metadata=META) as ckpt:
        restored = ckpt.restore_latest(checkpoints.abstract_like(state))
    for name, value in state.items():
        np.testing.assert_array_equal(restored.state[name], value)


def test_half_written_checkpoints_are_ignored(tmp_path, mesh):
    state, rng = make_state(mesh), jax.random.key(0)
    with TrainingCheckpointer(tmp_path, save_every=1, keep=5, metadata=META) as ckpt:
        ckpt.save(2, state, rng)
        ckpt.save(4, state, rng)
    root = tmp_path / checkpoints.CHECKPOINT_DIR
    # A crash during a save leaves Orbax's temporary directory ...
    (root / "8.orbax-checkpoint-tmp-1234" / "state").mkdir(parents=True)
    # ... and a partial copy leaves a step directory without its metadata.
    (root / "9" / "state").mkdir(parents=True)
    (root / "9" / "state" / "garbage").write_bytes(b"\0" * 10)

    with TrainingCheckpointer(tmp_path, save_every=1, keep=5, metadata=META) as ckpt:
        assert ckpt.set_aside == [root / "9.incomplete"]
        assert ckpt.all_steps() == [2, 4]
        restored = ckpt.restore_latest(checkpoints.abstract_like(state))
        assert restored.step == 4
        assert ckpt.save(5, state, rng)  # a stray higher step would have blocked this save
        ckpt.wait()
        assert ckpt.latest_step() == 5
    assert (root / "9.incomplete" / "state" / "garbage").exists()  # kept, not deleted
    assert not (root / "8.orbax-checkpoint-tmp-1234").exists()


def test_check_compatible_names_the_differing_fields():
    stored = {
        "stage": "stage1",
        "architecture": {"size": 256, "latent_groups": [4, 4, 6], "cid": {"depth": 6, "heads": 14}},
    }
    check_compatible_ok = {
        "stage": "stage1",
        "architecture": {"size": 256, "latent_groups": (4, 4, 6), "cid": {"depth": 6}},
    }
    checkpoints.check_compatible(stored, check_compatible_ok)
    expected = {
        "stage": "stage1",
        "architecture": {
            "size": 32,
            "latent_groups": (2, 2, 4),
            "cid": {"depth": 6, "kind": "vit"},
        },
    }
    with pytest.raises(IncompatibleCheckpointError) as err:
        checkpoints.check_compatible(stored, expected, source="stage-1 checkpoint W/100")
    message = str(err.value)
    assert message.startswith("stage-1 checkpoint W/100 does not fit this run")
    assert "architecture.size: 256, expected 32" in message
    assert "architecture.latent_groups: [4, 4, 6], expected [2, 2, 4]" in message
    assert "architecture.cid.kind: missing, expected 'vit'" in message
    assert "depth" not in message and "stage:" not in message


def test_restore_refuses_other_architecture(tmp_path, mesh):
    state = make_state(mesh)
    with TrainingCheckpointer(tmp_path, save_every=1, keep=1, metadata=META) as ckpt:
        ckpt.save(3, state, jax.random.key(0))
        ckpt.wait()
        other = {"stage": "stage1", "architecture": {**META["architecture"], "size": 256}}
        with pytest.raises(
            IncompatibleCheckpointError, match="architecture.size: 32, expected 256"
        ):
            ckpt.restore_latest(checkpoints.abstract_like(state), expected=other)


def test_catch_sigterm_raises_keyboard_interrupt():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with checkpoints.catch_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is previous
