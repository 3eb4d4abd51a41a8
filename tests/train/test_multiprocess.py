"""The several-hosts path, exercised: a training step run by 2 processes with 4 CPU
devices each (``jax.distributed.initialize`` on localhost, as ``launch.py --distributed``
runs it) equals the same step in 1 process with 8 devices."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.paths import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_step(processes: int, out: Path) -> dict[str, np.ndarray]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.multiprocess_step",
                "--processes",
                str(processes),
                "--process-id",
                str(i),
                "--port",
                str(port),
                "--out",
                str(out),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(processes)
    ]
    for worker in workers:
        output, _ = worker.communicate(timeout=1800)
        assert worker.returncode == 0, output[-3000:]
    with np.load(out) as saved:
        return {name: saved[name] for name in saved.files}


# Gradients are summed over the devices in another order across processes. Leaves that
# start at zero (biases, noise weights) hold one step's update after the step, lr times
# a gradient that can be a nearly cancelling sum (a noise weight's sums over every
# pixel): measured against their own largest value, such leaves differed by up to
# 7.6e-3 (4 noise weights and 2 biases above 2e-4), by less than 4e-9 in absolute terms.
# So each value may differ by RTOL of itself plus ATOL, 1e-4 of the learning rate
# (1e-4), the scale of one step's update. A wrong split of the batch or of the
# collectives changes the losses (the metrics) and the updates by orders of magnitude more.
RTOL, ATOL = 2e-4, 1e-8


@pytest.mark.long
def test_two_processes_step_equals_one_process(tmp_path):
    one = run_step(1, tmp_path / "one.npz")
    two = run_step(2, tmp_path / "two.npz")
    assert one.keys() == two.keys() and any("metrics" in k for k in one)
    for name, expected in one.items():
        np.testing.assert_allclose(two[name], expected, rtol=RTOL, atol=ATOL, err_msg=name)
