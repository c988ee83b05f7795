//! UET vs RoCE (issue 33 must-show): flow completion times, trims and retransmissions on an
//! incast and on a permutation with packet spraying, on the packet engine.
//!
//! Fabrics (k = 8 fat-trees, 128 hosts, 100 Gb/s NICs, 1 us per link, 32 MiB per switch):
//! - incast: full bisection (100 Gb/s everywhere); `--incast-senders` (default 32) hosts of the
//!   other pods (hosts 32, 33, ...) each send `--incast-bytes` (default 2 MB) to host 0 at t = 0;
//! - permutation: 2:1 oversubscribed (50 Gb/s edge-agg and agg-core links, as
//!   `load_balance_bench`); host i sends `--perm-bytes` (default 2 MB) to host (i + 64) mod 128 at
//!   t = 0 (every flow leaves its pod).
//!
//! Rows: RoCE (DCQCN or HPCC, go-back-N, PFC, ns-3's `run.py` parameters, 1000-byte payloads)
//! under ECMP (and DCQCN under spraying with `--roce-spray`: slow, go-back-N resends most of it),
//! and UET (NSCC, trimming, PFC off; `UetConfig` defaults) with 4096-byte
//! and 1000-byte payloads under ECMP and spraying.
//!
//! Run: `cargo run --release -p llmsim-net --example uet_bench` (or `bench/uet.sh`); `--only
//! incast|permutation` runs one. Prints one markdown table row per (workload, configuration).

use std::sync::Arc;
use std::time::Instant;

use llmsim_core::{Bandwidth, NodeId, SimTime};
use llmsim_net::packet::{CcMode, FlowSpec, LoadBalance, PacketConfig, PacketEngine, Transport};
use llmsim_topo::generators::{FatTreeParams, fat_tree};
use llmsim_topo::{LinkParams, ScaleUp, Topology};

const HOSTS: u32 = 128;

/// Flows `(src, dst, bytes)` that start together at t = 0.
type Flows = Vec<(u32, u32, u64)>;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn topo(fabric_gbps: u64) -> Arc<Topology> {
    let lat = SimTime::from_us(1);
    let p = FatTreeParams {
        k: 8,
        host_link: LinkParams::new(Bandwidth::from_gbps(100), lat),
        edge_agg: LinkParams::new(Bandwidth::from_gbps(fabric_gbps), lat),
        agg_core: LinkParams::new(Bandwidth::from_gbps(fabric_gbps), lat),
    };
    Arc::new(fat_tree(HOSTS, &p, ScaleUp::none(), 1).expect("fat-tree"))
}

struct Setup {
    name: &'static str,
    transport: Transport,
    cc: CcMode,
    lb: LoadBalance,
    mtu: Option<u32>,
}

fn config(s: &Setup) -> PacketConfig {
    let mut c = PacketConfig {
        load_balance: s.lb,
        seed: 1,
        ..PacketConfig::ns3_defaults(s.cc)
    };
    if s.transport == Transport::Uet {
        c.transport = Transport::Uet;
        c.pfc = false;
        c.mtu = 4096;
    }
    if let Some(m) = s.mtu {
        c.mtu = m;
    }
    c
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn main() {
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    // RoCE go-back-N under spraying resends most of the permutation (bench/README.md, issue 32:
    // 96 s of wall time there): off unless asked for.
    let roce_spray = std::env::args().any(|a| a == "--roce-spray");
    let senders = arg("--incast-senders", 32) as u32;
    let incast_bytes = arg("--incast-bytes", 2_000_000);
    let perm_bytes = arg("--perm-bytes", 2_000_000);
    let incast: Flows = (0..senders).map(|i| (32 + i, 0, incast_bytes)).collect();
    let perm: Flows = (0..HOSTS).map(|i| (i, (i + HOSTS / 2) % HOSTS, perm_bytes)).collect();
    let setups = [
        Setup {
            name: "RoCE DCQCN ecmp",
            transport: Transport::Roce,
            cc: CcMode::Dcqcn,
            lb: LoadBalance::Ecmp,
            mtu: None,
        },
        Setup {
            name: "RoCE HPCC ecmp",
            transport: Transport::Roce,
            cc: CcMode::Hpcc,
            lb: LoadBalance::Ecmp,
            mtu: None,
        },
        Setup {
            name: "RoCE DCQCN spray",
            transport: Transport::Roce,
            cc: CcMode::Dcqcn,
            lb: LoadBalance::Spray,
            mtu: None,
        },
        Setup {
            name: "UET ecmp",
            transport: Transport::Uet,
            cc: CcMode::Dcqcn,
            lb: LoadBalance::Ecmp,
            mtu: None,
        },
        Setup {
            name: "UET spray",
            transport: Transport::Uet,
            cc: CcMode::Dcqcn,
            lb: LoadBalance::Spray,
            mtu: None,
        },
        Setup {
            name: "UET spray, 1000 B",
            transport: Transport::Uet,
            cc: CcMode::Dcqcn,
            lb: LoadBalance::Spray,
            mtu: Some(1000),
        },
    ];
    let workloads: [(&str, u64, &Flows); 2] = [("incast", 100, &incast), ("permutation", 50, &perm)];
    println!(
        "| workload | transport | FCT mean (us) | p50 | p99 | max | trimmed | NACKs | resent packets | RTOs | PFC pauses | ECN marks | M events/s |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (wname, fabric, flows) in workloads {
        if only.as_deref().is_some_and(|o| o != wname) {
            continue;
        }
        let t = topo(fabric);
        for s in &setups {
            if s.transport == Transport::Roce && s.lb == LoadBalance::Spray && !roce_spray {
                continue;
            }
            let cfg = config(s);
            let mtu = u64::from(cfg.mtu);
            let mut e = PacketEngine::new(t.clone(), None, cfg).expect("engine");
            for (i, &(src, dst, size)) in flows.iter().enumerate() {
                e.add_flow(FlowSpec {
                    src: NodeId(src),
                    dst: NodeId(dst),
                    size,
                    start: SimTime::ZERO,
                    pg: 3,
                    dport: 100,
                    tag: i as u64,
                    flow_hash: llmsim_core::mix64(i as u64 + 1),
                })
                .expect("flow");
            }
            let wall = Instant::now();
            e.run();
            let wall = wall.elapsed().as_secs_f64();
            let st = e.stats();
            let n = e.num_flows() as u32;
            assert_eq!(st.flows_done, u64::from(n), "{wname}/{}: every flow finishes", s.name);
            let total: u64 = flows.iter().map(|f| f.2).sum();
            assert_eq!(st.payload_delivered, total, "{wname}/{}: every byte once", s.name);
            let mut fct: Vec<f64> = (0..n).map(|f| e.flow_result(f).expect("flow").fct().as_ns() as f64 / 1e3).collect();
            fct.sort_by(f64::total_cmp);
            let mean = fct.iter().sum::<f64>() / fct.len() as f64;
            let resent = if s.transport == Transport::Uet {
                (0..n)
                    .map(|f| u64::from(e.uet_flow_stats(f).expect("uet").retransmitted_packets))
                    .sum()
            } else {
                st.retransmitted_bytes.div_ceil(mtu)
            };
            println!(
                "| {wname} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {:.2} |",
                s.name,
                mean,
                quantile(&fct, 0.5),
                quantile(&fct, 0.99),
                fct[fct.len() - 1],
                st.trimmed,
                st.nacks,
                resent,
                st.uet_rtos,
                st.pfc_pauses,
                st.ecn_marks,
                st.events as f64 / wall / 1e6
            );
        }
    }
}
