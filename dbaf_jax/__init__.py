"""dbaf_jax: reversible, password-controlled face de-identification (DBAF) in JAX/Flax.

Importing it changes no global JAX setting; the commands' settings are
`compilation_cache.enable`'s.
"""

__version__ = "0.1.0"
