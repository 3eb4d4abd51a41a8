"""The arguments both video commands take."""

from __future__ import annotations

import argparse

from dbaf_jax import commands, precision
from dbaf_jax.video import clip, tracks


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="DBAF model directory (python -m convert.dbaf, or a training export)")
    parser.add_argument("--password-file", required=True, help="file whose first line is the password")
    parser.add_argument("input", help="a video file (" + ", ".join(clip.FORMATS) + ")")
    parser.add_argument("output", help="the video to write; its suffix chooses the container")
    parser.add_argument("--batch-size", type=commands.positive_int, help="faces per model call, across frames; default 32 per GPU, 8 on a CPU")
    parser.add_argument("--dtype", choices=precision.COMPUTE_DTYPES, default="float32", help="compute dtype of every network")
    parser.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    parser.add_argument("--detector", help="MTCNN directory (python -m convert.mtcnn); default MODEL/mtcnn")
    parser.add_argument("--min-face-size", type=float, default=0.0,
                        help="smaller detected faces (crop side in pixels) are left alone; default 0: every detected face is processed")
    parser.add_argument("--key-file", help="key file (python -m dbaf_jax.keys new)")
    parser.add_argument("--smooth", type=float, default=tracks.DEFAULT_SIGMA,
                        help=f"sigma in frames of the Gaussian smoothing landmarks along each track (0: none); default {tracks.DEFAULT_SIGMA}")
    out = parser.add_argument_group("output encoding")
    out.add_argument("--codec", help=f"FFmpeg video encoder; default {clip.DEFAULT_CODEC} ({clip.WEBM_CODEC} for .webm)")
    out.add_argument("--crf", type=int, default=clip.DEFAULT_CRF, help=f"constant rate factor of x264/x265/VP9 (0: lossless x264); default {clip.DEFAULT_CRF}")
    out.add_argument("--pix-fmt", default=clip.DEFAULT_PIX_FMT, help=f"pixel format; default {clip.DEFAULT_PIX_FMT}")
    return parser


def encoding(args: argparse.Namespace) -> clip.Encoding:
    return clip.Encoding(args.codec, args.crf, args.pix_fmt)
