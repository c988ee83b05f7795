//! `faults:` (issue 32 §2): links down at the start are routed around and every transfer still
//! completes with its bytes; a degraded link slows what crosses it; a straggler slows compute by
//! its factor; mistakes name their field.

use std::path::Path;

use llmsim_sim::{Outcome, RunOptions, Scenario, SimError, simulate};

/// Data parallel over 32 GPUs, one per server, 8 leaves of 4 under 4 spines: the DP ring
/// crosses the spines. Host-free (`compute.host: null`): these tests time the GPU and network.
const DP32: &str = "
compute: { host: null }
model: { hidden_size: 1024, num_hidden_layers: 4, num_attention_heads: 16, intermediate_size: 4096, vocab_size: 128, gated_mlp: false }
training: { seq_length: 1024, micro_batch_size: 1, global_batch_size: 32 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 32, gpus_per_node: 1, topology: { kind: spine-leaf, hosts_per_leaf: 4, spines: 4 } }
network: { backend: flow }
";

fn scenario(sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(DP32, &sets, Path::new(".")).expect("valid scenario")
}

fn run(s: &Scenario, opts: RunOptions) -> Result<Outcome, SimError> {
    simulate(s, &opts, &mut |_, _| {})
}

#[test]
fn random_links_down_every_transfer_completes_and_bytes_are_conserved() {
    let base = run(&scenario(&[]), RunOptions::default()).expect("baseline");
    for n in [1, 4, 8] {
        let f = format!("faults=[{{links: {{random: {n}, seed: 3}}, action: down}}]");
        let o = run(&scenario(&[&f]), RunOptions::default()).expect("runs with links down");
        let (a, b) = (&base.engine.net, &o.engine.net);
        assert_eq!(b.submitted, b.completed, "{n} down: every transfer completes");
        assert_eq!(
            (b.completed, b.bytes_delivered),
            (a.completed, a.bytes_delivered),
            "{n} down: the same transfers and bytes as with no failure"
        );
        assert_eq!(o.topo.links_down(), 2 * n, "{n} cables, both directions");
        println!(
            "{n} cables down: iteration {:.3} ms vs {:.3} ms",
            o.report.iteration_time_s * 1e3,
            base.report.iteration_time_s * 1e3
        );
    }
}

/// Degrading every uplink of leaf 0 to a tenth cannot speed the iteration up, and slows it
/// when the DP ring crosses them.
#[test]
fn degraded_links_slow_the_iteration() {
    let base = run(&scenario(&[]), RunOptions::default()).expect("baseline");
    let faults: Vec<String> = (0..4).map(|s| format!("{{link: leaf0-spine{s}, bandwidth: 40Gbps}}")).collect();
    let f = format!("faults=[{}]", faults.join(", "));
    let o = run(&scenario(&[&f]), RunOptions::default()).expect("degraded");
    let bw = o
        .topo
        .links()
        .iter()
        .filter(|l| l.bandwidth == llmsim_core::Bandwidth::from_gbps(40))
        .count();
    assert_eq!(bw, 8, "4 cables, both directions");
    assert!(
        o.report.iteration_time_s > base.report.iteration_time_s,
        "{} vs {}",
        o.report.iteration_time_s,
        base.report.iteration_time_s
    );
}

/// With free communication the iteration is the slowest GPU's compute: a straggler at 2x
/// doubles it; a server straggler likewise; 1.0 changes nothing.
#[test]
fn a_straggler_slows_the_iteration_by_its_factor() {
    let ideal = RunOptions {
        ideal_comm: true,
        ..Default::default()
    };
    let base = run(&scenario(&[]), ideal.clone()).expect("baseline").report.iteration_time_s;
    for (f, factor) in [
        ("faults=[{gpu: 5, slowdown: 2.0}]", 2.0),
        ("faults=[{server: 7, slowdown: 1.5}]", 1.5),
        ("faults=[{gpu: 0, slowdown: 1.0}]", 1.0),
    ] {
        let t = run(&scenario(&[f]), ideal.clone()).expect(f).report.iteration_time_s;
        assert!((t / base - factor).abs() < 1e-6, "{f}: {t} / {base} = {}", t / base);
    }
    // From half way on: the kernels that start after it run 2x, so the iteration lands between
    // 1.5x (give or take the kernel running at the switch) and 2x.
    let f = format!("faults=[{{gpu: 5, slowdown: 2.0, at: {}ns}}]", (base * 1e9 / 2.0) as u64);
    let t = run(&scenario(&[&f]), ideal.clone())
        .expect("late straggler")
        .report
        .iteration_time_s;
    assert!(t / base > 1.4 && t / base < 1.6, "{f}: {}", t / base);
}

#[test]
fn fault_mistakes_name_their_field() {
    let cases = [
        ("faults=[{link: leaf0-nowhere, action: down}]", "faults[0].link"),
        ("faults=[{gpu: 0, slowdown: 1.1}, {gpu: 32, slowdown: 1.3}]", "faults[1].gpu"),
        ("faults=[{server: 99, slowdown: 1.3}]", "faults[0].server"),
        ("faults=[{link: leaf0-spine0, action: down, at: 100s}]", "faults[0].at"),
        ("faults=[{links: {random: 2}, action: down, at: 100s}]", "faults[0].at"),
        ("faults=[{link: leaf0-spine0, loss: 1e-4}]", "faults[0].loss"),
        ("faults=[{link: leaf0-spine0, loss: 1.5}]", "faults[0].loss"),
        ("faults=[{link: leaf0-spine0, action: down, loss: 1e-3}]", "faults[0].loss"),
        ("faults=[{links: {random: 2}, loss: 1e-3}]", "faults[0].loss"),
        ("faults=[{links: {random: 1000}, action: down}]", "faults[0].links.random"),
        ("faults=[{gpu: 1, slowdown: 0.5}]", "faults[0].slowdown"),
        ("faults=[{link: leaf0-spine0}]", "faults[0].action"),
        ("faults=[{link: leaf0-spine0, gpu: 1, action: down}]", "faults[0]"),
        ("faults=[{switch: spine9, action: down}]", "faults[0].switch"),
    ];
    for (set, field) in cases {
        let e = run(&scenario(&[set]), RunOptions::default())
            .err()
            .unwrap_or_else(|| panic!("{set}: no error"));
        match &e {
            SimError::Scenario { field: f, .. } => assert_eq!(f, field, "{set}: {e}"),
            other => panic!("{set}: {other}"),
        }
    }
    // The analytical backend has no flows to move: a change during the run is refused.
    let e = run(
        &scenario(&["network.backend=analytical", "faults=[{link: leaf0-spine0, action: down, at: 1us}]"]),
        RunOptions::default(),
    )
    .err()
    .expect("refused");
    assert!(matches!(&e, SimError::Scenario { field, .. } if field == "faults[0].at"), "{e}");
    // Cutting every uplink of leaf 0 leaves its GPUs unreachable: a routing error, not a hang.
    let all: Vec<String> = (0..4).map(|s| format!("{{link: leaf0-spine{s}, action: down}}")).collect();
    let e = run(&scenario(&[&format!("faults=[{}]", all.join(", "))]), RunOptions::default())
        .err()
        .expect("cut off");
    assert!(e.to_string().contains("failed links"), "{e}");
}

/// A link that fails during the run on the flow backend: every transfer still completes, with
/// the same bytes.
#[test]
fn a_link_failing_during_the_run_is_routed_around() {
    let base = run(&scenario(&[]), RunOptions::default()).expect("baseline");
    let end = base.report.iteration_time_s;
    let at = format!("{}us", (end * 1e6 / 3.0) as u64);
    let f = format!("faults=[{{link: leaf0-spine0, action: down, at: {at}}}, {{link: leaf1-spine1, bandwidth: 50Gbps, at: {at}}}]");
    let o = run(&scenario(&[&f]), RunOptions::default()).expect("runs");
    let (a, b) = (&base.engine.net, &o.engine.net);
    assert_eq!((b.completed, b.bytes_delivered), (a.completed, a.bytes_delivered));
    println!(
        "link down at {at}: {:.4} ms vs {:.4} ms",
        o.report.iteration_time_s * 1e3,
        end * 1e3
    );
}

/// Random fabric cables and a whole switch failing during the run (flow backend): every
/// transfer completes with its bytes, and the routes avoid the failed links from then on.
#[test]
fn random_links_and_a_switch_failing_during_the_run_are_routed_around() {
    let base = run(&scenario(&[]), RunOptions::default()).expect("baseline");
    let at = format!("{}us", (base.report.iteration_time_s * 1e6 / 2.0) as u64);
    for f in [
        format!("faults=[{{links: {{random: 4, seed: 5}}, action: down, at: {at}}}]"),
        format!("faults=[{{switch: spine2, action: down, at: {at}}}]"),
    ] {
        let o = run(&scenario(&[&f]), RunOptions::default()).expect("runs");
        let (a, b) = (&base.engine.net, &o.engine.net);
        assert_eq!(b.submitted, b.completed, "{f}");
        assert_eq!((b.completed, b.bytes_delivered), (a.completed, a.bytes_delivered), "{f}");
        // Not slower by necessity: the moved flows may hash onto less loaded paths.
        println!(
            "{f}: {:.4} ms vs {:.4} ms",
            o.report.iteration_time_s * 1e3,
            base.report.iteration_time_s * 1e3
        );
    }
}

/// A switch down takes every link of it; a link taken down then brought up in the same list is
/// the run with no fault, exactly.
#[test]
fn a_switch_down_is_routed_around_and_down_then_up_is_no_fault() {
    let base = run(&scenario(&[]), RunOptions::default()).expect("baseline");
    let o = run(&scenario(&["faults=[{switch: spine0, action: down}]"]), RunOptions::default()).expect("spine0 down");
    // spine0 has one cable to each of the 8 leaves.
    assert_eq!(o.topo.links_down(), 16);
    assert_eq!(o.engine.net.completed, base.engine.net.completed);
    assert_eq!(o.engine.net.bytes_delivered, base.engine.net.bytes_delivered);
    let o = run(
        &scenario(&["faults=[{link: leaf0-spine0, action: down}, {link: leaf0-spine0, action: up}]"]),
        RunOptions::default(),
    )
    .expect("down, up");
    assert_eq!(o.topo.links_down(), 0);
    assert_eq!(o.report.iteration_time_s, base.report.iteration_time_s);
    assert_eq!(o.engine.net, base.engine.net);
}

/// Data parallel over 8 GPUs, one per server, 2 leaves of 4 under 2 spines (the DP ring
/// crosses the spines), on the packet backend; host-free as `DP32`.
const TINY_PACKET: &str = "
compute: { host: null }
model: { hidden_size: 256, num_hidden_layers: 2, num_attention_heads: 4, intermediate_size: 1024, vocab_size: 128, gated_mlp: false }
training: { seq_length: 256, micro_batch_size: 1, global_batch_size: 8 }
parallel: { tp: 1, pp: 1 }
cluster: { gpu: H100, gpus: 8, gpus_per_node: 1, topology: { kind: spine-leaf, hosts_per_leaf: 4, spines: 2 } }
network: { backend: packet }
";

fn tiny_packet(sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_yaml(TINY_PACKET, &sets, Path::new(".")).expect("valid scenario")
}

/// The packet backend: a link failing during the run loses its packets and RoCE recovers them;
/// every transfer completes with its bytes, also when the link comes back later.
#[test]
fn packet_backend_recovers_a_link_failing_during_the_run() {
    let sc = tiny_packet;
    let base = run(&sc(&[]), RunOptions::default()).expect("baseline");
    // leaf0-spine0 fails at 90% of the iteration, while the gradients' all-reduce crosses it.
    let end = base.report.iteration_time_s;
    let at = format!("{}ns", (end * 1e9 * 0.9) as u64);
    let f = format!("faults=[{{link: leaf0-spine0, action: down, at: {at}}}]");
    let o = run(&sc(&[&f]), RunOptions::default()).expect("recovers");
    let (a, b) = (&base.engine.net, &o.engine.net);
    assert_eq!(
        (b.completed, b.bytes_delivered),
        (a.completed, a.bytes_delivered),
        "every transfer, every byte"
    );
    assert_eq!(a.drops, 0);
    assert!(
        b.drops > 0 && b.retransmitted_bytes > 0,
        "packets were lost on the link and sent again: {b:?}"
    );
    println!(
        "packet, leaf0-spine0 down at {at}: {:.3} us vs {:.3} us, {} drops, {} NACKs, {} B resent",
        o.report.iteration_time_s * 1e6,
        end * 1e6,
        b.drops,
        b.nacks,
        b.retransmitted_bytes
    );
    // Down during the run, then up again later: every transfer completes.
    let up = format!("{}ns", (end * 1e9 * 0.95) as u64);
    let f = format!("faults=[{{link: leaf0-spine0, action: down, at: {at}}}, {{link: leaf0-spine0, action: up, at: {up}}}]");
    let o = run(&sc(&[&f]), RunOptions::default()).expect("down, then up");
    assert_eq!(
        (o.engine.net.completed, o.engine.net.bytes_delivered),
        (a.completed, a.bytes_delivered)
    );
}

/// The packet backend's other link changes: a lossy link (from the start and during the run)
/// drops packets and RoCE recovers every byte, tail losses included; links whose bandwidth
/// drops during the run slow the iteration.
#[test]
fn packet_backend_lossy_and_degraded_links() {
    let sc = tiny_packet;
    let base = run(&sc(&[]), RunOptions::default()).expect("baseline");
    let end = base.report.iteration_time_s;
    let a = &base.engine.net;
    let mid = format!("{}ns", (end * 1e9 * 0.5) as u64);
    for f in [
        "faults=[{link: leaf0-spine0, loss: 0.01}, {link: leaf0-spine1, loss: 0.01}]".to_string(),
        format!("faults=[{{link: leaf0-spine0, loss: 0.005, at: {mid}}}, {{link: leaf0-spine1, loss: 0.005, at: {mid}}}]"),
    ] {
        let o = run(&sc(&[&f]), RunOptions::default()).expect("recovers");
        let b = &o.engine.net;
        assert_eq!((b.completed, b.bytes_delivered), (a.completed, a.bytes_delivered), "{f}");
        assert!(b.drops > 0 && b.retransmitted_bytes > 0, "{f}: {b:?}");
        assert!(o.report.iteration_time_s > end, "{f}: losses cost time");
        assert!(o.report.packet_engine.as_deref().is_some_and(|e| e.starts_with("exact")), "{f}");
    }
    // Every cable between leaf 0 and the spines at a tenth of its rate from the middle on.
    let slow: Vec<String> = (0..2)
        .map(|sp| format!("{{link: leaf0-spine{sp}, bandwidth: 40Gbps, at: {mid}}}"))
        .collect();
    let o = run(&sc(&[&format!("faults=[{}]", slow.join(", "))]), RunOptions::default()).expect("degraded");
    assert_eq!(
        (o.engine.net.completed, o.engine.net.bytes_delivered),
        (a.completed, a.bytes_delivered)
    );
    assert!(o.report.iteration_time_s > end, "{} vs {end}", o.report.iteration_time_s);
}
