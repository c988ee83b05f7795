//! Context-parallel attention's per-step merges (Transformer Engine `AttnFuncWithCPAndKVP2P`):
//! the forward merges each ring step's partial output and softmax statistics into the running
//! ones, the backward accumulates each step's partial dq and dk/dv.

use llmsim_workload::model::preset;
use llmsim_workload::ops::transformer_layer;
use llmsim_workload::{OpSpec, OpSpecKind, ParallelConfig, TrainingConfig};

fn flops_bytes(op: &OpSpec) -> (f64, f64) {
    match op.kind {
        OpSpecKind::Compute { flops, bytes, .. } => (flops, bytes),
        _ => panic!("{} is not a kernel", op.name),
    }
}

fn find<'a>(ops: &'a [OpSpec], name: &str) -> Vec<&'a OpSpec> {
    ops.iter().filter(|o| o.name == name).collect()
}

/// Llama 3 8B (32 query heads, 8 key/value heads of 128), seq 8192, one micro-batch of 1, on
/// `cp` ranks of context parallelism.
fn layer(cp: u64) -> (llmsim_workload::LayerOps, TrainingConfig) {
    let m = preset("llama3-8b").unwrap();
    let t = TrainingConfig {
        seq_length: 8192,
        micro_batch_size: 1,
        global_batch_size: 8,
        ..TrainingConfig::default()
    };
    let p: ParallelConfig = serde_yaml_ng::from_str(&format!("{{ tp: 1, pp: 1, cp: {cp} }}")).unwrap();
    let p = p.resolve(8, &m, &t).unwrap();
    (transformer_layer(&m, &t, &p, 0), t)
}

#[test]
fn merges_follow_the_ring_steps() {
    for cp in [2u64, 4, 8] {
        let (l, t) = layer(cp);
        let dt = t.dtype.bytes() as f64;
        let tok = (t.seq_length / cp) as f64;
        // Local elements: output and dq over 32 heads of 128, dk/dv over 8 heads of 128 + 128.
        let o = tok * 32.0 * 128.0;
        let kv = tok * 8.0 * 256.0;
        // Causal, load-balanced chunks: the first step merges every element (a scaled copy, 2
        // accesses), each of the cp - 1 later ones 3/4 of them on average (read, read, write).
        let steps = (cp - 1) as f64;
        let merged = |e: f64| (e * (1.0 + 0.75 * steps), dt * e * (2.0 + 2.25 * steps));
        let f = find(&l.forward, "cp_attn_merge");
        let b = find(&l.backward, "cp_attn_merge_bwd");
        assert_eq!((f.len(), b.len()), (1, 1), "cp {cp}: one merge each way");
        let (ff, fb) = flops_bytes(f[0]);
        let (fe, fbytes) = merged(o);
        assert_eq!(ff, 2.0 * fe, "cp {cp} forward FLOPs");
        // The running softmax statistics: fp32, one per query row and head, read twice and
        // written once at each later step.
        assert_eq!(fb, fbytes + 12.0 * tok * 32.0 * steps, "cp {cp} forward bytes");
        let (bf, bb) = flops_bytes(b[0]);
        let (qe, qb) = merged(o);
        let (ke, kb) = merged(kv);
        assert_eq!(bf, 2.0 * (qe + ke), "cp {cp} backward FLOPs");
        assert_eq!(bb, qb + kb, "cp {cp} backward bytes");
        // Right after the attention kernel in forward; in backward after its kernel and before
        // the dK/dV reduce-scatter that sends the accumulated gradients on.
        let pos = |ops: &[OpSpec], n: &str| ops.iter().position(|o| o.name == n).unwrap();
        assert_eq!(pos(&l.forward, "cp_attn_merge"), pos(&l.forward, "core_attention") + 1);
        let m = pos(&l.backward, "cp_attn_merge_bwd");
        assert!(pos(&l.backward, "core_attention_bwd") < m);
        assert!(m < pos(&l.backward, "cp_dkv_reducescatter"));
    }
}

#[test]
fn no_merges_without_context_parallelism() {
    let (l, _) = layer(1);
    assert!(l.forward.iter().chain(&l.backward).all(|o| !o.name.starts_with("cp_attn_merge")));
}
