"""Recover faces anonymized by `dbaf_jax.anonymize` with the same password (see there)."""

from dbaf_jax.anonymize import command_line

if __name__ == "__main__":
    command_line("recover")
