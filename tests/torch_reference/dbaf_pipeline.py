"""The reference's inference composition (its test.py), on the reference modules.

Per image, as the reference's test script runs with batch size 1:
- e4e: codes C (with latent_avg) and the body maps c3, c2, c1;
- CID on that image alone: attribute code A; identity code I = C - A;
- MAAR: three maps that replace the fine-tuned generator's noise inputs 3-4, 5-6, 7-8;
- key: three z through the ORIGINAL generator's mapping, repeated by the latent groups;
- anonymize: ``w = A + KRIA(cat([I, key]))``, decoded with the maps and the stored noise;
- latent recovery (as the reference trains it): ``A + KRIA(cat([KRIA(cat([I, key])), key]))``.

`reduced_reference` builds it at reduced width with random weights and
`save_reference_files` writes the files the reference and its dependencies write.
"""

from pathlib import Path

import torch
from torch import nn

from tests.parity import randomize_
from tests.torch_reference import e4e as torch_e4e
from tests.torch_reference.dbaf import AnonymizationNet, AttrBlock, DisentanglementId
from tests.torch_reference.irse import randomize_irse_
from tests.torch_reference.stylegan2 import Discriminator, Generator, reset_fixed_kernels_

# Generator noise inputs each MAAR map replaces (model_revise_c3's attr_noise).
NOISE_LAYERS = ((3, 4), (5, 6), (7, 8))


class ReferenceDBAF(nn.Module):
    def __init__(self, encoder, latent_avg, cid, maar, decoder, kria, base_generator, groups):
        super().__init__()
        self.encoder, self.cid, self.maar, self.decoder, self.kria = (
            encoder,
            cid,
            maar,
            decoder,
            kria,
        )
        self.base_generator = base_generator
        self.latent_avg = latent_avg
        self.groups = tuple(groups)

    def key(self, z):
        """z (n_groups, D) -> key (1, n_latent, D)."""
        w = self.base_generator.style(z)
        return torch.cat([w[g : g + 1].repeat(n, 1) for g, n in enumerate(self.groups)])[None]

    def encode(self, image):
        """One image (1, 3, H, W) -> (C, A, I, maps)."""
        codes, c3, c2, c1 = self.encoder(image)
        codes = codes + self.latent_avg
        attribute = self.cid(codes)
        return codes, attribute, codes - attribute, self.maar(c3, c2, c1)

    def synthesize(self, latents, maps):
        noise = {layer: m for m, layers in zip(maps, NOISE_LAYERS) for layer in layers}
        return self.decoder(latents, noise=noise)

    def anonymize(self, image, key):
        """-> (anonymized image, anonymized identity KRIA(I, key), A, I, maps)."""
        _, attribute, identity, maps = self.encode(image)
        anonymized_identity = self.kria(torch.cat([identity, key], dim=-1))
        return (
            self.synthesize(attribute + anonymized_identity, maps),
            anonymized_identity,
            attribute,
            identity,
            maps,
        )

    def recover_latent(self, anonymized_identity, attribute, maps, key):
        """-> (recovered image, its latents A + KRIA(cat([KRIA(I, key), key])))."""
        latents = attribute + self.kria(torch.cat([anonymized_identity, key], dim=-1))
        return self.synthesize(latents, maps), latents


# Reduced copy of the reference: e4e at width 1/4 on 256 px inputs (so c3, c2, c1 are
# 16, 32, 64 px as in the reference), a 64 px generator at width 1/16 (10 latents, so
# MAAR's maps replace noise inputs 3-8 exactly as at 256 px), style_dim 32.
SIZE, STYLE_DIM, N_MLP, GEN_WIDTH, ENC_WIDTH = 64, 32, 2, 1 / 16, 0.25
N_LATENT = 10
GROUPS = (4, 4, 2)  # convert.dbaf's default for 10 latents: 4, 4 and the rest
CID_SIZE = dict(depth=2, heads=2, dim_head=8, mlp_dim=48)
MAAR_CHANNELS = 32  # the generator's width at 16-64 px
ENCODER_MAP_CHANNELS = tuple(round(c * ENC_WIDTH) for c in (512, 256, 128))  # c3, c2, c1


def reduced_generator(seed: int) -> Generator:
    generator = reset_fixed_kernels_(
        randomize_(Generator(SIZE, STYLE_DIM, N_MLP, width_scale=GEN_WIDTH), seed=seed)
    )
    with (
        torch.no_grad()
    ):  # mapping weights are stored as N(0, 1) / lr_mul, so keys vary with z as in g_ema
        for layer in generator.style[1:]:
            layer.weight.mul_(100.0)
    return generator.eval()


def reduced_kria(
    seed: int, dim: int = STYLE_DIM, groups: tuple[int, ...] = GROUPS
) -> AnonymizationNet:
    kria = randomize_(AnonymizationNet(dim=dim, groups=groups), seed=seed)
    with (
        torch.no_grad()
    ):  # stored EqualLinear weights are N(0, 1) / lr_mul, as the reference draws them
        for name, p in kria.named_parameters():
            if name.endswith("weight") and not name.endswith(".7.weight"):
                p.mul_(100.0)
    return kria.eval()


def reduced_reference(seed: int = 0) -> ReferenceDBAF:
    """The reference's networks at the reduced widths above, random weights, eval mode."""
    encoder = randomize_irse_(torch_e4e.Encoder4Editing(SIZE, STYLE_DIM, ENC_WIDTH), seed=seed + 1)
    latent_avg = torch.randn(N_LATENT, STYLE_DIM, generator=torch.Generator().manual_seed(seed + 2))
    cid = DisentanglementId(dim=STYLE_DIM, n_latent=N_LATENT, groups=GROUPS, **CID_SIZE)
    return ReferenceDBAF(
        encoder=encoder,
        latent_avg=latent_avg,
        cid=randomize_(cid, seed=seed + 3, scale=0.5).eval(),
        maar=randomize_(
            AttrBlock(ENCODER_MAP_CHANNELS, MAAR_CHANNELS), seed=seed + 4, scale=0.5
        ).eval(),
        decoder=reduced_generator(seed + 5),
        kria=reduced_kria(seed + 6),
        base_generator=reduced_generator(seed + 7),
        groups=GROUPS,
    )


def save_reference_files(directory: Path, ref: ReferenceDBAF, seed: int = 0) -> dict[str, Path]:
    """torch.save as the reference does -> {convert.dbaf option name: file}.

    The e4e file is pSp's dict (its own decoder included, which DBAF never runs), the
    StyleGAN2 file rosinality's (``g_ema`` and ``d``), the stage outputs plain state_dicts.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "e4e": directory / "e4e_ffhq_encode_256.pt",
        "stylegan": directory / "stylegan2-ffhq-256.pt",
        "cid": directory / "best_model_w_disentanglement.pth",
        "maar": directory / "best_model_attr_block.pth",
        "decoder": directory / "best_model_decoder_finetune.pth",
        "kria": directory / "best_model_id_mlp.pth",
        "discriminator": directory / "best_model_discriminator.pth",
    }
    psp = torch_e4e.PSP(ref.encoder, reduced_generator(seed + 9), ref.latent_avg)
    opts = {"encoder_type": "Encoder4Editing", "stylegan_size": SIZE, "start_from_latent_avg": True}
    torch.save(
        {"state_dict": psp.state_dict(), "latent_avg": ref.latent_avg, "opts": opts}, files["e4e"]
    )
    discriminator = reset_fixed_kernels_(
        randomize_(Discriminator(SIZE, width_scale=GEN_WIDTH), seed=seed + 8)
    )
    torch.save(
        {"g_ema": ref.base_generator.state_dict(), "d": discriminator.state_dict()},
        files["stylegan"],
    )
    torch.save(ref.cid.state_dict(), files["cid"])
    torch.save(ref.maar.state_dict(), files["maar"])
    torch.save(ref.decoder.state_dict(), files["decoder"])
    torch.save(ref.kria.state_dict(), files["kria"])
    torch.save(discriminator.state_dict(), files["discriminator"])
    return files


def convert_args(files: dict[str, Path], out: Path, **replace) -> list[str]:
    """``python -m convert.dbaf`` arguments for ``files`` (``name=None`` leaves an option out)."""
    paths = {**files, **replace}
    args = [f"--{name}={path}" for name, path in paths.items() if path is not None]
    return args + ["--out", str(out), "--cid-heads", str(CID_SIZE["heads"])]
