"""DBAF's stage 1 under the design card's name: ``--config configs/stage1.py[:variants]``.

The config and its variants live in `configs/dbaf/stage1.py` (their one home); this
module is that config under the card's path, the same ``get_config`` and ``VARIANTS``.
"""

from configs.dbaf.stage1 import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
