//! Where pipeline sends run (`parallel.overlap_p2p_comm`): beside the computation with the
//! interleaved schedule and `--overlap-p2p-communication` (Megatron-LM's default), otherwise on
//! the compute stream, which waits for each send to be delivered (Megatron-Core's
//! `_communicate(wait_on_reqs=True)`, Megatron-LM before it, `torch.distributed.pipelining`).

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, simulate};
use llmsim_workload::dag::{DagNodeKind, Phase, Stream};

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

/// The iteration time of `PP2` under `sets`, with communication free and the host issuing
/// kernels for free (`compute.host`: a send on the compute stream is a communication call the
/// host pays for there, `call_us`).
fn ideal(sets: &[&str]) -> f64 {
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
}

#[test]
fn a_blocking_send_costs_its_transfer_and_the_schedule_it_implies() {
    // Interleaved, 100 Gb/s between the stages: each send is long against a layer. The wait
    // for the receiver (`collectives.p2p_eager`) is off here; see the rendezvous test below.
    let overlapped = run(&["parallel.vpp=2"]);
    let blocking = run(&["parallel.vpp=2", "parallel.overlap_p2p_comm=false", "collectives.p2p_eager=1TiB"]);
    let (a, b) = (overlapped.report.iteration_time_s, blocking.report.iteration_time_s);
    assert!(b > a, "blocking {b} s against overlapped {a} s");
    // With communication free, the blocking schedule is the overlapped one but for each
    // steady-state forward's send waiting for the backward after it (one exchange per pair):
    // never faster.
    let (ia, ib) = (
        ideal(&["parallel.vpp=2"]),
        ideal(&["parallel.vpp=2", "parallel.overlap_p2p_comm=false"]),
    );
    assert!(ib >= ia * (1.0 - 1e-9), "{ib} s against {ia} s");
    // The sends' transfers bound what waiting on them adds beyond that schedule: every send of
    // one stage, at the link's rate, end to end (an activation slice per TP rank over that
    // rank's NIC).
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
    assert!(
        b - a <= (ib - ia) + bound,
        "{} s more against {} s of schedule and {} s of transfers",
        b - a,
        ib - ia,
        bound
    );
}

/// What each stage's compute stream runs, in order: `F`/`B` a forward or backward computation
/// (consecutive ones once), `s`/`r` a pipeline send or receive.
fn stream_letters(o: &Outcome, stage: usize) -> String {
    let mut out = String::new();
    for n in o.workload.stages[stage].nodes.iter().filter(|n| n.stream == Stream::Compute) {
        let c = match n.kind {
            DagNodeKind::CommSend { .. } => 's',
            DagNodeKind::CommRecv { .. } => 'r',
            DagNodeKind::Comp { .. } if n.phase == Phase::Forward => 'F',
            DagNodeKind::Comp { .. } if n.phase == Phase::Backward => 'B',
            _ => continue,
        };
        if (c == 'F' || c == 'B') && out.ends_with(c) {
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn the_blocking_interleaved_schedule_exchanges_once_per_forward_backward_pair() {
    // Megatron's interleaved schedule without `overlap_p2p_comm`: forward, backward, then one
    // batch of both sends and both receives (`send_forward_backward_recv_forward_backward`).
    let o = run(&["parallel.vpp=2", "parallel.overlap_p2p_comm=false", "training.global_batch_size=16"]);
    for stage in 0..2 {
        let l = stream_letters(&o, stage);
        // Steady state: a forward and the backward run back to back, with no exchange between.
        assert!(l.contains("FB"), "stage {stage}: {l}");
        // Its exchange: the pair's two sends and the next pair's two receives together.
        assert!(l.contains("FBssrr"), "stage {stage}: {l}");
        // Nowhere does a forward's send sit between a forward and the backward of its pair.
        assert!(!l.contains("FsrB"), "stage {stage}: {l}");
    }
    // With the overlap, each pass sends and receives on its own (Megatron-Core's irecv/isend
    // posted around each step), and so does `torch.distributed.pipelining` (one action per time
    // step, then its batch): forward and backward are not fused.
    for sets in [
        vec!["parallel.vpp=2", "training.global_batch_size=16"],
        vec![
            "parallel.vpp=2",
            "parallel.overlap_p2p_comm=false",
            "parallel.pp_impl=torch",
            "training.global_batch_size=16",
        ],
    ] {
        let o = run(&sets);
        for stage in 0..2 {
            let l = stream_letters(&o, stage);
            assert!(!l.contains("FBssrr"), "{sets:?} stage {stage}: {l}");
        }
    }
}

#[test]
fn a_blocking_send_waits_for_its_receiver_beyond_the_eager_bytes() {
    // The activation slice per TP rank is 4 MiB (4096 x 4096 x 2 B / 8), above the default
    // 2 MiB NCCL moves before the receiving kernel runs: a send whose receiver has not reached
    // its batch goes in two parts, the second when the receive is posted.
    let sets = ["parallel.vpp=2", "parallel.overlap_p2p_comm=false"];
    let waits = run(&sets);
    let off: Vec<&str> = sets.iter().copied().chain(["collectives.p2p_eager=1TiB"]).collect();
    let eager = run(&off);
    let (w, e) = (waits.report.iteration_time_s, eager.report.iteration_time_s);
    assert!(w >= e * (1.0 - 1e-9), "with the rendezvous {w} s against {e} s without");
    // Some sends were split, none more than once: more transfers, at most two per send.
    let (tw, te) = (waits.report.net.submitted, eager.report.net.submitted);
    assert!(tw > te && tw <= 2 * te, "{tw} transfers against {te}");
    // Each stage's time still adds up: the sender's wait is pipeline bubble or exposed
    // pipeline communication, not unaccounted time.
    for st in &waits.report.stages {
        let b = &st.breakdown;
        let sum = b.compute_s
            + b.exposed_tp_s
            + b.exposed_cp_s
            + b.exposed_ep_s
            + b.exposed_pp_s
            + b.exposed_dp_s
            + b.exposed_offload_s
            + b.exposed_host_s
            + b.bubble_s
            + b.idle_s;
        assert!((sum - w).abs() <= 1e-6 * w, "stage {}: {sum} s against {w} s", st.stage);
    }
    // A message at or below the eager bytes never waits.
    let small: Vec<&str> = sets.iter().copied().chain(["collectives.p2p_eager=4MiB"]).collect();
    let small = run(&small);
    assert_eq!(small.report.net.submitted, te);
    assert!((small.report.iteration_time_s - e).abs() <= 1e-12 * e);
    // Both stages in one server (16 GPUs a server): NCCL's NVLink FIFO holds the message, no
    // send waits, whatever the eager bytes.
    let one: Vec<&str> = sets.iter().copied().chain(["cluster.gpus_per_node=16"]).collect();
    let one_off: Vec<&str> = one.iter().copied().chain(["collectives.p2p_eager=1TiB"]).collect();
    let (a, b) = (run(&one), run(&one_off));
    assert_eq!(a.report.iteration_time_s.to_bits(), b.report.iteration_time_s.to_bits());
    assert_eq!(a.report.net.submitted, b.report.net.submitted);
}

#[test]
fn the_host_synchronizes_after_each_blocking_exchange_under_megatron() {
    // Megatron-Core's `batch_p2p_sync`: `torch.cuda.synchronize()` after each exchange, so the
    // host's lead over the GPU is lost there and the next kernel waits for its issue.
    let t = |sets: &[&str]| run(sets).report.iteration_time_s;
    let synced = t(&[]);
    let free = t(&["parallel.batch_p2p_sync=false"]);
    assert!(synced > free, "with the sync {synced} s, without {free} s");
    // `torch.distributed.pipelining` waits on its batches without synchronizing the device.
    assert_eq!(t(&["parallel.pp_impl=torch"]).to_bits(), free.to_bits());
    // With a host that issues everything at once (`compute.host: null`) it costs nothing; nor
    // with overlapped sends, which Megatron does not batch (`batch_p2p_comm` off).
    assert_eq!(
        t(&["compute.host=null"]).to_bits(),
        t(&["compute.host=null", "parallel.batch_p2p_sync=false"]).to_bits()
    );
    assert_eq!(
        t(&["parallel.vpp=2"]).to_bits(),
        t(&["parallel.vpp=2", "parallel.batch_p2p_sync=false"]).to_bits()
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 48,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(28),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever the schedule, its blocking sends never wait on a receive that waits on them:
    /// every pipeline plan runs to the end (a stall is an error naming the node), and the wait
    /// for the receiver never makes the iteration shorter (on the analytical backend: on a
    /// shared network, holding a transfer back can let another finish sooner).
    #[test]
    fn every_pipeline_plan_completes_under_the_rendezvous(
        pp in 2u64..5,
        vpp in 1u64..4,
        per_stage in 1u64..3,
        rounds in 1u64..4,
        overlap in proptest::prelude::any::<bool>(),
        torch in proptest::prelude::any::<bool>(),
        a2a in proptest::prelude::any::<bool>(),
        uneven in proptest::prelude::any::<bool>(),
        iterations in 1u64..3,
    ) {
        let layers = pp * vpp * per_stage;
        let moe = a2a && vpp > 1;
        // Expert parallelism over two data-parallel replicas: each replica runs `pp * rounds`
        // micro-batches.
        let gbs = pp * rounds * if moe { 2 } else { 1 };
        let model = if moe {
            format!("{{ preset: mixtral-8x7b, num_hidden_layers: {layers} }}")
        } else {
            format!("{{ preset: llama3-8b, num_hidden_layers: {layers} }}")
        };
        // Uneven stages (without VP): one layer more on the first, one fewer on the last.
        let uneven = if uneven && vpp == 1 && per_stage >= 2 {
            format!(", first_stage_layers: {}, last_stage_layers: {}", per_stage + 1, per_stage - 1)
        } else {
            String::new()
        };
        let yaml = format!(
            "model: {model}
training: {{ seq_length: 2048, micro_batch_size: 1, global_batch_size: {gbs}, iterations: {iterations} }}
parallel: {{ tp: 2, pp: {pp}, vpp: {vpp}, ep: {ep}, sequence_parallel: true, overlap_p2p_comm: {overlap}, pp_impl: {imp}, moe_a2a_overlap: {moe}{uneven} }}
cluster: {{ gpu: H100, gpus: {gpus}, gpus_per_node: 2, topology: {{ kind: rail-fat-tree, nic: {{ bandwidth: 100Gbps }} }} }}
network: {{ backend: analytical }}
output: {{ flows: false }}
",
            ep = if moe { 2 } else { 1 },
            imp = if torch { "torch" } else { "megatron" },
            gpus = 2 * pp * if moe { 2 } else { 1 },
        );
        let run = |sets: &[String]| -> Result<f64, String> {
            let s = Scenario::from_yaml(&yaml, sets, Path::new(".")).map_err(|e| e.to_string())?;
            simulate(&s, &RunOptions::default(), &mut |_, _| {})
                .map(|o| o.report.iteration_time_s)
                .map_err(|e| format!("{yaml}\n{e}"))
        };
        let with = run(&[]);
        proptest::prop_assert!(with.is_ok(), "{}", with.unwrap_err());
        let without = run(&["collectives.p2p_eager=1TiB".to_string()]).expect("runs");
        let with = with.unwrap();
        proptest::prop_assert!(with >= without * (1.0 - 1e-9), "{with} s with the wait, {without} s without\n{yaml}");
    }
}
