"""The ``llmsim`` console script.

``run``, ``collective``, ``topo`` and ``sweep`` are the Rust command-line tool itself, run
in-process through the extension module (``_native.cli_main``): one implementation, identical
output and exit codes, no second binary to ship in the wheel. Python adds ``sweep --ray``,
``plot``, ``search``, ``profile`` and ``export`` (Parquet).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence

from . import _native

PYTHON_COMMANDS = """
Python package commands:
  sweep ... --ray ADDR   Run a sweep on a Ray cluster (auto, an address, or local)
  sweep NS3SPEC          A packet-level CC sweep of an ns-3 experiment (a sweep file with `ns3:`)
                         on the batch packet engine: --engine gpu|batch|threads (pip install .[batch])
  plot                   Plot a sweep's results or a packet run (ns3 run --out); write an HTML report
  search                 Best TP/PP/DP/EP/CP/VPP/micro-batch for a model and GPU count
  profile                Time a scenario's compute ops on this GPU (PyTorch) or CPU; write an op database CSV
  export DIR             Write a sweep's results as Parquet (DIR/results.parquet; needs pyarrow)
"""


def _rust(argv: Sequence[str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    # Ctrl-C ends the process as it would the Rust binary (the GIL is released while it runs).
    old = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return _native.cli_main(["llmsim", *argv])
    finally:
        signal.signal(signal.SIGINT, old)


def _sweep_ray(argv: Sequence[str]) -> int:
    from .sweep import Progress, run_on_ray  # noqa: F401

    p = argparse.ArgumentParser(prog="llmsim sweep", description="Run a sweep on Ray (one task per batch of points).")
    p.add_argument("spec")
    p.add_argument("--out")
    p.add_argument("--ray", required=True, metavar="ADDRESS", help="auto, an address (ray://host:port), or local")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--jobs", "-j", type=int, default=0, help="ignored on Ray (one CPU per task)")
    a = p.parse_args(argv)
    with open(a.spec, encoding="utf-8") as f:
        text = f.read()
    name = os.path.splitext(os.path.basename(a.spec))[0]
    plan = json.loads(_native.plan_sweep(text, os.path.dirname(a.spec) or ".", name))
    out = a.out or os.path.join("runs", plan["name"])
    s = run_on_ray(text, os.path.dirname(a.spec) or ".", out, address=a.ray, batch_size=a.batch_size, name=name)
    print(f"sweep {plan['name']}: {s['points']} points, {s['skipped']} already done, {s['ran']} ran on Ray")
    print(f"results: {os.path.join(out, _native.RESULTS_FILE)}")
    return 0


def _ns3_spec(args: Sequence[str]) -> bool:
    """Whether a sweep's file is a packet-level CC sweep of an ns-3 experiment (`ns3:`), which
    runs on the batch packet engine here rather than in the Rust tool."""
    from .batch.sweep import is_ns3_spec

    return any(not a.startswith("-") and os.path.isfile(a) and is_ns3_spec(a) for a in args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv else ""
    try:
        if cmd == "plot":
            from .plot import main as plot_main

            return plot_main(argv[1:])
        if cmd == "search":
            from .search import main as search_main

            return search_main(argv[1:])
        if cmd == "profile":
            from .profile import main as profile_main

            return profile_main(argv[1:])
        if cmd == "export":
            from .sweep import export_main

            return export_main(argv[1:])
        if cmd == "sweep" and any(a == "--ray" or a.startswith("--ray=") for a in argv[1:]):
            return _sweep_ray(argv[1:])
        if cmd == "sweep" and _ns3_spec(argv[1:]):
            from .batch.sweep import main as ns3_sweep_main

            return ns3_sweep_main(argv[1:])
    except _native.LlmsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `llmsim plot ... | head`: not an error (as in the Rust tool)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    code = _rust(argv)
    if cmd in ("", "-h", "--help", "help"):
        print(PYTHON_COMMANDS)
    return code


if __name__ == "__main__":
    sys.exit(main())
