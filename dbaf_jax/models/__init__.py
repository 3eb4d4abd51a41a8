"""The networks: StyleGAN2, IR-SE50 (e4e, ArcFace), LPIPS, face parsers, CID, MAAR, KRIA."""

LAYER = "networks"
