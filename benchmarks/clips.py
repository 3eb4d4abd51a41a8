"""Short clips made with PyAV from the real photos in tests/data (read as files; nothing
of tests/ is imported): a slow pan (and zoom) over a group photo, so faces move, enter
and leave. The video benchmarks and the video tests share them."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
WIDTH, HEIGHT = 320, 240


def pan_frames(
    count: int, photo: str = "office3.jpg", zoom: float = 1.1, travel: float = 1.0
) -> list[np.ndarray]:
    """``count`` frames (HEIGHT, WIDTH, 3) uint8: a window sliding left to right over
    ``travel`` of ``photo``'s free width while zooming in by ``zoom``."""
    with Image.open(DATA / photo) as img:
        source = img.convert("RGB")
    frames = []
    for i in range(count):
        t = i / max(count - 1, 1)
        scale = 1 + (zoom - 1) * t
        w, h = WIDTH / scale * 1.2, HEIGHT / scale * 1.2
        x = (source.width - w) * travel * t
        y = (source.height - h) / 2
        frames.append(
            np.asarray(
                source.resize((WIDTH, HEIGHT), Image.Resampling.BILINEAR, box=(x, y, x + w, y + h))
            )
        )
    return frames


def write_clip(
    path: Path,
    frames,
    rate: int = 12,
    rotation: int = 0,
    audio_streams: int = 1,
    codec: str = "libx264",
    pts: list[int] | None = None,
    format: str | None = None,
) -> Path:
    """Writes ``frames`` (upright) as a clip: stored turned back by ``rotation`` with that
    display rotation, ``audio_streams`` AAC tone streams, frame times ``pts`` (in 1/rate
    units, default 0, 1, ...), nearly lossless."""
    with av.open(str(path), "w", format=format) as out:
        video = out.add_stream(codec, rate=rate)
        stored = [np.ascontiguousarray(np.rot90(f, -(rotation // 90))) for f in frames]
        video.height, video.width = stored[0].shape[:2]
        video.pix_fmt = "yuv420p"
        video.time_base = Fraction(1, rate)
        if codec == "libx264":
            video.options = {"crf": "1"}
        if rotation:
            video.set_display_rotation(rotation)
        audios = [out.add_stream("aac", rate=16000) for _ in range(audio_streams)]
        for audio in audios:
            audio.layout = "mono"
        for i, pixels in enumerate(stored):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = (pts[i] if pts else i), Fraction(1, rate)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        seconds = ((pts[-1] if pts else len(frames) - 1) + 1) / rate
        samples = int(16000 * seconds)
        for n, audio in enumerate(audios):
            tone = (0.2 * np.sin(2 * np.pi * (300 + 200 * n) * np.arange(samples) / 16000)).astype(
                np.float32
            )[None]
            for start in range(0, samples, 1024):
                chunk = av.AudioFrame.from_ndarray(
                    tone[:, start : start + 1024], format="fltp", layout="mono"
                )
                chunk.sample_rate, chunk.pts = 16000, start
                out.mux(audio.encode(chunk))
            out.mux(audio.encode(None))
    return path
