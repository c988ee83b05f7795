//! Invariants of both backends on random inputs (proptest).

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use llmsim_core::{Bytes, NodeId, SimTime, TransferId};
use llmsim_net::{AnalyticalNetwork, Completion, FlowNetwork, Network, RouteSpec, Transfer};
use llmsim_topo::Topology;
use proptest::prelude::*;

/// `(src, dst, bytes, start_ns, route kind, relay hosts)`.
type Raw = (u32, u32, u64, u64, u8, Vec<u32>);

fn transfers(raw: &[Raw], hosts: u32) -> Vec<Transfer> {
    raw.iter()
        .enumerate()
        .map(|(i, (s, d, b, st, kind, relays))| {
            let mut t = Transfer::new(
                TransferId(i as u64),
                NodeId(s % hosts),
                NodeId(d % hosts),
                Bytes(*b),
                SimTime::from_ns(*st),
            );
            t.flow_hash = llmsim_core::mix64(i as u64);
            t.route = match kind % 4 {
                0 | 1 => RouteSpec::Direct,
                2 => RouteSpec::Via(NodeId(relays[0] % hosts)),
                _ => RouteSpec::Chain(relays.iter().map(|r| NodeId(r % hosts)).collect::<Vec<_>>().into()),
            };
            t
        })
        .collect()
}

fn raw_strategy() -> impl Strategy<Value = Vec<Raw>> {
    prop::collection::vec(
        (
            0u32..64,
            0u32..64,
            prop_oneof![Just(0u64), 1u64..5_000, 5_000u64..2_000_000],
            0u64..200_000,
            0u8..4,
            prop::collection::vec(0u32..64, 1..4),
        ),
        1..60,
    )
}

/// Submits at the right times (some up front, some as time passes) and steps event by event.
/// Checks the order `advance_to` promises: within one call, by completion time, ties by id; from
/// one call to the next, time never goes back. (Ties across calls are not ordered by id: a
/// transfer submitted at `t` after a call that delivered completions at `t` completes after them.)
fn run(net: &mut dyn Network, ts: &[Transfer]) -> Result<Vec<Completion>, TestCaseError> {
    let mut order: Vec<&Transfer> = ts.iter().collect();
    order.sort_by_key(|t| (t.start, t.id));
    let mut done = Vec::new();
    let mut next = 0;
    // Half the transfers are submitted only when the network reaches their start.
    for t in order.iter().filter(|t| t.id.0 % 2 == 0) {
        net.submit((*t).clone()).unwrap();
    }
    let late: Vec<&&Transfer> = order.iter().filter(|t| t.id.0 % 2 == 1).collect();
    loop {
        let ev = net.next_event_time();
        let sub = late.get(next).map(|t| t.start);
        let t = match (ev, sub) {
            (None, None) => break,
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
        };
        let before = done.len();
        net.advance_to(t, &mut done);
        if before > 0 && done.len() > before {
            prop_assert!(done[before - 1].finish <= done[before].finish, "completion time went back");
        }
        for w in done[before..].windows(2) {
            prop_assert!((w[0].finish, w[0].id) < (w[1].finish, w[1].id), "completion order within a call");
        }
        while late.get(next).is_some_and(|x| x.start == net.now()) {
            net.submit((**late[next]).clone()).unwrap();
            next += 1;
        }
    }
    Ok(done)
}

fn check_common(net: &dyn Network, ts: &[Transfer], done: &[Completion]) -> Result<(), TestCaseError> {
    prop_assert_eq!(done.len(), ts.len(), "every transfer completes");
    prop_assert_eq!(net.in_flight(), 0);
    let by_id: HashMap<u64, &Transfer> = ts.iter().map(|t| (t.id.0, t)).collect();
    let mut seen = std::collections::HashSet::new();
    for c in done {
        let t = by_id[&c.id.0];
        prop_assert!(seen.insert(c.id));
        prop_assert_eq!((c.src, c.dst, c.bytes, c.start), (t.src, t.dst, t.bytes, t.start));
        prop_assert!(c.finish >= c.start);
    }
    let submitted: u64 = ts.iter().map(|t| t.bytes.0).sum();
    let s = net.stats();
    prop_assert_eq!(s.bytes_delivered, submitted, "bytes conserved");
    prop_assert_eq!(done.iter().map(|c| c.bytes.0).sum::<u64>(), submitted);
    prop_assert_eq!((s.submitted, s.completed), (ts.len() as u64, ts.len() as u64));
    Ok(())
}

fn topo_for(kind: u8, caps: &[u64]) -> Arc<Topology> {
    match kind % 2 {
        0 => flat_topo(8),
        _ => {
            let up: Vec<u64> = caps.iter().take(6).copied().collect();
            let down: Vec<u64> = caps.iter().skip(6).take(6).copied().collect();
            star(&up, &down, SimTime::from_ns(300))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn flow_and_analytical_invariants(
        raw in raw_strategy(),
        topo_kind in 0u8..2,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
    ) {
        let topo = topo_for(topo_kind, &caps);
        let hosts = topo.num_hosts();
        let ts = transfers(&raw, hosts);

        let mut flow = FlowNetwork::new(topo.clone());
        flow.set_rate_checks(true);
        let f = run(&mut flow, &ts)?;
        check_common(&flow, &ts, &f)?;
        prop_assert!(flow.violations().is_empty(), "rate checks: {:?}", flow.violations());
        prop_assert_eq!(flow.active_flows(), 0);

        let mut ana = AnalyticalNetwork::new(topo.clone());
        let a = run(&mut ana, &ts)?;
        check_common(&ana, &ts, &a)?;

        // No contention can only make a transfer faster.
        let fa: HashMap<TransferId, SimTime> = f.iter().map(|c| (c.id, c.finish)).collect();
        for c in &a {
            prop_assert!(c.finish <= fa[&c.id], "transfer {}: analytical {} > flow {}", c.id, c.finish, fa[&c.id]);
        }
        prop_assert_eq!(flow.link_bytes(), ana.link_bytes(), "per-link bytes agree once all complete");

        // Deterministic.
        let f2 = run(&mut FlowNetwork::new(topo.clone()), &ts)?;
        prop_assert_eq!(f, f2);
    }

    /// The filling fast path (only each flow's tightest private link in the heap) gives
    /// bit-identical completions to plain progressive filling.
    #[test]
    fn private_link_filling_is_bit_identical_to_plain(
        raw in raw_strategy(),
        topo_kind in 0u8..2,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
    ) {
        let topo = topo_for(topo_kind, &caps);
        let ts = transfers(&raw, topo.num_hosts());
        let fast = run(&mut FlowNetwork::new(topo.clone()), &ts)?;
        let mut plain = FlowNetwork::new(topo.clone());
        plain.set_plain_filling(true);
        let slow = run(&mut plain, &ts)?;
        prop_assert_eq!(fast, slow);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// The compact per-link state's fast paths (a filling's first keys sorted once and merged
    /// with a heap of the pushed-back ones; link weights kept as flows come and go) give
    /// bit-identical completions to one heap and weights summed over the flow lists, with the
    /// rate checks (which also compare the kept weights with the sums) on.
    #[test]
    fn sorted_filling_and_kept_weights_are_bit_identical_to_reference(
        raw in raw_strategy(),
        topo_kind in 0u8..2,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
    ) {
        let topo = topo_for(topo_kind, &caps);
        let ts = transfers(&raw, topo.num_hosts());
        let mut fast = FlowNetwork::new(topo.clone());
        fast.set_rate_checks(true);
        let a = run(&mut fast, &ts)?;
        prop_assert!(fast.violations().is_empty(), "rate checks: {:?}", fast.violations());
        let mut reference = FlowNetwork::new(topo.clone());
        reference.set_reference_filling(true);
        let b = run(&mut reference, &ts)?;
        prop_assert_eq!(a, b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// Fillings resumed after departures give bit-identical completions to full fillings.
    #[test]
    fn resumed_filling_is_bit_identical_to_full(
        raw in raw_strategy(),
        topo_kind in 0u8..2,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
    ) {
        let topo = topo_for(topo_kind, &caps);
        let ts = transfers(&raw, topo.num_hosts());
        let mut inc = FlowNetwork::new(topo.clone());
        inc.set_rate_checks(true);
        let fast = run(&mut inc, &ts)?;
        prop_assert!(inc.violations().is_empty(), "rate checks: {:?}", inc.violations());
        let mut full = FlowNetwork::new(topo.clone());
        full.set_incremental(false);
        let slow = run(&mut full, &ts)?;
        prop_assert_eq!(fast, slow);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// The arrival lane (transfers submitted to start at the network's time skip the arrival
    /// heap and are sorted by id when they start) gives bit-identical completions to the heap
    /// alone. Starts fall on a few instants so that many transfers arrive together; each
    /// instant's transfers are submitted when the network reaches it, in an order the test
    /// draws (not by id), some ahead of time (the heap, or the lane for starts at 0) and some
    /// at it (the lane). Most orders give the same completions, so the activation order itself
    /// is pinned by the unit test `simultaneous_arrivals_start_in_id_order`.
    #[test]
    fn arrival_lane_is_bit_identical_to_the_heap(
        raw in raw_strategy(),
        topo_kind in 0u8..2,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
        order_seed in any::<u64>(),
    ) {
        let topo = topo_for(topo_kind, &caps);
        let mut ts = transfers(&raw, topo.num_hosts());
        for t in &mut ts {
            t.start = SimTime::from_ns(t.start.0 / 1_000 / 40_000 * 40_000);
        }
        let go = |lane: bool| {
            let mut n = FlowNetwork::new(topo.clone());
            n.set_arrival_lane(lane);
            n.set_rate_checks(true);
            let mut order: Vec<&Transfer> = ts.iter().collect();
            order.sort_by_key(|t| (t.start, llmsim_core::mix64(t.id.0 ^ order_seed)));
            let (ahead, at): (Vec<&Transfer>, Vec<&Transfer>) =
                order.into_iter().partition(|t| llmsim_core::mix64(t.id.0 ^ !order_seed).is_multiple_of(3));
            for t in &ahead {
                n.submit((*t).clone()).unwrap();
            }
            let mut done = Vec::new();
            let mut next = 0;
            loop {
                let t = match (n.next_event_time(), at.get(next).map(|t| t.start)) {
                    (None, None) => break,
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b).unwrap(),
                };
                n.advance_to(t, &mut done);
                while at.get(next).is_some_and(|x| x.start == t) {
                    n.submit(at[next].clone()).unwrap();
                    next += 1;
                }
            }
            assert!(n.violations().is_empty(), "{:?}", n.violations());
            done
        };
        let lane = go(true);
        prop_assert_eq!(lane.len(), ts.len());
        prop_assert_eq!(lane, go(false));
    }
}

/// An all-to-all with uneven sizes on fat-trees (ECMP collisions give many distinct rates and
/// completion times in one component), one path per flow and spread over paths: resumed
/// fillings give the full fillings' completions exactly, pass the max-min checks, and rerate
/// fewer flows.
#[test]
fn resumed_filling_matches_full_on_fat_tree_all_to_all() {
    use llmsim_net::packet::LoadBalance;
    use llmsim_topo::generators::{FatTreeParams, fat_tree};
    use llmsim_topo::{LinkParams, ScaleUp};
    for (k, g, spread) in [(4u32, 1u32, false), (6, 1, false), (4, 4, false), (4, 1, true)] {
        let hosts = k * k * k / 4;
        let su = if g == 1 {
            ScaleUp::none()
        } else {
            ScaleUp {
                gpus_per_server: g,
                ..ScaleUp::dgx_h100()
            }
        };
        let l = LinkParams::new(gbps(400), SimTime::from_ns(500));
        let p = FatTreeParams {
            k,
            host_link: l,
            edge_agg: l,
            agg_core: l,
        };
        let topo = Arc::new(fat_tree(hosts, &p, su, 3).unwrap());
        let mut ts = Vec::new();
        for s in 0..hosts {
            for d in 0..hosts {
                if s != d {
                    let id = ts.len() as u64;
                    let mut t = Transfer::new(
                        TransferId(id),
                        NodeId(s),
                        NodeId(d),
                        Bytes(100_000 + llmsim_core::mix64(id) % 50_000),
                        SimTime::from_ns(llmsim_core::mix64(id ^ 7) % 3 * 1000),
                    );
                    t.flow_hash = llmsim_core::mix64(id ^ 99);
                    ts.push(t);
                }
            }
        }
        let go = |incremental: bool| {
            let mut n = FlowNetwork::new(topo.clone());
            n.set_incremental(incremental);
            // The max-min certificate after every recomputation (O(active flows) each).
            n.set_rate_checks(incremental);
            if spread {
                n.set_load_balance(LoadBalance::Spray);
            }
            let done = llmsim_net::run_all(&mut n, ts.clone()).unwrap();
            assert!(n.violations().is_empty(), "k={k} g={g}: {:?}", n.violations());
            (done, n.stats().flows_rerated)
        };
        let (inc, inc_rerated) = go(true);
        let (full, full_rerated) = go(false);
        assert_eq!(inc.len(), ts.len());
        assert_eq!(inc, full, "k={k} g={g} spread={spread}");
        assert!(
            inc_rerated < full_rerated,
            "k={k} g={g}: {inc_rerated} vs {full_rerated} flows rerated"
        );
        println!("k={k} g={g} spread={spread}: flows rerated {inc_rerated} resumed vs {full_rerated} full");
    }
}

/// Runs `ts` on two flow networks in lockstep, event by event (every transfer submitted up
/// front), and checks after every step that both hold the same flows at bit-identical rates;
/// returns the completions of each and the first network's counters.
fn lockstep(
    a: &mut FlowNetwork,
    b: &mut FlowNetwork,
    ts: &[Transfer],
) -> Result<(Vec<Completion>, Vec<Completion>, llmsim_net::NetStats), TestCaseError> {
    for t in ts {
        a.submit(t.clone()).unwrap();
        b.submit(t.clone()).unwrap();
    }
    let (mut da, mut db) = (Vec::new(), Vec::new());
    while let Some(t) = a.next_event_time() {
        prop_assert_eq!(Some(t), b.next_event_time());
        a.advance_to(t, &mut da);
        b.advance_to(t, &mut db);
        let ra: Vec<(TransferId, u64)> = a.active_rates().map(|(id, r)| (id, r.to_bits())).collect();
        let rb: Vec<(TransferId, u64)> = b.active_rates().map(|(id, r)| (id, r.to_bits())).collect();
        prop_assert_eq!(ra, rb, "rates at {}", t);
    }
    prop_assert_eq!(b.next_event_time(), None);
    Ok((da, db, a.stats()))
}

/// A two-tier fat-tree of `k`-port switches (`k^3/4` hosts, ECMP) with `gpus` GPUs a server.
fn fat_tree_topo(k: u32, gpus: u32, caps: &[u64]) -> Arc<Topology> {
    use llmsim_topo::generators::{FatTreeParams, fat_tree};
    use llmsim_topo::{LinkParams, ScaleUp};
    let su = if gpus == 1 {
        ScaleUp::none()
    } else {
        ScaleUp {
            gpus_per_server: gpus,
            ..ScaleUp::dgx_h100()
        }
    };
    let l = |g: u64| LinkParams::new(gbps(g), SimTime::from_ns(500));
    let p = FatTreeParams {
        k,
        host_link: l(caps[0]),
        edge_agg: l(caps[1]),
        agg_core: l(caps[2]),
    };
    Arc::new(fat_tree(k * k * k / 4, &p, su, 3).unwrap())
}

/// The inputs of the filling lockstep properties: a flat or star topology (`topo_kind` 0-1) or a
/// k=4 fat-tree with one or two GPUs per server (2-3), and the transfers of `raw` with their
/// starts on a grid of `grid_ns` (1 ns: apart; coarser: many at one timestamp).
fn grid_case(raw: &[Raw], topo_kind: u8, caps: &[u64], grid_ns: u64) -> (Arc<Topology>, Vec<Transfer>) {
    let topo = match topo_kind {
        0 | 1 => topo_for(topo_kind, caps),
        2 => fat_tree_topo(4, 1, caps),
        _ => fat_tree_topo(4, 2, caps),
    };
    let mut ts = transfers(raw, topo.num_hosts());
    for t in &mut ts {
        t.start = SimTime::from_ns(t.start.0 / 1_000 / grid_ns * grid_ns);
    }
    (topo, ts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Fillings resumed after arrivals (and departures) keep every rate bit-identical to full
    /// fillings after every event, on flat, star and fat-tree topologies with relayed routes
    /// (multiplicities), one path or spread over paths (fractional shares), and starts on a
    /// coarse grid or a fine one (arrivals together, and with departures, at one timestamp).
    #[test]
    fn resumed_arrivals_keep_rates_bit_identical(
        raw in raw_strategy(),
        topo_kind in 0u8..4,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
        grid_ns in prop_oneof![Just(1u64), Just(1_000), Just(20_000)],
        spread in any::<bool>(),
    ) {
        let (topo, ts) = grid_case(&raw, topo_kind, &caps, grid_ns);
        let mk = |arrivals: bool| {
            let mut n = FlowNetwork::new(topo.clone());
            n.set_incremental_arrivals(arrivals);
            if spread {
                n.set_load_balance(llmsim_net::packet::LoadBalance::Spray);
            }
            n
        };
        let (mut inc, mut full) = (mk(true), mk(false));
        inc.set_rate_checks(true);
        let (a, b, _) = lockstep(&mut inc, &mut full, &ts)?;
        prop_assert!(inc.violations().is_empty(), "rate checks: {:?}", inc.violations());
        prop_assert_eq!(a.len(), ts.len());
        prop_assert_eq!(a, b);
        // Against fillings that never resume (departures in full too).
        let mut plain = FlowNetwork::new(topo.clone());
        plain.set_incremental(false);
        if spread {
            plain.set_load_balance(llmsim_net::packet::LoadBalance::Spray);
        }
        let mut inc2 = mk(true);
        lockstep(&mut inc2, &mut plain, &ts)?;
    }
}

/// Ring-like traffic on a k=8 fat-tree (ECMP collisions on the core, many equal rates, each
/// next send starting as an earlier one drains): arrivals resume, keep every rate bit-identical
/// to full fillings, and rerate fewer flows.
#[test]
fn resumed_arrivals_match_full_on_fat_tree_rings() {
    let topo = fat_tree_topo(8, 1, &[400, 400, 400]);
    let hosts = topo.num_hosts();
    let mut ts = Vec::new();
    for step in 0..6u64 {
        for r in 0..hosts {
            let id = ts.len() as u64;
            let mut t = Transfer::new(
                TransferId(id),
                NodeId(r),
                NodeId((r * 37 + 11) % hosts),
                Bytes(1_000_000 + llmsim_core::mix64(id) % 100_000),
                SimTime::from_ns(step * 20_000 + llmsim_core::mix64(id ^ 5) % 5_000),
            );
            t.flow_hash = llmsim_core::mix64(id ^ 99);
            ts.push(t);
        }
    }
    let mut inc = FlowNetwork::new(topo.clone());
    let mut full = FlowNetwork::new(topo.clone());
    full.set_incremental_arrivals(false);
    let (a, b, st) = lockstep(&mut inc, &mut full, &ts).unwrap();
    assert_eq!(a.len(), ts.len());
    assert_eq!(a, b);
    let sf = full.stats();
    println!(
        "rings k=8: flows rerated {} (full fillings {}, resumed {}, arrival fallbacks {}) vs {} (full {})",
        st.flows_rerated, st.rate_fills_full, st.rate_fills_resumed, st.arrival_full_fallbacks, sf.flows_rerated, sf.rate_fills_full
    );
    assert!(st.flows_rerated < sf.flows_rerated);
    assert!(st.rate_fills_full < sf.rate_fills_full);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The local filling (only the flows whose freeze can move are visited) keeps every rate
    /// bit-identical, after every event, to the fillings of whole components (resumed) and to
    /// full fillings, on flat, star and fat-tree topologies with relayed routes
    /// (multiplicities, where it gives up), one path or spread over paths, and starts on a
    /// coarse or fine grid; tried at every recomputation (`min_flows` `None`) or, as by
    /// default, where a dirty link's last component filling collected `min_flows` flows or more
    /// (small sizes here, so that recomputations switch between the two and the walks are
    /// dropped and taken again).
    #[test]
    fn local_filling_keeps_rates_bit_identical(
        raw in raw_strategy(),
        topo_kind in 0u8..4,
        caps in prop::collection::vec(prop_oneof![Just(10u64), Just(25), Just(100), Just(400)], 12),
        grid_ns in prop_oneof![Just(1u64), Just(1_000), Just(20_000)],
        spread in any::<bool>(),
        min_flows in prop_oneof![Just(None), Just(Some(1usize)), Just(Some(3)), Just(Some(6))],
    ) {
        let (topo, ts) = grid_case(&raw, topo_kind, &caps, grid_ns);
        let mk = |local: bool, incremental: bool| {
            let mut n = FlowNetwork::new(topo.clone());
            n.set_local_filling(local);
            if local {
                match min_flows {
                    None => n.set_local_from_start(),
                    Some(m) => n.set_local_trigger(m, 8),
                }
            }
            n.set_incremental(incremental);
            if spread {
                n.set_load_balance(llmsim_net::packet::LoadBalance::Spray);
            }
            n
        };
        let (mut local, mut resumed) = (mk(true, true), mk(false, true));
        local.set_rate_checks(true);
        let (a, b, _) = lockstep(&mut local, &mut resumed, &ts)?;
        prop_assert!(local.violations().is_empty(), "rate checks: {:?}", local.violations());
        prop_assert_eq!(a.len(), ts.len());
        prop_assert_eq!(a, b);
        let (mut local, mut full) = (mk(true, true), mk(false, false));
        lockstep(&mut local, &mut full, &ts)?;
    }
}

/// Ring-like traffic (each rank sends to one peer, sends overlapping) and an all-to-all with
/// uneven sizes on fat-trees, with equal link speeds (ties everywhere) and unequal ones: the
/// local filling keeps every rate bit-identical to the resumed fillings after every event, is
/// used (most recomputations after the first), and rerates fewer flows; and so does the
/// automatic trigger at a size these components cross (it fills some components and fills the
/// others locally).
#[test]
fn local_filling_matches_resumed_on_fat_trees() {
    for (k, caps, a2a) in [
        (8u32, [400u64, 400, 400], false),
        (8, [400, 100, 25], false),
        (6, [400, 400, 400], true),
        (4, [100, 400, 25], true),
    ] {
        let topo = fat_tree_topo(k, 1, &caps);
        let hosts = topo.num_hosts();
        let mut ts = Vec::new();
        let mut push = |src: u32, dst: u32, start_ns: u64| {
            let id = ts.len() as u64;
            let mut t = Transfer::new(
                TransferId(id),
                NodeId(src),
                NodeId(dst),
                Bytes(1_000_000 + llmsim_core::mix64(id) % 100_000),
                SimTime::from_ns(start_ns),
            );
            t.flow_hash = llmsim_core::mix64(id ^ 99);
            ts.push(t);
        };
        if a2a {
            for s in 0..hosts {
                for d in (0..hosts).filter(|&d| d != s) {
                    push(s, d, llmsim_core::mix64(u64::from(s * hosts + d)) % 4 * 5_000);
                }
            }
        } else {
            for step in 0..6u64 {
                for r in 0..hosts {
                    push(
                        r,
                        (r * 37 + 11) % hosts,
                        step * 20_000 + llmsim_core::mix64(u64::from(r) ^ step) % 5_000,
                    );
                }
            }
        }
        let mut local = FlowNetwork::new(topo.clone());
        local.set_local_from_start();
        let mut resumed = FlowNetwork::new(topo.clone());
        resumed.set_local_filling(false);
        let (a, b, st) = lockstep(&mut local, &mut resumed, &ts).unwrap();
        assert_eq!(a.len(), ts.len());
        assert_eq!(a, b);

        let sr = resumed.stats();
        println!(
            "k={k} caps={caps:?} a2a={a2a}: local fillings {} (gave up {}), flows rerated {} vs {} resumed",
            st.rate_fills_local, st.local_fill_fallbacks, st.flows_rerated, sr.flows_rerated
        );
        assert!(st.rate_fills_local > st.rate_recomputations / 2, "{st:?}");
        assert!(st.flows_rerated < sr.flows_rerated);

        for (min_flows, generation) in [(8, 64), (32, 1 << 16)] {
            let mut auto = FlowNetwork::new(topo.clone());
            auto.set_local_trigger(min_flows, generation);
            auto.set_rate_checks(true);
            let mut resumed = FlowNetwork::new(topo.clone());
            resumed.set_local_filling(false);
            let (a, b, st) = lockstep(&mut auto, &mut resumed, &ts).unwrap();
            assert!(auto.violations().is_empty(), "rate checks: {:?}", auto.violations());
            assert_eq!(a.len(), ts.len());
            assert_eq!(a, b);
            println!(
                "  auto at {min_flows} flows, generation {generation}: local fillings {} (gave up {}), resumed {}, flows rerated {}",
                st.rate_fills_local, st.local_fill_fallbacks, st.rate_fills_resumed, st.flows_rerated
            );
            assert!(st.rate_fills_local > 0 && st.rate_fills_resumed > 0, "{st:?}");
        }
    }
}
