"""The table `bash benchmarks/gpu/quick.sh` prints at the end, in the form of
docs/performance.md's GPU table: one row per part, read from the part's printed table
(``OUT/PART.md``) and its log (``OUT/PART.log``).

    python -m benchmarks.gpu.quick_summary OUT PART=COMMAND ...

Columns: compile s (the benchmark's own cell; for the files-in, files-out part its
first run, loading and compiling included), step / batch s (the timed steady state; for
files in, files out the warm run's seconds per photo), images/s (photos/s there), MFU
against the first named peak, peak GiB, and before compiling (seconds from the process's
start to the first "lowering and compiling" of its log: building and initialising). A
part that printed no table (it failed or ran out of time) gets a row saying so and
where its log is.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HEADER = [
    "part",
    "command",
    "compile s",
    "step / batch s",
    "images/s",
    "MFU",
    "peak GiB",
    "before compiling s",
]
PROGRESS = re.compile(r"^\[\s*([0-9.]+) s\] .*lowering and compiling", re.M)


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in ``text``, as header -> cell."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if len(lines) < 3:
        return []
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
        for line in lines[2:]
    ]


def before_compiling(log: str) -> str:
    found = PROGRESS.search(log)
    return f"{float(found.group(1)):.0f}" if found else "—"


def first_mfu(row: dict[str, str]) -> str:
    """The first MFU cell and its peak's label, e.g. '18.5% (H200 bf16)'."""
    for name, cell in row.items():
        if name.startswith("MFU "):
            return f"{cell} ({name[4:]})"
    return "—"


def measured_cells(rows: list[dict[str, str]]) -> list[str]:
    """compile s, step / batch s, images/s, MFU, peak GiB of a part's last row."""
    row = rows[-1]
    if "step s" in row:  # benchmarks.speed.train_step
        return [row["compile s"], row["step s"], row["images/s"], first_mfu(row), row["peak GiB"]]
    if "batch s" in row:  # benchmarks.speed.anonymize
        return [row["compile s"], row["batch s"], row["images/s"], first_mfu(row), row["peak GiB"]]
    # benchmarks.speed.anonymize_folder: a first run and a warm run.
    first, warm = rows[0], rows[-1]
    return [
        f"{first['s']} ({first['run']})",
        f"{warm['s/photo']} per photo",
        f"{warm['photos/s']} photos/s",
        "—",
        "—",
    ]


def summary(out: Path, parts: list[tuple[str, str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---" * len(HEADER) + "|"]
    for name, command in parts:
        md, log = out / f"{name}.md", out / f"{name}.log"
        rows = table_rows(md.read_text()) if md.is_file() else []
        log_text = log.read_text(errors="replace") if log.is_file() else ""
        if rows:
            cells = measured_cells(rows)
        else:
            cells = [f"no figures: see {log}", "", "", "", ""]
        lines.append(
            "| " + " | ".join([name, f"`{command}`", *cells, before_compiling(log_text)]) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        raise SystemExit("usage: python -m benchmarks.gpu.quick_summary OUT PART=COMMAND ...")
    print(summary(Path(argv[0]), [tuple(part.split("=", 1)) for part in argv[1:]]))


if __name__ == "__main__":
    main()
