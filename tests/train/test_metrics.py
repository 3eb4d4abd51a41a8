"""Metrics writer: stdout lines, TensorBoard event files (parsed back), PNG sample grids."""

import io
import struct

import jax.numpy as jnp
import numpy as np
from PIL import Image

from dbaf_jax.storage.images import make_grid
from dbaf_jax.train import metrics, progress


def read_events(path):
    """The Event protos of a TensorBoard event file (TFRecord framing, CRCs checked)."""
    from tensorboardX.crc32c import crc32c
    from tensorboardX.proto.event_pb2 import Event

    def masked(data):
        crc = crc32c(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    events, raw = [], path.read_bytes()
    offset = 0
    while offset < len(raw):
        header = raw[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", raw[offset + 8 : offset + 12])[0] == masked(header)
        data = raw[offset + 12 : offset + 12 + length]
        assert struct.unpack("<I", raw[offset + 12 + length : offset + 16 + length])[0] == masked(
            data
        )
        events.append(Event.FromString(data))
        offset += 16 + length
    return events


def test_make_grid_layout():
    images = np.stack([np.full((4, 6, 3), v, np.float32) for v in (-1.0, -0.5, 0.0, 0.5, 1.0)])
    grid = make_grid(images, rows=2, padding=1, pad_value=1.0)
    assert grid.shape == (2 * 5 + 1, 3 * 7 + 1, 3) and grid.dtype == np.uint8
    assert grid[0].min() == 255 and grid[:, 0].min() == 255  # border
    assert (
        (grid[1:5, 1:7] == 0).all()
        and (grid[1:5, 8:14] == 64).all()
        and (grid[1:5, 15:21] == 128).all()
    )
    assert (grid[6:10, 1:7] == 191).all() and (grid[6:10, 8:14] == 255).all()
    assert (grid[6:10, 15:21] == 255).all()  # the empty sixth cell is padding


def test_writer_scalars_images_and_rate(tmp_path):
    lines = []
    grid = make_grid(np.random.default_rng(0).uniform(-1, 1, (6, 8, 8, 3)), rows=2)
    clock = progress.StepClock(total_steps=100)
    with clock.training(steps=10):
        pass
    clock.train_seconds = 5.0  # 2 steps/s, so 80 steps to go take 40 s
    with clock.other("evaluation"):
        pass
    with metrics.MetricsWriter(tmp_path, clock, print_fn=lines.append, is_primary=True) as writer:
        values = writer.write_scalars(20, {"g_total": jnp.asarray(1.5), "d/r1": 0.25})
        (png,) = writer.write_images(20, {"samples/anonymize": grid})
    assert values["g_total"] == 1.5 and values["steps_per_sec"] == 2.0
    assert lines[0].startswith("step 20/100 | 2 steps/s | ETA 0:00:40 | ")
    assert lines[0].endswith("g_total 1.5 | d/r1 0.25")
    np.testing.assert_array_equal(np.asarray(Image.open(png)), grid)
    assert png == tmp_path / "samples" / "samples_anonymize_00000020.png"

    (event_file,) = tmp_path.glob("events.out.tfevents.*")
    summaries = [(e.step, v) for e in read_events(event_file) for v in e.summary.value]
    scalars = {v.tag: (step, v.simple_value) for step, v in summaries if v.HasField("simple_value")}
    assert (
        scalars["g_total"] == (20, 1.5)
        and scalars["d/r1"] == (20, 0.25)
        and "steps_per_sec" in scalars
    )
    (image,) = [(step, v.image) for step, v in summaries if v.HasField("image")]
    assert image[0] == 20 and (image[1].height, image[1].width) == grid.shape[:2]
    decoded = np.asarray(Image.open(io.BytesIO(image[1].encoded_image_string)).convert("RGB"))
    np.testing.assert_array_equal(decoded, grid)


def test_non_primary_process_writes_nothing(tmp_path):
    lines = []
    writer = metrics.MetricsWriter(tmp_path / "w", print_fn=lines.append, is_primary=False)
    writer.write_scalars(1, {"x": 1.0})
    assert writer.write_images(1, {"g": np.zeros((2, 2, 3), np.uint8)}) == []
    writer.close()
    assert lines == [] and not (tmp_path / "w").exists()


def test_format_duration():
    assert metrics.format_duration(3723.4) == "1:02:03"
    assert metrics.format_duration(float("inf")) == "?"


def test_step_clock_counts_training_steps_only():
    clock = progress.StepClock(total_steps=30)
    with clock.training(steps=3):
        pass
    with clock.other("evaluation"):
        pass
    with clock.other("evaluation"):
        pass
    clock.train_seconds, clock.other_seconds["evaluation"] = 6.0, 100.0
    assert clock.steps_per_sec() == 0.5 and clock.eta_seconds(3) == 54.0
    assert clock.summary() == "training 6.0 s (3 steps, 0.5 steps/s); evaluation 100.0 s"
    assert progress.StepClock(30).summary().startswith("training 0.0 s (0 steps, nan")
