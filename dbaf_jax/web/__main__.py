"""``python -m dbaf_jax.web``: serve the page (`dbaf_jax.web.serve`)."""

from dbaf_jax import commands
from dbaf_jax.web import main

if __name__ == "__main__":
    commands.run_main(main)
