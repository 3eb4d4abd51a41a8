"""DBAF's (and HFORD's) training: its networks table (`networks`), its train state
(`state`: Ranger and a discriminator), the adversarial step both stages share
(`adversarial`) and the two stages (`stage1`: disentangling, `stage2`: anonymizing
with a key and recovering).
"""
