"""Baseline: the authors' PyTorch training iteration (D step + G step), timed on the same
device, batch and semantics as `benchmarks.speed.train_step`.

    python -m benchmarks.baselines.reference_pytorch --reference-repo /path/to/DBAF [--stages 1 2] [--batch 8]
        [--modes fp32 tf32 bf16 tf32+compile] [--steps 20] [--find-max-batch [--max-batch 1024]]

``--reference-repo`` is a checkout of github.com/mrzhu-cool/DBAF with its requirements
installed (their modules import cv2, matplotlib, einops and torchvision). Their networks
are built from their own classes at the published 256 px config (the only size their
scripts run) with random weights: the constructors that read checkpoint files (pSp's
e4e, the ArcFace loss, the parser loss, LPIPS through torch.hub) read random files of
the right layout written to a temporary directory, so nothing is downloaded. The
StyleGAN2 generator and discriminator are rosinality's with its compiled CUDA ops
(fused bias-activation, upfirdn2d), which their code builds with
``torch.utils.cpp_extension`` at import; on a GPU they are required (their code has no
GPU fallback: the script stops with one error line if they did not build); on the CPU
their code takes its native PyTorch path.

One iteration is what their training scripts do per batch (train_disentanglement_stage.py
for stage 1, train_anonymization_stage.py for stage 2), minus logging and file writes:
the D step (generator side forward without gradients to the generator, D on real and
fake, logistic loss, R1 with gamma 10 on every step, Ranger step) then the G step (the
generator side forward again, every loss term, backward, Ranger step over CID, MAAR,
the generator and, in stage 2, KRIA); stage 2 draws its four keys through the frozen
base generator's mapping network each iteration, as theirs does. Inputs are a fixed
random batch already on the device; stage 1 pairs each image with itself every third
iteration and with its neighbour otherwise, as theirs does.

Modes (``--modes``; each a precision, optionally ``+compile``):
- fp32: float32 with TF32 off for matmuls and cuDNN convolutions;
- tf32: float32 with TF32 allowed (``torch.backends.{cuda.matmul,cudnn}.allow_tf32``);
- bf16: forward passes and losses under ``torch.autocast(bfloat16)``, TF32 allowed for
  what autocast keeps in float32;
- +compile: every network wrapped in ``torch.compile`` except the discriminator, whose
  R1 penalty needs a double backward that compiled graphs do not support.
A mode that fails (e.g. their CUDA kernels have no bfloat16 version) gets a row with
the error's first line instead of figures.

Columns:
- first s: the first iteration (cuDNN autotuning, ``torch.compile``'s compilation);
- iteration s: after a second warm-up iteration, ``--steps`` iterations run back to
  back with one ``torch.cuda.synchronize()`` at the end, wall time / steps;
- images/s: batch / iteration s (compare with `benchmarks.speed.train_step` at the same batch,
  with ``--two-pass`` for the same generator-side work per iteration);
- peak GiB: ``torch.cuda.max_memory_allocated()`` over that mode's iterations; n/a on CPU;
- max batch (``--find-max-batch``): the largest batch whose iteration runs without
  CUDA running out of memory, by doubling from ``--batch`` then bisecting.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import sys
import tempfile
import types
from argparse import Namespace
from pathlib import Path
from urllib.parse import urlparse

import torch
import torch.nn.functional as F

from benchmarks.common import device_info, timing

SIZE = 256  # their scripts' stylegan_size: CID's positional embedding and MAAR's widths assume it
N_LATENT = 14
LOSS_WEIGHTS = {  # their training scripts' defaults
    1: dict(id=0.5, rec=3.5, lpips=1.0, latent=0.1, parse=0.1, contrastive=0.1, cos_margin=0.0),
    2: dict(rec=0.05, lpips=1.0, latent=0.1, parse=0.1, cos_margin=0.1),
}
R1_GAMMA = 10.0
SAME_THRESHOLD, DIFFERENT_THRESHOLD, CYCLE = 0.0, 0.5, 3  # stage 1's contrastive term and pairing
LEARNING_RATE = 1e-4


class ReferenceUnavailable(Exception):
    """The authors' code cannot run here; the message says why."""


def import_reference(repo: Path, device: torch.device) -> Namespace:
    """The authors' modules this baseline uses, imported from their checkout."""
    if not (repo / "models" / "stylegan2" / "model_revise_c3.py").is_file():
        raise ReferenceUnavailable(
            f"{repo} is not a checkout of github.com/mrzhu-cool/DBAF (no models/stylegan2/model_revise_c3.py)"
        )
    if device.type == "cpu":
        # A CUDA build of torchvision on a CPU-only torch fails importing its compiled
        # ops' fake-tensor registrations; the pure-Python models LPIPS needs work without.
        sys.modules.setdefault(
            "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
        )
    sys.path.insert(0, str(repo))
    names = {
        "stylegan": "models.stylegan2.model_revise_c3",
        "psp": "models.psp",
        "irse": "models.encoders.model_irse",
        "cbam": "models.cbam",
        "cid1": "models.disentanglement_id_step1_1",
        "cid2": "models.disentanglement_id_step1",
        "ranger": "models.ranger",
        "gradfix": "models.stylegan2.op.conv2d_gradfix",
        "fused_act": "models.stylegan2.op.fused_act",
        "upfirdn2d": "models.stylegan2.op.upfirdn2d",
        "id_loss": "losses.id_loss_new",
        "lpips": "losses.lpips.lpips",
        "bg_loss": "losses.parse_related_loss.bg_loss",
        "unet": "losses.parse_related_loss.unet",
    }
    try:
        ref = Namespace(**{key: importlib.import_module(name) for key, name in names.items()})
    except ImportError as err:
        raise ReferenceUnavailable(
            f"cannot import the authors' code from {repo}: {err} (install their requirements.txt)"
        ) from None
    compiled_ops = hasattr(ref.fused_act, "fused") and not ref.upfirdn2d.use_fallback
    if device.type == "cuda" and not compiled_ops:
        raise ReferenceUnavailable(
            "rosinality's CUDA ops (fused_bias_act, upfirdn2d) did not build, and the authors' code has no GPU "
            "fallback: install ninja and a CUDA toolkit matching torch.version.cuda, then clear ~/.cache/torch_extensions"
        )
    ref.compiled_ops = compiled_ops
    return ref


def add_common_arguments(parser: argparse.ArgumentParser, max_batch: int) -> None:
    """The flags both baselines take: the authors' checkout, the modes, the timed calls
    and the largest-batch search (up to ``max_batch`` by default)."""
    parser.add_argument(
        "--reference-repo", type=Path, required=True, help="checkout of github.com/mrzhu-cool/DBAF"
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["fp32", "tf32", "bf16", "tf32+compile"],
        choices=[p + c for p in ("fp32", "tf32", "bf16") for c in ("", "+compile")],
    )
    parser.add_argument("--steps", type=int, default=20, help="timed calls after two warm-up calls")
    device_info.add_largest_batch_arguments(parser, max_batch)


def open_reference(repo: Path, device: torch.device) -> Namespace | None:
    """`import_reference`, or None after one ``error:`` line on stderr saying why not."""
    try:
        return import_reference(repo.resolve(), device)
    except ReferenceUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def describe_runtime(ref: Namespace, device: torch.device) -> str:
    """torch's version, the device, and whether rosinality's compiled ops run."""
    name = (
        torch.cuda.get_device_name()
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    ops = (
        "compiled CUDA ops"
        if ref.compiled_ops
        else "native PyTorch ops (no compiled CUDA ops on the CPU)"
    )
    return f"torch {torch.__version__} on {name}, {ops}"


def write_random_files(ref: Namespace, folder: Path, device: torch.device) -> Namespace:
    """Random-weight files where their constructors read checkpoints, and the options
    object (their ``args``) that points at them. torch.hub is redirected to ``folder``."""
    torch.manual_seed(0)
    e4e = folder / "e4e.pt"
    # pSp loads the encoder and its decoder with strict=False: without keys they keep
    # their own random initialisation.
    e4e_opts = {
        "encoder_type": "Encoder4Editing",
        "stylegan_size": SIZE,
        "start_from_latent_avg": True,
        "device": str(device),
    }
    torch.save({"state_dict": {}, "latent_avg": torch.randn(N_LATENT, 512), "opts": e4e_opts}, e4e)
    arcface = folder / "arcface.pth"
    torch.save(
        ref.irse.Backbone(input_size=112, num_layers=50, drop_ratio=0.6, mode="ir_se").state_dict(),
        arcface,
    )
    parser = folder / "parsenet.pth"
    torch.save(ref.unet.unet().state_dict(), parser)
    # LPIPS fetches torchvision's AlexNet and its linear layers through torch.hub, which
    # loads a file already in its cache instead of downloading it.
    import torchvision

    hub = folder / "hub"
    (hub / "checkpoints").mkdir(parents=True)
    torch.hub.set_dir(str(hub))
    alexnet_url = torchvision.models.AlexNet_Weights.IMAGENET1K_V1.url
    torch.save(
        torchvision.models.alexnet().state_dict(),
        hub / "checkpoints" / Path(urlparse(alexnet_url).path).name,
    )
    channels = (64, 192, 384, 256, 256)  # AlexNet's five compared layers
    torch.save(
        {f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1) / c for k, c in enumerate(channels)},
        hub / "checkpoints" / "alex.pth",
    )
    return Namespace(
        device=str(device),
        e4e_path=str(e4e),
        stylegan_path=str(folder / "unused.pt"),
        id_encoder_path=str(arcface),
        parsenet_weights=str(parser),
        stylegan_size=SIZE,
    )


class AttrBlock(torch.nn.Module):
    """MAAR as their training scripts define it: per e4e feature map (c3, c2, c1), a 1x1
    convolution to 512 channels, then their CBAM."""

    def __init__(self, cbam):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(c, 512, 1) for c in (512, 256, 128))
        self.gates = torch.nn.ModuleList(cbam(gate_channels=512) for _ in range(3))

    def forward(self, c3, c2, c1):
        return tuple(gate(conv(x)) for conv, gate, x in zip(self.convs, self.gates, (c3, c2, c1)))


class KRIA(torch.nn.Module):
    """KRIA (their AnonymizationNet): one MLP per latent group (4/4/6), each 1024->2048->
    1024->512, four 512->512 (their EqualLinear, lr_mul 0.01, fused leaky ReLU), then a
    plain Linear 512->512, applied to every latent of (B, 14, 1024)."""

    def __init__(self, equal_linear):
        super().__init__()

        def mlp():
            widths = (1024, 2048, 1024, 512, 512, 512, 512, 512)
            layers = [
                equal_linear(a, b, lr_mul=0.01, activation="fused_lrelu")
                for a, b in zip(widths, widths[1:])
            ]
            return torch.nn.Sequential(*layers, torch.nn.Linear(512, 512))

        self.mappers = torch.nn.ModuleList(mlp() for _ in range(3))
        self.group_of_latent = [0] * 4 + [1] * 4 + [2] * (N_LATENT - 8)

    def forward(self, codes):
        return torch.stack(
            [self.mappers[g](codes[:, i]) for i, g in enumerate(self.group_of_latent)], dim=1
        )


def set_trainable(modules, flag: bool) -> None:
    for module in modules:
        for p in module.parameters():
            p.requires_grad = flag


def d_logistic(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def r1_penalty(ref, real_pred, real_images):
    with ref.gradfix.no_weight_gradients():
        (grad,) = torch.autograd.grad(real_pred.sum(), real_images, create_graph=True)
    return grad.pow(2).reshape(grad.shape[0], -1).sum(1).mean()


def g_nonsaturating(fake_pred):
    return F.softplus(-fake_pred).mean()


def compiler(compiled: bool):
    """``torch.compile`` for a ``+compile`` mode, else the identity."""
    return torch.compile if compiled else (lambda module: module)


def autocast(device: torch.device, precision: str):
    """bfloat16 autocast for the bf16 mode, else nothing."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def build_e4e(ref: Namespace, opts: Namespace) -> torch.nn.Module:
    """pSp's e4e as their scripts load it. It holds its own StyleGAN2 decoder, which
    pSp's forward runs on every call (their CID calls that forward and keeps only the
    codes and feature maps), so it counts in their time as published."""
    e4e_opts = Namespace(
        **torch.load(opts.e4e_path, map_location="cpu")["opts"],
        checkpoint_path=opts.e4e_path,
        stylegan_weights=opts.stylegan_path,
    )
    return ref.psp.pSp(e4e_opts)


def build_generator(ref: Namespace) -> torch.nn.Module:
    """Their StyleGAN2 generator (rosinality's, with MAAR's noise inputs) at 256 px."""
    return ref.stylegan.Generator(SIZE, 512, 8)


def decode(decoder: torch.nn.Module, latents: torch.Tensor, maps) -> torch.Tensor:
    """W+ latents (B, 14, 512) and MAAR's maps -> images, as their scripts call the decoder."""
    return decoder(
        [latents], input_is_w=True, randomize_noise=False, truncation=1, attr_noise=list(maps)
    )[0]


@torch.no_grad()
def draw_keys(
    key_generator: torch.nn.Module, count: int, batch: int, device: torch.device
) -> list[torch.Tensor]:
    """``count`` random keys (B, 14, 512) as their scripts draw them: per image and latent
    group (4, 4, 6 latents), z ~ N(0, I) through the frozen base generator's mapping."""
    z = torch.randn(
        count * 3 * batch, 512, device=device
    )  # their mapping network takes (N, 512) only
    ws = key_generator.style(z).reshape(count, 3, batch, 512)
    return [
        torch.cat([w[g, :, None].expand(-1, n, -1) for g, n in enumerate((4, 4, 6))], 1) for w in ws
    ]


class Iteration:
    """One of their training iterations for a stage; ``precision`` and ``compiled`` as in
    the module doc. ``__call__(images, index)`` runs it and returns the G loss."""

    def __init__(
        self,
        ref: Namespace,
        opts: Namespace,
        stage: int,
        device: torch.device,
        precision: str,
        compiled: bool,
    ):
        self.ref, self.stage, self.device, self.precision = ref, stage, device, precision
        weights = LOSS_WEIGHTS[stage]
        self.w = Namespace(**weights)
        opts = Namespace(**vars(opts), id_cos_margin=weights["cos_margin"])
        wrap = compiler(compiled)
        self.id_encoder = wrap(ref.id_loss.IDLossExtractor(opts).to(device).eval())
        self.lpips = wrap(ref.lpips.LPIPS(opts, net_type="alex").to(device).eval())
        self.parse = wrap(ref.bg_loss.ParseLoss(opts).to(device).eval())
        self.e4e = wrap(build_e4e(ref, opts).to(device).eval())
        cid = ref.cid1.DisentanglementId() if stage == 1 else ref.cid2.DisentanglementId()
        self.cid = wrap(cid.to(device).train())
        self.maar = wrap(AttrBlock(ref.cbam.CBAM).to(device).train())
        self.decoder = wrap(build_generator(ref).to(device).train())
        self.discriminator = ref.stylegan.Discriminator(SIZE).to(device).train()
        set_trainable([self.id_encoder, self.lpips, self.parse, self.e4e], False)
        self.trained = [self.cid, self.maar, self.decoder]
        if stage == 2:
            self.key_generator = build_generator(ref).to(device).eval()  # the frozen base g_ema
            self.kria = wrap(KRIA(ref.stylegan.EqualLinear).to(device).train())
            set_trainable([self.key_generator], False)
            self.trained = [self.kria, *self.trained]
        self.g_optim = ref.ranger.Ranger(
            [{"params": m.parameters()} for m in self.trained], lr=LEARNING_RATE
        )
        self.d_optim = ref.ranger.Ranger(self.discriminator.parameters(), lr=LEARNING_RATE)

    def autocast(self):
        return autocast(self.device, self.precision)

    def decode(self, latents, maps):
        return decode(self.decoder, latents, maps)

    def __call__(self, images: torch.Tensor, index: int) -> torch.Tensor:
        return (self.stage1 if self.stage == 1 else self.stage2)(images, index)

    def d_step(self, real, make_fakes):
        """Their D step: the generator side runs with its parameters frozen (no graph to
        them), then D's logistic loss averaged over the fakes plus R1."""
        set_trainable(self.trained, False)
        set_trainable([self.discriminator], True)
        with self.autocast():
            fakes = make_fakes()
            real = real.detach().requires_grad_(True)
            real_pred = self.discriminator(real)
            d_loss = sum(d_logistic(real_pred, self.discriminator(fake)) for fake in fakes) / len(
                fakes
            )
            loss = d_loss + R1_GAMMA / 2 * r1_penalty(self.ref, real_pred, real)
        self.d_optim.zero_grad()
        loss.backward()
        self.d_optim.step()

    def g_step(self, loss_fn):
        set_trainable(self.trained, True)
        set_trainable([self.discriminator], False)
        with self.autocast():
            loss = loss_fn()
        self.g_optim.zero_grad()
        loss.backward()
        self.g_optim.step()
        return loss.detach()

    def stage1(self, id_images, index):
        same = index % CYCLE == 0
        if same:
            # Their D step sets requires_grad on the real images, here the very tensor their G
            # step reuses: its backward then also runs back through e4e and ArcFace to them.
            id_images = id_images.detach().requires_grad_(True)
        attr_images = id_images if same else torch.roll(id_images, 1, dims=0)

        def mix(id_images, attr_images):
            id_codes, id_attr, *_ = self.cid(id_images, self.e4e, self.device)
            _, attr_attr, c3, c2, c1 = self.cid(attr_images, self.e4e, self.device)
            latents = (id_codes - id_attr) + attr_attr
            return self.decode(latents, self.maar(c3, c2, c1)), latents

        self.d_step(
            attr_images, lambda: [mix(id_images.detach(), attr_images.detach())[0]]
        )  # before their requires_grad

        def g_loss():
            out, latents = mix(id_images, attr_images)
            w = self.w
            dists = self.id_encoder.calculate_contrastive_loss(attr_images, out)
            contrastive = (
                (dists - SAME_THRESHOLD if same else DIFFERENT_THRESHOLD - dists)
                .clamp(min=0.0)
                .mean()
            )
            id_loss = self.id_encoder(id_images, out)[0]
            return (
                w.id * id_loss
                + w.rec * F.smooth_l1_loss(attr_images, out)
                + w.lpips * self.lpips(attr_images, out)
                + w.latent * (latents**2).mean()
                + w.parse * self.parse(attr_images, out)
                + w.contrastive * contrastive
                + g_nonsaturating(self.discriminator(out))
            )

        return self.g_step(g_loss)

    def stage2(self, images, index):
        batch = images.shape[0]
        with self.autocast():
            p1, p2, r1, r2 = draw_keys(self.key_generator, 4, batch, self.device)

        def outputs():
            codes, attr, c3, c2, c1 = self.cid(images, self.e4e, self.device)
            maps = self.maar(c3, c2, c1)
            identity = codes - attr
            enc1, enc2 = (
                self.kria(torch.cat([identity, p1], -1)),
                self.kria(torch.cat([identity, p2], -1)),
            )
            decs = [self.kria(torch.cat([enc1, key], -1)) for key in (r1, r2, p1)]
            latents = [
                attr + x for x in (enc1, enc2, *decs)
            ]  # anonymized 1, 2; wrong key 1, 2; recovered
            return [self.decode(w, maps) for w in latents], latents

        self.d_step(images, lambda: outputs()[0])

        def g_loss():
            (anon1, anon2, wrong1, wrong2, recovered), latents = outputs()
            similarity = lambda a, b: self.id_encoder(a, b)[1]  # noqa: E731 - their clamped cosine
            id_loss = (
                similarity(images, anon1) + similarity(images, anon2) + similarity(anon1, anon2)
            ) / 3
            pairs = [
                (recovered, wrong1),
                (recovered, wrong2),
                (wrong1, wrong2),
                (images, wrong1),
                (images, wrong2),
            ]
            id_loss = (
                id_loss
                + sum(similarity(a, b) for a, b in pairs) / 5
                + self.id_encoder(images, recovered)[0]
            )
            outs = [anon1, anon2, recovered, wrong1, wrong2]
            w = self.w
            return (
                id_loss
                + w.rec * sum(F.smooth_l1_loss(images, o) for o in outs)
                + w.lpips * sum(self.lpips(images, o) for o in outs)
                + w.parse * sum(self.parse(images, o) for o in outs)
                + w.latent * sum((x**2).mean() for x in latents) / 5
                + sum(g_nonsaturating(self.discriminator(o)) for o in outs) / 5
            )

        return self.g_step(g_loss)


def set_precision(precision: str) -> None:
    allow_tf32 = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32


def measure(run, batch: int, steps: int, device: torch.device) -> dict:
    """Times ``run(images, index) -> tensor`` (a training iteration, an anonymization) on
    a fixed random batch (B, 3, 256, 256) in [-1, 1]: the first call alone, then, after a
    second warm-up call, ``steps`` calls back to back with one sync at the end."""
    images = torch.rand(batch, 3, SIZE, SIZE, device=device) * 2 - 1
    sync = (lambda _: torch.cuda.synchronize()) if device.type == "cuda" else (lambda _: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    counter = itertools.count()

    def call(_):
        return run(images, next(counter))

    first, result = timing.steady_state_seconds(call, None, 1, sync)
    call(None)
    sync(None)
    seconds, result = timing.steady_state_seconds(call, None, steps, sync)
    if not torch.isfinite(result).all():
        raise FloatingPointError(f"non-finite result at batch {batch}")
    return {
        "first_s": first,
        "call_s": seconds,
        "peak_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
    }


def largest_batch(run, start: int, limit: int, device: torch.device, modules=()) -> str:
    """The largest batch for which ``run`` (as in `measure`) does not run out of device
    memory, by doubling from ``start`` then bisecting up to ``limit``; ``modules``'
    gradients are dropped after each try."""

    def fits(batch):
        try:
            measure(run, batch, 1, device)
        finally:
            for module in modules:
                module.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()

    largest = device_info.largest_batch(fits, start, limit)
    return str(largest) if largest is not None else "none"


def failure_row(cells: str, err: Exception) -> str:
    """A table row for a mode that failed: a result of the baseline, not a crash."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"| {cells} | failed: {type(err).__name__}: {message} |"


def run_mode(ref, opts, stage: int, mode: str, args, device: torch.device) -> str:
    """One table row: the stage in one mode, or the error that stopped it."""
    precision, _, compiled = mode.partition("+")
    set_precision(precision)
    try:
        with contextlib.redirect_stdout(
            sys.stderr
        ):  # their constructors print; keep the table whole
            iteration = Iteration(ref, opts, stage, device, precision, bool(compiled))
        r = measure(iteration, args.batch, args.steps, device)
    except Exception as err:  # noqa: BLE001 - a failing mode is a result of the baseline, not a crash
        return failure_row(f"{stage} | {mode}", err)
    row = (
        f"| {stage} | {mode} | {r['first_s']:.3g} | {r['call_s']:.4g} | {args.batch / r['call_s']:.4g} | "
        f"{device_info.format_bytes(r['peak_bytes'])} |"
    )
    if args.find_max_batch:
        row += f" {largest_batch(iteration, args.batch, args.max_batch, device, (*iteration.trained, iteration.discriminator))} |"
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    parser.add_argument("--batch", type=int, default=8)
    add_common_arguments(parser, max_batch=1024)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ref = open_reference(args.reference_repo, device)
    if ref is None:
        return 1
    print(
        f"Authors' DBAF training iteration (D step + G step), {SIZE}px, batch {args.batch}, random weights; "
        f"{describe_runtime(ref, device)}; {args.steps} iterations, one sync\n"
    )
    max_column = " max batch |" if args.find_max_batch else ""
    print(f"| stage | mode | first s | iteration s | images/s | peak GiB |{max_column}")
    print("|---" * (6 + bool(args.find_max_batch)) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        opts = write_random_files(ref, Path(tmp), device)
        for stage in args.stages:
            for mode in args.modes:
                print(run_mode(ref, opts, stage, mode, args, device), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
