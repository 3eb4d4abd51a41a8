"""What a Ray run asks of the cluster (`dbaf_jax.distributed.cluster.layout`), the check
each node runs on the run's paths (`unseen`), and the command-line options; none of
these start Ray."""

import argparse

import pytest

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.distributed import cluster, options


def test_cpu_actors_and_a_detection_task_fit_the_cluster_together():
    for cpus, actors in [(2, 1), (2, 2), (2, 3), (16, 4), (3, 2), (1, 1)]:
        layout = cluster.layout({"CPU": float(cpus)}, actors)
        assert not layout.gpus and layout.actors == actors
        assert 0 < layout.share <= 1 and (actors + 1) * layout.share <= cpus
        assert layout.model()["num_cpus"] == layout.detection()["num_cpus"] == layout.share
        assert layout.detection()["runtime_env"]["env_vars"]["JAX_PLATFORMS"] == "cpu"
    assert cluster.layout({"CPU": 2.0}, None).actors == 1
    assert cluster.layout({"CPU": 16.0}, 4).share == 1.0


def test_gpu_clusters_get_one_actor_per_gpu():
    layout = cluster.layout({"CPU": 32.0, "GPU": 4.0}, None)
    assert layout.gpus and layout.actors == 4 and layout.model()["num_gpus"] == 1
    assert "JAX_PLATFORMS" not in layout.model()["runtime_env"]["env_vars"]
    assert cluster.layout({"CPU": 32.0, "GPU": 4.0}, 2).actors == 2
    with pytest.raises(ConfigError, match="--ray-actors 5: the cluster has 4 GPU"):
        cluster.layout({"CPU": 32.0, "GPU": 4.0}, 5)
    with pytest.raises(ConfigError, match="no CPU"):
        cluster.layout({}, None)


def test_a_node_that_sees_other_files_names_the_path(tmp_path):
    photo = tmp_path / "in" / "a.jpg"
    photo.parent.mkdir()
    photo.write_bytes(b"12345")
    stage = tmp_path / "out" / ".dbaf-ray-x"
    stage.mkdir(parents=True)
    (stage / "probe").write_text("token")
    check = cluster.path_check([photo], [photo.parent], stage, "token")
    assert cluster.unseen(check) is None and not [p for p in stage.iterdir() if p.name != "probe"]
    photo.write_bytes(b"123")  # another file under the same name
    assert cluster.unseen(check) == f"{photo}: 3 bytes here, 5 on the driver (another file?)"
    photo.unlink()
    assert cluster.unseen(check) == f"{photo}: No such file or directory"
    assert cluster.unseen(
        cluster.PathCheck((), (str(tmp_path / "gone"),), str(stage), "token")
    ) == (f"{tmp_path / 'gone'}: no such folder here")
    assert cluster.unseen(cluster.PathCheck((), (), str(stage), "other")) == (
        f"{stage}: another folder of that name (its token differs from the driver's)"
    )


def parse(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("in_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--aligned", action="store_true")
    options.add_arguments(parser)
    return parser, parser.parse_args(argv)


def test_ray_options():
    parser, args = parse("in", "out", "--ray")
    assert options.ray_options(parser, args) == options.RayOptions(options.LOCAL)
    for address in ("auto", "ray://head:10001", "10.0.0.1:6379", "head-node.local:6379"):
        parser, args = parse("--ray", address, "in", "out", "--ray-actors", "2")
        assert options.ray_options(parser, args) == options.RayOptions(address, 2)
    parser, args = parse("in", "out")
    assert options.ray_options(parser, args) is None


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--ray", "photos", "out"], "'photos' is not a Ray address"),
        (["in", "out", "--ray-actors", "2"], "--ray-actors needs --ray"),
        (["in", "out", "--ray", "--aligned"], "not --aligned"),
        (["in", "out", "--ray", "--ray-actors", "0"], "must be at least 1"),
    ],
)
def test_ray_options_that_do_not_fit_are_usage_errors(argv, says, capsys):
    with pytest.raises(SystemExit) as stop:
        parser, args = parse(*argv)
        options.ray_options(parser, args)
    assert stop.value.code == 2 and says in capsys.readouterr().err
