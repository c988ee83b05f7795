//! Where pipeline sends run (`parallel.overlap_p2p_comm`): beside the computation with the
//! interleaved schedule and `--overlap-p2p-communication` (Megatron-LM's default), otherwise on
//! the compute stream, which waits for each send to be delivered (Megatron-Core's
//! `_communicate(wait_on_reqs=True)`, Megatron-LM before it, `torch.distributed.pipelining`).

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};
use llmsim_workload::dag::{DagNodeKind, Stream};

/// Eight layers of Llama 3 8B over two servers: TP 8 inside each, two pipeline stages across.
const PP2: &str = "
model: { preset: llama3-8b, num_hidden_layers: 8 }
training: { seq_length: 4096, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 8, pp: 2, sequence_parallel: true }
cluster: { gpu: H100, gpus: 16, gpus_per_node: 8, topology: { kind: rail-fat-tree, nic: { bandwidth: 100Gbps } } }
network: { backend: flow }
output: { flows: false }
";

fn run(sets: &[&str]) -> Outcome {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let s = Scenario::from_yaml(PP2, &sets, Path::new(".")).expect("valid scenario");
    simulate(&s, &RunOptions::default(), &mut |_, _| {}).expect("runs")
}

/// The streams of every pipeline send in the run's programs.
fn send_streams(o: &Outcome) -> Vec<Stream> {
    o.workload
        .stages
        .iter()
        .flat_map(|p| p.nodes.iter())
        .filter(|n| matches!(n.kind, DagNodeKind::CommSend { .. }))
        .map(|n| n.stream)
        .collect()
}

#[test]
fn sends_block_the_compute_stream_unless_the_interleaved_schedule_overlaps_them() {
    let cases = [
        // (settings, sends on the compute stream)
        (vec![], true),
        (vec!["parallel.overlap_p2p_comm=false"], true),
        (vec!["parallel.vpp=2"], false),
        (vec!["parallel.vpp=2", "parallel.overlap_p2p_comm=false"], true),
    ];
    for (sets, blocking) in cases {
        let o = run(&sets);
        let streams = send_streams(&o);
        assert!(!streams.is_empty(), "{sets:?}");
        let want = if blocking { Stream::Compute } else { Stream::PpSend };
        assert!(streams.iter().all(|s| *s == want), "{sets:?}: {streams:?}");
    }
}

#[test]
fn a_blocking_send_costs_its_transfer_and_no_more() {
    // Interleaved, 100 Gb/s between the stages: each send is long against a layer.
    let overlapped = run(&["parallel.vpp=2"]);
    let blocking = run(&["parallel.vpp=2", "parallel.overlap_p2p_comm=false"]);
    let (a, b) = (overlapped.report.iteration_time_s, blocking.report.iteration_time_s);
    assert!(b > a, "blocking {b} s against overlapped {a} s");
    // The sends' transfers bound what waiting on them can add: every send of one stage, at
    // the link's rate, end to end (an activation slice per TP rank over that rank's NIC).
    let sends = blocking.workload.stages[0]
        .nodes
        .iter()
        .filter_map(|n| match n.kind {
            DagNodeKind::CommSend { bytes, .. } => Some(bytes as f64),
            _ => None,
        })
        .collect::<Vec<_>>();
    let per_send_s = sends[0] / (100e9 / 8.0);
    let bound = 2.0 * sends.len() as f64 * per_send_s;
    assert!(b - a <= bound, "{} s more against {} s of transfers", b - a, bound);
    // With communication free the two are the same schedule, when the host issues kernels for
    // free (`compute.host`: a send on the compute stream is a communication call the host pays
    // for there, `call_us`).
    let ideal = |sets: &[&str]| {
        let sets: Vec<String> = sets
            .iter()
            .map(|s| s.to_string())
            .chain(["compute.host=null".to_string()])
            .collect();
        let s = Scenario::from_yaml(PP2, &sets, Path::new(".")).expect("valid scenario");
        let opts = RunOptions {
            ideal_comm: true,
            ..RunOptions::default()
        };
        simulate(&s, &opts, &mut |_, _| {}).expect("runs").report.iteration_time_s
    };
    let (ia, ib) = (
        ideal(&["parallel.vpp=2"]),
        ideal(&["parallel.vpp=2", "parallel.overlap_p2p_comm=false"]),
    );
    assert!((ia - ib).abs() <= 1e-9 * ia, "{ia} against {ib}");
}
