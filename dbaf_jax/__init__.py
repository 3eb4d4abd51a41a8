"""dbaf_jax: reversible, password-controlled face de-identification (DBAF) in JAX/Flax.

Importing it changes no global JAX setting; the commands' settings are
`compilation_cache.enable`'s.

Each folder of the package is one layer's (its `__init__` names it: ``LAYER``), and a
module imports only modules of its own layer or of the layers before it in `LAYERS`
(tests/test_layering.py reads both from the tree). The folders of ``applications``
do not import each other.
"""

__version__ = "0.1.0"

LAYERS = (
    "foundations",  # core/, nn/: errors, precision, meshes, building blocks
    "networks",  # models/: the Flax networks
    "storage",  # storage/: files, keys, model directories
    "faces",  # faces/: detection, alignment, paste-back, ledgers, photo metadata
    "inference",  # inference/: anonymize and recover with a loaded model
    "applications",  # train/, evaluation/, video/: apart from each other
    "interfaces",  # commands/, web/, distributed/: what users run
)
