//! Two memory-bound passes counted from the code real runs use: the all-to-all MoE dispatcher's
//! second permutation (sort of the received chunks by local expert, and the unsort before the
//! combine) and the vocabulary-parallel cross-entropy's kernels, fused and unfused.

mod common;
use common::plan;

use llmsim_compute::DType;
use llmsim_workload::model::preset;
use llmsim_workload::ops::{head, padded_vocab, transformer_layer};
use llmsim_workload::{MoeDispatcher, OpSpec, OpSpecKind, ParallelConfig, TrainingConfig};

fn bytes(op: &OpSpec) -> f64 {
    match op.kind {
        OpSpecKind::Compute { bytes, .. } => bytes,
        _ => panic!("{} is not a kernel", op.name),
    }
}

fn find<'a>(ops: &'a [OpSpec], name: &str) -> Vec<&'a OpSpec> {
    ops.iter().filter(|o| o.name == name).collect()
}

#[test]
fn alltoall_dispatcher_sorts_received_chunks_flex_does_not() {
    // Qwen3-30B-A3B on 16 GPUs with EP 8: 128 experts, 16 per rank, top-8, hidden 2048.
    let m = preset("qwen3-30b-a3b").unwrap();
    let t = TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 2,
        global_batch_size: 256,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 16, "{ tp: 1, pp: 1, ep: 8, etp: 1 }");
    assert_eq!(p.moe_token_dispatcher, MoeDispatcher::AllToAll, "the default");
    let layer = transformer_layer(&m, &t, &p, 0);
    // The received tokens: b·s·topk rows of h activations (balanced routing), read and written.
    let dt = t.dtype.bytes() as f64;
    let received = (t.micro_batch_size * t.seq_length * m.num_experts_per_tok * m.hidden_size) as f64;
    for name in ["moe_sort_chunks", "moe_unsort_chunks"] {
        let f = find(&layer.forward, name);
        assert_eq!(f.len(), 1, "{name} once in forward");
        assert_eq!(bytes(f[0]), 2.0 * received * dt, "{name}");
        let b = find(&layer.backward, &format!("{name}_bwd"));
        assert_eq!(b.len(), 1, "{name}_bwd once in backward");
        assert_eq!(bytes(b[0]), 2.0 * received * dt, "{name}_bwd");
    }
    // Order: sort after the dispatch and before the first expert GEMM; unsort after the last
    // expert GEMM and before the combine.
    let pos = |n: &str| layer.forward.iter().position(|o| o.name == n).unwrap();
    assert!(pos("ep_dispatch") < pos("moe_sort_chunks") && pos("moe_sort_chunks") < pos("expert_fc1"));
    assert!(pos("expert_fc2") < pos("moe_unsort_chunks") && pos("moe_unsort_chunks") < pos("ep_combine"));

    // The flex dispatcher lays tokens out in its dispatch kernel: no second permutation.
    let flex = plan(&m, &t, 16, "{ tp: 1, pp: 1, ep: 8, etp: 1, moe_token_dispatcher: flex }");
    let lf = transformer_layer(&m, &t, &flex, 0);
    assert!(lf.forward.iter().chain(&lf.backward).all(|o| !o.name.contains("sort_chunks")));
    // Everything else is the same op list.
    let names = |l: &llmsim_workload::ops::LayerOps| -> Vec<&str> {
        l.forward
            .iter()
            .chain(&l.backward)
            .map(|o| o.name)
            .filter(|n| !n.contains("sort_chunks"))
            .collect()
    };
    assert_eq!(names(&layer), names(&lf));

    // Megatron-Core's alias is accepted.
    let alias = plan(&m, &t, 16, "{ ep: 8, etp: 1, moe_token_dispatcher_type: flex }");
    assert_eq!(alias.moe_token_dispatcher, MoeDispatcher::Flex);
}

#[test]
fn one_local_expert_needs_no_sort() {
    // 8 experts over EP 8: one per rank, so the received chunks are already in expert order.
    let m = preset("mixtral-8x7b").unwrap();
    let t = TrainingConfig {
        seq_length: 4096,
        global_batch_size: 64,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 8, "{ tp: 1, pp: 1, ep: 8, etp: 1 }");
    let layer = transformer_layer(&m, &t, &p, 0);
    assert!(layer.forward.iter().chain(&layer.backward).all(|o| !o.name.contains("sort_chunks")));
    assert!(!find(&layer.forward, "expert_fc1").is_empty());
}

#[test]
fn unfused_cross_entropy_moves_the_fp32_logits_five_times() {
    let m = preset("llama3-8b").unwrap();
    let p = ParallelConfig::default();
    let loss = |dtype: DType, fused: bool| -> (f64, f64) {
        let t = TrainingConfig {
            dtype,
            cross_entropy_fusion: fused,
            ..TrainingConfig::default()
        };
        let h = head(&m, &t, &p);
        let logits = (t.micro_batch_size * t.seq_length * padded_vocab(&m, 1)) as f64;
        let f = bytes(find(&h.forward, "cross_entropy")[0]);
        let b = bytes(find(&h.backward, "cross_entropy_bwd")[0]);
        (f / logits, b / logits)
    };
    // BF16 logits, unfused: cast to fp32 (2 + 4), max (4), subtract (4 + 4), exp (4 + 4),
    // sum (4), divide (4 + 4); backward: scale in place (4 + 4), cast back (4 + 2).
    assert_eq!(loss(DType::Bf16, false), (38.0, 14.0));
    // fp32 logits: no cast either way.
    assert_eq!(loss(DType::Fp32, false), (32.0, 8.0));
    // Fused (two reads and an in-place gradient write; backward one scale in place).
    assert_eq!(loss(DType::Bf16, true), (6.0, 4.0));
    // FP8 training keeps the output layer, and so its logits, in BF16.
    assert_eq!(loss(DType::Fp8, false), loss(DType::Bf16, false));
}

#[test]
fn the_router_gemm_runs_on_tensor_cores() {
    // Megatron-Core's gating GEMM is Transformer Engine's `general_gemm`: BF16 forward (FP32
    // output, outside FP8 autocast), TF32 backward for the FP32 router; DeepSeek-V3's 256
    // experts over hidden 7168 at 4k tokens. It used to be charged at the FP32 CUDA-core rate.
    let m = preset("deepseek-v3").unwrap();
    let t = TrainingConfig {
        seq_length: 4096,
        micro_batch_size: 1,
        global_batch_size: 64,
        dtype: DType::Fp8,
        ..TrainingConfig::default()
    };
    let p = plan(&m, &t, 64, "{ tp: 1, pp: 1, ep: 64, etp: 1 }");
    let layer = transformer_layer(&m, &t, &p, m.first_k_dense_layers);
    let h100 = llmsim_compute::gpu::gpu("H100").unwrap();
    let cm = llmsim_compute::ComputeModel::new(h100);
    let tokens = (t.micro_batch_size * t.seq_length) as f64;
    let flops = 2.0 * tokens * m.hidden_size as f64 * m.num_experts as f64;
    for (name, dtype) in [
        ("moe_router", DType::Bf16),
        ("moe_router_dgrad", DType::Tf32),
        ("moe_router_wgrad", DType::Tf32),
    ] {
        let op = find(&layer.forward, name)
            .into_iter()
            .chain(find(&layer.backward, name))
            .next()
            .expect(name);
        let q = op.query(t.dtype).expect("a kernel");
        assert_eq!((q.class, q.dtype), (llmsim_compute::OpClass::Gemm, dtype), "{name}");
        let secs = cm.time(&q).time.as_secs_f64();
        // Never above the tensor-core roof, and far below the CUDA cores' FP32 roof.
        assert!(secs >= flops / h100.peak_flops(dtype), "{name}: {secs} s");
        assert!(secs < 0.5 * flops / h100.peak_flops(DType::Fp32), "{name}: {secs} s");
    }
}
