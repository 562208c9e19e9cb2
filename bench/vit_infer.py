"""ViT-B/16 inference (timm vit_base_patch16_224, attention through SDPA, random weights, fp16,
batch 64): the script of `fuseprof bench -- python3 bench/vit_infer.py`; options as
bench/timm_infer.py's."""
from timm_infer import main

if __name__ == "__main__":
    main("vit_base_patch16_224")
