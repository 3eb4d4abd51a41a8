"""The clips of the video tests: the benchmarks' (benchmarks/clips.py, one home for both)."""

from benchmarks.clips import HEIGHT, WIDTH, pan_frames, write_clip

__all__ = ["HEIGHT", "WIDTH", "pan_frames", "write_clip"]
