"""Recovery without metadata, end to end: what the face ledger lets recovery touch after
the anonymized photos are shared (metadata stripped, JPEG 90 and 75, rescaled by 0.5).

    python -m benchmarks.studies.ledger_recovery --photos DIR --detector models/mtcnn [--work DIR]

Anonymizes every photo below DIR with a key file (writing its face ledger) using the
test double `fixtures.invertible_double.InvertibleDouble` (a key-dependent colour change
and mirror, so that the anonymized faces are still faces the real MTCNN finds again),
then recovers each transformed copy with the key file alone. Per photo and
transformation it prints: faces anonymized, faces found again, verified against the
ledger, restored (their mean error to the original within the face halved or better),
and the pixels recovery changed outside the faces anonymization changed (must be 0).
The never-anonymized originals, recovered with the same key file, are the control:
every detection there must stay unverified and every pixel as it was. The measurement
is `fixtures.ledger_sharing.measure` (the ledger tests assert on it).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from dbaf_jax.storage import images
from fixtures.ledger_sharing import Row, measure


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", required=True, help="folder of photos (jpg, png)")
    parser.add_argument(
        "--detector", required=True, help="MTCNN directory (python -m convert.mtcnn)"
    )
    parser.add_argument("--work", help="folder for the runs (default: a temporary one)")
    args = parser.parse_args(argv)
    sources = images.input_images(Path(args.photos))
    with tempfile.TemporaryDirectory() as temporary:
        rows = measure(sources, Path(args.detector), Path(args.work or temporary))
    print(
        "| photo | shared as | anonymized | found | verified | restored | pixels changed outside |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.photo} | {row.transform} | {row.anonymized} | {row.found} | {row.verified} | {row.restored} | {row.changed_outside} |"
        )
    return rows


if __name__ == "__main__":
    main()
