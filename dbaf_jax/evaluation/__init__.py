"""The paper's evaluation measures: image quality, FID, recognition rates, diversity, data splits.

One concern per module (the per-image pixel metrics, MSE, PSNR and SSIM, are
`dbaf_jax.core.image_metrics`, which training uses too): `fid` (feature statistics
and the Frechet distance), `recognition` (identity distances and rates), `diversity`
(pairwise identity angles, key grids, t-SNE plots) and `splits` (seeded split lists);
`protocol` runs them over a model (`measures`: what it collects and reports) and `report`
writes the result (`paper_tables`: the paper's Tables I-IV).
"""

LAYER = "applications"
