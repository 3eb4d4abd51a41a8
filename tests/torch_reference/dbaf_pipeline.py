"""The reference's inference composition (its test.py), on the reference modules.

Per image, as the reference's test script runs with batch size 1:
- e4e: codes C (with latent_avg) and the body maps c3, c2, c1;
- CID on that image alone: attribute code A; identity code I = C - A;
- MAAR: three maps that replace the fine-tuned generator's noise inputs 3-4, 5-6, 7-8;
- key: three z through the ORIGINAL generator's mapping, repeated by the latent groups;
- anonymize: ``w = A + KRIA(cat([I, key]))``, decoded with the maps and the stored noise;
- latent recovery (as the reference trains it): ``A + KRIA(cat([KRIA(cat([I, key])), key]))``.
"""

import torch
from torch import nn

# Generator noise inputs each MAAR map replaces (model_revise_c3's attr_noise).
NOISE_LAYERS = ((3, 4), (5, 6), (7, 8))


class ReferenceDBAF(nn.Module):
    def __init__(self, encoder, latent_avg, cid, maar, decoder, kria, base_generator, groups):
        super().__init__()
        self.encoder, self.cid, self.maar, self.decoder, self.kria = encoder, cid, maar, decoder, kria
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
        return self.synthesize(attribute + anonymized_identity, maps), anonymized_identity, attribute, identity, maps

    def recover_latent(self, anonymized_identity, attribute, maps, key):
        return self.synthesize(attribute + self.kria(torch.cat([anonymized_identity, key], dim=-1)), maps)
