//! The `flex` token dispatcher's all-to-alls inside one NVLink domain take HybridEP's measured
//! bandwidth where it was measured (`llmsim_ccl::scaleup::HybridEp`: GB200/GB300, B200/B300),
//! and NCCL's all-to-all model elsewhere and for the `alltoall` dispatcher: every EP all-to-all
//! span of the trace lasts what the model it should use gives for its bytes.

use std::path::Path;

use llmsim_ccl::CollectiveOp;
use llmsim_ccl::scaleup::HybridEp;
use llmsim_core::{Bandwidth, Bytes, SimTime};
use llmsim_sim::{Outcome, Scenario, simulate};
use llmsim_workload::dag::{DagNodeKind, Group};

/// A 2-layer Mixtral-shaped model (8 experts, top 2) on one server of 8 GPUs, EP 8.
const MOE: &str = "
model: { preset: mixtral-8x7b, num_hidden_layers: 2 }
training: { seq_length: 2048, micro_batch_size: 1, global_batch_size: 16 }
parallel: { tp: 1, pp: 1, ep: 8, moe_token_dispatcher: flex }
cluster: { gpu: GB200, gpus: 8, gpus_per_node: 8, topology: { kind: flat } }
network: { backend: flow }
compute: { host: null }
output: { trace: true, flows: false }
";

fn run(sets: &[&str]) -> Outcome {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(MOE, &sets, Path::new(".")).expect("scenario");
    simulate(&s, &Default::default(), &mut |_, _| {}).expect("runs")
}

/// (duration, bytes) of every traced EP all-to-all.
fn ep_all_to_alls(o: &Outcome) -> Vec<(SimTime, u64)> {
    let prog = &o.workload.stages[0];
    o.engine
        .spans
        .iter()
        .filter_map(|sp| match prog.nodes[sp.node as usize].kind {
            DagNodeKind::CommColl {
                op: CollectiveOp::AllToAll,
                group: Group::Ep,
                bytes,
            } => Some((sp.end - sp.start, bytes)),
            _ => None,
        })
        .collect()
}

fn nvlink(gbs: u64) -> Bandwidth {
    Bandwidth::from_gbytes_per_sec(gbs)
}

#[test]
fn flex_all_to_alls_take_hybrid_eps_measured_bandwidth() {
    for (gpu, nv) in [("GB200", 900), ("B200", 900)] {
        let o = run(&[&format!("cluster.gpu={gpu}")]);
        let spans = ep_all_to_alls(&o);
        assert!(spans.len() >= 8, "{gpu}: {} EP all-to-all spans", spans.len());
        let mut su = llmsim_ccl::ScaleUpModel::from_nvlink(gpu, nvlink(nv), 8);
        let nccl: Vec<SimTime> = spans.iter().map(|&(_, b)| su.time(CollectiveOp::AllToAll, Bytes(b), 8)).collect();
        su.flex_all_to_all = HybridEp::for_gpu(gpu, nvlink(nv));
        assert!(su.flex_all_to_all.is_some(), "{gpu}");
        for (&(d, b), n) in spans.iter().zip(nccl) {
            assert_eq!(d, su.flex_time(Bytes(b), 8), "{gpu}: {b} bytes");
            assert!(d.as_secs_f64() > 1.3 * n.as_secs_f64(), "{gpu}: HybridEP {d} against NCCL's {n}");
        }
    }
}

#[test]
fn other_dispatchers_and_unmeasured_gpus_keep_nccls_all_to_all() {
    for (sets, gpu, nv) in [
        (vec!["parallel.moe_token_dispatcher=alltoall"], "GB200", 900),
        // DeepEP's backend is not HybridEP: NCCL's model on every GPU.
        (vec!["parallel.moe_flex_backend=deepep"], "GB200", 900),
        (vec!["cluster.gpu=H100"], "H100", 450),
    ] {
        let o = run(&sets);
        let spans = ep_all_to_alls(&o);
        assert!(!spans.is_empty(), "{sets:?}");
        let su = llmsim_ccl::ScaleUpModel::from_nvlink(gpu, nvlink(nv), 8);
        for (d, b) in spans {
            assert_eq!(d, su.time(CollectiveOp::AllToAll, Bytes(b), 8), "{sets:?}: {b} bytes");
        }
    }
}
