//! The estimate made before a run: monotone in the run's size, and cheaper for what folds.
//! (How close it comes to measured peak RSS is a benchmark: bench/scale.sh.)

use std::path::Path;

use llmsim_sim::estimate::estimate;
use llmsim_sim::{Backend, Scenario, generate};

const BASE: &str = "
model: gpt3-6.7b
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 64 }
parallel: { tp: 4, pp: 2, use_distributed_optimizer: true, overlap_grad_reduce: true }
cluster: { gpu: H100, gpus: 64, topology: { kind: rail-fat-tree } }
";

/// `gpus` GPUs (data parallelism `gpus / 8`), `mb` micro-batches per pipeline.
fn est(gpus: u32, mb: u32, backend: Backend, fold: bool) -> llmsim_sim::estimate::Estimate {
    let gbs = gpus / 8 * mb;
    let sets = vec![format!("cluster.gpus={gpus}"), format!("training.global_batch_size={gbs}")];
    let s = Scenario::from_yaml(BASE, &sets, Path::new(".")).expect("valid scenario");
    let g = generate(&s).expect("generates");
    let active_dp = if fold { 1 } else { g.layout.dp };
    estimate(&g.workload, g.layout, active_dp, u64::from(gpus), backend)
}

#[test]
fn the_estimate_grows_with_gpus_and_micro_batches() {
    let mut last = None;
    for gpus in [16u32, 32, 64, 128] {
        let e = est(gpus, 8, Backend::Flow, false);
        if let Some(p) = last {
            let p: llmsim_sim::estimate::Estimate = p;
            assert!(
                e.memory_bytes > p.memory_bytes && e.program_nodes > p.program_nodes,
                "{gpus} GPUs: {e} after {p}"
            );
            assert!(e.seconds > p.seconds && e.p2p_transfers > p.p2p_transfers);
        }
        last = Some(e);
    }
    let few = est(64, 8, Backend::Flow, false);
    let many = est(64, 32, Backend::Flow, false);
    assert!(many.memory_bytes > few.memory_bytes && many.program_nodes > 3 * few.program_nodes);
}

#[test]
fn folding_and_the_analytical_backend_cost_less() {
    let full = est(128, 8, Backend::Flow, false);
    let folded = est(128, 8, Backend::Analytical, true);
    assert!(folded.memory_bytes < full.memory_bytes);
    assert!(folded.seconds < full.seconds);
    assert_eq!(folded.units * 16, full.units, "dp = 128 / (4 x 2) = 16 replicas of 2 units");
    // The packet backend costs more time and memory than the flow backend on the same run.
    let packet = est(128, 8, Backend::Packet, false);
    assert!(packet.seconds > 10.0 * full.seconds, "{packet} {full}");
    assert!(packet.memory_bytes > full.memory_bytes, "{packet} {full}");
}

/// Expert all-to-alls that cross servers add one transfer per rank and remote peer to the time
/// (a 256-GPU EP32 run ran ~20x its estimate without them), on the analytical backend too (its
/// all-to-alls run in NCCL's rounds, transfer by transfer); inside a server they add nothing, and
/// memory never changes.
#[test]
fn cross_server_expert_all_to_alls_add_to_the_time() {
    let moe = "
model: mixtral-8x7b
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 64 }
parallel: { tp: 1, pp: 2, ep: 8, use_distributed_optimizer: true }
cluster: { gpu: H100, gpus: 16, topology: { kind: rail-fat-tree } }
";
    let at = |gpn: u32, backend: Backend| {
        let sets = vec![format!("cluster.gpus_per_node={gpn}")];
        let s = Scenario::from_yaml(moe, &sets, Path::new(".")).expect("valid scenario");
        let g = generate(&s).expect("generates");
        let e = estimate(&g.workload, g.layout, g.layout.dp, 16, backend);
        (e, e.with_ep_transfers(&g.workload, g.layout, g.layout.dp, gpn, backend))
    };
    // EP8 on 4-GPU servers: every all-to-all crosses servers.
    let (plain, with) = at(4, Backend::Flow);
    assert!(with.seconds > plain.seconds, "{with} {plain}");
    assert_eq!(with.memory_bytes, plain.memory_bytes);
    let (plain, with) = at(4, Backend::Analytical);
    assert!(with.seconds > plain.seconds, "{with} {plain}");
    assert_eq!(with.memory_bytes, plain.memory_bytes);
    // Inside one 8-GPU server: unchanged.
    let (plain, with) = at(8, Backend::Flow);
    assert_eq!(with.seconds, plain.seconds);
    let (plain, with) = at(8, Backend::Analytical);
    assert_eq!(with.seconds, plain.seconds);
}
