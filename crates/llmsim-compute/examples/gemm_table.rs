//! Prints the GEMM model's throughput for a list of shapes next to published kernel benchmarks.
//!
//! `cargo run --release -p llmsim-compute --example gemm_table`
//!
//! Rows: DeepGEMM's FP8 table on H800 (deepseek-ai/DeepGEMM README, 2025-03-25 "v2" columns;
//! normal dense GEMMs and grouped contiguous-layout GEMMs). DeepGEMM is not cuBLAS (the
//! library the calibration comes from), so this is a check of the shape dependence, not of the
//! level; the table is reported in bench/kernels.md, nothing is fitted to it.

use llmsim_compute::{ComputeModel, DType, GemmShape, KernelShape, OpClass, OpQuery, gpu};

/// Seconds the model gives one GEMM kernel of shape `s` moving `bytes` of HBM, without the
/// per-op launch cost (the benchmarks time kernels back to back).
fn kernel_secs(cm: &ComputeModel, dtype: DType, s: GemmShape, bytes: u64) -> f64 {
    let q = OpQuery {
        name: "gemm".into(),
        class: OpClass::Gemm,
        dtype,
        flops: s.flops(),
        bytes: bytes as f64,
        shape: String::new(),
        kernel: Some(KernelShape::Gemm(s)),
    };
    (cm.time(&q).time - cm.efficiency_for(OpClass::Gemm, dtype).launch).as_secs_f64()
}

fn main() {
    // (groups, m per group, n, k, published TFLOP/s)
    let rows: &[(u64, u64, u64, u64, f64)] = &[
        (1, 64, 2112, 7168, 206.0),
        (1, 64, 24576, 1536, 289.0),
        (1, 64, 32768, 512, 219.0),
        (1, 64, 7168, 16384, 336.0),
        (1, 64, 4096, 7168, 287.0),
        (1, 64, 7168, 2048, 295.0),
        (1, 128, 2112, 7168, 352.0),
        (1, 128, 24576, 1536, 535.0),
        (1, 128, 32768, 512, 358.0),
        (1, 128, 7168, 16384, 645.0),
        (1, 128, 4096, 7168, 533.0),
        (1, 128, 7168, 2048, 510.0),
        (1, 4096, 2112, 7168, 1009.0),
        (1, 4096, 24576, 1536, 1125.0),
        (1, 4096, 32768, 512, 751.0),
        (1, 4096, 7168, 16384, 1426.0),
        (1, 4096, 4096, 7168, 1265.0),
        (1, 4096, 7168, 2048, 1168.0),
        (4, 8192, 4096, 7168, 1346.0),
        (4, 8192, 7168, 2048, 1214.0),
        (8, 4096, 4096, 7168, 1346.0),
        (8, 4096, 7168, 2048, 1214.0),
    ];
    let spec = gpu("H800").expect("catalog GPU");
    let cm = ComputeModel::new(spec);
    println!("| groups | m | n | k | DeepGEMM TFLOP/s | llmsim TFLOP/s | llmsim / DeepGEMM |");
    println!("|---|---|---|---|---|---|---|");
    let mut ratios = Vec::new();
    for &(g, m, n, k, published) in rows {
        let s = GemmShape { m, n, k, batch: g };
        // FP8 operands, bf16 output.
        let secs = kernel_secs(&cm, DType::Fp8, s, g * (m * k + k * n) + 2 * g * m * n);
        let tflops = s.flops() / secs / 1e12;
        ratios.push(tflops / published);
        println!(
            "| {g} | {m} | {n} | {k} | {published:.0} | {tflops:.0} | {:.2} |",
            tflops / published
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "\nmedian ratio {:.2}, min {:.2}, max {:.2}",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );

    // Transformer Engine's GEMM profiling table (NVIDIA/TransformerEngine
    // docs/features/low_precision_training/gemm_profiling/gemm_profiling.rst, commit 33294178):
    // BF16 GEMM times of a hidden-4096 / FFN-16384 layer at m = 31 x 512 tokens on B300 SXM6 AC,
    // autocast; TFLOP/s = 2mnk / time. B300's shipped BF16 row is fit to the pre-quantized total
    // of these and their dgrad / wgrad GEMMs (`tests/calibration.rs`), so the rows here show the
    // spread around that fit; B200 takes the same row (same peaks and SMs).
    let te: &[(&str, u64, u64, u64, f64)] = &[
        ("qkv", 15872, 12288, 4096, 1.018),
        ("attn_out", 15872, 4096, 4096, 0.296),
        ("mlp_up", 15872, 16384, 4096, 1.364),
        ("mlp_down", 15872, 4096, 16384, 1.378),
    ];
    let b300 = gpu("B300").expect("catalog GPU");
    let cm = ComputeModel::new(b300);
    println!("\n| TE layer GEMM (B300 BF16) | m | n | k | measured TFLOP/s | llmsim (B300) TFLOP/s | llmsim / measured |");
    println!("|---|---|---|---|---|---|---|");
    for &(name, m, n, k, ms) in te {
        let s = GemmShape::new(m, n, k);
        let secs = kernel_secs(&cm, DType::Bf16, s, 2 * (m * k + k * n + m * n));
        let model = s.flops() / secs / 1e12;
        let measured = s.flops() / (ms * 1e-3) / 1e12;
        println!(
            "| {name} | {m} | {n} | {k} | {measured:.0} | {model:.0} | {:.2} |",
            model / measured
        );
    }

    // Grouped expert GEMMs on H100, BF16, as Transformer Engine's `GroupedLinear` runs them (one
    // cuBLAS GEMM per local expert, round-robin over 4 streams: TE <= 2.7's default path).
    // Published: NVIDIA/TransformerEngine PR #2045 (`tests/pytorch/test_group_gemm.py`, H100 SXM,
    // BF16), TE 2.2 and TE 2.7 + CUDA 12.9 multi-stream cuBLAS columns; tgale96/grouped_gemm
    // PR #37 (H100, BF16, Qwen3-30B-A3B up_proj, 128 experts x 512 tokens, uniform routing, cuBLAS
    // loop). Rows are (groups, m per group, n, k, TE 2.2 / loop TFLOP/s, TE 2.7 TFLOP/s or 0).
    let grouped: &[(u64, u64, u64, u64, f64, f64)] = &[
        (8, 4096, 768, 2048, 508.8, 627.9),
        (16, 2048, 768, 2048, 398.8, 553.9),
        (128, 512, 1536, 2048, 129.5, 0.0),
    ];
    let h100 = gpu("H100").expect("catalog GPU");
    let cm = ComputeModel::new(h100);
    println!(
        "\n| grouped GEMM (H100 BF16) | groups | m | n | k | published TFLOP/s (TE 2.2 or loop / TE 2.7) | llmsim TFLOP/s | llmsim / TE 2.7 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &(g, m, n, k, old, new) in grouped {
        let s = GemmShape { m, n, k, batch: g };
        let secs = kernel_secs(&cm, DType::Bf16, s, 2 * g * (m * k + k * n + m * n));
        let model = s.flops() / secs / 1e12;
        let vs = if new > 0.0 {
            format!("{:.2}", model / new)
        } else {
            "-".to_string()
        };
        let new = if new > 0.0 { format!("{new:.0}") } else { "-".to_string() };
        println!("| expert | {g} | {m} | {n} | {k} | {old:.0} / {new} | {model:.0} | {vs} |");
    }

    // The same layer's four forward GEMMs on an H200 NVL, BF16: Transformer Engine's GEMM
    // profiling guide, "Worked Example: 5B Model on H200" (NVIDIA/TransformerEngine
    // docs/examples/gemm_profiling/gemm_profiling.rst at d0067d0da), Fprop sum 10.653 ms per
    // layer (autocast; 15,872 tokens, hidden 4096, FFN 16384). H200 NVL is not in the catalog: a
    // custom GPU on H200 with its datasheet's 835 dense BF16 TFLOP/s at its 600 W board power
    // (NVIDIA H200 NVL datasheet: 1,671 TFLOP/s BF16 with sparsity).
    let nvl = llmsim_compute::CustomGpu {
        name: Some("H200-NVL".into()),
        base: Some("H200".into()),
        bf16_tflops: Some(835.0),
        fp16_tflops: Some(835.0),
        ..Default::default()
    }
    .build()
    .expect("custom GPU");
    let cm = ComputeModel::new(nvl);
    let mut total = 0.0;
    for &(_, m, n, k, _) in te {
        let s = GemmShape::new(m, n, k);
        let secs = kernel_secs(&cm, DType::Bf16, s, 2 * (m * k + k * n + m * n));
        total += secs * 1e3;
    }
    println!("\n| TE layer forward GEMMs (H200 NVL BF16) | measured ms | llmsim ms | llmsim / measured time |");
    println!("|---|---|---|---|");
    println!(
        "| qkv + attn_out + mlp_up + mlp_down | 10.653 | {total:.3} | {:.2} |",
        total / 10.653
    );
}
