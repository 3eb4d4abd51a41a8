"""Baseline: the authors' PyTorch anonymization, timed on the same device, batches and
semantics as `benchmarks.speed.anonymize`.

    python -m benchmarks.baselines.reference_anonymize --reference-repo /path/to/DBAF [--batches 1 8 32]
        [--modes fp32 tf32 bf16 tf32+compile] [--steps 20] [--find-max-batch [--max-batch 4096]]

Their networks, random weights and modes are those of `benchmarks.baselines.reference_pytorch`
(its module doc says how they are built without downloading anything). What is timed is
what their ``test.py`` does per image and key, on a batch with one key per image, in
eval mode without gradients: their CID's forward (which runs pSp: e4e, then pSp's own
StyleGAN2 decoder on the codes, whose images it discards), MAAR on e4e's feature maps,
KRIA on the identity code and the key, and the fine-tuned generator with MAAR's maps as
noise. The keys are drawn through the base generator's mapping network before timing,
as `benchmarks.speed.anonymize` maps its key before timing; like it, copying images to and
from the host is not timed.

Columns: batch s is the time per call after two warm-up calls, ``--steps`` calls back
to back with one ``torch.cuda.synchronize()`` at the end; first s, peak GiB and max
batch as in `benchmarks.baselines.reference_pytorch`. Compare images/s with `benchmarks.speed.anonymize`
at the same batch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from argparse import Namespace
from pathlib import Path

import torch

from benchmarks.baselines import reference_pytorch as reference
from benchmarks.common import device_info


class Anonymization:
    """Their test-time anonymization of a batch, one key per image; ``precision`` and
    ``compiled`` as in `benchmarks.baselines.reference_pytorch`. ``__call__(images, index)``
    returns the anonymized images (B, 3, 256, 256)."""

    def __init__(
        self, ref: Namespace, opts: Namespace, device: torch.device, precision: str, compiled: bool
    ):
        self.device, self.precision = device, precision
        wrap = reference.compiler(compiled)
        self.e4e = wrap(reference.build_e4e(ref, opts).to(device).eval())
        self.cid = wrap(ref.cid2.DisentanglementId().to(device).eval())
        self.maar = wrap(reference.AttrBlock(ref.cbam.CBAM).to(device).eval())
        self.kria = wrap(reference.KRIA(ref.stylegan.EqualLinear).to(device).eval())
        self.decoder = wrap(reference.build_generator(ref).to(device).eval())
        self.key_generator = reference.build_generator(ref).to(device).eval()  # the base g_ema
        self.keys: dict[int, torch.Tensor] = {}

    def key(self, batch: int) -> torch.Tensor:
        """One key per image (B, 14, 512), drawn once per batch size, outside the timing."""
        if batch not in self.keys:
            with reference.autocast(self.device, self.precision):
                (self.keys[batch],) = reference.draw_keys(self.key_generator, 1, batch, self.device)
        return self.keys[batch]

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, index: int) -> torch.Tensor:
        key = self.key(images.shape[0])
        with reference.autocast(self.device, self.precision):
            codes, attribute_code, c3, c2, c1 = self.cid(images, self.e4e, self.device)
            maps = self.maar(c3, c2, c1)
            latents = attribute_code + self.kria(torch.cat([codes - attribute_code, key], -1))
            return reference.decode(self.decoder, latents, maps)


def run_mode(ref, opts, mode: str, args, device: torch.device) -> list[str]:
    """One table row per batch for one mode, or one row with the error that stopped it."""
    precision, _, compiled = mode.partition("+")
    reference.set_precision(precision)
    try:
        with contextlib.redirect_stdout(
            sys.stderr
        ):  # their constructors print; keep the table whole
            anonymization = Anonymization(ref, opts, device, precision, bool(compiled))
    except Exception as err:  # noqa: BLE001 - a failing mode is a result of the baseline, not a crash
        return [reference.failure_row(f"all | {mode}", err)]
    rows = []
    for batch in args.batches:
        try:
            r = reference.measure(anonymization, batch, args.steps, device)
        except Exception as err:  # noqa: BLE001
            rows.append(reference.failure_row(f"{batch} | {mode}", err))
            continue
        rows.append(
            f"| {batch} | {mode} | {r['first_s']:.3g} | {r['call_s']:.4g} | {batch / r['call_s']:.4g} | "
            f"{device_info.format_bytes(r['peak_bytes'])} |"
        )
    if args.find_max_batch:
        largest = reference.largest_batch(anonymization, args.batches[-1], args.max_batch, device)
        rows.append(
            f"| max | {mode} | largest batch that fits (up to {args.max_batch}): {largest} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    reference.add_common_arguments(parser, max_batch=4096)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ref = reference.open_reference(args.reference_repo, device)
    if ref is None:
        return 1
    print(
        f"Authors' DBAF anonymization (their test.py, one key per image), {reference.SIZE}px, random weights; "
        f"{reference.describe_runtime(ref, device)}; {args.steps} calls, one sync\n"
    )
    print("| batch | mode | first s | batch s | images/s | peak GiB |")
    print("|---" * 6 + "|")
    with tempfile.TemporaryDirectory() as tmp:
        opts = reference.write_random_files(ref, Path(tmp), device)
        for mode in args.modes:
            for row in run_mode(ref, opts, mode, args, device):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
