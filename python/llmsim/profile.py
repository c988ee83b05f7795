"""``llmsim profile``: measure an op-time database on the device at hand and write the CSV that a
scenario's ``compute.database`` reads (``gpu,op,shape,time_us``; crates/llmsim-compute/src/db.rs).

The scenario's distinct compute ops come from the simulator itself (the ``ops.csv`` of an
in-process ``llmsim run``), so the op names and shape keys are exactly the ones the database is
matched on. Each op's kernel dimensions (GEMM M/K/N, attention batch/heads/sequence/head size,
element counts) are recovered from its shape key and FLOPs, then the kernel is timed on a
backend: PyTorch (``pip install llmsim[profile]``; CUDA events, or wall time on a CPU) or NumPy
(CPU, fp32; tests the whole path without a GPU, its times are not a GPU's).

Optionally (``--collectives``, PyTorch + CUDA, 2+ GPUs) NCCL all-reduce/all-gather/reduce-scatter
over the node's GPUs are timed too and written as a separate table; nothing in llmsim reads that
table yet (the scale-up model takes ``cluster.nvlink_bandwidth``; see ``collectives_hint``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _native
from .core import PathLike, Scenario

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")

# GEMMs by the role of the hidden size h (crates/llmsim-workload/src/ops.rs): `[m,k]·[k,n]`.
# LatentMoE's experts take latent-wide tokens: h is then the shape's `latent` for expert_fc1/fc2.
GEMM_K_IS_H = ("attn_qkv", "mlp_fc1", "shared_fc1", "expert_fc1", "logits", "moe_router", "moe_latent_down")
GEMM_N_IS_H = ("attn_proj", "mlp_fc2", "shared_fc2", "expert_fc2", "moe_latent_up")
# GEMMs over the rank's own (sequence-parallel) tokens, before the MoE dispatch or after it.
GEMM_M_IS_TOK_SP = ("moe_router", "moe_latent_down", "moe_latent_up")
NORMS = ("input_norm", "post_attn_norm", "final_norm")
RESIDUALS = ("attn_residual", "mlp_residual", "moe_shared_add")  # each adds two [tokens, h] tensors
ACTIVATIONS = ("mlp_act", "shared_act", "expert_act")
# Unfused attention's batched GEMMs (ops.rs `unfused_attention`), `[m,k]·[k,n]` per head in terms of
# the queries `sq`, the keys `skv`, and the query/key and value head sizes `dqk`, `dv`.
ATTN_BMM = {
    "core_attention_qk": ("sq", "skv", "dqk"),
    "core_attention_av": ("sq", "dv", "skv"),
    "core_attention_av_dp": ("sq", "skv", "dv"),
    "core_attention_av_dv": ("skv", "dv", "sq"),
    "core_attention_qk_dq": ("sq", "dqk", "skv"),
    "core_attention_qk_dk": ("skv", "dqk", "sq"),
}
DROPOUT_P = 0.1
SDPA_BACKENDS = ("auto", "flash", "cudnn", "efficient")
SPIN_S = 1e-3  # the GPU's wait before each timed run while the host queues the op (TorchBackend)

# Every compute op name the transformer generator emits: a database row with another name never
# matches (check_database says so).
KNOWN_OPS = tuple(
    sorted(
        {g + x for g in GEMM_K_IS_H + GEMM_N_IS_H for x in ("", "_dgrad", "_wgrad")}
        | {
            b + x
            for b in ("core_attention", *NORMS, *RESIDUALS, *ACTIVATIONS)
            + ("embedding_dropout", "cross_entropy", "moe_permute", "moe_unpermute")
            + ("moe_sort_chunks", "moe_unsort_chunks", "rope", "attn_qk_norm", "cp_attn_merge")
            for x in ("", "_bwd")
        }
        | set(ATTN_BMM)
        | {"core_attention_" + b + x for b in ("softmax", "dropout", "kv_expand") for x in ("", "_bwd")}
        | {"embedding", "embedding_wgrad", "embedding_wgrad_zero", "embedding_main_grad_add"}
        | {"optimizer_step", "grad_norm", "zero_grad"}
        | {"grad_nan_check", "grad_scale", "grad_scale_per_token", "fsdp_copy_out"}
    )
)


class ProfileError(_native.LlmsimError):
    """An op the profiler cannot turn into a kernel, or a backend that cannot run."""


@dataclass
class Kernel:
    """One distinct compute op of the scenario and the kernel that times it."""

    op: str
    shape: str
    op_class: str
    kind: str
    """gemm, attention, softmax, norm, residual, activation, dropout, rope, merge, cross_entropy, embedding,
    embedding_wgrad, accumulate, gather, scatter, optimizer"""
    variant: str = "fwd"
    """fwd or bwd; for a GEMM fwd, dgrad or wgrad"""
    dims: dict[str, int] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        d = ",".join(f"{k}={v}" for k, v in self.dims.items())
        f = "".join(f",{k}" for k, v in self.flags.items() if v)
        return f"{self.kind}/{self.variant}[{d}{f}]"


# ---------------------------------------------------------------------------------------------
# The scenario's ops


@contextlib.contextmanager
def _captured_fds() -> Iterator[list[str]]:
    """Redirects file descriptors 1 and 2 (the Rust side prints there) into a temporary file;
    yields a list that holds its text afterwards."""
    out: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "replace"))


def run_ops(scenario: PathLike, sets: Sequence[str] = ()) -> list[dict[str, str]]:
    """The rows of ``ops.csv`` of one ``llmsim run`` of the scenario (analytical backend, free
    communication: only the compute ops matter here)."""
    with tempfile.TemporaryDirectory(prefix="llmsim-profile-") as d:
        argv = ["llmsim", "run", os.fspath(scenario), "--out", d, "--backend", "analytical", "--ideal-comm"]
        for s in [*sets, "output.ops=true", "output.trace=false", "output.flows=false"]:
            argv += ["--set", s]
        with _captured_fds() as text:
            code = _native.cli_main(argv)
        if code != 0:
            # The same run through the API raises the typed error (ComputeError, WorkloadError...).
            sc = Scenario.from_yaml(scenario, list(sets))
            _native.run(sc.native, True, False)
            msg = text[0].strip().removeprefix("error: ") if text else ""
            raise _native.LlmsimError(msg or f"llmsim run {scenario} failed (exit {code})")
        with open(os.path.join(d, "ops.csv"), newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))


def distinct_ops(rows: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """One row per (op, shape), in first-seen order."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        seen.setdefault((r["op"], r["shape"]), r)
    return list(seen.values())


def _shape(key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in key.split(","):
        k, _, v = part.partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


def _exact(num: float, den: int, what: str, row: dict[str, str], field: str = "flops") -> int:
    v = round(num / den) if den else 0
    if v <= 0 or abs(v * den - num) > 1e-6 * max(num, 1.0):
        raise ProfileError(
            f"op `{row['op']}` shape `{row['shape']}`: cannot derive {what} from {field}={row[field]}; "
            "the profiler's op table (python/llmsim/profile.py) does not match the workload generator"
        )
    return v


def kernel_of(row: dict[str, str], act_bytes: int) -> Kernel:
    """The kernel of one ops.csv row. ``act_bytes``: bytes per activation element (2 for bf16).

    Raises ``ProfileError`` for an op the profiler does not know."""
    op, cls = row["op"], row["class"]
    s = _shape(row["shape"])
    flops, nbytes = float(row["flops"]), float(row["bytes"])
    b, sl, h, tp = s.get("b", 0), s.get("s", 0), s.get("h", 0), max(s.get("tp", 1), 1)
    tok = b * sl
    tok_sp = tok // tp if s.get("sp") else tok
    k = Kernel(op, row["shape"], cls, "")
    base, variant = op, "fwd"
    for suffix in ("_dgrad", "_wgrad", "_bwd"):
        if op.endswith(suffix):
            base, variant = op[: -len(suffix)], suffix[1:]
    k.variant = variant
    if base in GEMM_K_IS_H + GEMM_N_IS_H:
        m = tok_sp if base in GEMM_M_IS_TOK_SP else tok
        groups, width = 1, h
        if base.startswith("expert_"):
            m, groups, width = tok * s["topk"], s["experts"], s.get("latent", h)
        other = _exact(flops, 2 * m * width, "the GEMM's other dimension", row)
        kk, n = (width, other) if base in GEMM_K_IS_H else (other, width)
        k.kind, k.dims = "gemm", {"m": m, "k": kk, "n": n, "groups": groups}
        if base == "moe_router" and variant == "fwd":
            k.flags["topk"] = s.get("topk", 1)
    elif op in ATTN_BMM:
        # One batched GEMM over every local head (`torch.bmm`), in the activation dtype.
        skv = s.get("window", sl)
        sizes = {"sq": sl, "skv": skv}
        if "dqk" in s:
            sizes |= {"dqk": s["dqk"], "dv": s["dv"]}
        else:
            hd = _exact(flops, 2 * b * s["heads"] * sl * skv, "the head size", row)
            sizes |= {"dqk": hd, "dv": hd}
        m, n, kk = (sizes[x] for x in ATTN_BMM[op])
        g = b * s["heads"]
        k.kind, k.dims, k.flags = "gemm", {"m": g * m, "k": kk, "n": n, "groups": g}, {"bmm": True}
    elif base == "core_attention_softmax":
        # The softmax over each query's keys (unfused attention's scores): forward and backward.
        skv = s.get("window", sl)
        k.kind, k.dims = "softmax", {"rows": b * s["heads"] * sl, "cols": skv}
    elif base == "core_attention_dropout":
        k.kind, k.dims = "dropout", {"elements": b * s["heads"] * sl * s.get("window", sl)}
    elif base == "core_attention_kv_expand":
        # `repeat_interleave` of K and V to the query heads: a copy (read the groups, write the
        # expansion; backward the reverse, summed).
        k.kind, k.dims = "copy", {"bytes": _exact(nbytes, 2, "the copied bytes", row, "bytes")}
    elif base == "core_attention":
        heads, kv = s["heads"], s["kv"]
        skv = s.get("kv_s", sl)
        ratio = 1.0
        if variant == "bwd":
            ratio = 2.5 if cls == "FlashAttention" else 2.0
        d = _exact(flops / ratio, 4 * b * sl * heads * skv, "the head size", row)
        k.kind, k.dims = "attention", {"b": b, "heads": heads, "kv_heads": kv, "sq": sl, "skv": skv, "head_dim": d}
        k.flags = {"flash": cls == "FlashAttention", "causal": skv == sl}
    elif base in NORMS:
        k.kind, k.dims = "norm", {"tokens": tok_sp, "h": h}
    elif base == "attn_qk_norm":
        # An RMSNorm over each query and key head (ops.rs `norm_width`): 4 (fwd) or 8 (bwd) FLOPs
        # an element; the forward's bytes are 2 per element plus the head-wide weight.
        e = _exact(flops, 8 if variant == "bwd" else 4, "the element count", row)
        if variant == "fwd":
            width = _exact(nbytes - 2 * e * act_bytes, act_bytes, "the head size", row, "bytes")
        else:
            width = _exact(nbytes - 3 * e * act_bytes, 4, "the head size", row, "bytes")
        k.kind, k.dims = "norm", {"tokens": e // width, "h": width}
    elif base == "rope":
        # Rotary embedding over the queries and keys (ops.rs `rope`): 3 FLOPs an element.
        k.kind, k.dims = "rope", {"elements": _exact(flops, 3, "the element count", row)}
    elif base == "cp_attn_merge":
        # Context-parallel attention's per-step merges (ops.rs `cp_merges`): 2 FLOPs a merged
        # element; timed as a scaled accumulate, `acc + x * s`, over those elements.
        k.kind, k.dims = "merge", {"elements": _exact(flops, 2, "the merged element count", row)}
    elif base in RESIDUALS:
        k.kind, k.dims = "residual", {"elements": tok_sp * h}
    elif base in ACTIVATIONS:
        e = _exact(flops, 16 if variant == "bwd" else 8, "the element count", row)
        reads = nbytes / (e * act_bytes)
        gated = reads > (4.0 if variant == "bwd" else 2.5)  # 5 vs 3 (bwd), 3 vs 2 (fwd): ops.rs
        k.kind, k.dims, k.flags = "activation", {"elements": e}, {"gated": gated}
    elif base == "embedding_dropout":
        k.kind, k.dims = "dropout", {"elements": tok_sp * h}
    elif base == "cross_entropy":
        vl = s["vocab"] // tp
        k.kind, k.dims = "cross_entropy", {"tokens": tok, "vocab": vl}
    elif base == "embedding":
        rows = s["vocab"] // tp
        k.kind = "embedding_wgrad" if variant == "wgrad" else "embedding"
        k.dims = {"tokens": tok, "h": h, "rows": rows}
    elif op == "embedding_wgrad_zero":
        # The dense gradient of the vocabulary shard zero-filled (ops.rs `embedding`: its bytes
        # written once, in the activations' dtype).
        n = (s["vocab"] // tp) * h
        k.kind, k.dims = "zero_grad", {"params": n, "bytes": _exact(nbytes, n, "the dense gradient", row, "bytes")}
    elif op == "embedding_main_grad_add":
        # Megatron's DDP hook: `main_grad.add_(grad)` over the vocabulary shard (ops.rs: the
        # gradient read, `main_grad` read and written).
        n = _exact(flops, 1, "the dense gradient", row)
        main = (_exact(nbytes, n, "the bytes", row, "bytes") - act_bytes) // 2
        k.kind, k.dims = "accumulate", {"elements": n, "main_bytes": main}
    elif base in ("moe_permute", "moe_unpermute"):
        # permute gathers tokens into expert order, unpermute scatters them back; backwards swap.
        gather = (base == "moe_permute") == (variant == "fwd")
        k.kind, k.dims = ("gather" if gather else "scatter"), {"tokens": tok_sp, "routed": tok_sp * s["topk"], "h": h}
    elif base in ("moe_sort_chunks", "moe_unsort_chunks"):
        # The all-to-all dispatcher's second permutation: a gather of the received rows into
        # local-expert order (ops.rs: read and write `routed · h` activations).
        routed = _exact(nbytes, 2 * h * act_bytes, "the received rows", row, "bytes")
        k.kind, k.dims = "gather", {"tokens": routed, "routed": routed, "h": h}
    elif base == "optimizer_step":
        k.kind, k.dims = "optimizer", {"params": s["params"]}
    elif base == "grad_norm":
        # The L2 norm of the optimizer's FP32 gradients (ops.rs: 4 bytes read a parameter).
        k.kind, k.dims = "grad_norm", {"params": s["params"]}
    elif base == "zero_grad":
        # The gradient buffer zeroed (ops.rs: the gradient dtype's bytes written a parameter).
        k.kind, k.dims = (
            "zero_grad",
            {"params": s["params"], "bytes": _exact(nbytes, s["params"], "the gradient buffer", row, "bytes")},
        )
    elif base == "grad_nan_check":
        # The L2 norm of one gradient bucket (ops.rs `grad_bucket_passes`: 2 FLOPs and the
        # gradient's bytes read a parameter).
        n = _exact(flops, 2, "the bucket's parameters", row)
        k.kind, k.dims = "grad_norm", {"params": n, "bytes": _exact(nbytes, n, "the gradient", row, "bytes")}
    elif base in ("grad_scale", "grad_scale_per_token"):
        # In-place scaling of gradients (1 FLOP, one read and one write a gradient).
        n = int(flops)
        k.kind, k.dims = "scale", {"params": n, "bytes": _exact(nbytes, 2 * n, "the gradient", row, "bytes")}
    elif base == "fsdp_copy_out":
        # FSDP2's copy of the gathered parameters (one read and one write of the gathered bytes).
        k.kind, k.dims = "copy", {"bytes": _exact(nbytes, 2, "the gathered bytes", row, "bytes")}
    else:
        raise ProfileError(f"op `{op}` (class {cls}, shape `{row['shape']}`) has no kernel in the profiler")
    return k


def kernels(rows: Sequence[dict[str, str]], act_bytes: int) -> tuple[list[Kernel], list[tuple[dict[str, str], str]]]:
    """Kernels of the distinct ops, and the ops left out with why (they keep the roofline)."""
    out, skipped = [], []
    for r in distinct_ops(rows):
        try:
            out.append(kernel_of(r, act_bytes))
        except (ProfileError, KeyError) as e:
            skipped.append((r, str(e) if isinstance(e, ProfileError) else f"shape key lacks {e}"))
    return out, skipped


# ---------------------------------------------------------------------------------------------
# Backends


class Backend:
    name = "?"
    device = "cpu"

    def device_name(self) -> str:
        return platform.processor() or platform.machine()

    def provenance(self) -> list[str]:
        return []

    def build(self, k: Kernel) -> Callable[[], Any]:
        raise NotImplementedError

    def time_us(self, fn: Callable[[], Any], warmup: int, iters: int) -> float:
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(max(iters, 1)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6

    def release(self) -> None:
        pass


class NumpyBackend(Backend):
    """CPU, fp32 (NumPy has no bf16 math): exercises the whole path without a GPU."""

    name = "numpy"

    def __init__(self) -> None:
        import numpy as np

        self.np = np
        self.rng = np.random.default_rng(0)

    def provenance(self) -> list[str]:
        return [f"numpy {self.np.__version__}, fp32 on CPU ({self.device_name()}); NOT GPU times"]

    def _r(self, *shape: int) -> Any:
        return self.rng.standard_normal(shape, dtype=self.np.float32)

    def build(self, k: Kernel) -> Callable[[], Any]:
        np, d, v = self.np, k.dims, k.variant
        if k.kind == "gemm":
            g, n, kk = d["groups"], d["n"], d["k"]
            m = -(-d["m"] // g)
            x, w, dy = self._r(g, m, kk), self._r(g, kk, n), self._r(g, m, n)
            if v == "dgrad":
                return lambda: np.matmul(dy, w.transpose(0, 2, 1))
            if v == "wgrad":
                return lambda: np.matmul(x.transpose(0, 2, 1), dy)
            topk = k.flags.get("topk")
            if topk:
                return lambda: np.argpartition(np.matmul(x, w), -topk, axis=-1)
            return lambda: np.matmul(x, w)
        if k.kind == "attention":
            b, a, sq, skv, hd = d["b"], d["heads"], d["sq"], d["skv"], d["head_dim"]
            q, kt, vv, do = self._r(b, a, sq, hd), self._r(b, a, skv, hd), self._r(b, a, skv, hd), self._r(b, a, sq, hd)
            mask = np.triu(np.ones((sq, skv), dtype=bool), 1) if k.flags["causal"] else None
            scale = 1.0 / np.sqrt(hd)

            def probs() -> Any:
                sc = np.matmul(q, kt.transpose(0, 1, 3, 2)) * scale
                if mask is not None:
                    sc[..., mask] = -np.inf
                sc -= sc.max(-1, keepdims=True)
                np.exp(sc, out=sc)
                sc /= sc.sum(-1, keepdims=True)
                return sc

            if v == "fwd":
                return lambda: np.matmul(probs(), vv)

            def bwd() -> Any:
                p = probs()
                dv = np.matmul(p.transpose(0, 1, 3, 2), do)
                dp = np.matmul(do, vv.transpose(0, 1, 3, 2))
                ds = p * (dp - (dp * p).sum(-1, keepdims=True))
                return np.matmul(ds, kt), np.matmul(ds.transpose(0, 1, 3, 2), q), dv

            return bwd
        if k.kind == "softmax":
            x, dy = self._r(d["rows"], d["cols"]), self._r(d["rows"], d["cols"])

            def softmax() -> Any:
                p = np.exp(x - x.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                return p if v == "fwd" else p * (dy - (dy * p).sum(-1, keepdims=True))

            return softmax
        if k.kind == "norm":
            x, dy, w = self._r(d["tokens"], d["h"]), self._r(d["tokens"], d["h"]), self._r(d["h"])

            def norm() -> Any:
                mu = x.mean(-1, keepdims=True)
                xc = x - mu
                rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
                if v == "fwd":
                    return xc * rstd * w
                xh = xc * rstd
                g = dy * w
                dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
                return dx, (dy * xh).sum(0)

            return norm
        if k.kind == "merge":
            acc, x = self._r(d["elements"]), self._r(d["elements"])
            s = np.float32(0.5)
            return lambda: acc + x * s
        if k.kind == "rope":
            x = self._r(d["elements"] // 2, 2)
            cos, sin = np.cos(x[:, :1]), np.sin(x[:, :1])
            sign = np.array([-1.0, 1.0], dtype=x.dtype)
            # Forward rotates x; backward rotates the gradient the other way: the same traffic.
            return lambda: x * cos + x[:, ::-1] * sign * sin
        if k.kind in ("residual", "dropout"):
            e = d["elements"]
            x, r = self._r(e), self._r(e)
            mask = self.rng.random(e) >= DROPOUT_P
            s = np.float32(1.0 / (1.0 - DROPOUT_P))
            if v != "fwd":
                return lambda: x * mask * s
            if k.kind == "residual":
                return lambda: x * (self.rng.random(e) >= DROPOUT_P) * s + r
            return lambda: x * (self.rng.random(e) >= DROPOUT_P) * s
        if k.kind == "activation":
            e = d["elements"]
            a, g, dy = self._r(e), self._r(e), self._r(e)
            sig = lambda t: 1.0 / (1.0 + np.exp(-t))
            if k.flags["gated"]:
                if v == "fwd":
                    return lambda: a * sig(a) * g
                return lambda: (dy * g * (sig(a) * (1 + a * (1 - sig(a)))), dy * a * sig(a))
            c = np.float32(np.sqrt(2 / np.pi))
            if v == "fwd":
                return lambda: 0.5 * a * (1 + np.tanh(c * (a + 0.044715 * a**3)))

            def gelu_bwd() -> Any:
                t = np.tanh(c * (a + 0.044715 * a**3))
                return dy * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + 3 * 0.044715 * a * a))

            return gelu_bwd
        if k.kind == "cross_entropy":
            n, vl = d["tokens"], d["vocab"]
            logits = self._r(n, vl)
            tgt = self.rng.integers(0, vl, n)

            def ce() -> Any:
                z = logits - logits.max(-1, keepdims=True)
                p = np.exp(z)
                ssum = p.sum(-1, keepdims=True)
                if v == "fwd":
                    return (np.log(ssum[:, 0]) - z[np.arange(n), tgt]).mean()
                p /= ssum
                p[np.arange(n), tgt] -= 1.0
                return p

            return ce
        if k.kind == "embedding":
            table = self._r(d["rows"], d["h"])
            ids = self.rng.integers(0, d["rows"], d["tokens"])
            return lambda: table[ids]
        if k.kind == "embedding_wgrad":
            grad = np.zeros((d["rows"], d["h"]), dtype=np.float32)
            dy = self._r(d["tokens"], d["h"])
            ids = self.rng.integers(0, d["rows"], d["tokens"])
            return lambda: np.add.at(grad, ids, dy)
        if k.kind == "accumulate":
            main = np.zeros(d["elements"], dtype=np.float32 if d["main_bytes"] == 4 else np.float16)
            g = self._r(d["elements"]).astype(main.dtype)
            return lambda: np.add(main, g, out=main)
        if k.kind in ("gather", "scatter"):
            idx = self.rng.integers(0, d["tokens"], d["routed"])
            if k.kind == "gather":
                x = self._r(d["tokens"], d["h"])
                return lambda: x[idx]
            y, out = self._r(d["routed"], d["h"]), np.zeros((d["tokens"], d["h"]), dtype=np.float32)
            return lambda: np.add.at(out, idx, y)
        if k.kind == "optimizer":
            n = d["params"]
            p, gr, m1, m2 = self._r(n), self._r(n), np.zeros(n, np.float32), np.zeros(n, np.float32)

            def adam() -> None:
                m1[:] = 0.9 * m1 + 0.1 * gr
                m2[:] = 0.999 * m2 + 0.001 * gr * gr
                p[:] -= 1e-4 * m1 / (np.sqrt(m2) + 1e-8)

            return adam
        if k.kind == "grad_norm":
            g = self._r(d["params"]).astype(np.float16 if d.get("bytes", 4) == 2 else np.float32)
            return lambda: np.sqrt(np.dot(g, g))
        if k.kind == "scale":
            g = self._r(d["params"]).astype(np.float16 if d["bytes"] == 2 else np.float32)
            return lambda: np.multiply(g, 0.5, out=g)
        if k.kind == "copy":
            src, dst = np.ones(d["bytes"], dtype=np.uint8), np.empty(d["bytes"], dtype=np.uint8)
            return lambda: np.copyto(dst, src)
        if k.kind == "zero_grad":
            buf = np.ones(d["params"] * d["bytes"], dtype=np.uint8)
            return lambda: buf.fill(0)
        raise ProfileError(f"numpy backend: no kernel for {k.kind}")


class TorchBackend(Backend):
    """PyTorch on CUDA (CUDA events) or on the CPU (wall time)."""

    name = "torch"

    def __init__(self, device: str, dtype: str, sdpa: str = "auto", compile: bool = False) -> None:
        import torch

        self.torch = torch
        if sdpa not in SDPA_BACKENDS:
            raise ProfileError(f"--sdpa {sdpa}: valid: {', '.join(SDPA_BACKENDS)}")
        if device == "cuda" and not torch.cuda.is_available():
            raise ProfileError("--device cuda: torch.cuda.is_available() is False; valid here: cpu")
        self.fp8 = dtype == "fp8"
        if self.fp8 and (
            device != "cuda" or not hasattr(torch, "float8_e4m3fn") or torch.cuda.get_device_capability() < (8, 9)
        ):
            raise ProfileError(
                "--dtype fp8: FP8 GEMMs (torch._scaled_mm) need a CUDA GPU of compute capability 8.9+ "
                "(Ada, Hopper, Blackwell); valid here: fp32, tf32, bf16, fp16"
            )
        self.device = device
        # Under FP8 only Transformer Engine's linear layers run in FP8; everything else (attention,
        # norms, activations, the output layer, the router) stays BF16, as in ops.rs.
        self.dtype = {
            "fp32": torch.float32,
            "tf32": torch.float32,
            "bf16": torch.bfloat16,
            "fp16": torch.float16,
            "fp8": torch.bfloat16,
        }[dtype]
        self.sdpa = sdpa
        self.compile = compile
        if compile:
            # Every op compiles the same few lambdas at new shapes: past Dynamo's default limit
            # of 8 recompilations it would silently run them eagerly.
            cfg = torch._dynamo.config
            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(cfg, name):
                    setattr(cfg, name, max(getattr(cfg, name), 1024))
        self._flush = None
        self.spin_cycles = 0
        if device == "cuda":
            clock_khz = getattr(torch.cuda.get_device_properties(device), "clock_rate", 2_000_000)
            self.spin_cycles = int(clock_khz * 1e3 * SPIN_S)
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            torch.backends.cudnn.allow_tf32 = dtype == "tf32"
        self.gen = torch.Generator(device=device).manual_seed(0)

    def device_name(self) -> str:
        if self.device == "cuda":
            return self.torch.cuda.get_device_name()
        return super().device_name()

    def provenance(self) -> list[str]:
        t = self.torch
        line = f"torch {t.__version__}"
        if self.device == "cuda":
            line += f", CUDA {t.version.cuda}, cuDNN {t.backends.cudnn.version()}, device {t.cuda.get_device_name()}"
            line += f" (cuda:{t.cuda.current_device()} of {t.cuda.device_count()}); times: CUDA events, median"
            line += f", L2 flushed and the GPU held {SPIN_S * 1e3:g} ms before each timed run (no host launch gaps)"
            line += f"; attention: SDPA backend {self.sdpa}"
            line += "; norms, residuals, activations, RoPE: " + (
                "torch.compile (Inductor)" if self.compile else "eager"
            )
            if self.fp8:
                line += "; FP8: torch._scaled_mm E4M3 x E4M3, tensorwise scales, fast accumulation in the forward"
        else:
            line += f", CPU ({self.device_name()}, {t.get_num_threads()} threads); times: wall clock"
        return [line]

    def _r(self, *shape: int, dtype: Any = None, grad: bool = False) -> Any:
        x = self.torch.randn(*shape, device=self.device, dtype=dtype or self.dtype, generator=self.gen)
        return x.requires_grad_(grad)

    def _ids(self, hi: int, n: int) -> Any:
        return self.torch.randint(0, hi, (n,), device=self.device, generator=self.gen)

    def build(self, k: Kernel) -> Callable[[], Any]:
        torch, d, v = self.torch, k.dims, k.variant
        F = torch.nn.functional
        grad = torch.autograd.grad
        if k.kind == "gemm":
            # Megatron's layouts: weight [n, k]; y = x·wᵀ, dx = dy·w, dw = dyᵀ·x.
            g, n, kk = d["groups"], d["n"], d["k"]
            m = -(-d["m"] // g)
            base = k.op.removesuffix("_" + v)
            if self.fp8 and base not in ("logits", "moe_router") and not k.flags.get("bmm"):
                return self._fp8_gemm(g, m, n, kk, v)
            x, w, dy = self._r(g, m, kk), self._r(g, n, kk), self._r(g, m, n)
            if v == "dgrad":
                return lambda: torch.bmm(dy, w)
            if v == "wgrad":
                return lambda: torch.bmm(dy.transpose(1, 2), x)
            topk = k.flags.get("topk")
            if topk:
                return lambda: torch.topk(torch.bmm(x, w.transpose(1, 2)), topk, dim=-1)
            return lambda: torch.bmm(x, w.transpose(1, 2))
        if k.kind == "attention":
            b, a, sq, skv, hd = d["b"], d["heads"], d["sq"], d["skv"], d["head_dim"]
            rep = a // max(d["kv_heads"], 1)
            q = self._r(b, a, sq, hd, grad=v != "fwd")
            # GQA: K/V heads repeated outside the timed region.
            kt = self._r(b, d["kv_heads"], skv, hd).repeat_interleave(rep, 1).requires_grad_(v != "fwd")
            vv = self._r(b, d["kv_heads"], skv, hd).repeat_interleave(rep, 1).requires_grad_(v != "fwd")
            causal = bool(k.flags["causal"])
            if k.flags["flash"]:
                ctx = self._sdpa_context()

                def attn() -> Any:
                    with ctx():
                        return F.scaled_dot_product_attention(q, kt, vv, is_causal=causal)
            else:
                mask = torch.ones(sq, skv, dtype=torch.bool, device=self.device).triu(1) if causal else None

                def attn() -> Any:
                    s = torch.matmul(q, kt.transpose(-1, -2)) * hd**-0.5
                    if mask is not None:
                        s = s.masked_fill(mask, float("-inf"))
                    return torch.matmul(F.dropout(torch.softmax(s, -1), DROPOUT_P), vv)

            if v == "fwd":
                return attn
            out = attn()
            do = torch.randn_like(out)
            return lambda: grad(out, (q, kt, vv), do, retain_graph=True)
        if k.kind == "softmax":
            x = self._r(d["rows"], d["cols"])
            if v == "fwd":
                return lambda: torch.softmax(x, -1)
            out, dy = torch.softmax(x, -1), torch.randn_like(x)
            return lambda: torch._softmax_backward_data(dy, out, -1, out.dtype)
        if k.kind == "norm":
            h = d["h"]
            x = self._r(d["tokens"], h, grad=v != "fwd")
            w, bias = self._r(h, grad=v != "fwd"), self._r(h, grad=v != "fwd")
            norm = self._c(lambda: F.layer_norm(x, (h,), w, bias))
            if v == "fwd":
                return norm
            y = norm()
            dy = torch.randn_like(y)
            return lambda: grad(y, (x, w, bias), dy, retain_graph=True)
        if k.kind == "merge":
            acc, x = self._r(d["elements"]), self._r(d["elements"])
            return lambda: acc.add_(x, alpha=0.5)
        if k.kind == "rope":
            x = self._r(d["elements"] // 2, 2)
            cos, sin = torch.cos(x[:, :1]), torch.sin(x[:, :1])
            sign = torch.tensor([-1.0, 1.0], device=x.device, dtype=x.dtype)
            # Forward rotates x; backward rotates the gradient the other way: the same traffic.
            return self._c(lambda: x * cos + x.flip(-1) * sign * sin)
        if k.kind in ("residual", "dropout"):
            e = d["elements"]
            x, r = self._r(e), self._r(e)
            if v != "fwd":
                mask = torch.rand(e, device=self.device, generator=self.gen) >= DROPOUT_P
                return self._c(lambda: x * mask * (1.0 / (1.0 - DROPOUT_P)))
            if k.kind == "residual":
                return self._c(lambda: F.dropout(x, DROPOUT_P, True) + r)
            return self._c(lambda: F.dropout(x, DROPOUT_P, True))
        if k.kind == "activation":
            e = d["elements"]
            gated = k.flags["gated"]
            x = self._r(2 * e if gated else e, grad=v != "fwd")

            def act() -> Any:
                if gated:
                    a, b = x.chunk(2)
                    return F.silu(a) * b
                return F.gelu(x, approximate="tanh")

            act = self._c(act)
            if v == "fwd":
                return act
            y = act()
            dy = torch.randn_like(y)
            return lambda: grad(y, x, dy, retain_graph=True)
        if k.kind == "cross_entropy":
            n, vl = d["tokens"], d["vocab"]
            logits = self._r(n, vl, grad=v != "fwd")
            tgt = self._ids(vl, n)
            # Megatron's vocab-parallel cross-entropy computes in fp32.
            if v == "fwd":
                return lambda: F.cross_entropy(logits.float(), tgt)
            loss = F.cross_entropy(logits.float(), tgt)
            return lambda: grad(loss, logits, retain_graph=True)
        if k.kind == "embedding":
            table, ids = self._r(d["rows"], d["h"]), self._ids(d["rows"], d["tokens"])
            return lambda: F.embedding(ids, table)
        if k.kind == "embedding_wgrad":
            # The tokens' rows scattered into the dense gradient (PyTorch's embedding backward;
            # its zero-fill is `embedding_wgrad_zero`).
            dense = torch.zeros(d["rows"], d["h"], device=self.device, dtype=self.dtype)
            dy, ids = self._r(d["tokens"], d["h"]), self._ids(d["rows"], d["tokens"])
            return lambda: dense.index_add_(0, ids, dy)
        if k.kind == "accumulate":
            main = torch.zeros(
                d["elements"], device=self.device, dtype=torch.float32 if d["main_bytes"] == 4 else self.dtype
            )
            g = self._r(d["elements"])
            return lambda: main.add_(g)
        if k.kind in ("gather", "scatter"):
            idx = self._ids(d["tokens"], d["routed"])
            if k.kind == "gather":
                x = self._r(d["tokens"], d["h"])
                return lambda: x.index_select(0, idx)
            y, out = (
                self._r(d["routed"], d["h"]),
                torch.zeros(d["tokens"], d["h"], device=self.device, dtype=self.dtype),
            )
            return lambda: out.index_add_(0, idx, y)
        if k.kind == "optimizer":
            n = d["params"]
            p = self._r(n, dtype=torch.float32, grad=True)
            p.grad = self._r(n, dtype=torch.float32)
            model_param = torch.empty(n, device=self.device, dtype=self.dtype)
            opt = torch.optim.Adam([p], lr=1e-4, fused=self.device == "cuda")

            def step() -> None:
                opt.step()
                with torch.no_grad():
                    model_param.copy_(p)

            return step
        if k.kind == "grad_norm":
            g = self._r(d["params"], dtype=torch.bfloat16 if d.get("bytes", 4) == 2 else torch.float32)
            return lambda: torch.linalg.vector_norm(g)
        if k.kind == "scale":
            g = self._r(d["params"], dtype=torch.bfloat16 if d["bytes"] == 2 else torch.float32)
            return lambda: g.mul_(0.5)
        if k.kind == "copy":
            src = torch.ones(d["bytes"], device=self.device, dtype=torch.uint8)
            dst = torch.empty_like(src)
            return lambda: dst.copy_(src)
        if k.kind == "zero_grad":
            buf = torch.empty(d["params"] * d["bytes"], device=self.device, dtype=torch.uint8)
            return lambda: buf.zero_()
        raise ProfileError(f"torch backend: no kernel for {k.kind}")

    def _fp8_gemm(self, g: int, m: int, n: int, kk: int, v: str) -> Callable[[], Any]:
        """Transformer Engine's FP8 GEMMs: E4M3 operands already in the layout each pass reads (the
        casts and transposes are separate ops in llmsim), a BF16 output, one kernel per group."""
        torch = self.torch
        f8 = torch.float8_e4m3fn
        m, n, kk = (-(-x // 16) * 16 for x in (m, n, kk))  # _scaled_mm wants multiples of 16
        one = torch.ones((), device=self.device, dtype=torch.float32)
        # (rows of A, inner, columns of B) of the pass: fwd x·wᵀ, dgrad dy·w, wgrad dyᵀ·x.
        r, inner, c = {"fwd": (m, kk, n), "dgrad": (m, n, kk), "wgrad": (n, m, kk)}[v]
        a = [self._r(r, inner).to(f8) for _ in range(g)]
        b = [self._r(c, inner).to(f8).t() for _ in range(g)]  # column-major [inner, c]
        fast = v == "fwd"

        def run() -> Any:
            return [
                torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)
                for x, y in zip(a, b)
            ]

        return run

    def _c(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``--compile``: the memory-bound op as torch.compile (Inductor) fuses it, forward and
        backward, in place of PyTorch's eager kernels."""
        return self.torch.compile(fn, dynamic=False) if self.compile else fn

    def _sdpa_context(self) -> Callable[[], Any]:
        if self.sdpa == "auto":
            return contextlib.nullcontext
        from torch.nn.attention import SDPBackend, sdpa_kernel

        which = {
            "flash": SDPBackend.FLASH_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
        }[self.sdpa]
        return lambda: sdpa_kernel(which)

    def _flush_l2(self) -> None:
        """Overwrite the L2 so a timed kernel reads its operands from HBM, as in a training step
        where every op's inputs were written several ops earlier."""
        torch = self.torch
        if self._flush is None:
            size = 2 * getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 64 << 20)
            self._flush = torch.empty(max(size, 64 << 20), dtype=torch.uint8, device=self.device)
        self._flush.zero_()

    def time_us(self, fn: Callable[[], Any], warmup: int, iters: int) -> float:
        torch = self.torch
        if self.device != "cuda":
            return super().time_us(fn, warmup, iters)
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        n = max(iters, 1)
        start = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            # The GPU spins for ~1 ms first, so the host has queued the whole op before its start
            # event runs: the events then time the GPU's work, not the host's launch gaps.
            torch.cuda._sleep(self.spin_cycles)
            self._flush_l2()
            start[i].record()
            fn()
            end[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(start, end)) * 1e3

    def release(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def make_backend(
    backend: str = "auto", device: str = "auto", dtype: str = "bf16", sdpa: str = "auto", compile: bool = False
) -> Backend:
    """``backend``: auto (torch if importable, else numpy), torch or numpy; ``device``: auto
    (cuda if available), cuda or cpu; ``sdpa``: PyTorch's attention kernel (auto, flash, cudnn,
    efficient; torch only)."""
    if sdpa not in SDPA_BACKENDS:
        raise ProfileError(f"--sdpa {sdpa}: valid: {', '.join(SDPA_BACKENDS)}")
    if backend not in ("auto", "torch", "numpy"):
        raise ProfileError(f"--backend {backend}: valid: auto, torch, numpy")
    if device not in ("auto", "cuda", "cpu"):
        raise ProfileError(f"--device {device}: valid: auto, cuda, cpu")
    if backend == "numpy" or (backend == "auto" and not torch_available()):
        if device == "cuda":
            raise ProfileError(
                "--device cuda needs PyTorch (pip install llmsim[profile]); the numpy backend runs on cpu"
            )
        return NumpyBackend()
    if not torch_available():
        raise ProfileError("--backend torch: PyTorch is not installed; pip install llmsim[profile], or --backend numpy")
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return TorchBackend(device, dtype, sdpa, compile)


# ---------------------------------------------------------------------------------------------
# The database


@dataclass
class Profile:
    path: str
    gpu: str
    rows: list[tuple[Kernel, float]]
    skipped: list[tuple[dict[str, str], str]]
    """ops without a row (they keep the roofline), with why"""


def profile(
    scenario: PathLike,
    out: PathLike,
    *,
    dtype: str | None = None,
    warmup: int = 3,
    iters: int = 10,
    device: str = "auto",
    backend: str | Backend = "auto",
    gpu: str | None = None,
    sets: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    sdpa: str = "auto",
    compile: bool = False,
) -> Profile:
    """Times every distinct compute op of ``scenario`` and writes the op database CSV to ``out``.

    ``gpu`` labels the rows (the ``gpu`` column the scenario's ``cluster.gpu`` is matched on);
    default: the CUDA device's name, or the scenario's GPU when timing on a CPU."""
    sc = Scenario.from_yaml(scenario, list(sets))
    res = sc.resolved()
    if res.get("model") is None:
        raise ProfileError(f"{scenario}: no transformer `model:`; the profiler times transformer ops only")
    dtype = dtype or res["training"]["dtype"]
    if dtype not in DTYPES:
        raise ProfileError(f"--dtype {dtype}: valid: {', '.join(DTYPES)}")
    act_bytes = 4 if res["training"]["dtype"] in ("fp32", "tf32") else 2
    ks, skipped = kernels(run_ops(scenario, sets), act_bytes)
    be = backend if isinstance(backend, Backend) else make_backend(backend, device, dtype, sdpa, compile)
    label = gpu or (be.device_name() if be.device == "cuda" else res["cluster"]["gpu"])
    rows: list[tuple[Kernel, float]] = []
    for i, k in enumerate(ks):
        try:
            t = be.time_us(be.build(k), warmup, iters)
        except (MemoryError, RuntimeError) as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
            skipped.append(({"op": k.op, "shape": k.shape}, f"{type(e).__name__}: {str(e).splitlines()[0]}"))
            be.release()
            continue
        rows.append((k, t))
        if log:
            log(f"[{i + 1}/{len(ks)}] {k.op:<24} {t:12.2f} us  {k.describe()}")
    write_database(out, label, rows, _header(sc, scenario, be, dtype, warmup, iters, skipped))
    return Profile(os.fspath(out), label, rows, skipped)


def _header(sc: Scenario, path: PathLike, be: Backend, dtype: str, warmup: int, iters: int, skipped: list) -> list[str]:
    lines = [
        "llmsim op-time database, written by `llmsim profile` (python/llmsim/profile.py)",
        f"date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
        f"scenario: {sc.name} ({os.fspath(path)}), key {sc.key}",
        f"backend: {be.name} on {be.device}",
        *be.provenance(),
        f"python {platform.python_version()}, {platform.platform()}",
        f"dtype {dtype}; {warmup} warm-up runs, median of {iters} timed runs",
        "time_us is one kernel's (or one fused op's) duration; op and shape are the workload's keys",
    ]
    for r, why in skipped:
        lines.append(f"not measured (the roofline stays): {r['op']} {r['shape']}: {why}")
    return lines


def write_database(out: PathLike, gpu: str, rows: Sequence[tuple[Kernel, float]], header: Sequence[str]) -> None:
    """``gpu,op,shape,time_us`` with ``#`` comment lines first."""
    with open(out, "w", newline="", encoding="utf-8") as f:
        f.writelines(f"# {line}\n" for line in header)
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["gpu", "op", "shape", "time_us"])
        for k, t in rows:
            w.writerow([gpu, k.op, k.shape, f"{t:.3f}"])


def database_coverage(scenario: PathLike, database: PathLike, sets: Sequence[str] = ()) -> dict[str, int]:
    """Runs the scenario with ``compute.database`` set to ``database``; counts its distinct
    compute ops by time source (``database`` / ``roofline``). Raises ``ComputeError`` on a
    database the Rust reader rejects."""
    rows = run_ops(scenario, [*sets, f"compute.database={os.path.abspath(database)}"])
    count: dict[str, int] = {}
    for r in distinct_ops(rows):
        count[r["source"]] = count.get(r["source"], 0) + 1
    return count


@dataclass
class Comparison:
    """One distinct op: the database's measured time beside llmsim's own model of it."""

    op: str
    shape: str
    op_class: str
    bound: str
    model_us: float
    measured_us: float
    count: float
    """times the op runs in one iteration (the weight of time-weighted ratios)"""


def database_scenario(database: PathLike) -> str | None:
    """The scenario path a database written by ``llmsim profile`` names in its ``# scenario:``
    line (as given to the profiler), or None."""
    with open(database, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# scenario: ") and "(" in line:
                return line.split("(", 1)[1].rsplit(")", 1)[0]
    return None


def _records(database: PathLike) -> tuple[str, list[tuple[int, list[str]]]]:
    """A database's path and its CSV records with their line numbers (blank and ``#`` lines
    left out); the first record is the header."""
    path = os.fspath(database)
    with open(path, newline="", encoding="utf-8") as f:
        lines = [(i, line) for i, line in enumerate(f, 1) if line.strip() and not line.lstrip().startswith("#")]
    return path, list(zip((i for i, _ in lines), csv.reader(line for _, line in lines)))


def read_database(database: PathLike) -> list[tuple[str, str, str, float]]:
    """The rows ``(gpu, op, shape, time_us)`` of a database; ``ProfileError`` naming the line
    and column of a missing column or a time that is not a number."""
    path, numbered = _records(database)
    if not numbered:
        return []
    (first, head), body = numbered[0], numbered[1:]
    header = [h.strip().lower() for h in head]
    missing = [c for c in ("gpu", "op", "shape", "time_us") if c not in header]
    if missing:
        cols = "`, `".join(missing)
        raise ProfileError(f"{path}, line {first}: no `{cols}` column; expected: gpu,op,shape,time_us")
    g, o, sh, t = (header.index(c) for c in ("gpu", "op", "shape", "time_us"))
    rows = []
    for n, rec in body:
        try:
            rows.append((rec[g].strip(), rec[o].strip(), rec[sh].strip(), float(rec[t])))
        except (IndexError, ValueError):
            raise ProfileError(f"{path}, line {n}, column `time_us`: expected a number of microseconds") from None
    return rows


def compare_database(scenario: PathLike, database: PathLike, sets: Sequence[str] = ()) -> list[Comparison]:
    """Every op of ``scenario`` that ``database`` times, beside llmsim's model of the same op on
    the database's GPU, one board (``compute.gpu_variability.sigma=0``: a profile times one GPU)."""
    rows = read_database(database)
    gpus = sorted({gpu for gpu, *_ in rows})
    if len(gpus) != 1:
        raise ProfileError(f"{database}: --compare needs one GPU's rows; found {', '.join(gpus) or 'none'}")
    measured = {(op, shape): t for _, op, shape, t in rows}
    ops = run_ops(scenario, [*sets, f"cluster.gpu={gpus[0]}", "compute.gpu_variability.sigma=0"])
    count: dict[tuple[str, str], float] = {}
    for r in ops:
        count[(r["op"], r["shape"])] = count.get((r["op"], r["shape"]), 0.0) + float(r["count"])
    return [
        Comparison(r["op"], r["shape"], r["class"], r["bound"], float(r["time_us"]), measured[k], count[k])
        for r in distinct_ops(ops)
        if (k := (r["op"], r["shape"])) in measured
    ]


def comparison_table(rows: Sequence[Comparison], per_op: bool = False) -> list[str]:
    """Per op class (and with ``per_op`` per op): share of the measured time and measured / llmsim,
    time-weighted by each op's count in one iteration."""
    by: dict[str, list[float]] = {}
    for c in rows:
        m = by.setdefault(f"{c.op_class} ({c.bound})", [0.0, 0.0])
        m[0] += c.measured_us * c.count
        m[1] += c.model_us * c.count
    total_m = sum(v[0] for v in by.values()) or 1.0
    total_l = sum(v[1] for v in by.values()) or 1.0
    out = [f"{'op class':<28} {'share':>6}  measured / llmsim"]
    for cls, (m, mod) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        out.append(f"{cls:<28} {100 * m / total_m:5.1f}%  {m / mod if mod else float('nan'):6.2f}")
    out.append(f"{'all ops':<28} {100.0:5.1f}%  {total_m / total_l:6.3f}")
    if per_op:
        out.append("")
        out.append(f"{'op':<26} {'class':<26} {'llmsim us':>11} {'measured us':>12} {'ratio':>6}")
        for c in rows:
            cls = f"{c.op_class} ({c.bound})"
            out.append(
                f"{c.op:<26} {cls:<26} {c.model_us:11.1f} {c.measured_us:12.1f} {c.measured_us / c.model_us:6.2f}"
            )
    return out


def check_database(database: PathLike, known: Sequence[str] = KNOWN_OPS) -> int:
    """Raises ``ProfileError`` naming the line and the ``op`` column of the first row whose op
    no llmsim workload produces (the Rust reader keeps such a row: it never matches). Returns
    the number of rows. The reader itself checks the rest (GPU names, times, duplicates)."""
    import difflib

    path, numbered = _records(database)
    if not numbered:
        return 0
    (first, head), body = numbered[0], numbered[1:]
    header = [h.strip().lower() for h in head]
    if "op" not in header:
        raise ProfileError(f"{path}, line {first}: no `op` column; expected: gpu,op,shape,time_us")
    col = header.index("op")
    for n, rec in body:
        op = rec[col].strip() if col < len(rec) else ""
        if op not in known:
            near = difflib.get_close_matches(op, known, n=3)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            raise ProfileError(
                f"{path}, line {n}, column `op`: unknown op `{op}`; {hint}"
                "valid: the op names of a scenario's ops.csv (`llmsim profile SCENARIO --list`)"
            )
    return len(body)


# ---------------------------------------------------------------------------------------------
# Collectives inside the node (NCCL)

COLLECTIVE_COLUMNS = ["gpu", "op", "nranks", "bytes", "time_us", "algbw_gbps", "busbw_gbps"]
# nccl-tests' bus-bandwidth factors (PERFORMANCE.md); sizes in its convention, as llmsim's.
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


def _collective_worker(rank: int, world: int, port: int, sizes: list[int], warmup: int, iters: int, out: str) -> None:
    import json

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results = []
    try:
        for op in BUSBW_FACTOR:
            for size in sizes:
                n = max(size // 2 // world * world, world)  # bf16 elements, divisible by world
                full = torch.ones(n, device="cuda", dtype=torch.bfloat16)
                part = torch.ones(n // world, device="cuda", dtype=torch.bfloat16)

                def call(op: str = op, full: Any = full, part: Any = part) -> None:
                    if op == "all_reduce":
                        dist.all_reduce(full)
                    elif op == "all_gather":
                        dist.all_gather_into_tensor(full, part)
                    else:
                        dist.reduce_scatter_tensor(part, full)

                for _ in range(warmup):
                    call()
                torch.cuda.synchronize()
                dist.barrier()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    call()
                end.record()
                torch.cuda.synchronize()
                results.append((op, n * 2, start.elapsed_time(end) * 1e3 / iters))
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(results, f)
    finally:
        dist.destroy_process_group()


def profile_collectives(
    out: PathLike, *, gpu: str | None = None, sizes: Sequence[int] | None = None, warmup: int = 5, iters: int = 20
) -> list[dict[str, Any]]:
    """NCCL all-reduce / all-gather / reduce-scatter over every visible GPU (the node's scale-up
    domain), bf16, nccl-tests size convention (the all-reduce buffer, the all-gather output, the
    reduce-scatter input); the mean over ``iters`` back-to-back calls, as nccl-tests reports.
    Writes ``COLLECTIVE_COLUMNS`` to ``out``. Needs PyTorch with CUDA and 2+ GPUs."""
    import json
    import socket

    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if world < 2:
        raise ProfileError(f"--collectives needs 2+ CUDA GPUs; this node has {world}")
    sizes = list(sizes or [1 << p for p in range(10, 31, 2)])  # 1 KiB .. 1 GiB
    label = gpu or torch.cuda.get_device_name(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "coll.json")
        mp.spawn(_collective_worker, args=(world, port, sizes, warmup, iters, res), nprocs=world, join=True)
        with open(res, encoding="utf-8") as f:
            results = json.load(f)
    rows = []
    for op, nbytes, us in results:
        algbw = nbytes / (us * 1e-6) / 1e9
        rows.append(
            {
                "gpu": label,
                "op": op,
                "nranks": world,
                "bytes": nbytes,
                "time_us": round(us, 3),
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * BUSBW_FACTOR[op](world), 3),
            }
        )
    with open(out, "w", newline="", encoding="utf-8") as f:
        f.write("# llmsim profile --collectives: NCCL collectives inside one node (GB/s = 1e9 bytes/s)\n")
        f.write(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {torch.cuda.nccl.version()}\n")
        f.write("# not read by the simulator; collectives_hint() turns it into cluster.nvlink_bandwidth\n")
        w = csv.DictWriter(f, COLLECTIVE_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return rows


def collectives_hint(rows: Sequence[dict[str, Any]]) -> str:
    """The scale-up model (crates/llmsim-ccl/src/scaleup.rs) assumes busbw = 0.8 x
    nvlink_bandwidth: the setting that reproduces the largest measured all-reduce."""
    ar = [r for r in rows if r["op"] == "all_reduce"]
    if not ar:
        return ""
    big = max(ar, key=lambda r: r["bytes"])
    return f"cluster.nvlink_bandwidth: {big['busbw_gbps'] / 0.8:.0f}GBps (all-reduce busbw {big['busbw_gbps']:.1f} GB/s at {big['bytes']} B / 0.8)"


# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="llmsim profile", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("scenario", help="scenario file (YAML) with a transformer model")
    p.add_argument("--out", default="ops_db.csv", help="database CSV to write (default ops_db.csv)")
    p.add_argument("--dtype", choices=DTYPES, help="default: the scenario's training.dtype")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10, help="timed runs per op; the median is kept")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto", help="auto: torch if installed")
    p.add_argument("--gpu", help="the rows' gpu column (default: the CUDA device's name; on a CPU the scenario's GPU)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--sdpa",
        choices=SDPA_BACKENDS,
        default="auto",
        help="PyTorch attention kernel (torch backend): auto, flash (FA2), cudnn (Megatron+TE's), efficient",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="time norms, residuals, activations and RoPE as torch.compile fuses them (torch backend)",
    )
    p.add_argument("--list", action="store_true", help="list the ops and their kernels; time nothing")
    p.add_argument("--collectives", metavar="CSV", help="also time NCCL collectives over this node's GPUs into CSV")
    p.add_argument("--no-check", action="store_true", help="skip re-running the scenario with the new database")
    p.add_argument("--check", metavar="CSV", help="check an existing database against the scenario; time nothing")
    p.add_argument(
        "--compare",
        metavar="CSV",
        help="set a database's measured times beside llmsim's model of the same ops; time nothing (--ops: every op)",
    )
    p.add_argument("--ops", action="store_true", help="with --compare: print every op, not only the classes")
    a = p.parse_args(argv)
    try:
        if a.compare:
            rows = compare_database(a.scenario, a.compare, a.sets)
            if not rows:
                raise ProfileError(f"{a.compare}: no row matches an op of {a.scenario} (wrong scenario or --set?)")
            print(f"{a.compare} against llmsim's model of {a.scenario}: {len(rows)} ops (one board, no pace)")
            print("\n".join(comparison_table(rows, a.ops)))
            return 0
        if a.check:
            n = check_database(a.check)
            cov = database_coverage(a.scenario, a.check, a.sets)
            print(
                f"{a.check}: {n} rows; {cov.get('database', 0)} of {sum(cov.values())} distinct compute ops of the scenario come from it"
            )
            return 0
        if a.list:
            res = Scenario.from_yaml(a.scenario, a.sets).resolved()
            act_bytes = 4 if res["training"]["dtype"] in ("fp32", "tf32") else 2
            ks, skipped = kernels(run_ops(a.scenario, a.sets), act_bytes)
            for k in ks:
                print(f"{k.op:<24} {k.shape:<56} {k.describe()}")
            for r, why in skipped:
                print(f"{r['op']:<24} {r['shape']:<56} (not measured: {why})")
            return 0
        prof = profile(
            a.scenario,
            a.out,
            dtype=a.dtype,
            warmup=a.warmup,
            iters=a.iters,
            device=a.device,
            backend=a.backend,
            gpu=a.gpu,
            sets=a.sets,
            log=lambda s: print(s, flush=True),
            sdpa=a.sdpa,
            compile=a.compile,
        )
        print(f"wrote {prof.path}: {len(prof.rows)} ops on {prof.gpu}", end="")
        print(f", {len(prof.skipped)} left to the roofline" if prof.skipped else "")
        if not a.no_check:
            sets = list(a.sets)
            res = Scenario.from_yaml(a.scenario, sets).resolved()
            if prof.gpu != res["cluster"]["gpu"]:
                sets.append(f"cluster.gpu={prof.gpu}")
            try:
                cov = database_coverage(a.scenario, a.out, sets)
            except _native.LlmsimError as e:
                raise ProfileError(
                    f"{a.out} was written but the simulator cannot use it: {e}\n"
                    "(a GPU the catalog lacks: label the rows with --gpu NAME)"
                ) from e
            print(
                f"check: {cov.get('database', 0)} of {sum(cov.values())} distinct compute ops now come from the database"
            )
        if a.collectives:
            rows = profile_collectives(a.collectives, gpu=a.gpu, warmup=a.warmup, iters=a.iters)
            print(f"wrote {a.collectives}: {len(rows)} collective timings; {collectives_hint(rows)}")
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
