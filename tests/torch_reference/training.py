"""One training step of each DBAF stage as the reference's scripts run it, in PyTorch (tests only).

Written from the facts of the authors' train_disentanglement_stage.py (stage 1) and
train_anonymization_stage.py (stage 2), their loss classes (IDLossExtractor, ParseLoss,
pSp's LPIPS) and their Ranger (models/ranger.py, 20.4.11), on the reference modules of
this package. A step, in the scripts' order:

1. D update. The generator side (e4e -> CID -> MAAR -> generator, and KRIA in stage 2)
   runs with its parameters frozen; D sees the real images (stage 1: the attribute
   images; stage 2: the input images, made differentiable for R1) and the fakes;
   loss = logistic + r1/2 * E||dD(real)/dreal||^2 (stage 2: the logistic term averaged
   over the five outputs); one Ranger step of D.
2. Generator-side update. The same forward pass runs again (MAAR's BatchNorm updates its
   running statistics a second time), D is frozen (already updated), every weighted
   loss term below is summed, and one Ranger step updates CID, MAAR, the generator (and
   KRIA). Parameters that get no gradient (the generator's unused mapping network) are
   skipped by Ranger, as torch leaves their ``grad`` at None.

MAAR's maps replace the generator's noise inputs of their resolutions: inputs 3-8 for
the reference's 256 px e4e maps (16, 32, 64 px), the same rule at reduced sizes.
Metric names and values are those of `dbaf_jax.train.steps` (loss terms already
weighted, as the scripts log them).
"""

import dataclasses
import math

import torch
from torch import autograd, nn
from torch.nn import functional as F

from tests.torch_reference.arcface import Backbone, extract_feats
from tests.torch_reference.dbaf import AnonymizationNet, AttrBlock, DisentanglementId
from tests.torch_reference.e4e import Encoder4Editing
from tests.torch_reference.parsers import UNet
from tests.torch_reference.stylegan2 import Discriminator, Generator

# train_disentanglement_stage.py's argparse defaults.
STAGE1_ARGS = dict(
    lambdaid=0.5,
    lambdarec=3.5,
    lambdalpips=1.0,
    lambdalatent=0.1,
    lambdaparse=0.1,
    lambdacontrastive=0.1,
    id_cos_margin=0.0,
    r1=10.0,
    cycle_num=3,
    same_thres=0.0,
    not_same_thres=0.5,
)
# train_anonymization_stage.py's (its --lambdaid is parsed but never used).
STAGE2_ARGS = dict(
    lambdarec=0.05, lambdalpips=1.0, lambdalatent=0.1, lambdaparse=0.1, id_cos_margin=0.1, r1=10.0
)

PARSE_CLASSES = [2, 4, 5, 10, 11, 12]  # ParseLoss.select_list


@dataclasses.dataclass
class Critics:
    """The frozen loss networks, in eval mode: ArcFace (IDLossExtractor), pSp's LPIPS, the U-Net parser."""

    arcface: Backbone
    lpips: nn.Module  # lpips.LPIPS(net='alex'): per-pair distances (B, 1, 1, 1)
    parser: UNet

    def embed(self, images):
        return extract_feats(self.arcface, images)[-1]

    def lpips_loss(self, a, b):
        """pSp's LPIPS module: the per-pair distances summed and divided by the batch size."""
        return self.lpips(a, b).sum() / a.shape[0]

    def parse_loss(self, a, b):
        """ParseLoss: MSE of the parser logits with all channels but PARSE_CLASSES zeroed."""

        def predict(x):
            logits = self.parser(x)
            mask = torch.zeros_like(logits)
            mask[:, PARSE_CLASSES] = 1
            return mask * logits

        return F.mse_loss(predict(a), predict(b))


def cosine_losses(emb_a, emb_b, margin):
    """IDLossExtractor.calculate_loss's (id_loss, rev_id_loss) from two embeddings."""
    cos = torch.cosine_similarity(emb_a, emb_b).clamp(min=margin)
    return (1 - cos).mean(), cos.mean()


@dataclasses.dataclass
class GeneratorSide:
    """The reference's trained networks and the frozen e4e (with its latent_avg)."""

    encoder: Encoder4Editing
    latent_avg: torch.Tensor
    cid: DisentanglementId
    maar: AttrBlock
    decoder: Generator
    discriminator: Discriminator
    kria: AnonymizationNet | None = None  # stage 2
    base_generator: Generator | None = None  # stage 2: its mapping network makes the keys

    def trained(self) -> dict[str, nn.Module]:
        """Network name (as in a dbaf_jax run) -> module that the generator-side Ranger updates."""
        named = {"cid": self.cid, "maar": self.maar, "decoder": self.decoder, "kria": self.kria}
        return {name: module for name, module in named.items() if module is not None}

    def disentangle(self, images):
        """w_disentanglement: -> (codes C, attribute code A, e4e's maps c3, c2, c1 for attr_block)."""
        codes, c3, c2, c1 = self.encoder(images)
        codes = codes + self.latent_avg
        return codes, self.cid(codes), (c3, c2, c1)

    def synthesize(self, latents, maps):
        by_resolution = {m.shape[-1]: m for m in maps}
        noise = {}
        for i in range(self.decoder.num_layers):
            resolution = 2 ** ((i + 5) // 2)
            if resolution in by_resolution:
                noise[i] = by_resolution[resolution]
        return self.decoder(latents, noise=noise)

    def key(self, z, groups):
        """sample_w: z (B, 3, D), one per latent group -> key (B, n_latent, D), w_g repeated groups[g] times."""
        w = [self.base_generator.style(z[:, g]) for g in range(z.shape[1])]
        return torch.cat([w[g][:, None].repeat(1, n, 1) for g, n in enumerate(groups)], dim=1)

    def transform(self, identity, key):
        return self.kria(torch.cat([identity, key], dim=-1))


def set_requires_grad(modules, flag: bool) -> None:
    for module in modules:
        for p in module.parameters():
            p.requires_grad = flag


def maar_running_stats(maar: AttrBlock) -> dict[str, torch.Tensor]:
    return {
        name: b.clone()
        for name, b in maar.named_buffers()
        if name.endswith(("running_mean", "running_var"))
    }


def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


def d_r1_loss(real_pred, real_images):
    (grad,) = autograd.grad(real_pred.sum(), real_images, create_graph=True)
    return grad.pow(2).reshape(grad.shape[0], -1).sum(1).mean()


@dataclasses.dataclass
class StepResult:
    metrics: dict[str, float]
    # MAAR's running statistics after the step's first forward pass (one update); the
    # module itself ends the step with two updates, one per forward pass.
    maar_stats_one_update: dict[str, torch.Tensor]


def discriminator_step(
    nets: GeneratorSide, d_opt, real, fakes, r1_gamma
) -> dict[str, torch.Tensor]:
    """D_total = mean over fakes of d_logistic(D(real), D(fake)) + r1/2 * R1(real); one Ranger step."""
    real = real.detach().clone().requires_grad_(True)
    real_pred = nets.discriminator(real)
    d_loss = sum(d_logistic_loss(real_pred, nets.discriminator(f)) for f in fakes) / len(fakes)
    r1 = r1_gamma / 2 * d_r1_loss(real_pred, real)
    total = d_loss + r1
    d_opt.zero_grad()
    total.backward()
    d_opt.step()
    return {"d_total": total, "d_logistic": d_loss, "r1": r1}


def cycle_images(images):
    """cycle_images_to_create_different_order: image b takes image b-1's place, 0 the last's."""
    return torch.cat([images[-1:], images[:-1]])


def stage1_forward(nets: GeneratorSide, id_images, attr_images):
    """-> (mixed images, w_new = (C_id - A_id) + A_attr), decoded with the attribute images' maps."""
    id_codes, id_attribute, _ = nets.disentangle(id_images)
    _, attr_attribute, features = nets.disentangle(attr_images)
    w_new = (id_codes - id_attribute) + attr_attribute
    return nets.synthesize(w_new, nets.maar(*features)), w_new


def stage1_step(
    nets: GeneratorSide, critics: Critics, g_opt, d_opt, id_images, idx: int, args=STAGE1_ARGS
) -> StepResult:
    """Batch ``idx`` of an epoch: every cycle_num-th batch pairs each image with itself."""
    same = idx % args["cycle_num"] == 0
    attr_images = id_images if same else cycle_images(id_images)
    trained = list(nets.trained().values())

    set_requires_grad(trained, False)
    set_requires_grad([nets.discriminator], True)
    out_images, _ = stage1_forward(nets, id_images, attr_images)
    one_update = maar_running_stats(nets.maar)
    metrics = discriminator_step(nets, d_opt, attr_images, [out_images], args["r1"])

    set_requires_grad(trained, True)
    set_requires_grad([nets.discriminator], False)
    out_images, w_new = stage1_forward(nets, id_images, attr_images)
    id_embedding, attr_embedding, out_embedding = (
        critics.embed(x) for x in (id_images, attr_images, out_images)
    )
    dists = (1 - torch.cosine_similarity(attr_embedding, out_embedding)).clamp(
        min=args["id_cos_margin"]
    )
    if same:
        contrastive = torch.clamp(dists - args["same_thres"], min=0.0).mean()
    else:
        contrastive = torch.clamp(args["not_same_thres"] - dists, min=0.0).mean()
    terms = {
        "id": args["lambdaid"]
        * cosine_losses(id_embedding, out_embedding, args["id_cos_margin"])[0],
        "contrastive": args["lambdacontrastive"] * contrastive,
        "rec": args["lambdarec"] * F.smooth_l1_loss(attr_images, out_images),
        "lpips": args["lambdalpips"] * critics.lpips_loss(attr_images, out_images),
        "parse": args["lambdaparse"] * critics.parse_loss(attr_images, out_images),
        "reg": args["lambdalatent"] * (w_new**2).mean(),
        "adv": g_nonsaturating_loss(nets.discriminator(out_images)),
    }
    return generator_update(g_opt, terms, metrics, one_update)


def generator_update(g_opt, terms: dict, metrics: dict, one_update) -> StepResult:
    """Both scripts' generator update on the sum of the weighted ``terms``, then the
    step's result: the D step's ``metrics``, the terms and that sum."""
    g_total = sum(terms.values())
    g_opt.zero_grad()
    g_total.backward()
    g_opt.step()
    metrics.update(terms, g_total=g_total)
    return StepResult({k: float(v) for k, v in metrics.items()}, one_update)


def stage2_forward(nets: GeneratorSide, images, keys):
    """keys (pwd1, pwd2, rand1, rand2), each (B, n_latent, D) -> (five outputs, their latents).

    Outputs in the script's ``outputs`` order: anonymized with pwd1, with pwd2, recovered
    with pwd1, recovered with rand1, with rand2 (recoveries from the pwd1 anonymization,
    with the original image's A and maps). Latents in its latent_loss order.
    """
    pwd1, pwd2, rand1, rand2 = keys
    codes, attribute, features = nets.disentangle(images)
    maps = nets.maar(*features)
    identity = codes - attribute
    enc1, enc2 = nets.transform(identity, pwd1), nets.transform(identity, pwd2)
    dec_rand1, dec_rand2, dec = (nets.transform(enc1, k) for k in (rand1, rand2, pwd1))
    latents = [
        enc1 + attribute,
        enc2 + attribute,
        dec_rand1 + attribute,
        dec_rand2 + attribute,
        dec + attribute,
    ]
    anony1, anony2, recover1, recover2, recover = (nets.synthesize(w, maps) for w in latents)
    return [anony1, anony2, recover, recover1, recover2], latents


def stage2_step(
    nets: GeneratorSide, critics: Critics, g_opt, d_opt, images, z, groups, args=STAGE2_ARGS
) -> StepResult:
    """``z`` (4, B, 3, D): the latents of pwd1, pwd2, rand1, rand2, through the base mapping."""
    with torch.no_grad():
        keys = [nets.key(zk, groups) for zk in z]
    trained = list(nets.trained().values())

    set_requires_grad(trained, False)
    set_requires_grad([nets.discriminator], True)
    outputs, _ = stage2_forward(nets, images, keys)
    one_update = maar_running_stats(nets.maar)
    metrics = discriminator_step(nets, d_opt, images, outputs, args["r1"])

    set_requires_grad(trained, True)
    set_requires_grad([nets.discriminator], False)
    outputs, latents = stage2_forward(nets, images, keys)
    anony1, anony2, recover, recover1, recover2 = outputs
    ori, a1, a2, rec, e1, e2 = (
        critics.embed(x) for x in (images, anony1, anony2, recover, recover1, recover2)
    )
    rev = lambda a, b: cosine_losses(a, b, args["id_cos_margin"])[1]  # noqa: E731
    id_loss = (rev(ori, a1) + rev(ori, a2) + rev(a1, a2)) / 3
    id_loss = (
        id_loss + (rev(rec, e1) + rev(rec, e2) + rev(e1, e2) + rev(ori, e1) + rev(ori, e2)) / 5
    )
    id_loss = id_loss + cosine_losses(ori, rec, args["id_cos_margin"])[0]
    terms = {
        "id": id_loss,
        "rec": args["lambdarec"] * sum(F.smooth_l1_loss(images, out) for out in outputs),
        "lpips": args["lambdalpips"] * sum(critics.lpips_loss(images, out) for out in outputs),
        "parse": args["lambdaparse"] * sum(critics.parse_loss(images, out) for out in outputs),
        "reg": args["lambdalatent"] * sum((w**2).mean() for w in latents) / len(latents),
        "adv": sum(g_nonsaturating_loss(nets.discriminator(out)) for out in outputs) / len(outputs),
    }
    return generator_update(g_opt, terms, metrics, one_update)


class Ranger(torch.optim.Optimizer):
    """Ranger 20.4.11 as the reference builds it (``Ranger(params, lr)``): RAdam with
    betas (0.95, 0.999), eps 1e-5 added to sqrt(v), the N_sma > 5 rectification rule,
    gradient centralisation over every dim but the first of tensors with more than one
    dim, and Lookahead (k=6, alpha=0.5) per parameter. Parameters without a gradient are
    skipped (no state, no update)."""

    def __init__(
        self, params, lr, alpha=0.5, k=6, n_sma_threshold=5.0, betas=(0.95, 0.999), eps=1e-5
    ):
        super().__init__(
            params,
            dict(lr=lr, alpha=alpha, k=k, n_sma_threshold=n_sma_threshold, betas=betas, eps=eps),
        )

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.clone()
                if grad.dim() > 1:
                    grad -= grad.mean(dim=tuple(range(1, grad.dim())), keepdim=True)
                state = self.state[p]
                if not state:
                    state.update(
                        step=0,
                        exp_avg=torch.zeros_like(p),
                        exp_avg_sq=torch.zeros_like(p),
                        slow=p.clone(),
                    )
                state["step"] += 1
                t = state["step"]
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                beta2_t = beta2**t
                n_sma_max = 2 / (1 - beta2) - 1
                n_sma = n_sma_max - 2 * t * beta2_t / (1 - beta2_t)
                if n_sma > group["n_sma_threshold"]:
                    ratio = (
                        (n_sma - 4)
                        / (n_sma_max - 4)
                        * (n_sma - 2)
                        / n_sma
                        * n_sma_max
                        / (n_sma_max - 2)
                    )
                    step_size = math.sqrt((1 - beta2_t) * ratio) / (1 - beta1**t)
                    denom = state["exp_avg_sq"].sqrt().add_(group["eps"])
                    p.addcdiv_(state["exp_avg"], denom, value=-step_size * group["lr"])
                else:
                    p.add_(state["exp_avg"], alpha=-group["lr"] / (1 - beta1**t))
                if t % group["k"] == 0:
                    slow = state["slow"]
                    slow.add_(p - slow, alpha=group["alpha"])
                    p.copy_(slow)
