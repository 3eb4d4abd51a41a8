"""What the user commands share: one way to end on an error, and their common arguments.

Library code raises the types of `dbaf_jax.core.errors`; a command's ``main(argv)`` lets
them through and `run_main` turns one into a single ``error: <message>`` line on
stderr and exit status 1. Any other exception is a bug and keeps its traceback.
Every command runs with the persistent compilation cache on (`compilation_cache`).

The commands are the thin modules of this folder (`scripts.COMMANDS`; the web page,
``python -m dbaf_jax.web``, is its own package), each run as ``python -m
dbaf_jax.commands.NAME`` or, once installed, as the console script ``dbaf-NAME``
(pyproject.toml: ``dbaf_jax.commands.scripts:NAME``). No library module imports this one.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Callable, Sequence

from dbaf_jax.core import compilation_cache, precision
from dbaf_jax.core.errors import ConfigError, DbafError, printable
from dbaf_jax.faces.detectors import registry
from dbaf_jax.faces.photos import MIN_FACE_SIZE
from dbaf_jax.inference.run import Model, Run
from dbaf_jax.inference.settings import FaceFinding, FolderRunSettings, RunSettings
from dbaf_jax.storage import images, keys
from dbaf_jax.video import clip, tracks
from dbaf_jax.video.settings import ClipRunSettings

LAYER = "interfaces"

Main = Callable[[Sequence[str] | None], Any]


def exit_status(main: Main, argv: Sequence[str] | None = None) -> int:
    """Runs ``main(argv)`` with the compilation cache on: 1 after printing its
    DbafError as ``error: <message>`` (control characters escaped, `errors.printable`); else the ``status`` of what it returns (a run
    that finished without doing all it was asked, `anonymizer.Report.status`), or 0."""
    compilation_cache.enable()
    try:
        result = main(argv)
    except DbafError as err:
        print(printable(f"error: {err}"), file=sys.stderr)
        return 1
    status = getattr(result, "status", 0)
    return status if isinstance(status, int) else 0


def run_main(main: Main, argv: Sequence[str] | None = None) -> None:
    """`exit_status`, exiting the interpreter only on a non-zero status: otherwise it
    returns, so a caller (a test, a notebook) can run several commands in one process."""
    status = exit_status(main, argv)
    if status:
        raise SystemExit(status)


DETECTORS_HELP = registry.names_help()


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def flags(parser: argparse._ActionsContainer, helps: dict[str, str]) -> None:
    """On/off options (``store_true``), each name with its help, in order."""
    for name, help in helps.items():
        parser.add_argument(name, action="store_true", help=help)


MODEL_HELP = "DBAF model directory (python -m convert.dbaf, or a training export)"


def compute_arguments(parser: argparse.ArgumentParser, batch_help: str, dtype_help: str) -> None:
    """``--batch-size`` and ``--dtype``: how the model runs (the run commands and the web
    page)."""
    parser.add_argument("--batch-size", type=positive_int, help=batch_help)
    parser.add_argument(
        "--dtype", choices=precision.COMPUTE_DTYPES, default="float32", help=dtype_help
    )


class _Renamed(argparse.Action):
    """An option that was renamed: giving it is a ConfigError naming the new spelling
    (one ``error:`` line), not argparse's guess between the options it abbreviates."""

    def __init__(self, option_strings: Sequence[str], dest: str, renamed: str, **kwargs: Any):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.renamed = renamed

    def __call__(self, parser, namespace, values, option_string=None):
        raise ConfigError(f"{option_string} is now {self.renamed}")


def detector_arguments(parser: argparse._ActionsContainer, detectors_help: str) -> None:
    """``--detector-weights`` (the folder of the detectors' weight folders) and
    ``--detectors`` (which detectors); the old ``--detector`` names the new flag."""
    parser.add_argument(
        "--detector-weights",
        help=f"folder holding the detectors' weights ({', '.join(registry.detector_folders())}: "
        "python -m convert.centerface / convert.mtcnn --out DIR); default the model directory",
    )
    parser.add_argument(
        "--detector",
        action=_Renamed,
        dest="renamed_detector",
        renamed="--detector-weights DIR (the folder that holds mtcnn/ and centerface/, not mtcnn/ itself)",
    )
    parser.add_argument("--detectors", help=detectors_help)


def _run_parser(
    prog: str,
    description: str,
    inputs: Sequence[tuple[str, str | None]],
    batch_help: str,
    dtype_help: str,
) -> argparse.ArgumentParser:
    """The arguments every anonymize and recover command takes: the model, a password
    file, the ``inputs`` (positional: name, help), the batch size, the dtype, --overwrite."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    parser.add_argument(
        "--password-file", required=True, help="file whose first line is the password"
    )
    for name, help in inputs:
        parser.add_argument(name, help=help)
    compute_arguments(parser, batch_help, dtype_help)
    parser.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    return parser


def folder_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The arguments of the anonymize and recover commands: a model, a password file, an
    input and an output folder, the batch size and --overwrite."""
    parser = _run_parser(
        prog,
        description,
        [("in_dir", None), ("out_dir", None)],
        "faces per model call; default 32 per GPU/TPU, 8 on a CPU",
        "compute dtype of every network (bfloat16: faster on accelerators; docs/decisions.md)",
    )
    flags(
        parser,
        {
            "--allow-unchecked-model": "run a model directory without model.json: its completeness (MAAR) and integrity go unchecked"
        },
    )
    photos = parser.add_argument_group("photos (the default; see docs/photos.md)")
    flags(photos, {"--aligned": "inputs are aligned face crops (resized to the model's input)"})
    detector_arguments(photos, DETECTORS_HELP)
    photos.add_argument(
        "--parser",
        help="BiSeNet directory (parser_bisenet) for soft face masks; default a box mask",
    )
    photos.add_argument(
        "--min-face-size",
        type=float,
        help="leave faces whose crop side is under N pixels as they were (counted, exit status 4); default 0: every face",
    )
    photos.add_argument(
        "--key-file", help="key file (python -m dbaf_jax.commands.new_key) instead of a fresh salt"
    )
    photos.add_argument(
        "--save-crops", action="store_true", help="also write each face's crop as NAME.faceN.png"
    )
    photos.add_argument(
        "--max-pixels",
        type=positive_int,
        default=images.MAX_PIXELS,
        help=f"skip (named, before decoding) photos of more than N pixels; default {images.MAX_PIXELS:,}"
        " (a photo needs about 10 bytes a pixel besides the detector's tiles: docs/performance.md)",
    )
    return parser


def photo_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses photo options together with --aligned (argparse's usage error)."""
    if args.aligned:
        given = [
            name
            for name in ("detector_weights", "detectors", "parser", "key_file")
            if getattr(args, name) is not None
        ]
        given += ["save_crops"] if args.save_crops else []
        if given:
            parser.error(
                f"--aligned takes no {', '.join('--' + g.replace('_', '-') for g in given)}"
            )


def video_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The arguments both video commands take: model, password, input and output videos, tracking and encoding."""
    parser = _run_parser(
        prog,
        description,
        [
            ("input", "a video file (" + ", ".join(clip.FORMATS) + ")"),
            ("output", "the video to write; its suffix chooses the container"),
        ],
        "faces per model call, across frames; default 32 per GPU, 8 on a CPU",
        "compute dtype of every network",
    )
    detector_arguments(parser, DETECTORS_HELP)
    parser.add_argument(
        "--min-face-size",
        type=float,
        default=0.0,
        help="smaller detected faces (crop side in pixels) are left alone; default 0: every detected face is processed",
    )
    parser.add_argument("--key-file", help="key file (python -m dbaf_jax.commands.new_key)")
    parser.add_argument(
        "--smooth",
        type=float,
        default=tracks.DEFAULT_SIGMA,
        help=f"sigma in frames of the Gaussian smoothing landmarks along each track (0: none); default {tracks.DEFAULT_SIGMA}",
    )
    out = parser.add_argument_group("output encoding")
    out.add_argument(
        "--codec",
        help=f"FFmpeg video encoder; default {clip.DEFAULT_CODEC} ({clip.WEBM_CODEC} for .webm)",
    )
    out.add_argument(
        "--crf",
        type=int,
        default=clip.DEFAULT_CRF,
        help=f"constant rate factor of x264/x265/VP9 (0: lossless x264); default {clip.DEFAULT_CRF}",
    )
    out.add_argument(
        "--pix-fmt",
        default=clip.DEFAULT_PIX_FMT,
        help=f"pixel format; default {clip.DEFAULT_PIX_FMT}",
    )
    return parser


def video_encoding(args: argparse.Namespace) -> clip.Encoding:
    """The output encoding `video_parser`'s arguments ask for."""
    return clip.Encoding(args.codec, args.crf, args.pix_fmt)


# What a run command builds from its arguments, once: the settings of each concern
# (`inference.settings`, `video.settings`) and its run (`inference.run.Run`).


def _given(args: argparse.Namespace, settings: type) -> dict[str, Any]:
    """The fields of the dataclass ``settings`` that ``args`` has, by name."""
    return {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(settings)
        if hasattr(args, field.name)
    }


def folder_run_settings(args: argparse.Namespace) -> FolderRunSettings:
    """The folder runs' settings (anonymize, recover; the web page's batch size)."""
    return FolderRunSettings(**_given(args, FolderRunSettings))


def clip_run_settings(args: argparse.Namespace) -> ClipRunSettings:
    """The video commands' settings: `video_parser`'s tracking and encoding, and
    recover_video's --recover-redetected."""
    return ClipRunSettings(
        **_given(args, RunSettings),
        encoding=video_encoding(args),
        sigma=args.smooth,
        redetect=getattr(args, "recover_redetected", False),
    )


def face_finding(args: argparse.Namespace) -> FaceFinding:
    """How the run finds and masks faces: --detector-weights, --detectors, --parser (photos
    only) and --min-face-size (unset: `photos.MIN_FACE_SIZE`)."""
    return FaceFinding(
        args.detector_weights,
        args.detectors,
        getattr(args, "parser", None),
        MIN_FACE_SIZE if args.min_face_size is None else args.min_face_size,
    )


def start_run(args: argparse.Namespace, operation: str, settings: RunSettings) -> Run:
    """The command's run (`Run.start`), read in this order: the password
    (--password-file), the key file's record (--key-file; a mistyped one fails here, in a
    second) and, recovering, its face ledger, then the model (--model, --dtype,
    --allow-unchecked-model) with the face finder of ``operation`` only (`face_finding`;
    none for --aligned), then recovery's mode (--mode, --aligned, --untrained-mode)."""
    password = keys.read_password(args.password_file)
    aligned = getattr(args, "aligned", False)
    finding = None if aligned else face_finding(args)

    def model() -> Model:
        unchecked = getattr(args, "allow_unchecked_model", False)
        return Model.load(args.model, args.dtype, unchecked, finding, (operation,))

    return Run.start(
        operation,
        password,
        model,
        settings,
        args.key_file,
        mode=getattr(args, "mode", None),
        aligned=aligned,
        untrained=getattr(args, "untrained_mode", False),
    )
