//! TCP over a lossy fabric (issue 33): every loss is recovered and every byte delivered in
//! order; a retransmission timeout never fires before `tcp.min_rto`; a lossless (PFC) fabric
//! never drops; TCP and RoCE behave differently on one incast; the combinations the engine does
//! not model are refused with the field to change.

mod common;

use llmsim_core::SimTime;
use llmsim_net::packet::{CcMode, DropPolicy, LoadBalance, PacketConfig, PacketEngine, TcpCc, TcpConfig, Transport, WormholeConfig};

use common::{flat_topo, packet_flow};

const MSS: u32 = 1460;

fn tcp_cfg(buffer: u64, policy: DropPolicy) -> PacketConfig {
    PacketConfig {
        transport: Transport::Tcp,
        pfc: false,
        ecn: false,
        mtu: MSS,
        buffer_bytes: buffer,
        drop_policy: policy,
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    }
}

fn roce_cfg(buffer: u64) -> PacketConfig {
    PacketConfig {
        buffer_bytes: buffer,
        ..PacketConfig::ns3_defaults(CcMode::Dcqcn)
    }
}

/// `senders` hosts each send `size` bytes to host `senders` (the last one), all at time 0, on
/// one 100 Gb/s switch; runs to the end.
fn incast(cfg: PacketConfig, senders: u32, size: u64) -> PacketEngine {
    let mut e = PacketEngine::new(flat_topo(senders + 1), None, cfg).expect("engine");
    for s in 0..senders {
        e.add_flow(packet_flow(s, senders, size, SimTime::ZERO, u64::from(s)))
            .expect("flow");
    }
    e.run();
    e
}

/// Every flow finished and the receivers delivered, in order, exactly the bytes sent: the
/// engine counts a payload byte as delivered only when the cumulative ACK point passes it.
fn assert_conserved(e: &PacketEngine, sizes: u64) {
    for f in 0..e.num_flows() as u32 {
        assert_eq!(e.flow_done(f), Some(true), "flow {f} did not finish");
    }
    assert_eq!(e.stats().payload_delivered, sizes, "bytes delivered in order == bytes sent");
    assert_eq!(e.stats().flows_done, e.num_flows() as u64);
}

#[test]
fn tcp_recovers_every_tail_drop_and_conserves_bytes() {
    for (policy, buffer) in [
        (DropPolicy::PerPortTailDrop, 1_000_000),
        (DropPolicy::PerPortTailDrop, 3_000_000),
        (DropPolicy::SharedTailDrop, 200_000),
    ] {
        let (n, size) = (16, 1_000_000);
        let e = incast(tcp_cfg(buffer, policy), n, size);
        let st = e.stats();
        assert!(st.drops_buffer > 0, "{policy:?}/{buffer}: the incast must overflow the buffer");
        assert!(st.retransmitted_bytes > 0);
        assert_eq!(st.pfc_pauses, 0, "a lossy fabric sends no PFC frame");
        assert_conserved(&e, u64::from(n) * size);
        // Per-flow drops add up to the switch's drops.
        let per_flow: u64 = (0..n).map(|f| u64::from(e.tcp_flow_stats(f).expect("tcp").drops)).sum();
        assert_eq!(per_flow, st.drops_buffer);
        let recoveries: u64 = (0..n)
            .map(|f| {
                let t = e.tcp_flow_stats(f).expect("tcp");
                u64::from(t.fast_retransmits + t.rtos)
            })
            .sum();
        assert!(recoveries > 0, "losses are repaired by fast retransmit or timeout");
        assert_eq!(recoveries, st.tcp_fast_retransmits + st.tcp_rtos);
    }
}

#[test]
fn tcp_recovers_random_data_and_ack_losses() {
    // 1% of packets lost on every link, data and ACKs alike.
    let cfg = PacketConfig {
        error_rate_per_link: 0.01,
        tcp: TcpConfig {
            min_rto: SimTime::from_ms(1),
            initial_rto: SimTime::from_ms(1),
            ..TcpConfig::default()
        },
        ..tcp_cfg(32 << 20, DropPolicy::PerPortTailDrop)
    };
    let (n, size) = (4, 2_000_000);
    let e = incast(cfg, n, size);
    assert!(e.stats().drops_error > 0);
    assert_eq!(e.stats().drops_buffer, 0, "32 MiB holds the incast");
    assert_conserved(&e, u64::from(n) * size);
}

#[test]
fn an_rto_fires_only_after_the_minimum_rto() {
    for min_ms in [2, 5] {
        let min_rto = SimTime::from_ms(min_ms);
        // Two-segment flows over links that lose 20% of packets: some lose a last segment or
        // every ACK after it, which only a timeout repairs (too few segments for 3 dup ACKs).
        let cfg = PacketConfig {
            error_rate_per_link: 0.2,
            tcp: TcpConfig {
                min_rto,
                initial_rto: min_rto,
                ..TcpConfig::default()
            },
            ..tcp_cfg(32 << 20, DropPolicy::PerPortTailDrop)
        };
        let mut e = PacketEngine::new(flat_topo(9), None, cfg).expect("engine");
        let size = 2 * u64::from(MSS);
        for i in 0..64u32 {
            let (s, d) = (i % 8, 8);
            let start = SimTime::from_us(u64::from(i) * 10);
            e.add_flow(packet_flow(s, d, size, start, u64::from(i))).expect("flow");
        }
        e.run();
        assert_conserved(&e, 64 * size);
        assert!(e.stats().tcp_rtos > 0, "the losses must cause timeouts");
        let wait = e.tcp_min_rto_wait().expect("a timeout fired");
        assert!(
            wait >= min_rto,
            "an RTO fired {wait} after its timer started, under min_rto {min_rto}"
        );
        for f in 0..64 {
            let t = e.tcp_flow_stats(f).expect("tcp");
            let r = e.flow_result(f).expect("flow");
            if t.rtos > 0 {
                let fct = r.finish - r.start;
                assert!(fct >= min_rto, "flow {f}: {} RTOs, done in {fct} < min_rto {min_rto}", t.rtos);
            }
        }
    }
}

#[test]
fn a_lossless_fabric_never_drops() {
    // The same incast as the TCP tests, under RoCE with PFC on a 1 MB buffer.
    let (n, size) = (16, 1_000_000);
    let e = incast(roce_cfg(1_000_000), n, size);
    let st = e.stats();
    assert_eq!(st.drops_buffer, 0);
    assert!(st.pfc_pauses > 0, "the buffer fills: PFC pauses the senders instead");
    assert_conserved(&e, u64::from(n) * size);
}

#[test]
fn tcp_and_roce_differ_on_an_incast() {
    let (n, size) = (16, 1_000_000);
    let tcp = incast(tcp_cfg(1_000_000, DropPolicy::PerPortTailDrop), n, size);
    let roce = incast(roce_cfg(1_000_000), n, size);
    let (t, r) = (tcp.stats(), roce.stats());
    assert!(t.drops_buffer > 0 && t.pfc_pauses == 0);
    assert!(r.drops_buffer == 0 && r.pfc_pauses > 0);
    let last = |e: &PacketEngine| (0..n).map(|f| e.flow_result(f).expect("flow").finish).max().expect("flows");
    assert_ne!(last(&tcp), last(&roce));
    // Both are bounded below by the receiver's link: n * size bytes at 100 Gb/s.
    let floor = SimTime::from_ps(u64::from(n) * size * 8 * 10);
    assert!(last(&tcp) > floor && last(&roce) > floor);
}

#[test]
fn a_lone_tcp_flow_runs_at_line_rate() {
    let size = 10_000_000u64;
    let mut e = PacketEngine::new(flat_topo(2), None, tcp_cfg(32 << 20, DropPolicy::PerPortTailDrop)).expect("engine");
    e.add_flow(packet_flow(0, 1, size, SimTime::ZERO, 0)).expect("flow");
    e.run();
    assert_conserved(&e, size);
    assert_eq!(e.stats().drops_buffer, 0);
    let t = e.tcp_flow_stats(0).expect("tcp");
    assert_eq!((t.rtos, t.fast_retransmits, t.retransmitted_segments), (0, 0, 0));
    // Wire bytes (54 header bytes per MSS of payload) at 100 Gb/s.
    let segs = size.div_ceil(u64::from(MSS));
    let wire_ps = (size + segs * 54) * 8 * 10;
    let fct = e.flow_result(0).expect("flow").fct().as_ns() * 1000;
    assert!(fct >= wire_ps, "{fct} ps under the wire time {wire_ps}");
    // Slow start from 10 segments reaches the 2-hop path's BDP within a few round trips.
    assert!((fct as f64) < 1.05 * wire_ps as f64, "{fct} ps vs wire time {wire_ps}");
}

#[test]
fn the_window_bounds_a_flow_on_a_long_path() {
    // 100 us per link: an RTT of ~400 us; a 50 kB window then allows ~1 Gb/s.
    let nic = llmsim_topo::LinkParams::new(llmsim_core::Bandwidth::from_gbps(100), SimTime::from_us(100));
    let topo = std::sync::Arc::new(llmsim_topo::generators::flat(2, nic, llmsim_topo::ScaleUp::none(), 1).unwrap());
    let window = 50_000u64;
    let cfg = PacketConfig {
        tcp: TcpConfig {
            max_window_bytes: window,
            ..TcpConfig::default()
        },
        ..tcp_cfg(32 << 20, DropPolicy::PerPortTailDrop)
    };
    let mut e = PacketEngine::new(topo, None, cfg).expect("engine");
    let size = 2_000_000u64;
    e.add_flow(packet_flow(0, 1, size, SimTime::ZERO, 0)).expect("flow");
    e.run();
    assert_conserved(&e, size);
    // At least size / window round trips of 400 us (at most `window` bytes per RTT).
    let min_fct_ns = size / window * 400_000;
    let fct = e.flow_result(0).expect("flow").fct().as_ns();
    assert!(fct >= min_fct_ns, "{fct} ns: faster than the window allows ({min_fct_ns} ns)");
    assert!(
        fct < min_fct_ns * 13 / 10,
        "{fct} ns: the window should be the only limit ({min_fct_ns} ns)"
    );
}

#[test]
fn combinations_the_engine_does_not_model_are_refused() {
    let topo = flat_topo(4);
    let err = |cfg: PacketConfig| match PacketEngine::new(topo.clone(), None, cfg) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let tcp = tcp_cfg(32 << 20, DropPolicy::PerPortTailDrop);
    let m = err(PacketConfig { pfc: true, ..tcp.clone() });
    assert!(m.contains("network.pfc: false"), "{m}");
    let m = err(PacketConfig {
        pfc: false,
        ..roce_cfg(32 << 20)
    });
    assert!(m.contains("needs PFC") && m.contains("never be recovered"), "{m}");
    let m = err(PacketConfig {
        transport: Transport::Uet,
        ..roce_cfg(32 << 20)
    });
    assert!(m.contains("network.transport=uet") && m.contains("network.pfc: false"), "{m}");
    let m = err(PacketConfig {
        wormhole: WormholeConfig {
            fast_forward: true,
            ..WormholeConfig::default()
        },
        ..tcp.clone()
    });
    assert!(m.contains("network.fast_forward") && m.contains("tcp"), "{m}");
    let m = err(PacketConfig {
        cc: CcMode::Hpcc,
        ..tcp.clone()
    });
    assert!(m.contains("network.cc=hpcc"), "{m}");
    let m = err(PacketConfig {
        tcp: TcpConfig {
            min_rto: SimTime::ZERO,
            ..TcpConfig::default()
        },
        ..tcp.clone()
    });
    assert!(m.contains("tcp.min_rto"), "{m}");
    // Spraying under go-back-N runs, with a warning naming what it costs.
    let spray = PacketConfig {
        load_balance: LoadBalance::Spray,
        ..roce_cfg(32 << 20)
    };
    let w = spray.warnings();
    assert!(w.len() == 1 && w[0].contains("go-back-N") && w[0].contains("resends"), "{w:?}");
    assert!(roce_cfg(32 << 20).warnings().is_empty());
}

#[test]
fn delayed_acks_halve_the_acks_and_hold_the_last_one_for_the_timer() {
    let delack = SimTime::from_us(300);
    let cfg = PacketConfig {
        tcp: TcpConfig {
            delayed_ack: true,
            delack_timeout: delack,
            ..TcpConfig::default()
        },
        ..tcp_cfg(32 << 20, DropPolicy::PerPortTailDrop)
    };
    // An odd number of segments: the last one waits for the timer.
    let segs = 1001u64;
    let size = segs * u64::from(MSS);
    let mut e = PacketEngine::new(flat_topo(2), None, cfg).expect("engine");
    e.add_flow(packet_flow(0, 1, size, SimTime::ZERO, 0)).expect("flow");
    e.run();
    assert_conserved(&e, size);
    assert_eq!(e.stats().acks, segs.div_ceil(2), "one ACK per two in-order segments");
    let t = e.tcp_flow_stats(0).expect("tcp");
    assert_eq!((t.rtos, t.retransmitted_segments), (0, 0));
    let wire_ps = (size + segs * 54) * 8 * 10;
    let fct = e.flow_result(0).expect("flow").finish.as_ps();
    assert!(fct >= wire_ps + delack.as_ps(), "{fct} ps: the last ACK waits {delack}");
    // Losses are still repaired (out-of-order segments are acknowledged at once).
    let cfg = PacketConfig {
        tcp: TcpConfig {
            delayed_ack: true,
            delack_timeout: delack,
            ..TcpConfig::default()
        },
        ..tcp_cfg(1_000_000, DropPolicy::PerPortTailDrop)
    };
    let e = incast(cfg, 16, 1_000_000);
    assert!(e.stats().drops_buffer > 0 && e.stats().tcp_fast_retransmits > 0);
    assert_conserved(&e, 16 * 1_000_000);
}

#[test]
fn cubic_recovers_every_loss_and_differs_from_newreno() {
    let (n, size) = (16, 1_000_000);
    let cubic = PacketConfig {
        tcp: TcpConfig {
            cc: TcpCc::Cubic,
            ..TcpConfig::default()
        },
        ..tcp_cfg(1_000_000, DropPolicy::PerPortTailDrop)
    };
    let c = incast(cubic, n, size);
    let r = incast(tcp_cfg(1_000_000, DropPolicy::PerPortTailDrop), n, size);
    assert!(c.stats().drops_buffer > 0 && c.stats().retransmitted_bytes > 0);
    assert_conserved(&c, u64::from(n) * size);
    let fcts = |e: &PacketEngine| (0..n).map(|f| e.flow_result(f).expect("flow").finish).collect::<Vec<_>>();
    assert_ne!(fcts(&c), fcts(&r), "CUBIC's backoff (0.7) and growth differ from NewReno's");
}
