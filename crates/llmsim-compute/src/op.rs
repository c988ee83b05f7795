//! What the compute model is asked about: one op, by class, with its FLOPs and bytes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Numeric format of an op's math and of the tensors it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE single precision.
    Fp32,
    /// TensorFloat-32: fp32 storage, 10-bit mantissa tensor-core math.
    Tf32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    Fp16,
    /// 8-bit floating point (E4M3/E5M2), tensor-core math.
    Fp8,
    /// 4-bit floating point (E2M1) with block scales: NVFP4 (Transformer Engine's
    /// `NVFP4BlockScaling`), tensor-core math on Blackwell. Also spelled `nvfp4`.
    #[serde(alias = "nvfp4")]
    Fp4,
    /// MXFP8: E4M3 data with an E8M0 scale per 32 elements (Transformer Engine's
    /// `MXFP8BlockScaling`), Blackwell's block-scaled tensor-core MMA, at the FP8 peak. The GEMMs
    /// of a run with `dtype: fp8` and `fp8_recipe: mxfp8` are timed in it, so the efficiency
    /// table can give block-scaled GEMMs their own rows (`mxfp8`, else the `fp8` rows). Only the
    /// workload makes it: a scenario says `dtype: fp8` with the recipe, so it never deserializes
    /// (it is not in [`DType::SCENARIO`]).
    #[serde(skip_deserializing)]
    Mxfp8,
    /// FP8 with block scales (Transformer Engine's `Float8BlockScaling`, DeepSeek-V3's recipe):
    /// E4M3 data, an FP32 scale per 1x128 block of activations and gradients and per 128x128
    /// block of weights. Hopper runs it as block-scaled GEMMs with split accumulation (cuBLAS
    /// 12.9 or newer); on Blackwell Transformer Engine emulates the recipe with MXFP8
    /// (NVIDIA/TransformerEngine `docs/examples/gemm_profiling/gemm_profiling.rst`), so its
    /// efficiency rows fall back to `mxfp8`'s, then `fp8`'s. Only the workload makes it
    /// (`dtype: fp8` with `fp8_recipe: blockwise`), like [`DType::Mxfp8`].
    #[serde(rename = "fp8_block", skip_deserializing)]
    Fp8Block,
}

impl DType {
    /// Every format.
    pub const ALL: [DType; 8] = [
        DType::Fp32,
        DType::Tf32,
        DType::Bf16,
        DType::Fp16,
        DType::Fp8,
        DType::Fp4,
        DType::Mxfp8,
        DType::Fp8Block,
    ];

    /// The formats a scenario's dtype fields accept: all but [`DType::Mxfp8`] and
    /// [`DType::Fp8Block`], which a scenario states as `dtype: fp8` with `fp8_recipe: mxfp8` or
    /// `blockwise`.
    pub const SCENARIO: [DType; 6] = [DType::Fp32, DType::Tf32, DType::Bf16, DType::Fp16, DType::Fp8, DType::Fp4];

    /// Position in [`DType::ALL`], for per-dtype arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The format whose efficiency rows ([`crate::Efficiencies`]) stand in where a table has none
    /// for this one: MXFP8 GEMMs take FP8's (what they were timed with before they had a dtype
    /// of their own); FP8 block-scaled ones MXFP8's (Blackwell emulates them with it), and so
    /// FP8's after that; the others none.
    pub const fn efficiency_fallback(self) -> Option<DType> {
        match self {
            DType::Mxfp8 => Some(DType::Fp8),
            DType::Fp8Block => Some(DType::Mxfp8),
            _ => None,
        }
    }

    /// Bytes per element, in whole bytes: FP4 packs two elements per byte and counts as 1 here
    /// (an upper bound); the NVFP4 tensors themselves are counted with their scales by
    /// [`DType::NVFP4_BYTES_PER_ELEMENT`].
    pub fn bytes(self) -> u64 {
        match self {
            DType::Fp32 | DType::Tf32 => 4,
            DType::Bf16 | DType::Fp16 => 2,
            DType::Fp8 | DType::Fp4 | DType::Mxfp8 | DType::Fp8Block => 1,
        }
    }

    /// Bytes of one NVFP4 copy of an element: half a byte of E2M1 data plus one E4M3 scale per
    /// 16 elements (Transformer Engine `recipe/__init__.py`, `NVFP4BlockScaling`: 16-element 1D
    /// blocks; the per-tensor FP32 scale is negligible). 2D-scaled weights (16x16 blocks) carry
    /// their scales at the same 1/16 per element along each quantized direction.
    pub const NVFP4_BYTES_PER_ELEMENT: f64 = 0.5 + 1.0 / 16.0;

    /// Whether GEMMs in this dtype run on Transformer Engine's quantized path (FP8, MXFP8 or NVFP4):
    /// inputs cast by separate kernels, attention and the memory-bound ops in BF16.
    pub fn is_te_quantized(self) -> bool {
        matches!(self, DType::Fp8 | DType::Fp4 | DType::Mxfp8 | DType::Fp8Block)
    }

    /// Bytes per element of the tensors outside the quantized GEMMs (activations between
    /// layers, embedding rows): the quantized formats keep them in 16 bits.
    pub fn activation_bytes(self) -> u64 {
        if self.is_te_quantized() { 2 } else { self.bytes() }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::Fp32 => "fp32",
            DType::Tf32 => "tf32",
            DType::Bf16 => "bf16",
            DType::Fp16 => "fp16",
            DType::Fp8 => "fp8",
            DType::Fp4 => "fp4",
            DType::Mxfp8 => "mxfp8",
            DType::Fp8Block => "fp8_block",
        })
    }
}

/// The class of an op decides which roofline efficiency applies to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Dense matrix multiply (QKV, projection, MLP, logits, expert GEMMs). Compute-bound.
    Gemm,
    /// Fused attention (FlashAttention): compute-bound.
    FlashAttention,
    /// Unfused attention (QK^T, softmax, AV as separate kernels).
    Attention,
    /// LayerNorm / RMSNorm. Memory-bound.
    Norm,
    /// Element-wise ops: activation, dropout, residual add, bias. Memory-bound.
    Elementwise,
    /// Softmax / cross-entropy over the vocabulary. Memory-bound.
    Softmax,
    /// Embedding lookup / its gradient scatter. Memory-bound.
    Embedding,
    /// MoE routing and token permutation (top-k, sorts, permutes; the gating GEMM itself is a
    /// [`OpClass::Gemm`]). Memory-bound.
    Router,
    /// Optimizer step (Adam): reads and writes params, grads and states. Memory-bound.
    Optimizer,
}

impl OpClass {
    /// Every class, in declaration order; `ALL[c.index()] == c`.
    pub const ALL: [OpClass; 9] = [
        OpClass::Gemm,
        OpClass::FlashAttention,
        OpClass::Attention,
        OpClass::Norm,
        OpClass::Elementwise,
        OpClass::Softmax,
        OpClass::Embedding,
        OpClass::Router,
        OpClass::Optimizer,
    ];

    /// Position in [`OpClass::ALL`], for per-class arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The snake_case name used in serde and in the efficiency CSV (`flash_attention`).
    pub const fn as_str(self) -> &'static str {
        match self {
            OpClass::Gemm => "gemm",
            OpClass::FlashAttention => "flash_attention",
            OpClass::Attention => "attention",
            OpClass::Norm => "norm",
            OpClass::Elementwise => "elementwise",
            OpClass::Softmax => "softmax",
            OpClass::Embedding => "embedding",
            OpClass::Router => "router",
            OpClass::Optimizer => "optimizer",
        }
    }

    /// Whether the class runs on tensor cores (its roofline peak is the tensor-core peak of the
    /// op's dtype). The other classes compute in FP32 on CUDA cores.
    pub const fn uses_tensor_cores(self) -> bool {
        matches!(self, OpClass::Gemm | OpClass::FlashAttention | OpClass::Attention)
    }

    /// Parses the snake_case name, ignoring ASCII case.
    pub fn from_name(name: &str) -> Option<OpClass> {
        OpClass::ALL.into_iter().find(|c| c.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for OpClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One compute op to be timed. `shape` is the key the op database is matched on
/// (e.g. "b=1,s=2048,h=5120,tp=2"); `name` is the op's name in the workload (e.g. "attn_qkv").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpQuery {
    /// The op's name in the workload, e.g. "attn_qkv".
    pub name: String,
    /// What kind of kernel it is.
    pub class: OpClass,
    /// Numeric format of its math.
    pub dtype: DType,
    /// Floating-point operations (multiply and add counted as 2).
    pub flops: f64,
    /// Bytes read plus written from HBM.
    pub bytes: f64,
    /// The op database's key, e.g. "b=1,s=2048,h=5120,tp=2".
    pub shape: String,
    /// The kernel's dimensions where the op is a GEMM (tile and wave quantization,
    /// [`crate::gemm`]) or a fused attention (the kernel tables of [`crate::attention`]).
    /// `None`: FLOPs and bytes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelShape>,
}

/// The dimensions the compute model needs beyond FLOPs and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelShape {
    /// A (batched) GEMM.
    Gemm(GemmShape),
    /// A fused attention kernel.
    Attention(AttentionShape),
    /// The Mamba-2 SSD chunked scan (mamba_ssm's Triton kernels, [`crate::ssd`]).
    Ssd(crate::ssd::SsdShape),
}

/// One fused attention call: `batch_heads` independent heads of `s_q` queries over `s_kv` keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionShape {
    /// Batch times local query heads.
    pub batch_heads: u64,
    /// Query tokens per head.
    pub s_q: u64,
    /// Key/value tokens per head.
    pub s_kv: u64,
    /// Dimension of one head.
    pub head_dim: u64,
    /// Causal mask: each query attends to the keys up to its own position.
    pub causal: bool,
    /// The backward kernel (dQ, dK, dV) rather than the forward.
    pub backward: bool,
    /// The kernel that runs, where the workload knows it (e.g. PyTorch SDPA's flash backend,
    /// FlashAttention-2); `None`: Transformer Engine's default for the GPU
    /// ([`crate::AttentionKernel::default_for`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<crate::AttentionKernel>,
}

#[cfg(test)]
impl AttentionShape {
    /// Self-attention of `batch_heads` heads over `s` tokens (the tests' shape).
    pub(crate) fn square(batch_heads: u64, s: u64, head_dim: u64, causal: bool, backward: bool) -> AttentionShape {
        AttentionShape {
            batch_heads,
            s_q: s,
            s_kv: s,
            head_dim,
            causal,
            backward,
            kernel: None,
        }
    }
}

/// `batch` independent GEMMs `[m,k]·[k,n]` (a grouped expert GEMM has one per local expert).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmShape {
    /// Rows of the left operand and of the output.
    pub m: u64,
    /// Columns of the right operand and of the output.
    pub n: u64,
    /// The contracted dimension.
    pub k: u64,
    /// Independent GEMMs of this shape.
    pub batch: u64,
}

impl GemmShape {
    /// One GEMM `[m,k]·[k,n]`.
    pub const fn new(m: u64, n: u64, k: u64) -> GemmShape {
        GemmShape { m, n, k, batch: 1 }
    }

    /// FLOPs, multiply-add counted as 2.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }

    /// The input-gradient GEMM of this forward GEMM: `dX[m,k] = dY[m,n]·Wᵀ[n,k]`.
    pub const fn dgrad(&self) -> GemmShape {
        GemmShape {
            m: self.m,
            n: self.k,
            k: self.n,
            batch: self.batch,
        }
    }

    /// The weight-gradient GEMM of this forward GEMM: `dW[k,n] = Xᵀ[k,m]·dY[m,n]`.
    pub const fn wgrad(&self) -> GemmShape {
        GemmShape {
            m: self.k,
            n: self.n,
            k: self.m,
            batch: self.batch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxfp8_serializes_but_never_deserializes() {
        assert_eq!(serde_json::to_string(&DType::Mxfp8).unwrap(), "\"mxfp8\"");
        let e = serde_json::from_str::<DType>("\"mxfp8\"").unwrap_err().to_string();
        assert!(e.contains("unknown variant `mxfp8`") && e.contains("`fp8`"), "{e}");
        for d in DType::SCENARIO {
            assert_eq!(serde_json::from_value::<DType>(serde_json::to_value(d).unwrap()).unwrap(), d);
        }
        assert_eq!(DType::ALL.map(|d| d.index()), std::array::from_fn(|i| i));
        let workload_only = |d: &DType| matches!(d, DType::Mxfp8 | DType::Fp8Block);
        assert!(DType::ALL.iter().all(|d| DType::SCENARIO.contains(d) != workload_only(d)));
        assert_eq!(serde_json::to_string(&DType::Fp8Block).unwrap(), "\"fp8_block\"");
        assert_eq!(DType::Fp8Block.to_string(), "fp8_block");
        assert!(serde_json::from_str::<DType>("\"fp8_block\"").is_err());
    }
}
