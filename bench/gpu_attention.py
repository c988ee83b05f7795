"""cuDNN attention throughput against the work in one launch (bench/kernels.md, "Hopper measured").

    python3 bench/gpu_attention.py OUT.csv [cudnn|flash]

Causal SDPA with cuDNN's fused kernel, or PyTorch's FlashAttention-2 (`flash`) (BF16, batch 1) over sequence length x heads x head size,
forward and backward, burst times as `llmsim profile` takes them (L2 flushed, the GPU held 1 ms
before each run, median of 10). TFLOP/s in FlashAttention's benchmark convention (forward
4·s²·heads·d halved when causal; backward 2.5x that), so a row sits beside llmsim's attention table
(crates/llmsim-compute/data/attention.csv: 16k tokens x 16 heads of 128 in every row).
"""

from __future__ import annotations

import csv
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SEQS = (1024, 2048, 4096, 8192, 16384)
HEADS = (2, 4, 8, 16, 32, 64)
HEAD_DIMS = (64, 128)


def timed(fn, flush: torch.Tensor, iters: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        torch.cuda._sleep(2_000_000)
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts) * 1e3


def main(out: str, backend: str) -> int:
    which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for d in HEAD_DIMS:
        for s in SEQS:
            for h in HEADS:
                q, k, v = (
                    torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
                )
                with sdpa_kernel(which):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                do = torch.randn_like(o)

                def fwd(q=q, k=k, v=v):
                    with sdpa_kernel(which):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def bwd(o=o, q=q, k=k, v=v, do=do):
                    return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

                flops = 4.0 * s * s * h * d / 2
                tf, tb = timed(fwd, flush), timed(bwd, flush)
                rows.append(
                    {
                        "head_dim": d,
                        "seq": s,
                        "heads": h,
                        "fwd_us": f"{tf:.1f}",
                        "bwd_us": f"{tb:.1f}",
                        "fwd_tflops": f"{flops / tf / 1e6:.0f}",
                        "bwd_tflops": f"{2.5 * flops / tb / 1e6:.0f}",
                    }
                )
                print(rows[-1], flush=True)
                del q, k, v, o, do
    with open(out, "w", newline="") as f:
        f.write(
            f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
            f"SDPA backend {backend}\n"
        )
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "attention.csv", sys.argv[2] if len(sys.argv) > 2 else "cudnn"))
