"""``vsr models``: configurations and known official checkpoints."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list model configurations and known official checkpoints")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from vsr.model import OFFICIAL, list_configs, load_config
    from vsr.model.weights import BUNDLED_NAMES, DEFAULT_WEIGHTS, WEIGHTS_DIR

    cfgs = [load_config(n) for n in list_configs()]
    bundled = {n: WEIGHTS_DIR / f"{n}.pth" for n in BUNDLED_NAMES if (WEIGHTS_DIR / f"{n}.pth").is_file()}
    if args.json:
        print(json.dumps({
            "configs": [{"name": c.name, "num_feat": c.num_feat, "num_frame": c.num_frame,
                         "num_reconstruct_block": c.num_reconstruct_block, "with_tsa": c.with_tsa,
                         "description": c.description} for c in cfgs],
            "official": [{"file": o.filename, "config": o.config, "sha256": o.sha256 or f"{o.prefix}...",
                          "published": o.psnr} for o in OFFICIAL],
            "default_weights": str(DEFAULT_WEIGHTS) if DEFAULT_WEIGHTS.is_file() else None,
            "bundled": {n: str(f) for n, f in bundled.items()}}, indent=2))
        return 0
    print("Configurations (configs/):")
    for c in cfgs:
        print(f"  {c.name:<14} feat {c.num_feat:<4} frames {c.num_frame}  blocks {c.num_extract_block}+"
              f"{c.num_reconstruct_block:<3} TSA {'yes' if c.with_tsa else 'no ':<3}  {c.description}")
    print("\nOfficial BasicSR checkpoints (recognised by sha256, config chosen automatically):")
    for o in OFFICIAL:
        sha = o.sha256 or f"{o.prefix}... (file-name suffix)"
        print(f"  {o.filename}\n      config {o.config}; published {o.psnr}; sha256 {sha}")
    print(f"\nBundled default weights: {DEFAULT_WEIGHTS if DEFAULT_WEIGHTS.is_file() else 'none in this build'}")
    for n, f in bundled.items():
        record = f.with_suffix(".json")
        use = json.loads(record.read_text()).get("use", "") if record.is_file() else ""
        print(f"  --weights {n:<8} {use}: {f}")
    return 0
