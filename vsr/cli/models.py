"""``vsr models``: configurations, bundled weights and the official checkpoints; ``vsr models fetch NAME``."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list model configurations and official checkpoints; fetch them",
                       description="List the model configurations, the bundled weights and the official EDVR "
                                   "checkpoints (with which are downloaded); `vsr models fetch NAME` downloads one.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    f = actions.add_parser("fetch", help="download official checkpoints (resumable, sha256-verified)",
                           description="Download official EDVR checkpoints from where they are published, verify "
                                       "their sha256 and keep them in the weights cache ($VSR_WEIGHTS_DIR, else "
                                       "~/.cache/vsr/weights), where --weights NAME finds them.  An interrupted "
                                       "download resumes where it stopped.")
    f.add_argument("names", nargs="+", metavar="NAME", help="short names from `vsr models`, or all")
    f.add_argument("--dir", default=None, metavar="D", help="download into folder D instead of the weights cache "
                                                          "(then pass --weights D/FILE, or set VSR_WEIGHTS_DIR=D)")
    f.add_argument("--timeout", default="30", metavar="S", help="give up on a server that sends nothing for S "
                                                               "seconds (default 30; run again to resume)")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=run_fetch)


def run_fetch(args) -> int:
    from vsr.errors import InputError, did_you_mean, printable
    from vsr.model.official import fetch, find_official, official_names

    names = list(official_names()) if "all" in args.names else list(dict.fromkeys(args.names))
    unknown = [n for n in names if find_official(n) is None]
    if unknown:
        raise InputError(f"unknown official checkpoint {unknown[0]!r}{did_you_mean(unknown[0], official_names())} "
                         f"(known: {', '.join(official_names())}, or all)")
    try:
        timeout = float(args.timeout)
    except ValueError:
        timeout = 0.0
    if not 0 < timeout < 86400:
        raise InputError(f"--timeout must be a number of seconds above 0 and below 86400 (a day), not "
                         f"{args.timeout!r}")
    folder = Path(args.dir) if args.dir is not None else None
    for name in names:
        path, downloaded = fetch(name, folder, timeout=timeout, quiet=args.quiet)
        ckpt = find_official(name)
        # only 8 hex digits are published for most: say so, not "verified" as if the whole digest were known
        checked = "sha256 verified" if ckpt.sha256 else f"sha256 starts with the published {ckpt.prefix}"
        print(f"{name}: {printable(path)}{'' if downloaded else f' (already there, {checked})'}")
    return 0


def run(args) -> int:
    import json

    from vsr.model import list_configs, load_config, official
    from vsr.errors import printable
    from vsr.files import weights_dir
    from vsr.model.official import DOWNLOADED, fetched_path, fetched_state
    from vsr.model.weights import BUNDLED_NAMES, DEFAULT_WEIGHTS, WEIGHTS_DIR

    cfgs = [load_config(n) for n in list_configs()]
    bundled = {n: WEIGHTS_DIR / f"{n}.pth" for n in BUNDLED_NAMES if (WEIGHTS_DIR / f"{n}.pth").is_file()}
    catalogue = official.OFFICIAL
    state = {o.name: fetched_state(o) for o in catalogue}  # a file there is checked against its sha256
    present = {o.name: fetched_path(o) for o in catalogue if state[o.name] == DOWNLOADED}
    if args.json:
        print(json.dumps({
            "configs": [{"name": c.name, "num_feat": c.num_feat, "num_frame": c.num_frame,
                         "num_reconstruct_block": c.num_reconstruct_block, "with_tsa": c.with_tsa,
                         "description": c.description} for c in cfgs],
            "official": [{"name": o.name, "file": o.filename, "config": o.config,
                          "sha256": o.sha256 or f"{o.prefix}...", "published": o.psnr, "urls": list(o.urls),
                          "source": o.source, "path": str(present[o.name]) if o.name in present else None,
                          "state": state[o.name]}
                         for o in catalogue],
            "default_weights": str(DEFAULT_WEIGHTS) if DEFAULT_WEIGHTS.is_file() else None,
            "bundled": {n: str(f) for n, f in bundled.items()}}, indent=2))
        return 0
    print("Configurations:")
    for c in cfgs:
        print(f"  {c.name:<14} feat {c.num_feat:<4} frames {c.num_frame}  blocks {c.num_extract_block}+"
              f"{c.num_reconstruct_block:<3} TSA {'yes' if c.with_tsa else 'no ':<3}  {c.description}")
    print("\nOfficial checkpoints (`vsr models fetch NAME` downloads one, then --weights NAME; any copy of these "
          "files is recognised by its sha256):")
    for o in catalogue:
        print(f"  {o.name:<25} config {o.config:<13} published {o.psnr}\n"
              f"  {'':<25} {o.filename}; {_where(o, state[o.name])}")
    folder = weights_dir()
    if folder.exists() and not folder.is_dir():  # fetch refuses it too: say so here, not "put it in" a file
        print(f"  The weights folder {printable(folder)} is not a folder: set VSR_WEIGHTS_DIR to one (or pass "
              "--weights FILE).")
    else:
        print("  A copy downloaded elsewhere (a browser, another machine) works as well: put it in "
              f"{printable(folder)} under the file name above (or pass --weights FILE).")
    bundled_at = printable(DEFAULT_WEIGHTS) if DEFAULT_WEIGHTS.is_file() else "none in this build"
    print(f"\nBundled default weights: {bundled_at}")
    for n, f in bundled.items():
        record = f.with_suffix(".json")
        use = json.loads(record.read_text()).get("use", "") if record.is_file() else ""
        print(f"  --weights {n:<8} {use}: {printable(f)}")
    return 0


def _where(ckpt, state: str) -> str:
    from vsr.errors import printable
    from vsr.model.official import DOWNLOADED, MISSING, fetched_path

    if state == MISSING:
        return f"not downloaded (from {ckpt.hosts})"
    path = printable(fetched_path(ckpt))
    if state == DOWNLOADED:
        from vsr.files import untrusted

        where = fetched_path(ckpt)
        why = untrusted(where.parent) or untrusted(where)  # the loader's rule (check_weights_folder)
        refused = f" (not loaded from there: {printable(why)}; see VSR_WEIGHTS_DIR)" if why else ""
        return f"downloaded: {path}{refused}"
    return (f"corrupt: {path} is not the published file (its sha256 differs: cut short or damaged); "
            f"`vsr models fetch {ckpt.name}` replaces it")
