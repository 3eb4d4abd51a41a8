"""``--ray [ADDRESS]`` and ``--ray-actors N``: what the anonymize and recover commands take
to run a folder on a Ray cluster (docs/distributed.md)."""

from __future__ import annotations

import argparse
import dataclasses
import re

from dbaf_jax.commands import positive_int

LOCAL = "local"  # --ray without an address: a cluster of this machine alone
# What --ray takes as an address: auto (the cluster this machine belongs to), a Ray
# client address, or a GCS address HOST:PORT.
ADDRESS = re.compile(r"^(auto|local|ray://\S+|[\w.\-]+:\d+|\[[0-9a-fA-F:]+\]:\d+)$")


def ray_address(text: str) -> str:
    """argparse type: a Ray address (`ADDRESS`). Anything else is refused, saying how
    to give the folders: ``--ray`` with nargs='?' would otherwise take the input folder
    as its address."""
    if not ADDRESS.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Ray address (auto, local, ray://HOST:PORT or HOST:PORT); "
            "put --ray after the folders, or write --ray=ADDRESS"
        )
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Ray arguments of a folder command, in a group of their own."""
    group = parser.add_argument_group("a Ray cluster (docs/distributed.md)")
    group.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL,
        type=ray_address,
        metavar="ADDRESS",
        help="run the folder on Ray: no address starts a cluster of this machine; auto, ray://HOST:PORT "
        "or HOST:PORT joins one. Photos and clips only (not --aligned); needs the [distributed] extra",
    )
    group.add_argument(
        "--ray-actors",
        type=positive_int,
        metavar="N",
        help="model actors: default one per GPU of the cluster, or 1 on CPUs",
    )


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """Where to run (`LOCAL` or an address) and how many model actors (None: the default)."""

    address: str
    actors: int | None = None


def ray_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RayOptions | None:
    """The run's `RayOptions`, or None without --ray; argparse's usage error for Ray
    options that do not fit the run."""
    if args.ray is None:
        if args.ray_actors is not None:
            parser.error("--ray-actors needs --ray")
        return None
    if getattr(args, "aligned", False):
        parser.error("--ray runs photo folders (with their clips), not --aligned crops")
    return RayOptions(args.ray, args.ray_actors)
