"""The ``tiered`` command line: ``demo``, ``info``, ``versions``, ``diff`` and ``bench``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiered.bench import COLD_IO
from tiered.console import counter, table
from tiered.sizes import format_size


def _sizes(text: str) -> list[int]:
    try:
        values = [int(s) for s in text.split(",") if s]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated positive integers, "
                                         "e.g. 4,16,64")
    return values


DESCRIPTION = """\
tiered: a tiered checkpoint cache over GPU memory, host memory, a burst-buffer directory
and HDF5 files.

  tiered demo              an adjoint-style run through tiered beside np.save/np.load
  tiered info PATH         what a persistent tier directory holds, verified
  tiered versions PATH     the committed versions in a tier, as a tree
  tiered diff PATH A B     what changed between two versions (ids or labels)
  tiered diff --runs A B   where two runs' tiers first differ, version by version
  tiered bench NAME        a benchmark; prints a table and writes JSON
"""

BENCHES = (("capture", "store() blocking time against np.copyto into a reused buffer"),
           ("drain", "background drain throughput against raw write + fsync"),
           ("interference", "how much draining slows a compute loop in the foreground"),
           ("revisit", "backward-pass stall with each prefetch policy"),
           ("adjoint", "reverse time migration, every way of keeping its history"),
           ("history", "store/revisit cost per call as the history grows"),
           ("sweeps", "CPU per state over several sweeps, files new or reused"),
           ("versions", "commits of a state dict: bytes written, blocking, rollback"))
PLOTS = ("adjoint", "revisit")  # benches where a picture says more than the table


def _parser() -> argparse.ArgumentParser:
    from tiered import __version__

    p = argparse.ArgumentParser(prog="tiered", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"tiered {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                         help="what to do (tiered COMMAND --help for its options)")
    demo = sub.add_parser("demo", help="an adjoint-style run through tiered and through "
                                       "np.save/np.load, timed side by side")
    demo.add_argument("--steps", type=_positive, default=100,
                      help="states in the history (default 100)")
    demo.add_argument("--rounds", type=_positive, default=3,
                      help="rounds of each run, alternating; the median is reported "
                           "(default 3)")
    demo.add_argument("--n", type=_positive, default=1024,
                      help="each state is n x n float32 (default 1024: 4 MiB)")
    demo.add_argument("--workdir", type=Path,
                      help="keep tiered's persistent tier here, to look at with tiered info "
                           "(default: a temporary directory, removed afterwards)")
    info = sub.add_parser("info", help="list and verify what a persistent tier directory "
                                       "holds")
    info.add_argument("path", type=Path, help="the directory of a DirectoryTier or HDF5Tier")
    info.add_argument("--no-verify", action="store_true",
                      help="list only: do not read every object back against its checksums")
    versions = sub.add_parser("versions", help="the committed versions in a persistent tier, "
                                               "as a tree (* marks the head)")
    versions.add_argument("path", type=Path, help="the directory of a DirectoryTier or HDF5Tier")
    diff = sub.add_parser("diff", help="what changed between two versions of a tier, or "
                                       "(--runs) where two runs first differ")
    diff.add_argument("path", type=Path, help="the tier's directory (with --runs: run A's)")
    diff.add_argument("refs", nargs="+", metavar="A B",
                      help="two versions, by id or label (with --runs: run B's directory)")
    diff.add_argument("--runs", action="store_true",
                      help="compare two runs: PATH is run A's tier, the next argument run "
                           "B's; versions are paired in commit order")
    bench = sub.add_parser("bench", help="benchmarks: a table on screen, the rows in JSON")
    kinds = bench.add_subparsers(dest="bench", required=True, metavar="NAME",
                                 help="which benchmark (tiered bench NAME --help)")
    for name, help_text in BENCHES:
        b = kinds.add_parser(name, help=help_text, description=help_text)
        b.add_argument("--json", metavar="PATH",
                       help="where the JSON goes (default tiered-bench-NAME.json)")
        b.add_argument("--workdir", help="directory for the files (default: system temp)")
        b.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
        if name in PLOTS:
            b.add_argument("--plot", metavar="PATH", type=Path,
                           help="also draw the result as a PNG (needs matplotlib: "
                                "pip install 'tiered[plot]')")
        if name in ("capture", "drain"):
            b.add_argument("--sizes-mib", type=_sizes, default=[4, 16, 64, 256],
                           help="value sizes in MiB, comma-separated (default 4,16,64,256)")
    _bench_options(kinds.choices)
    return p


def _bench_options(kinds: dict[str, argparse.ArgumentParser]) -> None:
    adj = kinds["adjoint"]
    adj.add_argument("--n", type=_positive, default=512, help="grid is n x n (float32)")
    adj.add_argument("--nt", type=_positive, default=400, help="snapshots in the history")
    adj.add_argument("--substeps", type=_positive, default=4,
                     help="wave steps per snapshot: 4 samples the 15 Hz wavelet at its "
                          "temporal Nyquist rate, as RTM codes do; 1 stores every step")
    adj.add_argument("--rounds", type=_positive, default=3,
                     help="rounds of every row, round-robin; the median round is reported")
    adj.add_argument("--device", help="keep the wavefields on this torch device (e.g. cuda): "
                                      "GPU snapshots, with a device tier above host memory")
    adj.add_argument("--cold-io", choices=COLD_IO, default=COLD_IO[0],
                     help="beyond memory, how tiered and the bare ring keep their files out "
                          "of the page cache: direct I/O (default), or fsync + DONTNEED "
                          "after each file, as the plain-file rows do")
    adj.add_argument("--rows", type=_names,
                     help="comma-separated rows to run (default: all); compute-only and "
                          "np.save/np.load are always run, every ratio is against them")
    ver = kinds["versions"]
    ver.add_argument("--state-mib", type=_positive, default=64, help="state dict size")
    ver.add_argument("--leaves", type=_positive, default=32, help="leaves in the state dict")
    ver.add_argument("--commits", type=_positive, default=100, help="commits to make")
    ver.add_argument("--changed", type=float, default=0.10,
                     help="share of the leaves changed before each commit (default 0.10)")
    hist = kinds["history"]
    hist.add_argument("--counts", type=_sizes, default=[1000, 4000, 16000],
                      help="history lengths, comma-separated")
    hist.add_argument("--state-kib", type=_positive, default=4, help="KiB per state")
    swp = kinds["sweeps"]
    swp.add_argument("--states", type=_positive, default=200, help="states per sweep")
    swp.add_argument("--sweeps", type=_positive, default=3, help="forward/backward sweeps")
    swp.add_argument("--state-mib", type=_positive, default=1, help="MiB per state")
    swp.add_argument("--rounds", type=_positive, default=5,
                     help="rounds of every row, alternated; the median round is reported")
    rev = kinds["revisit"]
    rev.add_argument("--states", type=_positive, default=64, help="states in the history")
    rev.add_argument("--state-mib", type=_positive, default=16, help="MiB per state")
    rev.add_argument("--trace", action="store_true",
                     help="replay key patterns against each policy instead (hit rates)")


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated row names")
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _demo(args: argparse.Namespace) -> int:
    from tiered import demo

    cfg = demo.DemoConfig(steps=args.steps, n=args.n, rounds=args.rounds)
    res = demo.run(cfg, workdir=args.workdir, announce=print)
    print(demo.summary(res))
    return 0


def _info(args: argparse.Namespace) -> int:
    from tiered.info import NotATierError, inspect

    try:
        res = inspect(args.path, verify=not args.no_verify)
    except (FileNotFoundError, NotATierError, PermissionError) as exc:
        print(f"tiered info: {exc}", file=sys.stderr)
        return 2
    print(f"{res['tier']} at {res['path']}: {len(res['objects'])} objects, "
          f"{format_size(res['total_bytes'])}")
    for row in res["objects"]:
        print(f"  {row['key']!r:40} v{row['version']:<6} {format_size(row['bytes']):>10}  "
              f"{row['leaves']} leaves  {row['status']}")
    for problem in res["problems"]:
        print(f"  ! {problem}")
    bad = any(r["status"].startswith("CORRUPT") for r in res["objects"]) or res["problems"]
    return 1 if bad else 0


def _versions(args: argparse.Namespace) -> int:
    from tiered.info import NotATierError, open_reader, version_tree

    try:
        cache = open_reader(args.path)
    except (FileNotFoundError, NotATierError, PermissionError) as exc:
        print(f"tiered versions: {exc}", file=sys.stderr)
        return 2
    with cache:
        lines = version_tree(cache)
    print("\n".join(lines) if lines else f"{args.path}: no versions (nothing was committed)")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from tiered.errors import TieredError
    from tiered.info import NotATierError, _ref, change_lines, open_reader
    from tiered.versions import compare

    if len(args.refs) != (1 if args.runs else 2):
        print("tiered diff: give PATH A B (two versions), or --runs PATH_A PATH_B",
              file=sys.stderr)
        return 2
    try:
        if args.runs:
            with open_reader(args.path) as a, open_reader(Path(args.refs[0])) as b:
                report = compare(a, b)
            if report.first is None:
                print(f"the runs agree on all {report.compared} versions compared")
                return 0
            print(f"the runs first differ at version {report.first[0]} (run A) / "
                  f"{report.first[1]} (run B), after {report.compared - 1} equal versions:")
            print("\n".join(change_lines(report.keys)))
            return 1
        with open_reader(args.path) as cache:
            changes = cache.diff(_ref(args.refs[0]), _ref(args.refs[1]))
    except (FileNotFoundError, NotATierError, PermissionError, TieredError) as exc:
        print(f"tiered diff: {exc}", file=sys.stderr)
        return 2
    lines = change_lines(changes)
    print("\n".join(lines) if lines else "no differences")
    return 1 if lines else 0


def _revisit(args: argparse.Namespace, workdir: Path | None) -> tuple[list[Any], list[str]]:
    from tiered.bench import revisit

    if args.trace:
        rows = revisit.run_trace(n=64 if args.quick else 256, capacity=8 if args.quick else 32)
        return rows, ["pattern", "eviction", "prefetch", "hit_rate", "prefetch_hits",
                      "wasted_prefetches"]
    cfg = (revisit.RevisitConfig(states=12, state_mib=4) if args.quick else
           revisit.RevisitConfig(states=args.states, state_mib=args.state_mib))
    rows = revisit.run(cfg, workdir=workdir)
    return rows, ["name", "backward_s", "overhead_s", "stall_s", "stall_share",
                  "stall_reduction", "vs_compute", "vs_bound", "prefetch_hits", "late_prefetches",
                  "wasted_prefetches"]


def _adjoint(args: argparse.Namespace, workdir: Path | None) -> tuple[list[Any], list[str]]:
    from tiered.bench import adjoint, rtm

    cfg = (rtm.RTMConfig(nz=160, nx=160, nt=200, sponge=12, device=args.device) if args.quick
           else rtm.RTMConfig(nz=args.n, nx=args.n, nt=args.nt, substeps=args.substeps,
                              device=args.device))
    names = adjoint.ROWS if args.device is None else adjoint.DEVICE_ROWS
    if args.rows:
        names = tuple(dict.fromkeys([*adjoint.REFERENCE_ROWS, *args.rows]))
    rounds = 1 if args.quick else args.rounds
    with counter(rounds * len(adjoint.REGIMES) * len(names), "adjoint") as bar:
        def tick(line: str) -> None:
            bar.set_postfix_str(line.split("] ", 1)[-1], refresh=False)
            bar.update()

        rows = adjoint.run(cfg, workdir=workdir, rounds=rounds, rows=names, progress=tick,
                           cold_io=args.cold_io)
    return rows, ["regime", "name", "wall_s", "vs_compute", "speedup_vs_numpy", "stall_s",
                  "recomputed_steps", "image_identical", "forward_s", "backward_s", "setup_s",
                  "calls_s", "solver_wait_s", "solver_runq_s", "solver_blocks",
                  "background_cpu_s", "speedup_bound",
                  "peak_rss_bytes", *(["peak_device_bytes"] if args.device else []),
                  "bytes_written", "bytes_read", "device_read_bytes", "direct_io"]


def _bench(args: argparse.Namespace) -> int:
    if getattr(args, "plot", None) is not None and getattr(args, "trace", False):
        print("tiered bench revisit: --plot draws the stall per step, which --trace does not "
              "measure", file=sys.stderr)
        return 2
    from tiered.bench import capture, drain, interference
    from tiered.bench.common import save_json

    workdir = Path(args.workdir) if args.workdir else None
    if args.bench == "capture":
        sizes = [4, 16] if args.quick else args.sizes_mib
        rows = capture.run(sizes, repeat=3 if args.quick else 15, workdir=workdir)
        cols = ["size_mib", "copyto_s", "copyto_rotating_s", "store_s", "ratio",
                "ratio_vs_rotating", "ratio_while_draining"]
    elif args.bench == "drain":
        sizes = [4, 16] if args.quick else args.sizes_mib
        rows = drain.run(sizes, total_mib=64 if args.quick else 256, workdir=workdir,
                         rounds=1 if args.quick else 3)
        cols = ["size_mib", "tier", "raw_gbps", "tiered_gbps", "ratio", "h5py_naive_gbps"]
    elif args.bench == "revisit":
        rows, cols = _revisit(args, workdir)
    elif args.bench == "history":
        from tiered.bench import history

        rows = history.run([200, 2000] if args.quick else args.counts, args.state_kib,
                           workdir=workdir)
        cols = ["states", "state_kib", "limit_store_us", "dict_store_us", "store_us",
                "store_vs_dict", "store_growth", "limit_revisit_us", "dict_revisit_us",
                "revisit_us", "revisit_growth"]
    elif args.bench == "sweeps":
        from tiered.bench import sweeps

        rows = (sweeps.run(24, 2, 1, rounds=1, workdir=workdir) if args.quick else
                sweeps.run(args.states, args.sweeps, args.state_mib, args.rounds,
                           workdir=workdir))
        cols = ["name", "states", "sweeps", "state_mib", "wall_s", "cpu_us_per_state",
                "cpu_vs_new_files", "files_reused"]
    elif args.bench == "versions":
        from tiered.bench import versions

        vcfg = (versions.VersionsConfig(state_mib=8, leaves=16, commits=10) if args.quick
                else versions.VersionsConfig(state_mib=args.state_mib, leaves=args.leaves,
                                             commits=args.commits, changed=args.changed))
        rows = versions.run(vcfg, workdir=workdir)
        cols = ["layout", "written_vs_full", "blocking_ms", "copy_changed_ms",
                "blocking_vs_copy", "checkout_host_s", "host_vs_torch_load",
                "host_vs_np_load", "checkout_disk_s", "disk_vs_torch_load", "disk_vs_np_load"]
    elif args.bench == "adjoint":
        try:
            rows, cols = _adjoint(args, workdir)
        except ValueError as exc:  # a row name that does not exist, or not on this device
            print(f"tiered bench adjoint: {exc}", file=sys.stderr)
            return 2
    else:
        rows = interference.run(total_mib=128 if args.quick else 768, value_mib=16,
                                seconds=0.3 if args.quick else 1.0, workdir=workdir)
        cols = ["loop", "background", "alone_s", "loaded_s", "slowdown", "loops", "written_mib"]
    print(table(rows, cols))
    extra = _verdicts(args, rows) if args.bench == "adjoint" else None
    print(f"wrote {save_json(args.bench, rows, args.json, extra)}")
    if getattr(args, "plot", None) is not None:
        from tiered.bench import plots

        print(f"wrote {getattr(plots, args.bench)(rows, args.plot)}")
    return 0


def _verdicts(args: argparse.Namespace, rows: list[Any]) -> dict[str, Any]:
    """Print the adjoint benchmark's targets judged on its rows; return them for the JSON."""
    from tiered.bench import targets

    verdicts = targets.judge(rows)
    if args.quick:  # fixed costs dominate a 100 KiB snapshot
        print("(--quick: too small a problem for these verdicts to mean anything)")
    print(targets.report(verdicts))
    return {"targets": verdicts}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tiered`` command."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handler = {"demo": _demo, "info": _info, "bench": _bench, "versions": _versions,
               "diff": _diff}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
