"""dbaf_jax: reversible, password-controlled face de-identification (DBAF) in JAX/Flax."""

__version__ = "0.1.0"
