//! Load balancing on a 2:1 oversubscribed fat-tree (issue 32 must-show): a cross-pod
//! permutation and a ring all-reduce under `ecmp | spray | flowlet | adaptive`, on the packet
//! backend (RoCE go-back-N, DCQCN, PFC) and the flow backend.
//!
//! Fabric: k = 8 fat-tree, 128 hosts, 100 Gb/s NICs, 50 Gb/s edge-agg and agg-core links (each
//! edge: 4 x 100 down, 4 x 50 up), 1 us per link.
//! - permutation: host i sends `--perm-bytes` (default 2 MB) to host (i + 64) mod 128, all at t = 0
//!   (every flow leaves its pod); the fabric's bound is 50 Gb/s per host.
//! - all-reduce: 4 rings of `--ring-edges` (default 32) hosts (ring j: host j of each edge, ordered
//!   so that neighbours sit in different pods), `--ar-bytes` (default 4 MB) per ring, 2(n-1) steps
//!   of bytes/n each, each step starting when the previous one has completed everywhere (ring
//!   all-reduce). `--only permutation|all-reduce` runs one of the two.
//!
//! Run: `cargo run --release -p llmsim-net --example load_balance_bench` (or `bench/load_balance.sh`).
//! Prints one markdown table row per (workload, backend, policy).

use std::sync::Arc;
use std::time::Instant;

use llmsim_core::{Bandwidth, Bytes, NodeId, SimTime, TransferId};
use llmsim_net::packet::{CcMode, LoadBalance, PacketConfig, PacketNetwork};
use llmsim_net::{FlowNetwork, Network, Transfer};
use llmsim_topo::generators::{FatTreeParams, fat_tree};
use llmsim_topo::{LinkParams, ScaleUp, Topology};

const HOSTS: u32 = 128;

/// Transfers `(src, dst, bytes)` that start together.
type Phase = Vec<(u32, u32, u64)>;

fn topo() -> Arc<Topology> {
    let lat = SimTime::from_us(1);
    let p = FatTreeParams {
        k: 8,
        host_link: LinkParams::new(Bandwidth::from_gbps(100), lat),
        edge_agg: LinkParams::new(Bandwidth::from_gbps(50), lat),
        agg_core: LinkParams::new(Bandwidth::from_gbps(50), lat),
    };
    Arc::new(fat_tree(HOSTS, &p, ScaleUp::none(), 1).expect("fat-tree"))
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn network(backend: &str, lb: LoadBalance) -> Box<dyn Network> {
    match backend {
        "flow" => {
            let mut n = FlowNetwork::new(topo());
            n.set_load_balance(lb);
            Box::new(n)
        }
        _ => {
            let cfg = PacketConfig {
                load_balance: lb,
                seed: 1,
                ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
            };
            Box::new(PacketNetwork::new(topo(), cfg).expect("packet network"))
        }
    }
}

/// Submits the phases one after another, each when the previous has completed; returns the
/// end time.
fn run_phases(net: &mut dyn Network, phases: &[Phase]) -> SimTime {
    let mut id = 0u64;
    let mut now = SimTime::ZERO;
    let mut done = Vec::new();
    for phase in phases {
        for &(s, d, b) in phase {
            id += 1;
            let mut t = Transfer::new(TransferId(id), NodeId(s), NodeId(d), Bytes(b), now);
            t.flow_hash = llmsim_core::mix64(id);
            net.submit(t).expect("submit");
        }
        while net.in_flight() > 0 {
            let t = net.next_event_time().expect("transfers in flight have events");
            net.advance_to(t, &mut done);
        }
        // The next step starts when this one's last transfer has arrived.
        now = net.now();
    }
    now
}

fn main() {
    let perm_bytes = arg("--perm-bytes", 2_000_000);
    let ar_bytes = arg("--ar-bytes", 4_000_000);
    let permutation: Phase = (0..HOSTS).map(|i| (i, (i + HOSTS / 2) % HOSTS, perm_bytes)).collect();
    // Edge e (4 hosts each) is in pod e / 4; this order puts ring neighbours in different pods.
    // `--ring-edges 8`: one edge per pod (14 steps instead of 62).
    let ring_edges = arg("--ring-edges", 32) as u32;
    let edges: Vec<u32> = (0..ring_edges.min(32)).map(|r| (r % 8) * 4 + (r / 8) % 4).collect();
    let n = edges.len() as u64;
    let chunk = ar_bytes / n;
    let mut ring_steps = Vec::new();
    for _ in 0..2 * (n - 1) {
        let mut step = Vec::new();
        for j in 0..4 {
            for (r, &e) in edges.iter().enumerate() {
                let next = edges[(r + 1) % edges.len()];
                step.push((e * 4 + j, next * 4 + j, chunk));
            }
        }
        ring_steps.push(step);
    }
    let workloads: [(&str, Vec<Phase>, u64); 2] = [
        ("permutation", vec![permutation], perm_bytes * 8),
        ("all-reduce", ring_steps, 2 * (n - 1) * chunk * 8),
    ];
    let gap = SimTime::from_us(arg("--flowlet-gap-us", 20));
    let lbs = [
        LoadBalance::Ecmp,
        LoadBalance::Spray,
        LoadBalance::Flowlet { gap },
        LoadBalance::Adaptive,
    ];
    println!("| workload | backend | load_balance | completion (us) | Gb/s per host | NACKs | resent MB | drops | wall (s) |");
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    for (name, phases, bits_per_host) in &workloads {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        for backend in ["packet", "flow"] {
            for lb in lbs {
                let mut net = network(backend, lb);
                let wall = Instant::now();
                let end = run_phases(net.as_mut(), phases);
                let wall = wall.elapsed().as_secs_f64();
                let s = net.stats();
                let us = end.as_secs_f64() * 1e6;
                let gbps = *bits_per_host as f64 / end.as_secs_f64() / 1e9;
                let (nacks, resent, drops) = if backend == "packet" {
                    (
                        s.nacks.to_string(),
                        format!("{:.1}", s.retransmitted_bytes as f64 / 1e6),
                        s.drops.to_string(),
                    )
                } else {
                    ("-".into(), "-".into(), "-".into())
                };
                println!(
                    "| {name} | {backend} | {} | {us:.0} | {gbps:.1} | {nacks} | {resent} | {drops} | {wall:.2} |",
                    lb.name()
                );
            }
        }
    }
}
