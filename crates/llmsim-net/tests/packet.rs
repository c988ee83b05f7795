//! Packet engine: standalone FCT, conservation, losslessness under PFC, go-back-N recovery,
//! determinism, distinct congestion controls, Network-trait plumbing, and ns-3 file errors.

mod common;

use std::sync::Arc;

use common::{fat_tree_k4, ns3_cfg, ns3_topo, packet_flow};
use llmsim_core::{Bytes, LinkId, NodeId, SimTime, TransferId};
use llmsim_net::packet::ns3::{fct_text, parse_config, parse_flows};
use llmsim_net::packet::{CcMode, FlowSpec, PacketConfig, PacketEngine, PacketError, PacketNetwork};
use llmsim_net::{Network, Transfer, run_all};
use llmsim_topo::ns3::parse_ns3;

fn flow(src: u32, dst: u32, size: u64, tag: u64) -> FlowSpec {
    packet_flow(src, dst, size, SimTime::ZERO, tag)
}

/// Runs `flows` and returns the engine and the completion order.
fn run(cfg: PacketConfig, text: &str, flows: &[FlowSpec]) -> (PacketEngine, Vec<u32>) {
    let (t, ids) = ns3_topo(text);
    let mut e = PacketEngine::new(t, Some(ids), cfg).expect("engine");
    for f in flows {
        e.add_flow(*f).expect("flow");
    }
    e.run();
    let mut order = Vec::new();
    e.drain_completed(&mut order);
    (e, order)
}

fn incast(n: u32, size: u64) -> Vec<FlowSpec> {
    (1..=n).map(|s| flow(s, 0, size, u64::from(s))).collect()
}

#[test]
fn single_flow_on_an_idle_path_reaches_the_standalone_fct() {
    // Two hosts under one switch; third.cc's standalone_fct = base RTT + wire bytes / bottleneck,
    // base RTT = 2 x propagation + per-hop serialization of one payload.
    let text = "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n";
    let size = 1_000_000u64;
    let (mtu, hdr, ack) = (1000u64, 48u64, 60u64);
    let pkts = size.div_ceil(mtu);
    let bw = 100e9;
    let hops = 2.0;
    let d_ns = 1000.0;
    let base_rtt = 2.0 * hops * d_ns + hops * (mtu as f64 * 8.0 / bw * 1e9).floor();
    let standalone = base_rtt + ((size + pkts * hdr) * 8) as f64 / bw * 1e9;
    for ns_resolution in [false, true] {
        let cfg = PacketConfig {
            ns_resolution,
            ..ns3_cfg(CcMode::Dcqcn)
        };
        let (e, order) = run(cfg, text, &[flow(0, 1, size, 0)]);
        assert_eq!(order.len(), 1);
        let r = e.flow_result(0).unwrap();
        assert_eq!(r.standalone_fct.as_ns() as f64, standalone, "engine's standalone formula");
        // Store and forward on an idle path: packets leave back to back (T each); the last one
        // crosses two hops, its ACK (A) comes back over two hops.
        let tx = |b: u64| {
            let t = b as f64 * 8.0 / bw * 1e9;
            if ns_resolution { t.floor() } else { t }
        };
        let (t, a) = (tx(mtu + hdr), tx(ack));
        let expected = (pkts as f64 + 1.0) * t + 2.0 * a + 4.0 * d_ns;
        let fct = r.fct().as_ns() as f64;
        assert!((fct - expected).abs() <= 1.0, "fct {fct} vs derived {expected}");
        // The standalone formula counts the MTU-sized return trip: within 0.1% (exact ps) or
        // within ns-3's 1% truncation of 83.84 ns to 83 ns per packet.
        let tol = if ns_resolution { 0.011 } else { 0.001 };
        assert!((fct - standalone).abs() / standalone < tol, "fct {fct} vs standalone {standalone}");
    }
}

#[test]
fn bytes_are_conserved_and_every_flow_finishes() {
    let text = fat_tree_k4();
    let flows: Vec<FlowSpec> = (0..16)
        .map(|s| flow(s, (s + 5) % 16, 50_000 + 1_000 * u64::from(s), u64::from(s)))
        .collect();
    for cc in [CcMode::Dcqcn, CcMode::Hpcc, CcMode::Timely, CcMode::Dctcp] {
        let (e, order) = run(ns3_cfg(cc), &text, &flows);
        assert_eq!(order.len(), flows.len(), "{cc:?}: every flow finishes");
        let st = e.stats();
        let total: u64 = flows.iter().map(|f| f.size).sum();
        assert_eq!(st.payload_delivered, total, "{cc:?}: in-order payload delivered = bytes sent");
        assert_eq!(st.drops_buffer + st.drops_error, 0);
        let pkts: u64 = flows.iter().map(|f| f.size.div_ceil(1000)).sum();
        assert_eq!(st.data_packets, pkts, "{cc:?}: no retransmission without loss");
        assert_eq!(e.pending_events(), 0);
    }
}

#[test]
fn pfc_prevents_drops_in_a_lossless_config() {
    // A small buffer makes the incast hit the PFC threshold.
    let cfg = PacketConfig {
        buffer_bytes: 1 << 20,
        cc: CcMode::None,
        ..ns3_cfg(CcMode::Dcqcn)
    };
    let flows = incast(15, 200_000);
    let (e, order) = run(cfg, &fat_tree_k4(), &flows);
    let st = e.stats();
    assert!(st.pfc_pauses > 0, "the incast must trigger PFC: {st:?}");
    assert_eq!(st.pfc_pauses, st.pfc_resumes, "every pause is resumed");
    assert_eq!(st.drops_buffer, 0, "PFC is lossless");
    assert_eq!(order.len(), flows.len());
    assert_eq!(st.payload_delivered, 15 * 200_000);
}

#[test]
fn go_back_n_recovers_from_injected_loss() {
    let cfg = PacketConfig {
        error_rate_per_link: 0.002,
        seed: 3,
        ..ns3_cfg(CcMode::Dcqcn)
    };
    let flows: Vec<FlowSpec> = (0..8).map(|s| flow(s, s + 8, 300_000, u64::from(s))).collect();
    let (e, order) = run(cfg, &fat_tree_k4(), &flows);
    let st = e.stats();
    assert!(st.drops_error > 0, "loss was injected: {st:?}");
    assert!(st.nacks > 0, "gaps were NACKed");
    assert!(st.retransmitted_bytes > 0, "the sender went back");
    assert_eq!(order.len(), flows.len(), "every flow recovers and finishes");
    assert_eq!(
        st.payload_delivered,
        8 * 300_000,
        "the receiver got every byte exactly once in order"
    );
}

#[test]
fn runs_are_deterministic() {
    let flows = incast(15, 300_000);
    let (e1, o1) = run(ns3_cfg(CcMode::Dcqcn), &fat_tree_k4(), &flows);
    let (e2, o2) = run(ns3_cfg(CcMode::Dcqcn), &fat_tree_k4(), &flows);
    assert!(e1.stats().ecn_marks > 0, "random ECN marking is exercised");
    assert_eq!(fct_text(&e1, &o1).unwrap(), fct_text(&e2, &o2).unwrap());
    assert_eq!(llmsim_net::packet::ns3::pfc_text(&e1), llmsim_net::packet::ns3::pfc_text(&e2));
}

#[test]
fn the_four_congestion_controls_give_distinct_incast_results() {
    let flows = incast(15, 400_000);
    let mut means = Vec::new();
    let mut fcts = Vec::new();
    for cc in [CcMode::Dcqcn, CcMode::Hpcc, CcMode::Timely, CcMode::Dctcp] {
        let (e, order) = run(ns3_cfg(cc), &fat_tree_k4(), &flows);
        assert_eq!(order.len(), flows.len());
        let mut v: Vec<u64> = (0..flows.len() as u32).map(|f| e.flow_result(f).unwrap().fct().as_ns()).collect();
        means.push((cc, v.iter().sum::<u64>() as f64 / v.len() as f64));
        v.sort_unstable();
        fcts.push(v);
    }
    for i in 0..means.len() {
        for j in i + 1..means.len() {
            let (a, b) = (means[i].1, means[j].1);
            assert!(
                (a - b).abs() / a.min(b) > 0.005,
                "{:?} and {:?} must differ: mean FCT {a} vs {b}",
                means[i].0,
                means[j].0
            );
            assert_ne!(fcts[i], fcts[j]);
        }
    }
}

#[test]
fn the_packet_backend_serves_the_network_trait() {
    let t = Arc::new(
        llmsim_topo::generators::fat_tree(
            16,
            &llmsim_topo::generators::FatTreeParams {
                k: 4,
                host_link: llmsim_topo::LinkParams::new(llmsim_core::Bandwidth::from_gbps(100), SimTime::from_ns(1000)),
                edge_agg: llmsim_topo::LinkParams::new(llmsim_core::Bandwidth::from_gbps(100), SimTime::from_ns(1000)),
                agg_core: llmsim_topo::LinkParams::new(llmsim_core::Bandwidth::from_gbps(100), SimTime::from_ns(1000)),
            },
            llmsim_topo::ScaleUp::none(),
            7,
        )
        .expect("fat tree"),
    );
    let mut net = PacketNetwork::new(t.clone(), PacketConfig::ns3_defaults(CcMode::Hpcc)).expect("network");
    let transfers: Vec<Transfer> = (0..16u32)
        .map(|i| {
            Transfer::new(
                TransferId(u64::from(i)),
                NodeId(i),
                NodeId((i + 3) % 16),
                Bytes(100_000),
                SimTime::from_us(u64::from(i % 4)),
            )
        })
        .collect();
    let done = run_all(&mut net, transfers.clone()).expect("submits");
    assert_eq!(done.len(), 16);
    // Per-link bytes: each transfer's bytes on every link of its route, as the analytical
    // backend counts them over the same routes.
    let mut ana = llmsim_net::AnalyticalNetwork::new(t);
    run_all(&mut ana, transfers).expect("submits");
    assert_eq!(net.link_bytes(), ana.link_bytes());
    assert!(net.link_bytes().iter().any(|b| b.0 > 0));
    assert!(
        done.windows(2).all(|w| (w[0].finish, w[0].id) <= (w[1].finish, w[1].id)),
        "completion order"
    );
    assert!(done.iter().all(|c| c.finish > c.start));
    assert_eq!(net.stats().bytes_delivered, 16 * 100_000);
    assert_eq!(net.in_flight(), 0);
    // A lone transfer on the packet backend is never faster than the analytical alpha-beta time.
    let lone = done.iter().map(|c| c.finish.as_ps() - c.start.as_ps()).min().unwrap_or(0);
    let bytes_time = 100_000 * 8 * 10; // ps at 100 Gbps
    assert!(lone > bytes_time);
    let _ = LinkId(0);
}

#[test]
fn the_network_trait_reports_the_packet_counters() {
    // A 7-to-1 incast of 400 KB through the Network trait: DCQCN marks ECN, and the stats the
    // simulator's report prints are the engine's own counters.
    let (t, _) = ns3_topo(&fat_tree_k4());
    for cc in [CcMode::Dcqcn, CcMode::Hpcc] {
        let mut net = PacketNetwork::new(t.clone(), PacketConfig::ns3_defaults(cc)).expect("network");
        let transfers: Vec<Transfer> = (1..8u32)
            .map(|i| Transfer::new(TransferId(u64::from(i)), NodeId(i), NodeId(0), Bytes(400_000), SimTime::ZERO))
            .collect();
        assert_eq!(run_all(&mut net, transfers).expect("submits").len(), 7);
        let (s, e) = (net.stats(), net.engine().stats());
        assert_eq!(s.packet_events, e.events);
        assert_eq!((s.ecn_marks, s.pfc_pauses, s.nacks), (e.ecn_marks, e.pfc_pauses, e.nacks));
        assert_eq!(s.drops, e.drops_buffer + e.drops_error);
        assert_eq!(s.retransmitted_bytes, e.retransmitted_bytes);
        // One network leg per transfer here: the flows' payload is the transfers' bytes.
        assert_eq!(s.net_payload_bytes, e.payload_delivered);
        assert_eq!(s.net_payload_bytes, 7 * 400_000);
        if cc == CcMode::Dcqcn {
            assert!(s.ecn_marks > 0, "{s:?}");
        }
        assert_eq!(s.drops, 0, "lossless: {s:?}");
    }
}

#[test]
fn advancing_to_each_completion_matches_stepping_event_by_event() {
    // 16 GPUs, 4 per server on a slow NVLink, so a transfer relayed through a server peer
    // (`Via`) can end on its NVLink leg after its network leg: the completion is due later.
    let nic = llmsim_topo::LinkParams::new(llmsim_core::Bandwidth::from_gbps(100), SimTime::from_ns(1000));
    let nvlink = llmsim_topo::ScaleUp {
        gpus_per_server: 4,
        bandwidth: llmsim_core::Bandwidth::from_gbps(20),
        latency: SimTime::from_ns(500),
    };
    let t = Arc::new(llmsim_topo::generators::flat(16, nic, nvlink, 3).expect("topology"));
    let transfers: Vec<Transfer> = (0..16u32)
        .map(|i| {
            let mut tr = Transfer::new(
                TransferId(u64::from(i)),
                NodeId(i),
                NodeId((i + 5) % 16),
                Bytes(200_000 + 10_000 * u64::from(i)),
                SimTime::from_us(u64::from(i % 3)),
            );
            if i % 2 == 0 {
                tr.route = llmsim_net::RouteSpec::Via(NodeId(i ^ 1));
            }
            tr
        })
        .collect();
    let new = || {
        let mut n = PacketNetwork::new(t.clone(), PacketConfig::ns3_defaults(CcMode::Dcqcn)).expect("network");
        for tr in &transfers {
            n.submit(tr.clone()).expect("submit");
        }
        n
    };
    // Reference: one event time at a time.
    let mut a = new();
    let mut stepped = Vec::new();
    while let Some(n) = a.next_event_time() {
        a.advance_to(n, &mut stepped);
    }
    assert_eq!(stepped.len(), 16);
    // First up to a limit: nothing past it is run or delivered; then to the end. Every call
    // that delivers stops at its first completion instant.
    let limit = SimTime::from_us(30);
    let mut b = new();
    let mut fast = Vec::new();
    let mut calls = 0;
    for lim in [limit, SimTime::MAX] {
        loop {
            let before = fast.len();
            b.advance_until_completion(lim, &mut fast);
            calls += 1;
            assert!(b.now() <= lim, "ran past {lim}");
            if fast.len() == before {
                break;
            }
            let at = fast[before].finish;
            assert!(fast[before..].iter().all(|c| c.finish == at), "one instant per call");
            assert_eq!(b.now(), at);
        }
        if lim == limit {
            assert!(fast.iter().all(|c| c.finish <= limit) && fast.len() < 16, "{fast:?}");
        }
    }
    assert_eq!(b.next_event_time(), None);
    assert_eq!(fast, stepped);
    assert!(calls <= 16 + 2);
    // Some relayed transfer did end on its NVLink leg (alpha-beta over the server's route).
    let nvlink_bound = stepped.iter().filter(|c| c.id.0 % 2 == 0).any(|c| {
        let mut path = Vec::new();
        t.route(c.src, NodeId(c.src.0 ^ 1), transfers[c.id.0 as usize].flow_hash, &mut path)
            .expect("route");
        let (lat, bw) = t.path_latency_and_bottleneck(&path);
        c.finish == c.start + lat + bw.time_to_send(c.bytes)
    });
    assert!(nvlink_bound, "{stepped:?}");
}

#[test]
fn malformed_ns3_files_give_line_numbers() {
    let ok = "CC_MODE 1\nTOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\n";
    assert!(parse_config(ok, "config.txt").is_ok());
    let bad_key = "CC_MODE 1\nTOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\nRATE_AY 5Mb/s\n";
    match parse_config(bad_key, "config.txt") {
        Err(PacketError::Parse { line, message, .. }) => {
            assert_eq!(line, 4);
            assert!(message.contains("unknown key") && message.contains("RATE_AI"), "{message}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    let bad_value = "CC_MODE 1\nRATE_AI fast\nTOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\n";
    assert!(matches!(parse_config(bad_value, "c"), Err(PacketError::Parse { line: 2, .. })));
    // 10 is HPCC-PINT since issue 33; 99 is no algorithm.
    let bad_cc = "CC_MODE 99\nTOPOLOGY_FILE t.txt\nFLOW_FILE f.txt\n";
    assert!(matches!(parse_config(bad_cc, "c"), Err(PacketError::Parse { line: 1, .. })));
    let flows = "2\n0 1 3 100 1000 2.0\n0 1 3 100 1000\n";
    match parse_flows(flows, "flow.txt") {
        Err(PacketError::Parse { line, message, .. }) => {
            assert_eq!(line, 3);
            assert!(message.contains("6 fields"), "{message}");
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
    let unsorted = "2\n0 1 3 100 1000 2.0\n0 1 3 100 1000 1.0\n";
    assert!(matches!(parse_flows(unsorted, "f"), Err(PacketError::Parse { line: 3, .. })));
    let bad_topo = "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 fast 1000ns 0\n";
    match parse_ns3(bad_topo, "topo.txt", 0) {
        Err(llmsim_topo::TopoError::Parse { line, .. }) => assert_eq!(line, 4),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn link_utilization_bins_add_up_and_the_incast_bottleneck_runs_full() {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let mut e = PacketEngine::new(t, Some(ids), ns3_cfg(CcMode::Hpcc)).expect("engine");
    let bin = SimTime::from_us(10);
    e.set_util_bin(bin);
    for f in incast(4, 500_000) {
        e.add_flow(f).expect("flow");
    }
    e.run();
    let util = e.link_utilization();
    let tx = e.port_tx_bytes();
    // Bins hold every byte each port sent.
    for (l, &bytes) in tx.iter().enumerate() {
        let cap = e.topology().links()[l].bandwidth.bps_f64() * bin.as_secs_f64() / 8.0;
        let binned: f64 = util.iter().filter(|u| u.0 as usize == l).map(|u| u.2 * cap).sum();
        assert!((binned - bytes as f64).abs() < 1.0, "link {l}: {binned} vs {bytes}");
    }
    // The edge switch's port toward host 0 is the bottleneck: it runs at line rate (ns-3 floors
    // serialization to whole ns, so line rate reads up to 1% over 1) and HPCC keeps it busy.
    let port = e
        .topology()
        .ports(NodeId(16))
        .iter()
        .position(|l| e.topology().link(*l).dst == NodeId(0))
        .expect("port");
    let link = e.topology().ports(NodeId(16))[port].0;
    let bins: Vec<f64> = util.iter().filter(|u| u.0 == link).map(|u| u.2).collect();
    assert!(bins.len() > 10);
    let mid = &bins[1..bins.len() - 1];
    let max = mid.iter().copied().fold(0.0, f64::max);
    assert!(max > 0.99 && max < 1.011, "{mid:?}");
    assert!(mid.iter().sum::<f64>() / mid.len() as f64 > 0.75, "{mid:?}");
}

#[test]
fn utilization_bins_shorter_than_a_burst_split_each_packet_by_time() {
    // 1 us bins hold 12.05 full packets at 100 Gbit/s: counting each packet in the bin where it
    // starts would put 13 packets (1.09) in some bins. Split by time, a bin never exceeds the
    // 83-vs-83.84 ns truncation (1.0101), on any link, and the flows start late (1 ms) without
    // the bins before them being counted.
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let mut e = PacketEngine::new(t, Some(ids), ns3_cfg(CcMode::Dcqcn)).expect("engine");
    e.set_util_bin(SimTime::from_us(1));
    for mut f in incast(3, 300_000) {
        f.start = SimTime::from_us(1000);
        e.add_flow(f).expect("flow");
    }
    e.run();
    let util = e.link_utilization();
    let max = util.iter().map(|u| u.2).fold(0.0, f64::max);
    assert!(max > 0.99 && max < 1.0102, "max bin {max}");
    assert!(util.iter().all(|u| u.1 >= 1000), "a bin before the first packet");
    let tx: u64 = e.port_tx_bytes().iter().sum();
    let binned: f64 = util
        .iter()
        .map(|u| u.2 * e.topology().links()[u.0 as usize].bandwidth.bps_f64() * 1e-6 / 8.0)
        .sum();
    assert!((binned - tx as f64).abs() < 1e-9 * tx as f64 + 1.0, "{binned} vs {tx}");
}

#[test]
fn a_packet_size_or_buffer_the_engine_cannot_count_is_refused_and_a_jumbo_frame_runs() {
    let text = "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n";
    let (t, ids) = ns3_topo(text);
    let mut cfg = ns3_cfg(CcMode::Dcqcn);
    cfg.mtu = 70_000;
    match PacketEngine::new(t.clone(), Some(ids.clone()), cfg) {
        Err(PacketError::Config(m)) => assert!(m.contains("70000 payload bytes"), "{m}"),
        other => panic!("expected a config error, got {:?}", other.err()),
    }
    // The MMU counts in 32 bits, as ns-3's does.
    let mut cfg = ns3_cfg(CcMode::Dcqcn);
    cfg.buffer_bytes = 8 << 30;
    match PacketEngine::new(t.clone(), Some(ids.clone()), cfg) {
        Err(PacketError::Config(m)) => assert!(m.contains("switch buffer"), "{m}"),
        other => panic!("expected a config error, got {:?}", other.err()),
    }
    // So is a link whose PFC headroom (3 x rate x delay) overflows an ingress counter: 100 Gbit/s
    // over a 1 s cable needs 37.5 GB.
    let (slow, slow_ids) = ns3_topo("3 1 2\n2\n0 2 100Gbps 1000000000ns 0\n1 2 100Gbps 1000ns 0\n");
    match PacketEngine::new(slow, Some(slow_ids), ns3_cfg(CcMode::Dcqcn)) {
        Err(PacketError::Config(m)) => assert!(m.contains("PFC headroom"), "{m}"),
        other => panic!("expected a config error, got {:?}", other.err()),
    }
    // A 9000-byte payload fits, and every byte arrives.
    let mut cfg = ns3_cfg(CcMode::Dcqcn);
    cfg.mtu = 9000;
    let (e, order) = run(cfg, text, &[flow(0, 1, 100_000, 7)]);
    assert_eq!(order.len(), 1);
    assert_eq!(e.stats().payload_delivered, 100_000);
    assert_eq!(e.stats().data_packets, 12);
}
