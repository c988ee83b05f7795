"""Time Megatron-Core's own MoE layer (router, all-to-all token dispatcher, experts) on the GPU at
hand, eager, and split its time into GPU work and host work (bench/validation.md, "What is still
wrong": the eager dropless MoE rows).

    PYTHONPATH=MCORE python3 bench/gpu_moe_layer.py OUT.csv

MCORE is an unpacked `megatron-core` wheel (0.15.0, the Megatron-Core of NeMo 25.11; nothing else
is needed: Transformer Engine and Apex are absent, so the layer is Megatron-Core's local spec):

    pip download megatron-core==0.15.0 --no-deps --python-version 3.12 --only-binary=:all: -d W
    python3 -m zipfile -e W/megatron_core-0.15.0-cp312-*.whl MCORE
One GPU, so expert parallelism is 1, and each case sets the GPU's local experts and top-k so that
the tokens each local expert multiplies equal those of the published EP run: with T tokens a
micro-batch per GPU, EP ranks holding E/EP experts each and top-k routing, a GPU's local expert
receives T * k * EP / E tokens under balanced routing, the same as T * k / (E/EP) on one GPU
with E/EP experts and top-k. Routing is Megatron's forced balancing (random logits), as in the
Megatron-Bridge benchmarks.

Variants per case:
- `dropless`: the all-to-all dispatcher without a capacity (Megatron-Bridge 25.11's MoE rows):
  the host reads the per-expert token counts once a layer (`_maybe_dtoh_and_synchronize`, an
  event synchronize);
- `tokendrop`: capacity factor 1.0, inputs padded to capacity (Megatron-Bridge 25.09's rows): no
  host read of the counts.
Experts: `grouped` is Megatron's GroupedMLP with its `grouped_gemm.ops.gmm` served by
`torch._grouped_mm` (one kernel for the forward and one for the data gradient, like a grouped-GEMM
library; the weight gradient per expert; a per-expert loop if the shapes are refused, named in the
CSV), `sequential` is SequentialMLP (one linear module per expert,
a Python loop, the upper bound of host work per expert).

Per variant: wall time of a forward and of a forward + backward (CUDA-synchronized, 20 passes
after 5 warm-up, median); then 3 passes under torch.profiler: the GPU's busy time (the union of
kernel and copy intervals), the kernels and host launch calls per pass, the host's time blocked in
synchronizations, and the host's time outside them. GPU-bound means wall ~ busy; host-bound means
wall ~ host time and busy well below it.
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
import time
import types

import torch
import torch.nn.functional as F

# name, hidden, ffn (per expert), local experts, top-k, micro-batch tokens, published EP layout
CASES = [
    ("qwen3-30b-a3b", 2048, 768, 16, 8, 8192, "128 experts top-8, EP8, MBS 2 x 4096 (Bridge H100 row)"),
    ("qwen3-30b-a3b", 2048, 768, 16, 8, 4096, "same, MBS 1 (the v0.2.0 recipe's MBS)"),
    ("gpt-oss-120b", 2880, 2880, 16, 4, 4096, "128 experts top-4, EP8, MBS 1 x 4096 (Bridge H100 row)"),
    ("qwen3-235b-a22b", 4096, 1536, 16, 8, 4096, "128 experts top-8, EP8, MBS 1 x 4096 (Bridge B200/B300 rows)"),
]
VARIANTS = [("dropless", "grouped"), ("tokendrop", "grouped"), ("dropless", "sequential")]
WARMUP, TIMED, PROFILED = 5, 20, 3
MEASURED = [
    "fwd_wall_ms",
    "pass_wall_ms",
    "gpu_busy_ms",
    "busy_over_wall",
    "kernels",
    "launch_calls",
    "host_syncs",
    "blocked_ms_profiled",
    "host_ms_profiled",
    "host_tokens",
    "host_fwd_ms",
    "host_bwd_ms",
    "kernels_fwd",
    "kernels_bwd",
]

DEVICE = "cuda"
GMM_PATH = {"path": "torch._grouped_mm"}


def _loop_mm(a: torch.Tensor, b: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    outs, start = [], 0
    for e, n in enumerate(sizes):
        outs.append(a[start : start + n] @ b[e])
        start += n
    return torch.cat(outs)


def _grouped(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """a: [tokens, k] x b: [experts, k, n] by expert, with `torch._grouped_mm` while it accepts."""
    if GMM_PATH["path"] == "torch._grouped_mm":
        try:
            return torch._grouped_mm(a, b, offs=offs)
        except RuntimeError as err:  # shapes the kernel refuses: fall back, and say so
            GMM_PATH["path"] = f"per-expert loop ({str(err).splitlines()[0][:80]})"
    return _loop_mm(a, b, sizes)


class _Gmm(torch.autograd.Function):
    """One grouped GEMM forward; dgrad as one more, wgrad per expert (a^T dy over its rows)."""

    @staticmethod
    def forward(ctx, a, b, offs, sizes):
        ctx.save_for_backward(a, b, offs)
        ctx.sizes = sizes
        return _grouped(a, b, offs, sizes)

    @staticmethod
    def backward(ctx, dy):
        a, b, offs = ctx.saved_tensors
        dy = dy.contiguous()
        da = _grouped(dy, b.transpose(1, 2).contiguous(), offs, ctx.sizes)
        db, start = torch.empty_like(b), 0
        for e, n in enumerate(ctx.sizes):
            torch.matmul(a[start : start + n].t(), dy[start : start + n], out=db[e])
            start += n
        return da, db, None, None


def _gmm(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor, trans_b: bool = False) -> torch.Tensor:
    """`grouped_gemm.ops.gmm` (a: [tokens, k], b: [experts, k, n], batch_sizes on the host)."""
    if trans_b:
        b = b.transpose(1, 2)
    sizes = [int(n) for n in batch_sizes.tolist()]
    offs = torch.cumsum(batch_sizes.to(a.device), 0).to(torch.int32)
    return _Gmm.apply(a, b, offs, sizes)


def install_grouped_gemm_shim() -> None:
    shim = types.ModuleType("grouped_gemm")
    shim.ops = types.SimpleNamespace(gmm=_gmm)
    sys.modules["grouped_gemm"] = shim


def init_parallel() -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=0, world_size=1)
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
    # Megatron-Core 0.15 leaves `te_general_gemm` undefined when Transformer Engine is absent, and
    # the router's gating linear then fails; None is its own "no TE" path (moe_utils.py l.958).
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    if torch.cuda.is_available():
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(1234)


def build(h: int, ffn: int, experts: int, topk: int, variant: str, impl: str):
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    grouped = impl == "grouped"
    drop = variant == "tokendrop"
    cfg = TransformerConfig(
        num_layers=1,
        hidden_size=h,
        num_attention_heads=32,
        num_query_groups=4,
        ffn_hidden_size=4 * h,
        num_moe_experts=experts,
        moe_ffn_hidden_size=ffn,
        moe_router_topk=topk,
        moe_token_dispatcher_type="alltoall",
        moe_grouped_gemm=grouped,
        moe_use_legacy_grouped_gemm=grouped,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=1e-3,
        moe_router_force_load_balancing=True,
        moe_expert_capacity_factor=1.0 if drop else None,
        moe_pad_expert_input_to_capacity=drop,
        bf16=True,
        params_dtype=torch.bfloat16,
        add_bias_linear=False,
        gated_linear_unit=True,
        activation_func=F.silu,
        normalization="RMSNorm",
        use_cpu_initialization=not torch.cuda.is_available(),
    )
    spec = get_moe_module_spec(
        use_te=False, num_experts=experts, moe_grouped_gemm=grouped, moe_use_legacy_grouped_gemm=grouped
    )
    layer = build_module(spec, config=cfg, layer_number=1)
    return layer.cuda() if torch.cuda.is_available() else layer


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def measure(layer, tokens: int, h: int) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(tokens, 1, h, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(tokens, 1, h, device=DEVICE, dtype=torch.bfloat16)

    def fwd():
        out, _ = layer(x)
        return out

    def step():
        fwd().backward(g)

    def timed(fn) -> float:
        times = []
        for _ in range(TIMED):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    for _ in range(WARMUP):
        step()
    fwd_ms = timed(fwd)
    pass_ms = timed(step)

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(PROFILED):
            step()
        torch.cuda.synchronize()
        prof_wall_ms = (time.perf_counter() - t0) * 1e3
    # (device?, name, start us, end us) of every event, from kineto's own records
    spans = [
        (ev.device_type() == DeviceType.CUDA, ev.name(), ev.start_ns() / 1e3, (ev.start_ns() + ev.duration_ns()) / 1e3)
        for ev in prof.profiler.kineto_results.events()
    ]
    device, kernels, launches, syncs, blocked_us = [], 0, 0, 0, 0.0
    for on_device, name, start, end in spans:
        if on_device:
            device.append((start, end))
            if not name.startswith(("Memcpy", "Memset")):
                kernels += 1
        elif name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC"):
            launches += 1
        elif name in ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize"):
            syncs += 1
            blocked_us += end - start
    n = PROFILED
    busy_ms = _union_us(device) / 1e3 / n
    return {
        "fwd_wall_ms": round(fwd_ms, 3),
        "pass_wall_ms": round(pass_ms, 3),
        "gpu_busy_ms": round(busy_ms, 3),
        "busy_over_wall": round(busy_ms / pass_ms, 3),
        "kernels": round(kernels / n, 1),
        "launch_calls": round(launches / n, 1),
        "host_syncs": round(syncs / n, 1),
        "blocked_ms_profiled": round(blocked_us / 1e3 / n, 3),
        "host_ms_profiled": round((prof_wall_ms - blocked_us / 1e3) / n, 3),
    }


def host_only(layer, h: int, tokens: int = 512) -> dict:
    """The same layer at `tokens` tokens, where every kernel is a few microseconds: the wall time is
    the host's issue time. Kernels per direction from one profiled forward and one backward."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(tokens, 1, h, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(tokens, 1, h, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(WARMUP):
        layer(x)[0].backward(g)
    fwd, bwd = [], []
    for _ in range(TIMED):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = layer(x)[0]
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        out.backward(g)
        torch.cuda.synchronize()
        fwd.append((t1 - t0) * 1e3)
        bwd.append((time.perf_counter() - t1) * 1e3)
    counts = []
    out = None
    for phase in ("fwd", "bwd"):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            if phase == "fwd":
                out = layer(x)[0]
            else:
                out.backward(g)
            torch.cuda.synchronize()
        counts.append(
            sum(
                1
                for ev in prof.profiler.kineto_results.events()
                if ev.device_type() == DeviceType.CUDA and not ev.name().startswith(("Memcpy", "Memset"))
            )
        )
    return {
        "host_tokens": tokens,
        "host_fwd_ms": round(statistics.median(fwd), 3),
        "host_bwd_ms": round(statistics.median(bwd), 3),
        "kernels_fwd": counts[0],
        "kernels_bwd": counts[1],
    }


def reference_ops(out_path: str) -> list[str]:
    """Host cost of plain eager work on this machine's CPU, for comparison with the per-op figures
    llmsim cites (`compute.host`): an op with no autograd, one recorded by autograd, a PyTorch
    nn.Linear forward and Megatron-Core's local ColumnParallelLinear forward (tiny tensors)."""
    from megatron.core.tensor_parallel import ColumnParallelLinear
    from megatron.core.transformer.transformer_config import TransformerConfig

    n = 2000
    lines = []

    def per_call(fn) -> float:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            best.append((time.perf_counter() - t0) / n * 1e6)
        return statistics.median(best)

    x = torch.ones(8, 64, device=DEVICE, dtype=torch.bfloat16)
    lines.append(f"# host us per call, aten add (no grad): {per_call(lambda: x + 1):.2f}")
    xg = x.clone().requires_grad_(True)
    lines.append(f"# host us per call, aten mul recorded by autograd: {per_call(lambda: xg * 2):.2f}")
    lin = torch.nn.Linear(64, 64, bias=False, device=DEVICE, dtype=torch.bfloat16)
    lines.append(f"# host us per call, torch.nn.Linear forward (autograd): {per_call(lambda: lin(xg)):.2f}")
    cfg = TransformerConfig(
        num_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_cpu_initialization=DEVICE == "cpu",
    )
    col = ColumnParallelLinear(
        64, 64, config=cfg, init_method=torch.nn.init.zeros_, bias=False, gather_output=False
    ).to(DEVICE)
    xs = xg.view(8, 1, 64)
    lines.append(
        f"# host us per call, Megatron-Core ColumnParallelLinear forward (autograd): {per_call(lambda: col(xs)):.2f}"
    )
    return lines


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    install_grouped_gemm_shim()
    init_parallel()
    import megatron.core

    props = torch.cuda.get_device_properties(0)
    head = (
        f"# bench/gpu_moe_layer.py: Megatron-Core {megatron.core.__version__} MoE layer (local spec: no TE, "
        f"no Apex), eager, BF16; torch {torch.__version__}, {props.name}, {props.multi_processor_count} SMs; "
        f"{WARMUP} warm-up, median of {TIMED} timed passes, {PROFILED} profiled"
    )
    fields = ["model", "variant", "experts_impl", "gmm_path", "tokens", "local_experts", "topk", "hidden", "ffn"]
    rows = []
    for name, h, ffn, experts, topk, tokens, what in CASES:
        for variant, impl in VARIANTS:
            GMM_PATH["path"] = "torch._grouped_mm"
            torch.manual_seed(0)
            layer = build(h, ffn, experts, topk, variant, impl)
            row = dict(zip(fields, [name, variant, impl, "", tokens, experts, topk, h, ffn]))
            try:
                row.update(measure(layer, tokens, h))
                row.update(host_only(layer, h))
            except Exception as err:  # noqa: BLE001 (one failed variant must not lose the others)
                import traceback

                where = traceback.extract_tb(err.__traceback__)[-1]
                row["error"] = (
                    f"{type(err).__name__}: {str(err).splitlines()[0][:160]} "
                    f"({os.path.basename(where.filename)}:{where.lineno})"
                )
            row["gmm_path"] = GMM_PATH["path"] if impl == "grouped" else "per-expert modules"
            row["case"] = what
            rows.append(row)
            print(row, flush=True)
            del layer
            torch.cuda.empty_cache()
    keys = fields + MEASURED + ["error", "case"]
    refs = reference_ops(sys.argv[1])
    print("\n".join(refs), flush=True)
    with open(sys.argv[1], "w", newline="") as f:
        f.write(head + "\n")
        f.write("\n".join(refs) + "\n")
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


if __name__ == "__main__":
    main()
