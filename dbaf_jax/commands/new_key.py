"""Write a key file: a fresh random salt (`keys.KeyRecord`) to keep with the password.

    python -m dbaf_jax.commands.new_key --out me.key

Anonymize with ``--key-file me.key`` and its images stay recoverable with the
password and this file after their metadata is stripped (docs/photos.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from dbaf_jax.commands import run_main
from dbaf_jax.storage import keys


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m dbaf_jax.commands.new_key",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", required=True, help="the key file to write (keep it with the password)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    path = keys.write_key_file(args.out, keys.new_key_record(), args.overwrite)
    print(f"wrote {path}", file=sys.stderr)
    return path


if __name__ == "__main__":
    run_main(main)
