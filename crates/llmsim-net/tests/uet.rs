//! The UET-style transport (issue 33): switches trim instead of dropping and a trimmed payload
//! is never delivered as data; packets sprayed over several paths arrive in any order and every
//! flow completes without a resend; an incast trims and completes; UET and RoCE differ on one
//! incast; the combinations the engine does not model are refused with the field to change.

mod common;

use llmsim_core::SimTime;
use llmsim_net::packet::{CcMode, LoadBalance, PacketConfig, PacketEngine, PacketRouting, Transport, UetConfig, WormholeConfig};

use common::{fat_tree_k4, flat_topo, ns3_topo, packet_flow};

const MTU: u32 = 4096;

fn uet_cfg() -> PacketConfig {
    PacketConfig {
        transport: Transport::Uet,
        pfc: false,
        mtu: MTU,
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    }
}

/// `senders` hosts each send `size` bytes to host `senders`, all at time 0, on one 100 Gb/s
/// switch; runs to the end.
fn incast(cfg: PacketConfig, senders: u32, size: u64) -> PacketEngine {
    let mut e = PacketEngine::new(flat_topo(senders + 1), None, cfg).expect("engine");
    for s in 0..senders {
        e.add_flow(packet_flow(s, senders, size, SimTime::ZERO, u64::from(s)))
            .expect("flow");
    }
    e.run();
    e
}

/// Every flow finished, and the receivers delivered exactly the bytes sent: each payload byte
/// counts once, when the first copy of its packet arrives whole.
fn assert_conserved(e: &PacketEngine, bytes: u64) {
    for f in 0..e.num_flows() as u32 {
        assert_eq!(e.flow_done(f), Some(true), "flow {f} did not finish");
    }
    assert_eq!(e.stats().payload_delivered, bytes, "bytes delivered == bytes sent");
    assert_eq!(e.stats().flows_done, e.num_flows() as u64);
}

/// Packets of `size`-byte flows of `MTU` payload.
fn packets(size: u64) -> u64 {
    size.div_ceil(u64::from(MTU))
}

#[test]
fn an_incast_trims_and_never_delivers_a_trimmed_payload() {
    let (n, size) = (16u32, 1_000_000u64);
    let e = incast(uet_cfg(), n, size);
    let st = e.stats();
    assert!(st.trimmed > 0, "16 senders at 1.5 BDP each overflow the trim threshold");
    assert_eq!(st.drops_buffer, 0, "a UET switch trims instead of dropping");
    assert_eq!(st.pfc_pauses, 0);
    assert_eq!(st.uet_rtos, 0, "trimmed packets are NACKed, no timeout is needed");
    assert_conserved(&e, u64::from(n) * size);
    // With nothing lost, each data packet that left a sender either reached its receiver whole
    // (one ACK each, the payload delivered once) or was trimmed (one NACK each, nothing
    // delivered); each trimmed packet is sent once more.
    let pkts = u64::from(n) * packets(size);
    assert_eq!(st.nacks, st.trimmed);
    assert_eq!(st.acks, pkts, "one whole arrival per packet: no payload came from a trimmed one");
    assert_eq!(st.data_packets, pkts + st.trimmed);
    let per_flow: u64 = (0..n).map(|f| u64::from(e.uet_flow_stats(f).expect("uet").trimmed)).sum();
    assert_eq!(per_flow, st.trimmed);
    let resent: u64 = (0..n)
        .map(|f| u64::from(e.uet_flow_stats(f).expect("uet").retransmitted_packets))
        .sum();
    assert_eq!(resent, st.trimmed, "exactly the trimmed packets are sent again");
    // The last flow cannot finish before the receiver's link has carried every payload byte.
    let last = (0..n).map(|f| e.flow_result(f).expect("flow").finish).max().expect("flows");
    assert!(last.as_ps() > u64::from(n) * size * 8 * 10);
}

#[test]
fn a_small_trim_threshold_trims_more() {
    let (n, size) = (8u32, 500_000u64);
    let small = UetConfig {
        trim_threshold_bytes: 3 * u64::from(MTU + 64),
        ..UetConfig::default()
    };
    let a = incast(uet_cfg(), n, size);
    let b = incast(PacketConfig { uet: small, ..uet_cfg() }, n, size);
    assert_conserved(&a, u64::from(n) * size);
    assert_conserved(&b, u64::from(n) * size);
    assert!(
        b.stats().trimmed > a.stats().trimmed,
        "{} vs {}",
        b.stats().trimmed,
        a.stats().trimmed
    );
}

#[test]
fn sprayed_packets_arrive_out_of_order_and_every_flow_completes_without_go_back_n() {
    let (t, ids) = ns3_topo(&fat_tree_k4());
    let cfg = PacketConfig {
        routing: PacketRouting::Topology,
        load_balance: LoadBalance::Spray,
        ..uet_cfg()
    };
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    let mut e = PacketEngine::new(t, Some(ids), cfg).expect("engine");
    // A permutation across pods: host i sends to host (i + 8) % 16.
    let size = 2_000_000u64;
    for i in 0..16u32 {
        e.add_flow(packet_flow(i, (i + 8) % 16, size, SimTime::ZERO, u64::from(i)))
            .expect("flow");
    }
    e.run();
    assert_conserved(&e, 16 * size);
    let st = e.stats();
    let ooo: u64 = (0..16).map(|f| u64::from(e.uet_flow_stats(f).expect("uet").out_of_order)).sum();
    assert!(ooo > 0, "spraying over paths of different queues reorders packets");
    // Reordered packets are taken as they come: only trimmed packets are sent again.
    let resent: u64 = (0..16)
        .map(|f| u64::from(e.uet_flow_stats(f).expect("uet").retransmitted_packets))
        .sum();
    assert_eq!(resent, st.trimmed);
    assert_eq!(st.uet_rtos, 0);
    assert_eq!(st.acks, 16 * packets(size));
}

#[test]
fn random_link_losses_are_recovered_by_the_timeout() {
    let cfg = PacketConfig {
        error_rate_per_link: 0.01,
        uet: UetConfig {
            rto: SimTime::from_us(100),
            ..UetConfig::default()
        },
        ..uet_cfg()
    };
    let (n, size) = (4u32, 1_000_000u64);
    let e = incast(cfg, n, size);
    assert!(e.stats().drops_error > 0);
    assert!(e.stats().uet_rtos > 0, "a packet or ACK lost on a link is resent after the timeout");
    assert_conserved(&e, u64::from(n) * size);
}

#[test]
fn a_lone_flow_runs_near_line_rate() {
    let size = 10_000_000u64;
    let mut e = PacketEngine::new(flat_topo(2), None, uet_cfg()).expect("engine");
    e.add_flow(packet_flow(0, 1, size, SimTime::ZERO, 0)).expect("flow");
    e.run();
    assert_conserved(&e, size);
    assert_eq!(e.stats().trimmed, 0);
    let wire_ps = (size + packets(size) * 64) * 8 * 10;
    let fct = e.flow_result(0).expect("flow").fct().as_ns() * 1000;
    assert!(fct >= wire_ps, "{fct} ps under the wire time {wire_ps}");
    assert!((fct as f64) < 1.05 * wire_ps as f64, "{fct} ps vs wire time {wire_ps}");
}

#[test]
fn uet_and_roce_differ_on_an_incast() {
    let (n, size) = (16u32, 1_000_000u64);
    let uet = incast(uet_cfg(), n, size);
    let roce = incast(
        PacketConfig {
            mtu: MTU,
            buffer_bytes: 1_000_000,
            ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
        },
        n,
        size,
    );
    assert!(uet.stats().trimmed > 0 && uet.stats().pfc_pauses == 0);
    assert!(roce.stats().trimmed == 0 && roce.stats().pfc_pauses > 0);
    let fcts = |e: &PacketEngine| (0..n).map(|f| e.flow_result(f).expect("flow").finish).collect::<Vec<_>>();
    let (u, r) = (fcts(&uet), fcts(&roce));
    assert_ne!(u, r);
}

#[test]
fn combinations_the_engine_does_not_model_are_refused() {
    let topo = flat_topo(4);
    let err = |cfg: PacketConfig| match PacketEngine::new(topo.clone(), None, cfg) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let m = err(PacketConfig { pfc: true, ..uet_cfg() });
    assert!(m.contains("network.transport=uet") && m.contains("network.pfc: false"), "{m}");
    let m = err(PacketConfig {
        wormhole: WormholeConfig {
            fast_forward: true,
            ..WormholeConfig::default()
        },
        ..uet_cfg()
    });
    assert!(m.contains("network.fast_forward") && m.contains("uet"), "{m}");
    let m = err(PacketConfig {
        cc: CcMode::Hpcc,
        ..uet_cfg()
    });
    assert!(m.contains("network.cc=hpcc") && m.contains("NSCC"), "{m}");
    let m = err(PacketConfig {
        uet: UetConfig {
            trim_threshold_bytes: 1000,
            ..UetConfig::default()
        },
        ..uet_cfg()
    });
    assert!(m.contains("uet.trim_threshold"), "{m}");
    let m = err(PacketConfig {
        uet: UetConfig {
            ecn_kmin_frac: 0.9,
            ecn_kmax_frac: 0.5,
            ..UetConfig::default()
        },
        ..uet_cfg()
    });
    assert!(m.contains("uet.ecn_kmin"), "{m}");
    // A port share under one packet would trim every packet forever.
    let m = err(PacketConfig {
        buffer_bytes: 4 * 4000,
        ..uet_cfg()
    });
    assert!(
        m.contains("network.switch_buffer") && m.contains("no flow") && m.contains("would finish"),
        "{m}"
    );
    // Link failures during the run are RoCE's only.
    let mut e = PacketEngine::new(topo.clone(), None, uet_cfg()).expect("engine");
    let m = e.schedule_link_down(SimTime::from_us(1), 0).expect_err("refused").to_string();
    assert!(m.contains("roce"), "{m}");
    // Spraying: a warning under RoCE go-back-N, none under UET.
    let spray = |t: Transport| PacketConfig {
        load_balance: LoadBalance::Spray,
        transport: t,
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    };
    assert!(spray(Transport::Uet).warnings().is_empty());
    assert!(spray(Transport::Roce).warnings()[0].contains("go-back-N"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// On random incasts and permutations of random sizes, with random trim thresholds and
    /// payloads, sprayed or not, with or without link losses: every flow finishes and every
    /// payload byte is delivered exactly once. Without losses, each packet reaches its receiver
    /// whole exactly once (one ACK) and each trim costs one NACK and one resend, never a
    /// delivery.
    #[test]
    fn uet_conserves_bytes_whatever_the_trimming(
        senders in 2u32..12,
        sizes in proptest::collection::vec(1u64..600_000, 12),
        threshold_pkts in 2u64..40,
        mtu in proptest::sample::select(vec![1000u32, 2048, 4096]),
        spray in proptest::bool::ANY,
        lossy_links in proptest::bool::ANY,
        permutation in proptest::bool::ANY,
    ) {
        let (t, ids) = ns3_topo(&fat_tree_k4());
        let cfg = PacketConfig {
            routing: PacketRouting::Topology,
            load_balance: if spray { LoadBalance::Spray } else { LoadBalance::Ecmp },
            mtu,
            error_rate_per_link: if lossy_links { 0.002 } else { 0.0 },
            uet: UetConfig {
                trim_threshold_bytes: threshold_pkts * u64::from(mtu + 64),
                rto: SimTime::from_us(200),
                ..UetConfig::default()
            },
            ..uet_cfg()
        };
        let mut e = PacketEngine::new(t, Some(ids), cfg).expect("engine");
        let mut total = 0;
        let mut pkts = 0;
        for s in 0..senders {
            let dst = if permutation { (s + 8) % 16 } else { 15 };
            let size = sizes[s as usize];
            total += size;
            pkts += size.div_ceil(u64::from(mtu));
            e.add_flow(packet_flow(s, dst, size, SimTime::ZERO, u64::from(s))).expect("flow");
        }
        e.run();
        let st = e.stats();
        proptest::prop_assert_eq!(st.flows_done, u64::from(senders));
        proptest::prop_assert_eq!(st.payload_delivered, total);
        if !lossy_links {
            proptest::prop_assert_eq!(st.uet_rtos, 0);
            proptest::prop_assert_eq!(st.acks, pkts);
            proptest::prop_assert_eq!(st.nacks, st.trimmed);
            proptest::prop_assert_eq!(st.data_packets, pkts + st.trimmed);
        }
    }
}
