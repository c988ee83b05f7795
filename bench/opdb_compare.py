"""Set a measured op database beside llmsim's own model of the same ops (bench/kernels.md).

    .venv/bin/python bench/opdb_compare.py data/op-db/h200/*.csv [--ops]
    .venv/bin/python bench/opdb_compare.py --layers data/op-db/h200/layers-sustained.csv

For each database, `llmsim profile SCENARIO --compare DB` on the scenario named in its `#` lines
(on the database's GPU, one board: no slowest-board pace): per op class the time-weighted
measured / llmsim (weights: each op's count in one iteration) and, with --ops, every op.
With --layers, bench/gpu_layer.py's whole-layer times against the sum of llmsim's ops of one
layer (forward, backward) at the same shapes.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from llmsim import profile as prof

ROOT = Path(__file__).resolve().parents[1]


def compare(db: Path, ops: bool) -> None:
    scenario = prof.database_scenario(db)
    print(f"\n{db.name} ({scenario})")
    print("\n".join("  " + line for line in prof.comparison_table(prof.compare_database(ROOT / scenario, db), ops)))


# bench/gpu_layer.py's layers as scenarios: the same shapes on one GPU (no TP, SP or CP).
LAYER_SCENARIOS = {
    "gpt-1.7b": ("bench/scenarios/megatron-h100-1.7b.yaml", []),
    "gpt-7.1b-tp1": (
        "bench/scenarios/megatron-h100-7.1b.yaml",
        ["parallel.tp=1", "parallel.dp=96", "parallel.sequence_parallel=false", "parallel.tp_comm_overlap=false"],
    ),
    "llama3-8b": (
        "bench/scenarios/real-nemo-llama3-8b-8.yaml",
        ["training.dtype=bf16", "parallel.cp=1", "parallel.dp=8"],
    ),
}


def layers(path: Path, gpu: str) -> None:
    rows = list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("#")))
    print(
        "| layer | mode | llmsim fwd / bwd us | burst fwd / bwd us | sustained fwd / bwd us | sustained / llmsim (fwd+bwd) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        scenario, sets = LAYER_SCENARIOS[r["layer"]]
        ops = prof.run_ops(ROOT / scenario, [*sets, f"cluster.gpu={gpu}", "compute.gpu_variability.sigma=0"])
        f = sum(float(o["time_us"]) for o in ops if o["segment"] == "layer.fwd.0")
        b = sum(float(o["time_us"]) for o in ops if o["segment"] == "layer.bwd.0")
        sf, sb = float(r["fwd_sustained_us"]), float(r["bwd_sustained_us"])
        print(
            f"| {r['layer']} | {r['mode']} | {f:.0f} / {b:.0f} | {float(r['fwd_us']):.0f} / {float(r['bwd_us']):.0f} "
            f"| {sf:.0f} / {sb:.0f} | {(sf + sb) / (f + b):.3f} (fwd {sf / f:.2f}, bwd {sb / b:.2f}) |"
        )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("databases", nargs="*", type=Path)
    p.add_argument("--layers", type=Path, help="bench/gpu_layer.py's CSV")
    p.add_argument("--gpu", default="H200", help="with --layers: the GPU of the layers CSV")
    p.add_argument("--ops", action="store_true", help="print every op")
    a = p.parse_args(argv)
    if a.layers:
        layers(a.layers, a.gpu)
    for db in a.databases:
        if db.read_text().startswith("# llmsim op-time database"):
            compare(db, a.ops)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
