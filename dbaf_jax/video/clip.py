"""Decoding and encoding video with PyAV (FFmpeg's libraries, from the package registry).

Frames are handed out upright, (H, W, 3) uint8 RGB: a clip whose display matrix says
"rotate" (phone videos) is turned as a player would show it, so that detection sees
upright faces; `Writer` turns frames back to the stored orientation and writes the
same rotation flag, so the output displays as the input did. Each frame keeps its
presentation time (variable frame rates stay variable); audio streams are copied
packet by packet, never re-encoded, interleaved as the video is written so memory does
not grow with the clip.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import av
import numpy as np

from dbaf_jax.core.errors import ConfigError, InputError

# Suffix -> FFmpeg muxer name.
FORMATS = {".mp4": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm", ".avi": "avi"}
DEFAULT_CODEC = "libx264"
WEBM_CODEC = "libvpx-vp9"  # WebM only holds VP8/VP9/AV1
DEFAULT_CRF = 18
DEFAULT_PIX_FMT = "yuv420p"
UNTAGGED = {"avi"}  # muxers that drop container metadata tags of their own naming


def is_video(path: str | Path) -> bool:
    return Path(path).suffix.lower() in FORMATS


def muxer(path: str | Path) -> str:
    """The FFmpeg muxer for ``path``'s suffix; ConfigError for a suffix that is not a video's."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"{path}: not a video file name (one of {', '.join(FORMATS)})")
    return FORMATS[suffix]


def holds_tags(path: str | Path) -> bool:
    """Whether ``path``'s container keeps metadata tags of any name (`Writer`'s ``tags``)."""
    return muxer(path) not in UNTAGGED


def read_tag(path: str | Path, key: str) -> str | None:
    """The container metadata tag ``key`` of the clip (any case: Matroska writes it
    upper-case), or None."""
    path = Path(path)
    with _open(path) as container:
        found = [value for name, value in container.metadata.items() if name.lower() == key.lower()]
    return found[0] if found else None


@dataclasses.dataclass(frozen=True)
class ClipInfo:
    """What the output must keep: the stored size, display rotation (degrees,
    counter-clockwise, a multiple of 90), average rate, the video stream's time base,
    and how many audio streams there are; and what the container says the clip holds
    (`shortfall` checks a pass against it): its frame count, or else its duration in
    seconds (None where it does not say)."""

    width: int
    height: int
    rotation: int
    rate: Fraction
    time_base: Fraction
    audio_streams: int
    declared_frames: int | None = None
    declared_seconds: float | None = None

    @property
    def upright_shape(self) -> tuple[int, int]:
        """(H, W) of the frames as displayed."""
        return (self.width, self.height) if self.rotation % 180 else (self.height, self.width)


def _open(path: Path):
    try:
        return av.open(str(path))
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot open as a video ({err})") from None


def _video_stream(container, path: Path):
    if not container.streams.video:
        raise InputError(f"{path}: has no video stream")
    return container.streams.video[0]


def _rotation(value, path: Path) -> int:
    rotation = int(round(float(value or 0))) % 360
    if rotation % 90:
        raise InputError(
            f"{path}: a display rotation of {rotation} degrees is not a multiple of 90"
        )
    return rotation


def probe(path: str | Path) -> ClipInfo:
    """The clip's `ClipInfo` (rotation from its first frame); InputError naming the file
    when it cannot be read or holds no decodable video."""
    path = Path(path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        first = next(_decoded(container, stream, path), None)
        if first is None:
            raise InputError(f"{path}: holds no decodable video frame")
        rate = stream.average_rate or stream.guessed_rate or Fraction(25)
        if stream.duration:
            seconds = float(stream.duration * stream.time_base)
        else:
            seconds = container.duration / av.time_base if container.duration else None
        return ClipInfo(
            first.width,
            first.height,
            _rotation(first.rotation, path),
            Fraction(rate),
            Fraction(stream.time_base),
            len(container.streams.audio),
            stream.frames or None,
            seconds,
        )


def shortfall(
    path: Path, info: ClipInfo, decoded: int, first_pts: int | None, last_pts: int | None
) -> str | None:
    """A note when a pass decoded fewer frames than ``path``'s container declares (a
    truncated or damaged file that the decoder ends quietly), else None: against its
    frame count when it gives one, else against its duration (the span from the first
    frame's time to the end of the last, within two frames)."""
    if info.declared_frames is not None:
        if decoded >= info.declared_frames:
            return None
        return f"{path}: decoded {decoded} frame(s) of the {info.declared_frames} its container declares (truncated or damaged?); the output holds those {decoded}"
    if info.declared_seconds is None or first_pts is None or last_pts is None:
        return None
    span = float((last_pts - first_pts) * info.time_base) + 1 / float(info.rate)
    if span >= info.declared_seconds - 2 / float(info.rate):
        return None
    return (
        f"{path}: decoded {decoded} frame(s), {span:.2f} s of the {info.declared_seconds:.2f} s its container declares "
        f"(truncated or damaged?); the output holds those {decoded}"
    )


def packet_count(path: str | Path) -> int:
    """The video stream's packets, demuxed without decoding (one a frame in the containers
    written here): what the clip holds, which a header's frame count or duration could
    overstate; InputError naming the file when it cannot be read."""
    path = Path(path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        try:
            return sum(1 for packet in container.demux(stream) if packet.size)
        except av.error.FFmpegError as err:
            raise InputError(f"{path}: the video is damaged or truncated ({err})") from None


def _decoded(container, stream, path: Path) -> Iterator[av.VideoFrame]:
    try:
        yield from container.decode(stream)
    except av.error.FFmpegError as err:
        raise InputError(f"{path}: the video is damaged or truncated ({err})") from None


@dataclasses.dataclass(frozen=True)
class Frame:
    """One decoded frame: its number in the clip, presentation time (in the stream's
    time base) and pixels (H, W, 3) uint8 upright."""

    index: int
    pts: int | None
    pixels: np.ndarray


def frames(path: str | Path, info: ClipInfo) -> Iterator[Frame]:
    """The clip's frames, one at a time, upright (`ClipInfo.rotation` undone)."""
    path = Path(path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        stream.thread_type = "AUTO"
        for index, frame in enumerate(_decoded(container, stream, path)):
            pixels = frame.to_ndarray(format="rgb24")
            if pixels.shape[:2] != (info.height, info.width):
                raise InputError(
                    f"{path}: frame {index} is {pixels.shape[1]}x{pixels.shape[0]}, not {info.width}x{info.height}"
                )
            yield Frame(
                index, frame.pts, np.ascontiguousarray(np.rot90(pixels, info.rotation // 90))
            )


@dataclasses.dataclass(frozen=True)
class Encoding:
    """The output video stream's codec, constant rate factor and pixel format (None:
    the codec's defaults by the output's suffix)."""

    codec: str | None = None
    crf: int = DEFAULT_CRF
    pix_fmt: str = DEFAULT_PIX_FMT

    def codec_for(self, path: Path) -> str:
        if self.codec is not None:
            return self.codec
        return WEBM_CODEC if muxer(path) == "webm" else DEFAULT_CODEC


class Writer:
    """Writes upright frames to ``target`` (a temporary file the caller renames; its
    muxer is ``format``) with the source's rotation, time base and audio streams, and
    the container metadata ``tags`` (for a muxer that holds them, `holds_tags`)."""

    def __init__(
        self,
        source: Path,
        target: Path,
        format: str,
        info: ClipInfo,
        encoding: Encoding,
        codec: str,
        tags: dict[str, str] | None = None,
    ):
        self.info = info
        self.source = source
        # MP4 and MOV write tags beyond their fixed set (title, comment, ...) only when asked.
        options = {"movflags": "use_metadata_tags"} if tags and format in ("mp4", "mov") else {}
        self.output = av.open(str(target), "w", format=format, options=options)
        self.output.metadata.update(tags or {})
        try:
            self.stream = self.output.add_stream(codec, rate=info.rate)
        except (av.error.FFmpegError, ValueError) as err:
            self.output.close()
            raise ConfigError(f"cannot encode with the codec {codec!r} ({err})") from None
        self.stream.width, self.stream.height = info.width, info.height
        self.stream.pix_fmt = encoding.pix_fmt
        self.stream.time_base = info.time_base
        self.stream.codec_context.time_base = info.time_base
        if codec in ("libx264", "libx265", "libvpx-vp9"):
            self.stream.options = {"crf": str(encoding.crf)} | (
                {"b": "0"} if codec == "libvpx-vp9" else {}
            )
        if info.rotation:
            self.stream.set_display_rotation(info.rotation)
        self._audio_in = av.open(str(source)) if info.audio_streams else None
        self._audio_map = {}
        if self._audio_in is not None:
            for stream in self._audio_in.streams.audio:
                try:
                    self._audio_map[stream.index] = self.output.add_stream_from_template(stream)
                except (av.error.FFmpegError, ValueError) as err:
                    self.close()
                    raise ConfigError(
                        f"cannot copy audio stream {stream.index} ({stream.codec_context.name}) into {format} ({err})"
                    ) from None
            self._packets = self._audio_in.demux(*self._audio_in.streams.audio)
        self._pending = None
        self._last_pts = None

    def _copy_audio(self, until: float | None) -> None:
        """Copies audio packets whose time is before ``until`` seconds (all when None)."""
        if self._audio_in is None:
            return
        while True:
            packet = self._pending or next(self._packets, None)
            self._pending = None
            if packet is None:
                return
            if packet.dts is None:
                continue  # the demuxer's flush packets
            if until is not None and float(packet.dts * packet.time_base) > until:
                self._pending = packet
                return
            packet.stream = self._audio_map[packet.stream.index]
            self.output.mux(packet)

    def write(self, pixels: np.ndarray, pts: int | None) -> None:
        """Encodes one upright frame (H, W, 3) uint8 shown at ``pts`` (in the time base)."""
        frame = av.VideoFrame.from_ndarray(
            np.ascontiguousarray(np.rot90(pixels, -(self.info.rotation // 90))), format="rgb24"
        )
        if pts is None or (self._last_pts is not None and pts <= self._last_pts):
            pts = 0 if self._last_pts is None else self._last_pts + 1
        frame.pts, frame.time_base = pts, self.info.time_base
        self._last_pts = pts
        self._copy_audio(float(pts * self.info.time_base))
        self.output.mux(self.stream.encode(frame))

    def finish(self) -> None:
        """Flushes the encoder, copies the remaining audio and closes the file."""
        self.output.mux(self.stream.encode(None))
        self._copy_audio(None)
        self.close()

    def close(self) -> None:
        if self._audio_in is not None:
            self._audio_in.close()
            self._audio_in = None
        self.output.close()
