"""DBAF's (and HFORD's) networks: the composition (`dbaf`: the `DBAF` class, how e4e,
CID, MAAR, the generator and KRIA compose), and the networks only DBAF uses: `cid`
(CID), `maar` (MAAR), `kria` (KRIA).
"""

# Importers of the package written before the composition had its own module: the
# names they read (model_families.py, benchmarks/common/models.py, tests/storage/test_model_directory.py).
from dbaf_jax.models.dbaf.dbaf import DBAF, FAMILY, NETWORKS  # noqa: F401
