//! `parallel.tp_impl: dtensor`: PyTorch DTensor tensor parallelism as TorchTitan applies it (no
//! backward re-gather of a column-parallel input; FP8 forward gathers under torchao's tensorwise
//! Float8; async TP's fused collectives in one chunk per rank).

mod common;
use common::plan;

use llmsim_compute::DType;
use llmsim_core::CollectiveOp;
use llmsim_workload::ops::{OverlapMethod, Pass, transformer_layer};
use llmsim_workload::{Fp8Recipe, LayerOps, TrainingConfig, model::preset};

fn training(dtype: DType) -> TrainingConfig {
    TrainingConfig {
        seq_length: 8192,
        micro_batch_size: 1,
        global_batch_size: 64,
        dtype,
        fp8_recipe: Fp8Recipe::Current,
        ..TrainingConfig::default()
    }
}

/// `(pass, op, bytes)` of every standalone TP collective of the layer.
fn tp_colls(l: &LayerOps) -> Vec<(Pass, CollectiveOp, u64)> {
    l.forward
        .iter()
        .chain(&l.backward)
        .filter_map(|o| o.comm().map(|(op, _, b)| (o.pass, op, b)))
        .collect()
}

/// [`tp_colls`] and the NCCL collectives that ride on a backward GEMM
/// (`parallel.tp_backward_overlap`: the re-gather on the dgrad GEMM, the input gradient's
/// reduce-scatter on the wgrad GEMM), both counted in the input-gradient pass they serve.
fn tp_colls_all(l: &LayerOps) -> Vec<(Pass, CollectiveOp, u64)> {
    let mut v = tp_colls(l);
    v.extend(l.backward.iter().filter_map(|o| {
        o.overlap
            .filter(|ov| ov.method == llmsim_workload::ops::OverlapMethod::Nccl)
            .map(|ov| (Pass::BackwardInput, ov.op, ov.bytes))
    }));
    v
}

#[test]
fn dtensor_keeps_the_gathered_input_and_gathers_fp8() {
    // Llama 3 70B, TP 8 with sequence parallelism: a [b·s, h] activation is 8192 x 8192.
    let m = preset("llama3-70b").unwrap();
    let act = 8192 * 8192u64;
    for dtype in [DType::Bf16, DType::Fp8] {
        let t = training(dtype);
        let dt = t.activation_bytes();
        let meg = plan(&m, &t, 8, "{ tp: 8, sequence_parallel: true }");
        let dten = plan(&m, &t, 8, "{ tp: 8, sequence_parallel: true, tp_impl: dtensor }");
        let (a, b) = (
            tp_colls_all(&transformer_layer(&m, &t, &meg, 0)),
            tp_colls_all(&transformer_layer(&m, &t, &dten, 0)),
        );
        let count = |v: &[(Pass, CollectiveOp, u64)], pass: Pass, op: CollectiveOp| v.iter().filter(|c| c.0 == pass && c.1 == op).count();
        // Megatron: backward gathers each column-parallel input again (attention, MLP) and each
        // output gradient of a row-parallel one (2 + 2); DTensor only the latter.
        assert_eq!(count(&a, Pass::BackwardInput, CollectiveOp::AllGather), 4);
        assert_eq!(count(&b, Pass::BackwardInput, CollectiveOp::AllGather), 2);
        assert_eq!(
            count(&a, Pass::BackwardInput, CollectiveOp::ReduceScatter),
            count(&b, Pass::BackwardInput, CollectiveOp::ReduceScatter)
        );
        // Forward: two gathers and two reduce-scatters either way; the gathers carry FP8 under
        // FP8 in both (Transformer Engine gathers its quantized input, torchao casts before the
        // gather), everything else of DTensor the activation dtype.
        let fwd_ag = |v: &[(Pass, CollectiveOp, u64)]| -> Vec<u64> {
            v.iter()
                .filter(|c| c.0 == Pass::Forward && c.1 == CollectiveOp::AllGather)
                .map(|c| c.2)
                .collect()
        };
        let want = if dtype == DType::Fp8 { act } else { act * dt };
        assert_eq!(fwd_ag(&a), vec![want; 2], "{dtype:?}");
        assert_eq!(fwd_ag(&b), vec![want; 2], "{dtype:?}");
        for c in b.iter().filter(|c| !(c.0 == Pass::Forward && c.1 == CollectiveOp::AllGather)) {
            assert_eq!(c.2, act * dt, "{c:?}");
        }
    }
}

#[test]
fn async_dtensor_fuses_in_one_chunk_per_rank() {
    let m = preset("llama3-70b").unwrap();
    let t = training(DType::Fp8);
    let p = plan(
        &m,
        &t,
        8,
        "{ tp: 8, sequence_parallel: true, tp_comm_overlap: true, tp_impl: dtensor }",
    );
    let l = transformer_layer(&m, &t, &p, 0);
    // No standalone TP collective: each is fused with a GEMM.
    assert!(tp_colls(&l).is_empty());
    let overlaps: Vec<_> = l
        .forward
        .iter()
        .chain(&l.backward)
        .filter_map(|o| o.overlap.map(|v| (o.name, o.pass, v)))
        .collect();
    // Forward: gather + GEMM (attention, MLP input), GEMM + reduce-scatter (their outputs);
    // backward: the row-parallel output gradients' gathers, the column-parallel input gradients'
    // reduce-scatters; none on a weight gradient, and all by copy engines, one chunk per rank.
    assert_eq!(overlaps.iter().filter(|o| o.1 == Pass::Forward).count(), 4);
    assert_eq!(overlaps.iter().filter(|o| o.1 == Pass::BackwardInput).count(), 4);
    assert!(overlaps.iter().all(|o| o.1 != Pass::BackwardWeight));
    assert!(overlaps.iter().all(|o| o.2.method == OverlapMethod::RingExchange), "{overlaps:?}");
    let fwd_ag: Vec<u64> = overlaps
        .iter()
        .filter(|o| o.1 == Pass::Forward && o.2.op == CollectiveOp::AllGather)
        .map(|o| o.2.bytes)
        .collect();
    assert_eq!(fwd_ag, vec![8192 * 8192u64; 2]);
    // Megatron's userbuffers: the backward re-gather and the weight gradient's reduce-scatter.
    let meg = plan(&m, &t, 8, "{ tp: 8, sequence_parallel: true, tp_comm_overlap: true }");
    let lm = transformer_layer(&m, &t, &meg, 0);
    assert!(lm.backward.iter().any(|o| o.pass == Pass::BackwardWeight && o.overlap.is_some()));
}
