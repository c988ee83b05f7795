"""Measure the op-time databases shipped in `data/ops/` on the GPU at hand (bench/kernels.md).

    PYTHONPATH=python python3 bench/gpu_profile.py OUTDIR [--gpu H200] [--only NAME ...] [--compile]

For each scenario below, `llmsim profile` times every distinct compute op at the scenario's own
shapes (PyTorch, CUDA events, median of --iters, L2 flushed before each run) and writes
OUTDIR/NAME.csv, a database `compute.database` reads. One process for all, so CUDA starts once;
a scenario that fails is reported and the others go on. The GPU's name, power limit and clocks
before and after go to OUTDIR/gpu.txt.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback

# (name, scenario, sdpa backend). Megatron-Core with Transformer Engine runs cuDNN's fused
# attention on Hopper; one scenario is also timed with PyTorch's FlashAttention-2 to compare.
SCENARIOS = [
    ("gpt3-13b", "examples/gpt3-13b-128gpu.yaml", "cudnn"),
    ("megatron-1.7b", "bench/scenarios/megatron-h100-1.7b.yaml", "cudnn"),
    ("megatron-7.1b", "bench/scenarios/megatron-h100-7.1b.yaml", "cudnn"),
    ("megatron-70b", "bench/scenarios/megatron-h100-70b.yaml", "cudnn"),
    ("llama3-405b-8k", "bench/scenarios/real-llama3-405b-8k.yaml", "cudnn"),
    ("llama3-405b-8k-fa2", "bench/scenarios/real-llama3-405b-8k.yaml", "flash"),
    ("nemo-llama3-8b-fp8", "bench/scenarios/real-nemo-llama3-8b-8.yaml", "cudnn"),
    ("nemo-llama3-70b-fp8", "bench/scenarios/real-nemo-llama3-70b-64.yaml", "cudnn"),
    ("automodel-llama3-70b", "bench/scenarios/real-automodel-h100-llama3-70b-64.yaml", "cudnn"),
    ("automodel-qwen3-30b-a3b", "bench/scenarios/real-automodel-h100-qwen3-30b-a3b-8.yaml", "cudnn"),
    ("bridge-qwen3-30b-a3b-fp8", "bench/scenarios/real-bridge-h100-qwen3-30b-a3b-16.yaml", "cudnn"),
    ("bridge-gpt-oss-120b", "bench/scenarios/real-bridge-h100-gpt-oss-120b-64.yaml", "cudnn"),
]

SMI = "name,power.limit,power.draw,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,driver_version"


def smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", f"--query-gpu={SMI}", "--format=csv"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi: {e}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("outdir")
    p.add_argument("--gpu", default="H200", help="the rows' gpu column: the catalog name of this GPU")
    p.add_argument("--only", nargs="*", help="names from SCENARIOS")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--compile", action="store_true", help="memory-bound ops as torch.compile fuses them")
    a = p.parse_args(argv)
    from llmsim import profile as prof

    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "gpu.txt"), "w") as f:
        f.write(f"before:\n{smi()}\n")
    failed = 0
    for name, scenario, sdpa in SCENARIOS:
        if a.only and name not in a.only:
            continue
        t0 = time.time()
        try:
            r = prof.profile(
                scenario,
                os.path.join(a.outdir, f"{name}{'-compiled' if a.compile else ''}.csv"),
                warmup=a.warmup,
                iters=a.iters,
                backend="torch",
                device="cuda",
                gpu=a.gpu,
                sdpa=sdpa,
                compile=a.compile,
            )
            print(f"{name}: {len(r.rows)} ops, {len(r.skipped)} left out, {time.time() - t0:.1f} s", flush=True)
            for row, why in r.skipped:
                print(f"  left out {row['op']} {row['shape']}: {why}", flush=True)
        except Exception:  # noqa: BLE001 - one scenario's failure must not lose the others
            failed += 1
            print(f"{name}: FAILED after {time.time() - t0:.1f} s", flush=True)
            traceback.print_exc()
    with open(os.path.join(a.outdir, "gpu.txt"), "a") as f:
        f.write(f"after:\n{smi()}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
