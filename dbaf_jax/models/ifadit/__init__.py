"""iFADIT's networks: the composition (`ifadit`: the `IFADIT` class, how ArcFace, e4e,
the mapper, the flow, the compensation layer and the generator compose), and the
networks only iFADIT uses: `sif` (the secure identity flow), `mapper` (identity and
attributes to W+), `icl` (the identity compensation layer).
"""

# Importers of the package written before the composition had its own module: the
# names they read (model_families.py).
from dbaf_jax.models.ifadit.ifadit import FAMILY, IFADIT  # noqa: F401
