"""Time the Adam step on the GPU at hand: the achieved HBM bandwidth of a fused multi-tensor Adam
over fp32 main parameters, for `efficiency.csv`'s `optimizer` class (bench/kernels.md).

    python3 bench/gpu_optimizer.py OUT.csv

PyTorch's `torch.optim.AdamW(fused=True)` (one multi-tensor kernel per group of tensors, as Apex's
and Transformer Engine's `multi_tensor_adam` that Megatron-Core's distributed optimizer runs) and
`foreach=True` (several `_foreach_` kernels), over fp32 parameters, fp32 gradients and two fp32
moments: 16 bytes read and 12 written per parameter (28). Then the copy of the updated main
parameters into the bf16 model weights (`_foreach_copy_`, 4 read + 2 written), which
Megatron-Core does after the step. Tensors of one size per run (1M to 64M parameters each,
2^31 parameters in all, ~60 GB of state on the GPU); 3 warm-up steps, median of 10, CUDA events.
"""

from __future__ import annotations

import csv
import statistics
import sys

import torch

TOTAL = 1 << 31


def time_ms(fn, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    props = torch.cuda.get_device_properties(0)
    rows = []
    for numel in (1 << 20, 1 << 22, 1 << 24, 1 << 26):
        count = TOTAL // numel
        params = [torch.zeros(numel, device="cuda", dtype=torch.float32, requires_grad=True) for _ in range(count)]
        for p in params:
            p.grad = torch.full_like(p, 1e-3)
        model = [torch.empty(numel, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
        for impl in ("fused", "foreach"):
            opt = torch.optim.AdamW(params, lr=1e-4, **{impl: True})
            ms = time_ms(opt.step)
            rows.append(("adamw", impl, numel, count, ms, 28 * TOTAL / ms / 1e6))
            print(rows[-1], flush=True)
            del opt
            torch.cuda.empty_cache()
        ms = time_ms(lambda m=model, p=params: torch._foreach_copy_(m, p))
        rows.append(("copy_to_bf16", "foreach", numel, count, ms, 6 * TOTAL / ms / 1e6))
        print(rows[-1], flush=True)
        del params, model
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w", newline="") as f:
        f.write(
            f"# bench/gpu_optimizer.py: torch {torch.__version__}, {props.name}; 2^31 fp32 parameters; "
            "bytes: adamw 28 per parameter, copy_to_bf16 6\n"
        )
        w = csv.writer(f)
        w.writerow(["op", "impl", "tensor_numel", "tensors", "time_ms", "achieved_gb_s"])
        for r in rows:
            w.writerow([r[0], r[1], r[2], r[3], f"{r[4]:.3f}", f"{r[5]:.0f}"])


if __name__ == "__main__":
    main()
