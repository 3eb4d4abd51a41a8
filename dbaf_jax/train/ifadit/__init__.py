"""iFADIT's training: its networks table (`networks`), its train state (`state`) and its
two phases (`phases`). The phases' names are the values of ``config.stage`` that select
them; configs/ifadit/phases.py sets them from here.
"""

PHASE1 = "ifadit1"  # E_Attr and the mapper learn to rebuild faces
PHASE2 = "ifadit2"  # the identity flow and the compensation layer learn to anonymize and recover
