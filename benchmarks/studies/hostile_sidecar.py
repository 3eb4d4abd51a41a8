"""What one clip sidecar can make recovery do: a clip's honest sidecar against the same
clip with a sidecar crafted to hold the most faces the checks accept.

    python -m benchmarks.studies.hostile_sidecar [--model DIR] [--frames 12] [--photo office3.jpg] [--repeats 1]

Anonymizes a test clip (fixtures/clips.py: a pan over tests/data/office3.jpg, or
``--photo``, 320x240, 12 fps) with `runner.anonymize_video`, then times `runner.recover_video`
(warm: one recovery runs first to compile; median of ``--repeats``) with

- the honest sidecar (the tracks anonymize found);
- a crafted sidecar: the same clip, key record and model, with on every frame a grid of
  32 px faces, as many as `metadata.max_recorded_faces` allows for the frame (the
  densest list `sidecar.check` accepts: 75 on 320x240);

and times the refusal of the hostile trial's sidecar (1000 tracks at one place on every
frame). Prints faces and seconds of each and the ratios. Model: ``--model DIR`` (a
converted DBAF model directory holding ``mtcnn/``), or the tiny random model (random
weights) with the real MTCNN.
"""

from __future__ import annotations

import json
import time

import numpy as np

from benchmarks.common.models import model_parser, photo_run
from benchmarks.common.timing import median_seconds
from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import metadata
from dbaf_jax.inference.run import Run
from dbaf_jax.storage import keys
from dbaf_jax.video import runner, sidecar
from dbaf_jax.video.settings import ClipRunSettings
from fixtures.clips import HEIGHT, WIDTH, pan_frames, write_clip

PASSWORD = "hostile sidecar benchmark"
GRID = 32  # px: one crafted face per GRID x GRID of the frame (metadata.FACE_AREA_PER_FACE)


def at(x: float, y: float, side: float, size: int) -> list[float]:
    """The transform (6 numbers) of a ``side`` px face centred at (x, y), crops of ``size``."""
    scale = size / side
    return [scale, 0.0, size / 2 - scale * x, 0.0, scale, size / 2 - scale * y]


def crafted_tracks(frames: int, size: int) -> list[dict]:
    """A track per cell of a grid of GRID px faces (GRID - 2 px apart, so that the most
    the frame's area allows fit), each on every frame."""
    step = GRID - 2
    cells = [
        (x + GRID / 2, y + GRID / 2)
        for y in range(0, HEIGHT - GRID // 2, step)
        for x in range(0, WIDTH - GRID // 2, step)
    ]
    cells = cells[: metadata.max_recorded_faces((HEIGHT, WIDTH))]
    return [
        {"number": n, "first": 0, "transforms": [at(x, y, GRID, size)] * frames}
        for n, (x, y) in enumerate(cells)
    ]


def sidecars(honest: dict, frames: int) -> dict[str, dict]:
    """The three sidecars of the clip whose honest one is ``honest``: "honest", "crafted"
    (`crafted_tracks`) and "hostile" (the hostile trial's: 1000 tracks at one place on
    each of the ``frames`` frames)."""
    crafted = {**honest, "tracks": crafted_tracks(honest["clip"]["frames"], honest["size"])}
    hostile = {
        **honest,
        "tracks": [
            {
                "number": n,
                "first": 0,
                "transforms": [at(100, 100, 40, honest["size"])] * frames,
            }
            for n in range(1000)
        ],
    }
    return {"honest": honest, "crafted": crafted, "hostile": hostile}


def print_table(
    args, model, work, contents: dict[str, dict], faces: int, seconds: dict, refusal: str
) -> None:
    """The module doc's table and ratios; ``faces``: the honest sidecar's over all frames,
    ``seconds``: the "honest" and "crafted" recoveries', ``refusal``: the hostile one's outcome."""
    honest_faces, honest_s, crafted_s = faces, seconds["honest"], seconds["crafted"]
    crafted = contents["crafted"]
    crafted_faces = sum(len(t["transforms"]) for t in crafted["tracks"])
    sizes = {name: (work / f"{name}.json").stat().st_size for name in contents}
    print(
        f"model {model} ({'given' if args.model else 'tiny, random weights'}), clip {WIDTH}x{HEIGHT}, {args.frames} frames over {args.photo}"
    )
    print("| sidecar | faces (over all frames) | bytes | recover s (warm) | s per face |")
    print("|---|---|---|---|---|")
    print(
        f"| honest | {honest_faces} | {sizes['honest']} | {honest_s:.2f} | {honest_s / max(honest_faces, 1):.3f} |"
    )
    print(
        f"| crafted, the most the checks accept | {crafted_faces} | {sizes['crafted']} | {crafted_s:.2f} | "
        f"{crafted_s / crafted_faces:.3f} |"
    )
    print(
        f"| the hostile trial's (1000 tracks at one place) | {1000 * args.frames} | {sizes['hostile']} | {refusal} | |"
    )
    print(
        f"crafted / honest: {crafted_s / honest_s:.1f}x the time for {crafted_faces / max(honest_faces, 1):.1f}x the faces; "
        f"bound on the sidecar's bytes for this clip: {sidecar.max_bytes((HEIGHT, WIDTH), args.frames)}; "
        f"faces per frame: honest {np.round(honest_faces / args.frames, 1)}, crafted {len(crafted['tracks'])}"
    )


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument(
        "--photo", default="office3.jpg", help="the photo of tests/data the clip pans over"
    )
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    with photo_run(args.model) as (work, model, anonymizer, faces):
        clip_path = write_clip(
            work / "pan.mp4", pan_frames(args.frames, args.photo), audio_streams=0
        )
        record = keys.KeyRecord(salt="5e" * keys.SALT_BYTES)
        anonymized = runner.anonymize_video(
            Run("anonymize", anonymizer, faces, PASSWORD, record), clip_path, work / "anon.mkv"
        )
        again = Run(
            "recover", anonymizer, faces, PASSWORD, settings=ClipRunSettings(overwrite=True)
        )
        honest = json.loads(sidecar.path_for(work / "anon.mkv").read_text())
        contents = sidecars(honest, args.frames)
        for name, content in contents.items():
            (work / f"{name}.json").write_text(json.dumps(content, separators=(",", ":")))

        def recover(name: str) -> float:
            return median_seconds(
                lambda: runner.recover_video(
                    again, work / "anon.mkv", work / f"out_{name}.mkv", work / f"{name}.json"
                ),
                args.repeats,
            )

        recover("honest")  # compiles
        seconds = {"honest": recover("honest"), "crafted": recover("crafted")}
        start = time.perf_counter()
        try:
            recover("hostile")
            refusal = "accepted (!)"
        except InputError as err:
            refusal = (
                f"refused in {time.perf_counter() - start:.2f} s: {str(err).split(': ', 1)[1][:90]}"
            )
        print_table(args, model, work, contents, anonymized.faces, seconds, refusal)


if __name__ == "__main__":
    main()
