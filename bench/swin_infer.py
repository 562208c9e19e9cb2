"""Swin-T inference (timm swin_tiny_patch4_window7_224, random weights, fp16, batch 64): the
script of `fuseprof bench -- python3 bench/swin_infer.py`; options as bench/timm_infer.py's."""
from timm_infer import main

if __name__ == "__main__":
    main("swin_tiny_patch4_window7_224")
