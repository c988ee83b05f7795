//! `parallel.cp_impl: torch_ring` / `torch_ring_eager`: PyTorch's experimental ring attention
//! as TorchTitan runs it (pytorch/pytorch `torch/distributed/tensor/experimental/_attention.py`,
//! rotate method `allgather`, causal load balancing), compiled or eager. The expected numbers
//! follow from that mechanism.

use llmsim_compute::{AttentionKernel, KernelShape};
use llmsim_core::CollectiveOp;
use llmsim_workload::model::preset;
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{AttentionKernelChoice, CommGroup, CpImpl, LayerOps, OpSpec, OpSpecKind, ParallelConfig, Pass, TrainingConfig};

const SEQ: u64 = 16384;

/// Llama 3 8B (32 query heads, 8 key/value heads of 128), one sequence of `SEQ`, on `cp` ranks.
fn layer(cp: u64, parallel: &str) -> (LayerOps, TrainingConfig) {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        seq_length: SEQ,
        micro_batch_size: 1,
        global_batch_size: 8 / cp,
        attention_kernel: AttentionKernelChoice::Fa2,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str(&format!("{{ tp: 1, pp: 1, cp: {cp}{parallel} }}")).unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    (transformer_layer(&m, &t, &p, 0), t)
}

fn ring(cp: u64) -> (LayerOps, TrainingConfig) {
    layer(cp, ", cp_impl: torch_ring")
}

fn eager(cp: u64) -> (LayerOps, TrainingConfig) {
    layer(cp, ", cp_impl: torch_ring_eager")
}

/// (op, bytes, beside) of the CP collectives, in order.
fn cp_comms(ops: &[OpSpec]) -> Vec<(CollectiveOp, u64, u32)> {
    ops.iter()
        .filter_map(|o| match o.kind {
            OpSpecKind::Comm {
                op,
                group: CommGroup::Cp,
                bytes,
                beside,
            } => Some((op, bytes, beside)),
            _ => None,
        })
        .collect()
}

fn bytes(op: &OpSpec) -> f64 {
    match op.kind {
        OpSpecKind::Compute { bytes, .. } => bytes,
        _ => panic!("{} is not a kernel", op.name),
    }
}

/// FLOPs the attention kernels execute: a causal kernel does half of its op's FLOPs.
fn executed(ops: &[OpSpec]) -> f64 {
    ops.iter()
        .filter_map(|o| match (o.kind.clone(), o.kernel) {
            (OpSpecKind::Compute { flops, .. }, Some(KernelShape::Attention(a))) => Some(if a.causal { flops / 2.0 } else { flops }),
            _ => None,
        })
        .sum()
}

#[test]
fn forward_is_one_allgather_then_one_sdpa_call_and_merge_per_step() {
    for cp in [2u64, 4, 8] {
        let (l, t) = ring(cp);
        let dt = t.dtype.bytes();
        let sl = SEQ / cp;
        // K/V as SDPA gets them: repeated to the 32 query heads (TorchTitan's repeat_kv).
        let kv_local = sl * 32 * 256 * dt;
        let fwd = &l.forward;
        let comms = cp_comms(fwd);
        // One all-gather: its output is the whole sequence's K/V, of which each rank receives
        // the (cp-1)/cp it does not hold; compiled, waited for at once (it blocks).
        assert_eq!(comms, vec![(CollectiveOp::AllGather, cp * kv_local, 0)], "cp {cp}");
        assert_eq!(comms[0].1 * (cp - 1) / cp, (cp - 1) * kv_local);
        let at = fwd.iter().position(|o| o.name == "cp_kv_allgather").unwrap();
        assert_eq!(fwd[at - 1].name, "cp_ring_kv_pack");
        assert_eq!(fwd[at + 1].name, "core_attention");
        // Step 0: the local block, causal; steps 1..cp: half of it each, no mask, FA2.
        let kernels: Vec<_> = fwd
            .iter()
            .filter_map(|o| match o.kernel {
                Some(KernelShape::Attention(a)) => Some((o.name, a)),
                _ => None,
            })
            .collect();
        assert_eq!(kernels.len() as u64, cp, "one SDPA call per ring step");
        assert_eq!(
            (kernels[0].0, kernels[0].1.causal, kernels[0].1.s_q, kernels[0].1.s_kv),
            ("core_attention", true, sl, sl)
        );
        for (name, a) in &kernels[1..] {
            assert_eq!(
                (*name, a.causal, a.s_q, a.s_kv, a.batch_heads),
                ("core_attention_ring", false, sl, sl / 2, 32)
            );
            assert_eq!(a.kernel, Some(AttentionKernel::Fa2));
        }
        // The ring executes the causal attention's work, no more: Megatron's one causal kernel.
        let (meg, _) = layer(cp, "");
        assert_eq!(executed(fwd), executed(&meg.forward), "cp {cp}");
        // One merge after each step but the first, each right after its kernel.
        let merges: Vec<usize> = fwd
            .iter()
            .enumerate()
            .filter(|(_, o)| o.name == "cp_ring_merge")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(merges.len() as u64, cp - 1);
        assert!(merges.iter().all(|&i| fwd[i - 1].name == "core_attention_ring"));
        // Merge bytes per output element: read the running output (bf16 from the first step,
        // then fp32), read the step's (bf16), write the running one (fp32, the last bf16); and
        // the fp32 logsumexp per query row and head (read two, write one).
        let (o, rows, d) = ((sl * 32 * 128) as f64, (sl * 32) as f64, dt as f64);
        for (k, &i) in merges.iter().enumerate() {
            let first = if k == 0 { d } else { 4.0 };
            let last = if k + 1 == merges.len() { d } else { 4.0 };
            assert_eq!(bytes(&fwd[i]), o * (first + d + last) + 12.0 * rows, "cp {cp} merge {k}");
        }
    }
}

#[test]
fn backward_regathers_kv_and_passes_fp32_dkv_after_every_step() {
    for cp in [2u64, 4, 8] {
        let (l, t) = ring(cp);
        let dt = t.dtype.bytes();
        let sl = SEQ / cp;
        let kv_elems = sl * 32 * 256;
        let bwd: Vec<&OpSpec> = l.backward.iter().filter(|o| o.pass != Pass::Recompute).collect();
        let bwd: Vec<OpSpec> = bwd.into_iter().cloned().collect();
        let comms = cp_comms(&bwd);
        // The all-gather again, then after each of the cp steps the whole fp32 dK/dV to one
        // peer: an all-to-all whose per-rank buffer holds cp/(cp-1) of it. Compiled: blocking.
        let mut want = vec![(CollectiveOp::AllGather, cp * kv_elems * dt, 0)];
        for _ in 0..cp {
            want.push((CollectiveOp::AllToAll, (4 * kv_elems * cp).div_ceil(cp - 1), 0));
        }
        assert_eq!(comms, want, "cp {cp}");
        assert_eq!(comms[1].1 * (cp - 1) / cp, 4 * kv_elems, "one fp32 dK/dV leaves each rank per step");
        let n = |name: &str| bwd.iter().filter(|o| o.name == name).count() as u64;
        assert_eq!((n("core_attention_bwd"), n("core_attention_ring_bwd")), (1, cp - 1));
        assert_eq!((n("cp_ring_dkv_accum"), n("cp_ring_dq_accum"), n("cp_ring_grad_cast")), (cp, cp, 1));
        assert_eq!(n("cp_dkv_reducescatter"), 0);
        // Backward kernels: 2.5x the forward's FLOPs, step for step.
        let (meg, _) = layer(cp, "");
        let meg_bwd: Vec<OpSpec> = meg.backward.iter().filter(|o| o.pass != Pass::Recompute).cloned().collect();
        assert_eq!(executed(&bwd), executed(&meg_bwd), "cp {cp}");
    }
}

#[test]
fn eager_overlaps_each_exchange_and_runs_the_unfused_element_wise_ops() {
    for cp in [2u64, 4, 8] {
        let (l, t) = eager(cp);
        let dt = t.dtype.bytes();
        let sl = SEQ / cp;
        let kv_elems = sl * 32 * 256;
        // The all-gather waits at step 1 (after step 0's kernel and its output's fp32 cast).
        assert_eq!(cp_comms(&l.forward), vec![(CollectiveOp::AllGather, cp * kv_elems * dt, 2)]);
        let n = |ops: &[OpSpec], name: &str| ops.iter().filter(|o| o.name == name).count() as u64;
        // Casts: every step's output to fp32, and the result back; the K/V `cat` at every step
        // but the last.
        assert_eq!(n(&l.forward, "cp_ring_merge_cast"), cp + 1);
        assert_eq!(n(&l.forward, "cp_ring_kv_pack"), cp - 1);
        // Eight element-wise kernels per merge: 32 bytes per output element (three fp32
        // passes over it and one over the product) and 56 per row of logsumexp.
        let (o, rows) = ((sl * 32 * 128) as f64, (sl * 32) as f64);
        let merges: Vec<&OpSpec> = l.forward.iter().filter(|o| o.name == "cp_ring_merge").collect();
        assert_eq!(merges.len() as u64, cp - 1);
        assert!(merges.iter().all(|m| bytes(m) == 32.0 * o + 56.0 * rows));
        // Backward: each dK/dV exchange beside this step's dQ accumulation, the next step's
        // K/V `cat` (all but the last step's) and kernel; the last beside dQ only.
        let bwd: Vec<OpSpec> = l.backward.iter().filter(|o| o.pass != Pass::Recompute).cloned().collect();
        let besides: Vec<u32> = cp_comms(&bwd).iter().map(|c| c.2).collect();
        let mut want = vec![2];
        for i in 0..cp - 1 {
            want.push(if i + 2 < cp { 3 } else { 2 });
        }
        want.push(1);
        assert_eq!(besides, want, "cp {cp}");
        assert_eq!(n(&bwd, "cp_ring_grad_zeros"), 1);
        // The same kernels as compiled.
        let compiled: Vec<OpSpec> = ring(cp).0.backward.iter().filter(|o| o.pass != Pass::Recompute).cloned().collect();
        assert_eq!(executed(&bwd), executed(&compiled));
    }
}

#[test]
fn without_context_parallelism_the_option_changes_nothing() {
    assert_eq!(layer(1, "").0, ring(1).0);
    assert_eq!(layer(1, "").0, eager(1).0);
}

#[test]
fn megatron_stays_the_default() {
    let p: ParallelConfig = serde_yaml_ng::from_str("{ cp: 4 }").unwrap();
    assert_eq!(p.cp_impl, CpImpl::Megatron);
    let (l, _) = layer(4, "");
    assert!(l.backward.iter().any(|o| o.name == "cp_dkv_reducescatter"));
    assert!(cp_comms(&l.forward).iter().all(|c| c.2 == 0), "Megatron's CP collectives block");
}

#[test]
fn torch_ring_needs_fused_attention() {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        seq_length: SEQ,
        flash_attention: false,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str("{ cp: 2, cp_impl: torch_ring }").unwrap();
    let e = p.resolve(8, &m, &t).unwrap_err().to_string();
    assert!(e.contains("parallel.cp_impl") && e.contains("flash_attention"), "{e}");
}

#[test]
fn the_dag_blocks_compiled_and_overlaps_eager_exchanges() {
    use llmsim_workload::dag::{DagNodeKind, Group, Stream};
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        seq_length: SEQ,
        micro_batch_size: 1,
        global_batch_size: 2,
        ..TrainingConfig::default()
    };
    let cp_streams = |imp: &str| {
        let p: ParallelConfig = serde_yaml_ng::from_str(&format!("{{ tp: 1, pp: 1, cp: 4, cp_impl: {imp} }}")).unwrap();
        let w = llmsim_workload::megatron::generate(&m, &t, &p.resolve(8, &m, &t).unwrap()).unwrap();
        let s: Vec<Stream> = w.stages[0]
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, DagNodeKind::CommColl { group: Group::Cp, .. }))
            .map(|n| n.stream)
            .collect();
        s
    };
    assert!(cp_streams("torch_ring").iter().all(|&s| s == Stream::Compute));
    assert!(cp_streams("torch_ring_eager").iter().all(|&s| s == Stream::Free));
    let p: ParallelConfig = serde_yaml_ng::from_str("{ tp: 1, pp: 1, cp: 4, cp_impl: torch_ring_eager }").unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    let w = llmsim_workload::megatron::generate(&m, &t, &p).unwrap();
    let prog = &w.stages[0];
    let seg_name = |i: usize| match prog.nodes[i].kind {
        DagNodeKind::Comp { segment } => Some(w.segments[segment as usize].ops.iter().map(|o| o.name).collect::<Vec<_>>()),
        _ => None,
    };
    // The first layer's forward all-gather: on its own stream, after the K/V pack.
    let ag = (0..prog.nodes.len())
        .find(|&i| {
            matches!(
                prog.nodes[i].kind,
                DagNodeKind::CommColl {
                    op: CollectiveOp::AllGather,
                    group: Group::Cp,
                    ..
                }
            )
        })
        .unwrap();
    assert_eq!(prog.nodes[ag].stream, Stream::Free);
    assert_eq!(seg_name(ag - 1).unwrap().last(), Some(&"cp_ring_kv_pack"));
    assert_eq!(prog.deps(ag as u32), &[ag as u32 - 1]);
    // Step 0's kernel and its output's cast run beside it without waiting for it; the next
    // segment (step 1's K/V `cat`, then the later steps) waits.
    assert_eq!(seg_name(ag + 1).unwrap(), vec!["core_attention", "cp_ring_merge_cast"]);
    assert!(!prog.deps(ag as u32 + 1).contains(&(ag as u32)));
    assert_eq!(seg_name(ag + 2).unwrap()[..2], ["cp_ring_kv_pack", "core_attention_ring"]);
    assert_eq!(prog.deps(ag as u32 + 2), &[ag as u32]);
}
