//! The shipped GEMM calibration against the kernel benchmarks it was derived from.
//!
//! `data/efficiency.csv` holds, per GPU and dtype, the efficiency `eff` of the GEMM model
//! ([`llmsim_compute::gemm`]). It was derived from the best-shape cuBLAS (torch.matmul)
//! throughput of the "Maximum Achievable Matmul FLOPS" table (stas00/ml-engineering,
//! `compute/accelerator/README.md`, revision 744d01e, 2026-08-22; mamf-finder.py, mean of 100
//! iterations): `eff = measured fraction of peak / model fraction at eff = 1` for that shape. These
//! tests recompute the model's throughput at each cited shape with the shipped table and require
//! it within 2% of the measurement, so the CSV cannot drift from its source.
//!
//! The DeepGEMM rows (FP8 on H800, deepseek-ai/DeepGEMM README, 2025-03-25 table) are a second
//! library the CSV was *not* derived from; they are reported by `bench/kernels.sh`, not asserted.

use llmsim_compute::{ComputeModel, DType, GemmShape, KernelShape, OpClass, OpQuery, gemm, gpu};

/// (GPU, dtype, m, n, k, measured TFLOP/s): the MAMF table's best shapes the rows derive from.
/// Not the Blackwell boards': B300's rows come from Transformer Engine's B300 layer profile
/// ([`b300_rows_reproduce_transformer_engines_layer`]), B200 takes them
/// ([`b200_rows_match_independent_kernel_timings`]) and GB200's follow from its own MXFP8 kernels
/// ([`gb200_rows_follow_b300s_dtype_ratios`]). (The MAMF B300 rows, BF16 1769.0 at
/// 12288x18432x1024 and FP8 3353.3 at 3072x6144x7168, are 12% and 5% above what those rows give;
/// `bench/kernels.md`; B200's and GB200's are in `data/efficiency.csv`, marked not used.)
const MAMF: &[(&str, DType, u64, u64, u64, f64)] = &[
    ("A100", DType::Bf16, 1024, 10240, 5120, 271.2),
    ("H100", DType::Bf16, 2048, 2048, 13312, 794.5),
    ("H100", DType::Fp8, 1024, 9216, 14336, 1402.6),
    ("H200", DType::Fp8, 1280, 4096, 12032, 1453.4),
    ("MI300X", DType::Bf16, 10240, 15360, 8192, 668.4),
];

/// B200's BF16 MAMF best shape, which no longer sets its row (B200 takes B300's measured rows)
/// but stands in for B300's in [`sustained_fraction_reproduces_the_te_layer_gemms`]: (m, n, k,
/// measured TFLOP/s).
const B200_MAMF_BF16: (u64, u64, u64, f64) = (1792, 16128, 3072, 1745.0);

/// The 12 GEMMs of Transformer Engine's B300 layer profile (`docs/examples/gemm_profiling`):
/// fprop, dgrad and wgrad of QKV, attention output, MLP up and down of a hidden-4096 /
/// FFN-16384 layer at 15,872 tokens.
fn te_b300_layer() -> Vec<GemmShape> {
    [
        (15872u64, 12288u64, 4096u64),
        (15872, 4096, 4096),
        (15872, 16384, 4096),
        (15872, 4096, 16384),
    ]
    .iter()
    .flat_map(|&(m, n, k)| {
        let s = GemmShape::new(m, n, k);
        [s, s.dgrad(), s.wgrad()]
    })
    .collect()
}

fn query(dtype: DType, s: GemmShape) -> OpQuery {
    OpQuery {
        name: "gemm".into(),
        class: OpClass::Gemm,
        dtype,
        flops: s.flops(),
        // Operands once, in the dtype: far below the compute roof for these shapes.
        bytes: ((s.m * s.k + s.k * s.n + s.m * s.n) * dtype.bytes()) as f64,
        shape: String::new(),
        kernel: Some(KernelShape::Gemm(s)),
    }
}

/// The model's best-shape TFLOP/s for a shape with the shipped table, launch cost excluded: its
/// training-step rate over [`gemm::SUSTAINED_FRACTION`] (the shipped rows include that factor).
fn model_tflops(g: &str, dtype: DType, m: u64, n: u64, k: u64) -> f64 {
    sustained_tflops(g, dtype, m, n, k) / gemm::SUSTAINED_FRACTION
}

/// The model's TFLOP/s for a GEMM of a training step.
fn sustained_tflops(g: &str, dtype: DType, m: u64, n: u64, k: u64) -> f64 {
    let spec = gpu(g).unwrap();
    let cm = ComputeModel::new(spec);
    let s = GemmShape::new(m, n, k);
    let t = cm.time(&query(dtype, s)).time;
    let launch = cm.efficiency_for(OpClass::Gemm, dtype).launch;
    s.flops() / (t - launch).as_secs_f64() / 1e12
}

#[test]
fn shipped_gemm_efficiency_reproduces_the_cited_best_shapes() {
    let mut bad = Vec::new();
    for &(g, d, m, n, k, measured) in MAMF {
        let got = model_tflops(g, d, m, n, k);
        let spec = gpu(g).unwrap();
        let cm = ComputeModel::new(spec);
        let eff = cm.efficiency_for(OpClass::Gemm, d).compute_eff / gemm::SUSTAINED_FRACTION;
        let implied = eff * measured / got;
        if (got / measured - 1.0).abs() >= 0.02 {
            bad.push(format!(
                "{g} {d} {m}x{n}x{k}: model {got:.1} TFLOP/s, measured {measured}; the CSV's best-shape {eff:.3} should be {implied:.3}"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// V100's row: cuBLAS mixed-precision GEMM "up to 83 Tflops/s" (Markidis et al., IPDPSW 2018,
/// abstract), at a size the abstract does not give; the row takes it as 8192^3. The best-shape
/// model must give 83 there, and stay within 10% of it over 4096^3-16384^3 (the sizes such a
/// benchmark sweeps to), so the assumed size moves the row by less than that.
#[test]
fn v100_row_reproduces_the_cublas_tensor_core_peak() {
    let at = |n: u64| model_tflops("V100", DType::Fp16, n, n, n);
    assert!((at(8192) / 83.0 - 1.0).abs() < 0.02, "{}", at(8192));
    for n in [4096, 16384] {
        assert!((at(n) / 83.0 - 1.0).abs() < 0.10, "{n}: {}", at(n));
    }
}

#[test]
fn fp8_gemms_are_faster_than_bf16_but_not_beyond_the_peak_ratio() {
    for g in ["H100", "H200", "B200", "B300", "GB200", "GB300"] {
        let spec = gpu(g).unwrap();
        let ratio = spec.peak_flops(DType::Fp8) / spec.peak_flops(DType::Bf16);
        for (m, n, k) in [
            (4096, 4096, 4096),
            (8192, 28672, 8192),
            (2048, 1024, 8192),
            (512, 512, 512),
            (16384, 6144, 1536),
        ] {
            let cm = ComputeModel::new(spec);
            let s = GemmShape::new(m, n, k);
            let t16 = cm.time(&query(DType::Bf16, s)).time;
            let t8 = cm.time(&query(DType::Fp8, s)).time;
            assert!(t8 < t16, "{g} {m}x{n}x{k}: fp8 {t8:?} >= bf16 {t16:?}");
            assert!(t16.as_secs_f64() / t8.as_secs_f64() <= ratio + 1e-9, "{g} {m}x{n}x{k}");
        }
    }
}

/// The sustained fraction reproduces the long GEMMs of Transformer Engine's B300 layer profile
/// (see [`gemm::SUSTAINED_FRACTION`]; B200's MAMF best shape times the fraction stands in for
/// B300, same BF16 peak and SMs).
#[test]
fn sustained_fraction_reproduces_the_te_layer_gemms() {
    let (g, d) = ("B200", DType::Bf16);
    let (bm, bn, bk, best) = B200_MAMF_BF16;
    // The model is linear in the row's eff on these compute-bound shapes: the factor that takes
    // the shipped row to the MAMF-derived one (best shape x the sustained fraction).
    let to_mamf = best * gemm::SUSTAINED_FRACTION / sustained_tflops(g, d, bm, bn, bk);
    // (m, n, k, measured ms): QKV, MLP up, MLP down.
    for (m, n, k, ms) in [
        (15872u64, 12288u64, 4096u64, 1.018),
        (15872, 16384, 4096, 1.364),
        (15872, 4096, 16384, 1.378),
    ] {
        let measured = 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
        let got = sustained_tflops(g, d, m, n, k) * to_mamf;
        assert!(
            (got / measured - 1.0).abs() < 0.03,
            "{m}x{n}x{k}: model {got:.0}, measured {measured:.0}"
        );
    }
}

/// Grouped expert GEMMs run as one kernel per expert (Transformer Engine's `GroupedLinear`), so
/// small groups lose throughput. Measured: NVIDIA/TransformerEngine PR #2045
/// (`tests/pytorch/test_group_gemm.py`, H100, BF16, TE 2.7 + CUDA 12.9, multi-stream cuBLAS):
/// 627.9 TFLOP/s for 8 x 4096 tokens and 553.9 for 16 x 2048 at n = 768, k = 2048. Not a source of
/// any calibrated number: the model must land within 10% of both, and the smaller groups must
/// come out slower, as measured.
#[test]
fn grouped_expert_gemms_match_transformer_engines_loop() {
    let spec = gpu("H100").unwrap();
    let cm = ComputeModel::new(spec);
    let launch = cm.efficiency_for(OpClass::Gemm, DType::Bf16).launch;
    let tflops = |g: u64, m: u64| {
        let s = GemmShape {
            m,
            n: 768,
            k: 2048,
            batch: g,
        };
        let t = cm.time(&query(DType::Bf16, s)).time - launch;
        s.flops() / t.as_secs_f64() / 1e12
    };
    let (eight, sixteen) = (tflops(8, 4096), tflops(16, 2048));
    for (model, measured) in [(eight, 627.9), (sixteen, 553.9)] {
        assert!((model / measured - 1.0).abs() < 0.10, "model {model:.0} TFLOP/s, TE 2.7 {measured}");
    }
    assert!(
        sixteen < eight,
        "16 x 2048 ({sixteen:.0}) must be slower than 8 x 4096 ({eight:.0})"
    );
}

/// The Mamba-2 SSD forward (mamba_ssm's five unfused Triton kernels) on one H100: vLLM PR #27299
/// (cyang49, comment of 2025-10-25), "Original" column, granite-4.0-h-small shape (128 heads,
/// head dim 64, 1 group, state 128, chunk 256), tokens/s by tokens. The model times the op as
/// the workload builds it (FLOPs of `mamba_mixer`, traffic of `ssd::hbm_bytes`); every point is
/// within 12% (the spread of the measurement around the shipped mean efficiency).
#[test]
fn ssd_scan_reproduces_the_cited_triton_forward() {
    use llmsim_compute::{SsdShape, ssd};
    const VLLM_27299: &[(u64, f64)] = &[
        (8192, 1.262327e7),
        (16384, 1.292440e7),
        (32768, 1.180002e7),
        (65536, 1.106830e7),
        (131072, 1.070444e7),
        (262144, 1.081547e7),
    ];
    let cm = ComputeModel::new(gpu("H100").unwrap());
    for &(tokens, measured) in VLLM_27299 {
        let s = SsdShape {
            tokens,
            heads: 128,
            head_dim: 64,
            state: 128,
            groups: 1,
            chunk: 256,
            backward: false,
            // vLLM's prefill calls the scan without z (its gated norm applies it).
            gated: false,
        };
        // llmsim-workload `mamba_mixer`: G·2QN + H·(2QP + 4NP) per token.
        let flops = tokens as f64 * (2.0 * 256.0 * 128.0 + 128.0 * (2.0 * 256.0 * 64.0 + 4.0 * 128.0 * 64.0));
        let q = OpQuery {
            name: "mamba_ssd_scan".into(),
            class: OpClass::Attention,
            dtype: DType::Bf16,
            flops,
            bytes: ssd::hbm_bytes(&s),
            shape: String::new(),
            kernel: Some(KernelShape::Ssd(s)),
        };
        let t = cm.time(&q);
        assert_eq!(t.bound, llmsim_compute::Bound::Memory, "{tokens}");
        let got = tokens as f64 / t.time.as_secs_f64();
        assert!(
            (got / measured - 1.0).abs() < 0.12,
            "{tokens} tokens: model {got:.3e} tokens/s, measured {measured:.3e}"
        );
    }
}

/// The Mamba-2 SSD backward, and the gated forward, on one H100: the TFLA paper's kernel benchmark
/// (NX-AI/mlstm_kernels 39d3c61, `mlstm_tfla_paper_consttoken_benchmark_results_rerun.p`, its
/// `consttoken_benchmark_mamba` run), `mamba_split_conv1d_scan_combined` (conv1d, then the scan
/// gated by z, as Megatron-Core trains) at 65,536 tokens (8,192 x 8), head dim 64, state 64, one
/// group, chunk 256, BF16, median of 30: forward alone, and forward + `sum(out).backward()`.
/// The model adds the work outside the scan at its element-wise rate (bytes below, from the
/// harness's code: `training_kernel_benchmarks.py::MambaKernelBenchmark` builds FP32 leaves and
/// casts them to BF16 outside the timed function, so the backward casts `zxbcdt`'s gradient to
/// FP32 and accumulates it into the leaf). Forward within 5%; the backward, whose shipped
/// efficiency is the mean of the two points' (`ssd::BWD_MEMORY_EFF`), within 12%.
#[test]
fn ssd_backward_reproduces_the_tfla_benchmark() {
    use llmsim_compute::{SsdShape, ssd};
    // (heads, forward ms, forward + backward ms)
    const TFLA_H100: &[(u64, f64, f64)] = &[(128, 7.074272, 44.375969), (64, 3.625984, 26.952480)];
    let cm = ComputeModel::new(gpu("H100").unwrap());
    let elementwise = |bytes: f64| {
        cm.time(&OpQuery {
            name: "other".into(),
            class: OpClass::Elementwise,
            dtype: DType::Bf16,
            flops: 0.0,
            bytes,
            shape: String::new(),
            kernel: None,
        })
        .time
        .as_secs_f64()
    };
    let (tokens, head_dim, state, groups) = (65536u64, 64u64, 64u64, 1u64);
    for &(heads, fwd_ms, fwbw_ms) in TFLA_H100 {
        let scan = |backward: bool| {
            let s = SsdShape {
                tokens,
                heads,
                head_dim,
                state,
                groups,
                chunk: 256,
                backward,
                gated: true,
            };
            cm.time(&OpQuery {
                name: "mamba_ssd_scan".into(),
                class: OpClass::Attention,
                dtype: DType::Bf16,
                flops: 0.0,
                bytes: ssd::hbm_bytes(&s),
                shape: String::new(),
                kernel: Some(KernelShape::Ssd(s)),
            })
            .time
            .as_secs_f64()
        };
        let t = tokens as f64;
        let x = t * (heads * head_dim) as f64 * 2.0;
        // conv1d over x, B, C: forward reads and writes once, backward three passes.
        let conv = t * (heads * head_dim + 2 * groups * state) as f64 * 2.0;
        // zxbcdt's gradient (z, x, B, C, dt) in BF16: cast to FP32 (read, write), then added
        // into the FP32 leaf gradient (read both, write).
        let dzx = t * (2 * heads * head_dim + 2 * groups * state + heads) as f64 * 2.0;
        let harness = dzx + 2.0 * dzx + 3.0 * 2.0 * dzx;
        let model_fwd = scan(false) + elementwise(2.0 * conv);
        // sum(out) and its materialized gradient, the conv1d recompute and backward, the harness.
        let model_bwd = scan(true) + elementwise(2.0 * x + 2.0 * conv + 3.0 * conv + harness);
        let (mf, mb) = (fwd_ms * 1e-3, (fwbw_ms - fwd_ms) * 1e-3);
        assert!(
            (model_fwd / mf - 1.0).abs() < 0.05,
            "{heads} heads forward: model {model_fwd:.5} s, measured {mf:.5} s"
        );
        assert!(
            (model_bwd / mb - 1.0).abs() < 0.12,
            "{heads} heads backward: model {model_bwd:.5} s, measured {mb:.5} s"
        );
        // Per byte the backward runs at about two thirds of the forward's rate.
        assert!(scan(true) > 4.0 * scan(false) && scan(true) < 5.5 * scan(false), "{heads}");
    }
}

/// NVFP4 GEMMs on Blackwell Ultra: Transformer Engine's GEMM profiling guide times the 12 GEMMs
/// (forward, dgrad, wgrad of QKV, attention output, MLP up and down) of a hidden-4096,
/// FFN-16384 layer at 15,872 tokens on a B300, pre-quantized (kernels only): BF16 13.102 ms,
/// NVFP4 3.764 ms per layer (NVIDIA/TransformerEngine `docs/examples/gemm_profiling/
/// gemm_profiling.rst` at d0067d0da, "Per-Layer GEMM Time", pre-quantized). The shipped fp4 rows
/// of B300 and GB300 (same SM103 die) were derived from that ratio, 0.287: the model's NVFP4 /
/// BF16 time for the same 12 GEMMs must match it within 3%.
#[test]
fn nvfp4_gemms_match_transformer_engines_b300_layer() {
    let layer = te_b300_layer();
    for g in ["B300", "GB300"] {
        let cm = ComputeModel::new(gpu(g).unwrap());
        let total = |d: DType| -> f64 { layer.iter().map(|&s| cm.time(&query(d, s)).time.as_secs_f64()).sum() };
        let ratio = total(DType::Fp4) / total(DType::Bf16);
        println!(
            "{g}: bf16 {:.3} ms, fp4 {:.3} ms, ratio {ratio:.4}",
            total(DType::Bf16) * 1e3,
            total(DType::Fp4) * 1e3
        );
        assert!(
            (ratio / (3.764 / 13.102) - 1.0).abs() < 0.03,
            "{g}: NVFP4 / BF16 {ratio:.3}, measured 0.287"
        );
    }
}

/// cuDNN frontend's fused MXFP8 grouped GEMM + activation kernels timed on a GB200 and a GB300
/// (8 experts x 4096 tokens, K = 8192), two refreshes (sources:
/// [`gb300_gemms_match_the_paired_cudnn_runs`]): (GEMM n, GB200 ms, GB300 ms) in the order
/// swiglu, dswiglu, srelu, dsrelu, geglu, dgeglu.
const CUDNN_FUSED: [[(u64, f64, f64); 6]; 2] = [
    [
        (8192, 1.504, 1.323),
        (4096, 0.820, 0.718),
        (4096, 0.748, 0.666),
        (4096, 0.771, 0.701),
        (8192, 1.519, 1.316),
        (4096, 0.835, 0.734),
    ],
    [
        (8192, 1.550, 1.319),
        (4096, 0.870, 0.740),
        (4096, 0.739, 0.675),
        (4096, 0.781, 0.686),
        (8192, 1.544, 1.317),
        (4096, 0.889, 0.751),
    ],
];

/// The forward kernels of [`CUDNN_FUSED`] (swiglu, srelu, geglu): their epilogue only writes the
/// MXFP8 activation, so they time the GEMM (`mxfp8_rows_reproduce_their_kernels`).
const CUDNN_FORWARD: [usize; 3] = [0, 2, 4];

/// GB300 against GB200 on the same kernels: cuDNN frontend's MXFP8 grouped GEMM + activation
/// benchmark (8 experts x 4096 tokens, K = 8192; GEMM N = 8192 for swiglu and geglu, 4096 for
/// the other four), CUDA-graph replay, one software stack (torch 2.12.0a0 nv26.05, TE 2.15.0,
/// cudnn-frontend 1.23.0), fused cuDNN times in ms. Two refreshes, each a GB200 file against a
/// GB300 file of NVIDIA/cudnn-frontend `benchmark/cutedsl_fusion_kernels/results/`:
/// `GB200/output_verbose.txt` at 07b4346 / `GB300/output_verbose.txt` at 0e2d674, and
/// `B200/output_verbose.txt` at 35fd7b0 / `B300/output_verbose.txt` at 3b465d4 (which print
/// "device: NVIDIA GB200" and "NVIDIA GB300"). GB300's shipped GEMM rows are GB200's times the
/// geometric mean of the 12 time ratios: the model's GB200 / GB300 time on these shapes must
/// match it within 2%, and each refresh within 3%.
#[test]
fn gb300_gemms_match_the_paired_cudnn_runs() {
    let geomean = |r: &[f64]| (r.iter().map(|x| x.ln()).sum::<f64>() / r.len() as f64).exp();
    let (gb200, gb300) = (ComputeModel::new(gpu("GB200").unwrap()), ComputeModel::new(gpu("GB300").unwrap()));
    // The factor sits on GB300's fp8 (and BF16) rows; its mxfp8 row is timed on its own kernels
    // (`mxfp8_rows_reproduce_their_kernels`) and must keep the same ratio.
    for dtype in [DType::Fp8, DType::Mxfp8] {
        let model = |n: u64| {
            let s = GemmShape {
                m: 4096,
                n,
                k: 8192,
                batch: 8,
            };
            gb200.time(&query(dtype, s)).time.as_secs_f64() / gb300.time(&query(dtype, s)).time.as_secs_f64()
        };
        let mut all = Vec::new();
        for (i, refresh) in CUDNN_FUSED.iter().enumerate() {
            let measured: Vec<f64> = refresh.iter().map(|&(_, a, b)| a / b).collect();
            let modelled: Vec<f64> = refresh.iter().map(|&(n, _, _)| model(n)).collect();
            let (m, p) = (geomean(&measured), geomean(&modelled));
            println!("{dtype} refresh {i}: measured GB200/GB300 {m:.4}, model {p:.4}");
            assert!((p / m - 1.0).abs() < 0.03, "{dtype} refresh {i}: model {p:.3}, measured {m:.3}");
            all.extend(measured.iter().zip(&modelled).map(|(a, b)| (*a, *b)));
        }
        let measured = geomean(&all.iter().map(|p| p.0).collect::<Vec<_>>());
        let modelled = geomean(&all.iter().map(|p| p.1).collect::<Vec<_>>());
        assert!(
            (modelled / measured - 1.0).abs() < 0.02,
            "{dtype} GB200/GB300: model {modelled:.3}, measured {measured:.3}"
        );
        // The gain is GEMM-only: memory-bound kernels run alike on both (same HBM).
        assert!(
            modelled > 1.05,
            "GB300 must be faster than GB200 on tensor-core GEMMs: {modelled:.3}"
        );
    }
}

/// The mxfp8 rows against the MXFP8 kernels they were derived from (`data/efficiency.csv`):
/// - B300: Transformer Engine's layer profile, the 12 GEMMs pre-quantized in MXFP8, 7.161 ms
///   (`docs/examples/gemm_profiling/gemm_profiling.rst` at d0067d0da), within 1%;
/// - GB200, GB300: cuDNN frontend's fused MXFP8 grouped GEMM + activation, the three forward
///   kernels (swiglu, srelu, geglu) of both refreshes cited in
///   [`gb300_gemms_match_the_paired_cudnn_runs`]: the model's geometric-mean time over the six
///   within 2% of the measured one, and every kernel within 6%.
///
/// Every MXFP8 GEMM is slower than the same per-tensor FP8 one, and faster than BF16's.
#[test]
fn mxfp8_rows_reproduce_their_kernels() {
    let b300 = ComputeModel::new(gpu("B300").unwrap());
    let layer = te_b300_layer();
    let ms: f64 = layer
        .iter()
        .map(|&s| b300.time(&query(DType::Mxfp8, s)).time.as_secs_f64())
        .sum::<f64>()
        * 1e3;
    println!("B300 MXFP8 layer: model {ms:.3} ms, TE 7.161 ms");
    assert!((ms / 7.161 - 1.0).abs() < 0.01, "B300 MXFP8 layer: model {ms:.3} ms, TE 7.161 ms");
    // (GEMM n, ms): swiglu, srelu, geglu of the first refresh, then of the second.
    for (g, gb300) in [("GB200", false), ("GB300", true)] {
        let kernels = CUDNN_FUSED
            .iter()
            .flat_map(|r| CUDNN_FORWARD.map(|i| r[i]))
            .map(|(n, a, b)| (n, if gb300 { b } else { a }));
        let cm = ComputeModel::new(gpu(g).unwrap());
        let ratios: Vec<f64> = kernels
            .map(|(n, measured_ms)| {
                let s = GemmShape {
                    m: 4096,
                    n,
                    k: 8192,
                    batch: 8,
                };
                let ms = cm.time(&query(DType::Mxfp8, s)).time.as_secs_f64() * 1e3;
                assert!(
                    (ms / measured_ms - 1.0).abs() < 0.06,
                    "{g} n {n}: model {ms:.3} ms, cuDNN {measured_ms} ms"
                );
                ms / measured_ms
            })
            .collect();
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        println!("{g}: MXFP8 model / measured geomean {geo:.4}");
        assert!((geo - 1.0).abs() < 0.02, "{g}: model / measured {geo:.3}");
    }
    // Reported, not asserted: torchao's CUTLASS grouped MXFP8 GEMM on a B200 (not the kernel
    // Megatron-Core runs), DeepSeek-V3 expert shape, forward: 1,671.2 us.
    let b200 = ComputeModel::new(gpu("B200").unwrap());
    let s = GemmShape {
        m: 131072 / 8,
        n: 2048,
        k: 7168,
        batch: 8,
    };
    let us = b200.time(&query(DType::Mxfp8, s)).time.as_secs_f64() * 1e6;
    println!("B200 MXFP8 grouped forward: model {us:.1} us, torchao 1671.2 us");
    for g in ["B200", "B300", "GB200", "GB300"] {
        let cm = ComputeModel::new(gpu(g).unwrap());
        for s in [GemmShape::new(8192, 8192, 8192), GemmShape::new(4096, 2048, 7168)] {
            let t = |d| cm.time(&query(d, s)).time;
            assert!(t(DType::Mxfp8) > t(DType::Fp8) && t(DType::Mxfp8) < t(DType::Bf16), "{g}");
        }
    }
}

/// B300's GEMM rows are its own training-shape measurement: Transformer Engine's GEMM profiling
/// guide times the 12 GEMMs (fprop, dgrad, wgrad of QKV, attention output, MLP up and down) of a
/// hidden-4096 / FFN-16384 layer at 15,872 tokens on a B300, pre-quantized (kernels only): BF16
/// 13.102 ms, FP8 current scaling 6.812 ms, NVFP4 3.764 ms (NVIDIA/TransformerEngine
/// `docs/examples/gemm_profiling/gemm_profiling.rst` at d0067d0da, "Per-Layer GEMM Time"). The
/// model's times for the same GEMMs with the shipped rows must match each within 1%.
#[test]
fn b300_rows_reproduce_transformer_engines_layer() {
    let cm = ComputeModel::new(gpu("B300").unwrap());
    let layer = te_b300_layer();
    for (d, measured_ms) in [(DType::Bf16, 13.102), (DType::Fp8, 6.812), (DType::Fp4, 3.764)] {
        let ms: f64 = layer.iter().map(|&s| cm.time(&query(d, s)).time.as_secs_f64()).sum::<f64>() * 1e3;
        assert!(
            (ms / measured_ms - 1.0).abs() < 0.01,
            "B300 {d}: model {ms:.3} ms, TE {measured_ms} ms"
        );
    }
}

/// B200 takes B300's measured BF16, FP8 and MXFP8 rows (`data/efficiency.csv`: same peaks and
/// SMs). Kernel-only B200 timings that set no number must agree within 4%; the MAMF-derived rows
/// it had before were 7-10% faster than every one of them:
/// - cuBLAS BF16 `torch.matmul`, kernel time from `torch.profiler` (pytorch/ao PR #2427,
///   2025-06-23): 4096^3 1.41 PF, 6144^3 1.45 PF, 8192^3 1.42 PF;
/// - XLA's `sm_100` matmul table (tensorflow/tensorflow a305421c,
///   `third_party/xla/xla/backends/gpu/cost_model/matmul_interpolator_data.h`; the board is not
///   stated, B200 or GB200: compared as B200), 4096^3: BF16 1416.9 TFLOP/s, FP8 e4m3 2765.0.
#[test]
fn b200_rows_match_independent_kernel_timings() {
    let (b200, b300) = (ComputeModel::new(gpu("B200").unwrap()), ComputeModel::new(gpu("B300").unwrap()));
    for d in [DType::Bf16, DType::Fp8, DType::Mxfp8] {
        let row = |cm: &ComputeModel| cm.efficiency_for(OpClass::Gemm, d).compute_eff;
        assert_eq!(row(&b200), row(&b300), "{d}");
    }
    for (d, n, measured) in [
        (DType::Bf16, 4096u64, 1410.0),
        (DType::Bf16, 6144, 1450.0),
        (DType::Bf16, 8192, 1420.0),
        (DType::Bf16, 4096, 1416.9),
        (DType::Fp8, 4096, 2765.0),
    ] {
        let got = sustained_tflops("B200", d, n, n, n);
        println!("B200 {d} {n}^3: model {got:.0} TFLOP/s, measured {measured}");
        assert!(
            (got / measured - 1.0).abs() < 0.04,
            "B200 {d} {n}^3: model {got:.0}, measured {measured}"
        );
    }
}

/// GB200's only training-shape GEMM measurement is MXFP8 (cuDNN's fused grouped kernels,
/// [`mxfp8_rows_reproduce_their_kernels`]); its FP8 and BF16 rows follow from that row by the
/// dtype ratios B300's layer profile measures on one layer (FP8 / MXFP8, BF16 / FP8), and
/// GB300's by the paired GB200/GB300 factor ([`gb300_gemms_match_the_paired_cudnn_runs`]).
#[test]
fn gb200_rows_follow_b300s_dtype_ratios() {
    let row = |g: &str, d: DType| ComputeModel::new(gpu(g).unwrap()).efficiency_for(OpClass::Gemm, d).compute_eff;
    for g in ["GB200", "GB300"] {
        for (hi, lo) in [(DType::Fp8, DType::Mxfp8), (DType::Bf16, DType::Fp8)] {
            let (want, got) = (row("B300", hi) / row("B300", lo), row(g, hi) / row(g, lo));
            assert!((got / want - 1.0).abs() < 0.005, "{g} {hi}/{lo}: {got:.4}, B300 {want:.4}");
        }
    }
}

/// Blackwell's memory-bound rows are Hopper's times the paired copy-kernel ratio they cite
/// (`data/efficiency.csv`: vLLM PR #48110's Triton copy, 2,822.9 GB/s of an H100's 3.35 TB/s and
/// 5,900.6 GB/s of a GB200's 8 TB/s), and a copy on Blackwell is timed at that lower fraction.
#[test]
fn blackwell_memory_bound_rows_follow_the_paired_copy_kernel() {
    let ratio = (5900.6 / 8000.0) / (2822.9 / 3350.0);
    let h100 = ComputeModel::new(gpu::gpu("H100").unwrap());
    for name in ["B200", "GB200", "B300", "GB300"] {
        let m = ComputeModel::new(gpu::gpu(name).unwrap());
        // The memory-bound classes: all but the GEMM and attention ones.
        let memory_bound = OpClass::ALL
            .into_iter()
            .filter(|c| !matches!(c, OpClass::Gemm | OpClass::FlashAttention | OpClass::Attention));
        for class in memory_bound {
            let (b, h) = (m.efficiency(class).memory_eff, h100.efficiency(class).memory_eff);
            assert!((b / (h * ratio) - 1.0).abs() < 0.005, "{name} {class:?}: {b} vs {h} x {ratio}");
        }
    }
}

/// The Hopper `fp8_block` rows (`data/efficiency.csv`) are the `fp8` rows over the block-scaled
/// GEMMs' slowdown derived from Transformer Engine's GEMM profiling guide on an H200 NVL
/// (`docs/examples/gemm_profiling/gemm_profiling.rst` at d0067d0da, "Worked Example: 5B Model on
/// H200", 12 GEMMs of a hidden-4096 / FFN-16384 layer at 15,872 tokens): autocast FP8 current
/// scaling 20.285 ms and FP8 block 22.882 ms, pre-quantized current scaling 16.785 ms. Current
/// scaling's quantization is the difference; block quantization moves, per element, 2 bytes read
/// and `u` copies of 1 + 1/32 written against current scaling's 2 + 2 read and `u` written
/// (`u` = 1 or 2 usages), so the block GEMMs take what is left. The model's 12 block-scaled GEMMs
/// on an H200 must sit inside that range relative to its per-tensor ones, and every Blackwell GPU
/// must time block-scaled GEMMs as MXFP8 ones (the recipe is emulated with MXFP8 there).
#[test]
fn fp8_block_rows_follow_te_h200_profile() {
    let (cs_auto, block_auto, cs_kernels) = (20.285, 22.882, 16.785);
    let q_cs = cs_auto - cs_kernels;
    let bound = |u: f64| (block_auto - q_cs * (2.0 + u * (1.0 + 1.0 / 32.0)) / (4.0 + u)) / cs_kernels;
    let (lo, hi) = (bound(2.0), bound(1.0));
    let cm = ComputeModel::new(gpu("H200").unwrap());
    let layer = te_b300_layer();
    let ms = |d: DType| layer.iter().map(|&s| cm.time(&query(d, s)).time.as_secs_f64()).sum::<f64>() * 1e3;
    let r = ms(DType::Fp8Block) / ms(DType::Fp8);
    println!("H200 block / per-tensor FP8 GEMMs: model {r:.3}, from TE's profile {lo:.3}-{hi:.3}");
    assert!((lo - 0.005..=hi + 0.005).contains(&r), "model {r:.3} outside {lo:.3}-{hi:.3}");
    assert!(ms(DType::Fp8Block) < ms(DType::Bf16), "block-scaled FP8 still beats BF16");
    for g in ["B200", "B300", "GB200", "GB300"] {
        let cm = ComputeModel::new(gpu(g).unwrap());
        let s = GemmShape::new(8192, 8192, 8192);
        assert_eq!(
            cm.time(&query(DType::Fp8Block, s)).time,
            cm.time(&query(DType::Mxfp8, s)).time,
            "{g}"
        );
    }
}

/// MXFP8 quantization on a B200 against its measured kernel: Transformer Engine's cast-only
/// MXFP8 kernel on BF16 8192 x 8192 takes 34.84 us row-wise, 39.61 us column-wise and 52.34 us
/// for both usages (the B200 column of the CAST_ONLY table in ROCm/TransformerEngine PR #598,
/// 2026-05-27, which compares its own kernels with NVIDIA's on a B200; software versions not
/// stated). llmsim times a cast as a memory-bound element-wise op of its bytes: 2 read, and per
/// usage 1 written plus one E8M0 scale per 32 elements. Training quantizes both usages (the
/// forward input for fprop and wgrad, the output gradient for dgrad and wgrad), which the
/// model must match within 5%; a row-wise-only cast runs faster than the element-wise rate (73%
/// of HBM peak against 65% for both), so the model is slower there, by less than 20%.
#[test]
fn b200_mxfp8_casts_match_the_measured_kernel() {
    let cm = ComputeModel::new(gpu::gpu("B200").unwrap());
    let cast = |usages: f64| {
        let elems = 8192.0 * 8192.0;
        cm.time(&OpQuery {
            name: "fp8_cast".into(),
            class: OpClass::Elementwise,
            dtype: DType::Bf16,
            flops: elems,
            bytes: elems * (2.0 + usages * (1.0 + 1.0 / 32.0)),
            shape: String::new(),
            kernel: None,
        })
        .time
        .as_secs_f64()
            * 1e6
    };
    let (both, one) = (cast(2.0), cast(1.0));
    assert!((both / 52.34 - 1.0).abs() < 0.05, "both usages: model {both:.2} us, measured 52.34");
    assert!((one / 39.61 - 1.0).abs() < 0.05, "column-wise: model {one:.2} us, measured 39.61");
    assert!(one > 34.84 && one < 1.2 * 34.84, "row-wise: model {one:.2} us, measured 34.84");
}
