//! NVLink SHARP (NVLS/NVLSTree): the NVSwitch reduction cap, and simulation against NCCL's model.

use std::sync::Arc;

use llmsim_ccl::tuning::{self, Algo};
use llmsim_ccl::{CollectiveOp, PlanOptions, ScaleUpModel, execute, plan_collective};
use llmsim_core::{Bandwidth, Bytes, NodeId, SimTime};
use llmsim_net::flow::FlowNetwork;
use llmsim_topo::generators::flat;
use llmsim_topo::{LinkParams, ScaleUp, Topology};

fn cluster(gpus: u32) -> Arc<Topology> {
    let nic = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500));
    Arc::new(flat(gpus, nic, ScaleUp::dgx_h100(), 7).unwrap())
}

/// (simulated busbw, NCCL model busbw, NCCL's algorithm, NVSwitch cap) in GB/s.
fn run(gpus: u32, bytes: Bytes) -> (f64, f64, Algo, f64) {
    let t = cluster(gpus);
    let group: Vec<NodeId> = (0..gpus).map(NodeId).collect();
    let su = ScaleUpModel::from_nvlink("H100", Bandwidth::from_gbytes_per_sec(450), 8);
    let opts = PlanOptions::h100();
    let pc = plan_collective(&t, CollectiveOp::AllReduce, bytes, &group, &opts, &su).unwrap();
    let mut net = FlowNetwork::new(t);
    let r = execute(&pc.plan, &mut net, SimTime::ZERO, 0).unwrap();
    let factor = CollectiveOp::AllReduce.busbw_factor(gpus);
    let sim = bytes.0 as f64 / r.duration().as_secs_f64() / 1e9 * factor;
    let d = pc.decision.unwrap();
    let cap = tuning::nvls_reduction_busbw_gbps(opts.arch, &d.graph).unwrap();
    (sim, d.predicted_busbw_gbps, d.algo, cap)
}

#[test]
fn nvls_busbw_never_exceeds_the_nvswitch_cap() {
    for gpus in [8, 16] {
        for mib in [1, 16, 256, 4096] {
            let (sim, _, algo, cap) = run(gpus, Bytes::mib(mib));
            if matches!(algo, Algo::Nvls | Algo::NvlsTree) {
                assert!(
                    sim <= cap * 1.0001,
                    "{gpus} GPUs {mib} MiB: {sim:.1} GB/s above the NVSwitch cap {cap:.1}"
                );
            }
        }
    }
}

#[test]
fn nvls_and_nvlstree_simulation_agrees_with_nccl_model_within_10_percent() {
    for (gpus, bytes) in [(8, Bytes::gib(1)), (16, Bytes::mib(512)), (16, Bytes::gib(4))] {
        let (sim, model, algo, _) = run(gpus, bytes);
        assert!(matches!(algo, Algo::Nvls | Algo::NvlsTree), "{gpus} GPUs: NCCL picks {algo}");
        let ratio = sim / model;
        assert!(
            (0.9..=1.1).contains(&ratio),
            "{gpus} GPUs {bytes}: sim {sim:.1} vs model {model:.1} GB/s"
        );
    }
}

#[test]
fn nvls_cap_follows_nccl_nvls_term() {
    // tuning.cc: heads x graph intra bw x nvlsEfficiency x (heads-1)/heads x 2 for AllReduce.
    let d = tuning::decide(&tuning::TuningInput::h100(tuning::CollKind::AllReduce, Bytes::gib(8), 8)).unwrap();
    let cap = tuning::nvls_reduction_busbw_gbps(tuning::GpuArch::Hopper, &d.graph).unwrap();
    let g = d.graph.nvls.unwrap();
    let heads = f64::from(g.nchannels);
    let expect = heads * g.bw_intra_gbps * 0.85 * (heads - 1.0) / heads * 2.0;
    assert!((cap - expect).abs() < 1e-9, "{cap} vs {expect}");
    // A large single-node NVLS all-reduce approaches it from below.
    assert!(d.predicted_busbw_gbps <= cap && d.predicted_busbw_gbps > 0.95 * cap);
}
