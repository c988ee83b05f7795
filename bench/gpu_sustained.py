"""Burst against sustained compute rate on the GPU at hand (bench/kernels.md, "Hopper: sustained").

    PYTHONPATH=python python3 bench/gpu_sustained.py OUT.csv [SECONDS]

Each workload runs back to back for SECONDS (default 15) with no idle gaps, as a training step's
kernels do; CUDA events time each 0.1 s window, and NVML samples the SM clock and board power
in each. The first window is the burst rate (what a short kernel benchmark reports); the median
of the last third is the sustained rate. Workloads: a BF16 GEMM and an FP8 GEMM at Llama-3 405B's
MLP-up shape on TP8 (8192 x 16384 x 13312), and cuDNN attention (causal, 8,192 tokens, 16 heads
of 128, backward included).
"""

from __future__ import annotations

import csv
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    import pynvml

    pynvml.nvmlInit()
    NVML = pynvml.nvmlDeviceGetHandleByIndex(0)
except Exception:  # noqa: BLE001 - NVML is optional: clocks and power are then not recorded
    NVML = None


def nvml() -> tuple[float, float]:
    if NVML is None:
        return float("nan"), float("nan")
    clk = pynvml.nvmlDeviceGetClockInfo(NVML, pynvml.NVML_CLOCK_SM)
    return float(clk), pynvml.nvmlDeviceGetPowerUsage(NVML) / 1e3


def workloads() -> list[tuple[str, float, object]]:
    m, k, n = 8192, 16384, 13312
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = [("gemm-bf16", 2.0 * m * n * k, lambda: a @ b.t())]
    if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability() >= (8, 9):
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        out.append(
            (
                "gemm-fp8",
                2.0 * m * n * k,
                lambda: torch._scaled_mm(
                    a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
                ),
            )
        )
    s, heads, hd = 8192, 16, 128
    q, kk, v = (torch.randn(1, heads, s, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(1, heads, s, hd, device="cuda", dtype=torch.bfloat16)

    def attn() -> None:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        torch.autograd.grad(o, (q, kk, v), do)

    # causal: half the 4·s²·hd·heads forward FLOPs; backward 2.5x the forward
    out.append(("attention-cudnn-fwd+bwd", 3.5 * 4.0 * s * s * hd * heads / 2, attn))
    return out


def run(name: str, flops: float, fn, seconds: float, window: float = 0.1) -> list[dict]:
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    reps = 1
    # how many calls fill one window
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    torch.cuda.synchronize()
    reps = max(1, int(window * 1e3 / max(e0.elapsed_time(e1), 1e-3)))
    rows = []
    i = 0
    while time.time() - t0 < seconds:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        clk, pw = nvml()  # sampled while the window runs
        b.synchronize()
        ms = a.elapsed_time(b)
        rows.append(
            {
                "workload": name,
                "window": i,
                "t_s": f"{time.time() - t0:.2f}",
                "tflops": f"{flops * reps / ms / 1e9:.1f}",
                "sm_mhz": f"{clk:.0f}",
                "power_w": f"{pw:.0f}",
            }
        )
        i += 1
    return rows


def main(out: str, seconds: float) -> int:
    all_rows = []
    for name, flops, fn in workloads():
        time.sleep(5)  # cool down between workloads, so each first window is a burst
        rows = run(name, flops, fn, seconds)
        all_rows += rows
        tail = rows[len(rows) * 2 // 3 :]
        burst = float(rows[0]["tflops"])
        sus = statistics.median(float(r["tflops"]) for r in tail)
        clk = statistics.median(float(r["sm_mhz"]) for r in tail)
        pw = statistics.median(float(r["power_w"]) for r in tail)
        print(
            f"{name}: burst {burst:.0f} TFLOP/s (SM {rows[0]['sm_mhz']} MHz), sustained {sus:.0f} "
            f"(SM {clk:.0f} MHz, {pw:.0f} W), ratio {sus / burst:.3f}; {len(rows)} windows",
            flush=True,
        )
    with open(out, "w", newline="") as f:
        f.write(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
        w = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        w.writeheader()
        w.writerows(all_rows)
    return 0


if __name__ == "__main__":
    sys.exit(
        main(sys.argv[1] if len(sys.argv) > 1 else "sustained.csv", float(sys.argv[2]) if len(sys.argv) > 2 else 15.0)
    )
