"""``vsr bench``: this machine's standard benchmark (every backend, plan and precision on one input)."""

from __future__ import annotations


from vsr.errors import InputError, tell


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="time every backend, graph plan and precision on the same input",
                       description="Open every case (PyTorch eager; ONNX Runtime whole graph and split plan, per "
                                   "precision; with each frame's features kept and, -nostream, without), warm "
                                   "each up outside the clock, then time --frames frames of each, the cases "
                                   "interleaved frame by frame; upscale- cases time whole vsr upscale processes "
                                   "(the run after warm-up and the warm-up apart).  Prints medians, p95 and the "
                                   "paired ratios to a baseline; --out writes one run report per case (read it "
                                   "with vsr report) and a summary JSON.")
    p.add_argument("--config", default=None, help="model config name or TOML file (default: from the weights)")
    p.add_argument("--weights", default=None, help="checkpoint, 'default' or 'random' (default: 'default', or "
                                                   "'random' when --config is given)")
    p.add_argument("--size", default="180x320", metavar="HxW", help="LR frame size (default 180x320)")
    p.add_argument("--frames", default="3", metavar="N", help="timed frames per case (default 3)")
    p.add_argument("--threads", default=None,
                   help="inference threads of every case (default: the cores this process may use)")
    p.add_argument("--input", default=None, metavar="CLIP", help="video file or folder of frames (PNG, JPEG, "
                                                                 "TIFF, BMP or WebP), or 'random' "
                                                                 "(default: the shared Big Buck Bunny clip where "
                                                                 "it exists, else random)")
    p.add_argument("--cases", default=None, metavar="A,B", help="only these cases (e.g. ort-split-fp32,"
                                                                "ort-split-fp32-nostream, upscale-ort-split-fp32); "
                                                                "default: every per-frame case (upscale- cases, "
                                                                "whole vsr upscale processes, only when named)")
    p.add_argument("--runs", default="1", metavar="N", help="runs of each upscale- case, alternating (default 1)")
    p.add_argument("--baseline", default=None, help="the case ratios are taken against (default ort-whole-fp32)")
    p.add_argument("--out", default=None, metavar="DIR|SUMMARY.json", help="write the summary and one run "
                                                                          "report per case")
    p.add_argument("--html", action="store_true", help="with --out: also an HTML page per case")
    p.add_argument("--overwrite", action="store_true", help="replace files of an earlier bench in --out (and "
                                                            "remove its reports and pages of cases this bench "
                                                            "does not run, which the new summary would not list)")
    p.add_argument("--int8-account", action="store_true",
                   help="instead of the cases: where an int8 frame's time goes, step by step beside fp32 (each "
                        "segment, bridge and re-run in the plan; each segment alone in fp32, vsr's int8 and ONNX "
                        "Runtime's own QDQ int8; vsr's int8 segments by role: int8 convs, range pass, "
                        "re-quantisation); --frames windows, --runs repetitions of each segment alone")
    p.add_argument("--json", action="store_true", help="print the summary JSON instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


MAX_SIDE = 4096  # as vsr export's


def parse_size(text: str) -> tuple[int, int]:
    """``"180x320"`` -> (180, 320)."""
    h, sep, w = text.lower().partition("x")
    if not sep or not h.isdigit() or not w.isdigit() or int(h) < 1 or int(w) < 1:
        raise InputError(f"--size must be HxW with positive integers (e.g. 180x320), not {text!r}")
    if max(int(h), int(w)) > MAX_SIDE:
        raise InputError(f"--size {text}: a side is at most {MAX_SIDE} (an LR frame; vsr upscale runs larger ones "
                         "in tiles)")
    return int(h), int(w)


def _positive(text: str, option: str, most: int = 10**6) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InputError(f"{option} must be a positive integer, not {text!r}")
    if int(text) > most:
        raise InputError(f"{option} {text}: at most {most}")
    return int(text)


def run(args) -> int:
    import json
    import os

    # The cases share this process.  numba's OpenMP workers (the PixelShuffle bridge's parallel loop) keep the
    # cores busy after their loop and slowed PyTorch eager 25x right after a split-plan frame on the 2-core
    # machine; numba's own work-queue pool does not, and the split plan spends < 1 % of its time in that loop.
    # numba is not loaded yet here, so this takes effect.
    os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")
    from vsr.bench import BenchSettings, render_table, run_bench, summary, write_bench
    from vsr.cli.settings import parse_threads

    if args.html and args.out is None:
        raise InputError("--html needs --out (the pages go beside the reports)")
    if args.int8_account:
        return _int8_account(args)
    cases = None if args.cases is None else tuple(c.strip() for c in args.cases.split(",") if c.strip())
    if cases == ():
        raise InputError(f"--cases {args.cases!r} names no case: give case names separated by commas (e.g. "
                         "ort-whole-fp32,ort-split-fp32), or leave --cases out for all of them")
    settings = BenchSettings(config=args.config, weights=args.weights, size=parse_size(args.size),
                             frames=_positive(args.frames, "--frames"),
                             threads=parse_threads(args.threads),
                             input=args.input, baseline=args.baseline, runs=_positive(args.runs, "--runs"),
                             cases=cases)
    if args.out is not None:  # a bad or taken --out is reported before the models load
        from vsr.bench.cases import bench_cases, select_cases
        from vsr.bench.output import check_out

        names = [c.name for c in select_cases(bench_cases(settings.threads), settings.cases)]
        check_out(args.out, names, args.html, args.overwrite)
    progress = None if args.quiet else (lambda message: tell(f"vsr bench: {message}"))
    result = run_bench(settings, progress)
    data = write_bench(result, args.out, args.html, args.overwrite) if args.out else summary(result)
    print(json.dumps(data, indent=2) if args.json else render_table(data))
    return 0


def _int8_account(args) -> int:
    """``--int8-account``: :func:`vsr.bench.int8_account.int8_account`, printed (and with ``--out``, its JSON)."""
    import json

    from vsr.bench.int8_account import int8_account, render_account
    from vsr.cli.settings import parse_threads

    if args.cases is not None or args.html:
        raise InputError("--int8-account measures the split plan's own steps: it takes no --cases or --html")
    out = None
    if args.out is not None:
        from vsr.outfiles import check_file_output

        out = check_file_output(args.out, "--out", "account", overwrite=args.overwrite)
    say = None if args.quiet else (lambda message: tell(f"vsr bench: {message}"))
    data = int8_account(args.config, args.weights, parse_size(args.size), parse_threads(args.threads),
                        windows=_positive(args.frames, "--frames"), reps=_positive(args.runs, "--runs"), say=say)
    if out is not None:
        from vsr.outfiles import write_file_output

        write_file_output(out, json.dumps(data, indent=2) + "\n")
    # --out -: the account's JSON is what standard output holds (it was the table, the JSON written nowhere)
    print(json.dumps(data, indent=2) if args.json or args.out == "-" else render_account(data))
    return 0
