"""Time one whole transformer layer's forward and backward on the GPU at hand (PyTorch, BF16), to
set beside the sum of its ops in an op database (bench/kernels.md, "Hopper: ops and layers").

    PYTHONPATH=python python3 bench/gpu_layer.py OUT.csv [SECONDS]

Each layer is a plain PyTorch module with Megatron's op sequence (bench/gpu_profile.py times the
same ops one by one): norm, QKV, RoPE (Llama), SDPA attention (cuDNN), projection, dropout and
residual, norm, fc1, GeLU or SwiGLU, fc2, dropout and residual. Run eager, then compiled
(torch.compile fuses the elementwise ops as TorchTitan's runs do). CUDA events, back to back for
SECONDS (default 15): the burst (iterations 1-5) and sustained (last third) medians.
"""

from __future__ import annotations

import csv
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# name, hidden, heads, kv heads, ffn, seq, gated (Llama: RMSNorm, RoPE, SwiGLU, no dropout)
LAYERS = [
    ("gpt-1.7b", 2048, 16, 16, 8192, 4096, False),
    ("gpt-7.1b-tp1", 4096, 32, 32, 16384, 4096, False),
    ("llama3-8b", 4096, 32, 8, 14336, 8192, True),
]


class Layer(nn.Module):
    def __init__(self, h: int, heads: int, kv: int, ffn: int, gated: bool) -> None:
        super().__init__()
        self.h, self.heads, self.kv, self.hd, self.gated = h, heads, kv, h // heads, gated
        norm = nn.RMSNorm if gated else nn.LayerNorm
        self.n1, self.n2 = norm(h), norm(h)
        self.qkv = nn.Linear(h, (heads + 2 * kv) * self.hd, bias=not gated)
        self.proj = nn.Linear(h, h, bias=not gated)
        self.fc1 = nn.Linear(h, ffn * (2 if gated else 1), bias=not gated)
        self.fc2 = nn.Linear(ffn, h, bias=not gated)
        self.p = 0.0 if gated else 0.1

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        s, d = x.shape[2], x.shape[3]
        pos = torch.arange(s, device=x.device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        f = torch.outer(pos, inv)
        cos, sin = f.cos().to(x.dtype), f.sin().to(x.dtype)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, s, h]
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], -1)
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        if self.gated:
            q, k = self.rope(q), self.rope(k)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        a = a.transpose(1, 2).reshape(b, s, self.h)
        x = x + F.dropout(self.proj(a), self.p, self.training)
        y = self.fc1(self.n2(x))
        if self.gated:
            g, u = y.chunk(2, -1)
            y = F.silu(g) * u
        else:
            y = F.gelu(y, approximate="tanh")
        return x + F.dropout(self.fc2(y), self.p, self.training)


def time_layer(layer: nn.Module, x: torch.Tensor, seconds: float, warmup: int = 5) -> dict[str, float]:
    """Back to back for `seconds`: the median of iterations 1-5 after warm-up (burst, what a short
    benchmark reports) and of the last third (sustained, the clock held under the power limit)."""
    dy = torch.randn_like(x)
    for _ in range(warmup):
        layer(x.detach().requires_grad_(True)).backward(dy)
    torch.cuda.synchronize()
    ev = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        xi = x.detach().requires_grad_(True)
        e[0].record()
        out = layer(xi)
        e[1].record()
        out.backward(dy)
        e[2].record()
        ev.append(e)
        if len(ev) % 20 == 0:
            ev[-1][2].synchronize()  # keep the host at most 20 iterations ahead
    torch.cuda.synchronize()
    clk, pw = nvml()
    fwd = [a.elapsed_time(b) * 1e3 for a, b, _ in ev]
    bwd = [b.elapsed_time(c) * 1e3 for _, b, c in ev]
    tail = len(ev) * 2 // 3
    return {
        "fwd_us": statistics.median(fwd[:5]),
        "bwd_us": statistics.median(bwd[:5]),
        "fwd_sustained_us": statistics.median(fwd[tail:]),
        "bwd_sustained_us": statistics.median(bwd[tail:]),
        "iters": len(ev),
        "sm_mhz_end": clk,
        "power_w_end": pw,
    }


def nvml() -> tuple[float, float]:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)), pynvml.nvmlDeviceGetPowerUsage(h) / 1e3
    except Exception:  # noqa: BLE001 - NVML is optional
        return float("nan"), float("nan")


def main(out: str, seconds: float) -> int:
    torch.manual_seed(0)
    rows = []
    for name, h, heads, kv, ffn, s, gated in LAYERS:
        layer = Layer(h, heads, kv, ffn, gated).cuda().to(torch.bfloat16)
        x = torch.randn(1, s, h, device="cuda", dtype=torch.bfloat16)
        for mode in ("eager", "compiled"):
            t0 = time.time()
            try:
                m = torch.compile(layer) if mode == "compiled" else layer
                time.sleep(3)  # cool down: each run starts at the burst clock
                r = time_layer(m, x, seconds)
            except Exception as e:  # noqa: BLE001 - one failure must not lose the other rows
                print(f"{name} {mode}: FAILED {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
                continue
            rows.append({"layer": name, "mode": mode, **{k: f"{v:.1f}" for k, v in r.items()}})
            print(f"{name} {mode}: {rows[-1]} ({time.time() - t0:.1f} s)", flush=True)
        del layer, x
        torch.cuda.empty_cache()
    with open(out, "w", newline="") as f:
        f.write(
            f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}\n"
        )
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(
        main(sys.argv[1] if len(sys.argv) > 1 else "layers.csv", float(sys.argv[2]) if len(sys.argv) > 2 else 15.0)
    )
