//! Behaviour of the flow backend on small hand-checked cases.

mod common;

use std::sync::Arc;

use common::*;
use llmsim_core::{Bytes, NodeId, SimTime, TransferId};
use llmsim_net::route::serialization_ps;
use llmsim_net::{AnalyticalNetwork, FlowNetwork, NetError, Network, RouteSpec, Transfer, run_all};

fn tr(id: u64, src: u32, dst: u32, bytes: u64, start: SimTime) -> Transfer {
    Transfer::new(TransferId(id), NodeId(src), NodeId(dst), Bytes(bytes), start)
}

fn flow(topo: Arc<llmsim_topo::Topology>) -> FlowNetwork {
    let mut n = FlowNetwork::new(topo);
    n.set_rate_checks(true);
    n
}

#[test]
fn two_flows_on_one_bottleneck_each_get_half() {
    // 0 -> 2 and 1 -> 2 share the switch -> 2 downlink (100 Gb/s); 1 MB alone takes 80 us.
    let mut n = flow(flat_topo(4));
    let done = run_all(
        &mut n,
        [tr(1, 0, 2, 1_000_000, SimTime::ZERO), tr(2, 1, 2, 1_000_000, SimTime::ZERO)],
    )
    .unwrap();
    let latency = SimTime::from_ns(1000);
    assert_eq!(finish_of(&done, 1), SimTime::from_us(160) + latency);
    assert_eq!(finish_of(&done, 2), SimTime::from_us(160) + latency);
    assert_eq!(done[0].id, TransferId(1), "ties by id");
    assert!(n.violations().is_empty(), "{:?}", n.violations());
}

#[test]
fn a_late_flow_halves_the_rate_of_the_first() {
    // B arrives when A is half done: A's second half runs at 50 Gb/s (80 us), then B's
    // remaining half runs alone (40 us).
    let mut n = flow(flat_topo(4));
    let done = run_all(
        &mut n,
        [tr(1, 0, 2, 1_000_000, SimTime::ZERO), tr(2, 1, 2, 1_000_000, SimTime::from_us(40))],
    )
    .unwrap();
    let latency = SimTime::from_ns(1000);
    assert_eq!(finish_of(&done, 1), SimTime::from_us(120) + latency);
    assert_eq!(finish_of(&done, 2), SimTime::from_us(160) + latency);
    assert!(n.violations().is_empty(), "{:?}", n.violations());
}

#[test]
fn max_min_gives_the_leftover_to_the_unconstrained_flows() {
    // Three flows into host 3 (downlink 90 Gb/s); flow 3 also crosses host 2's 10 Gb/s uplink.
    // Max-min: flow 3 = 10, flows 1 and 2 split the leftover 80 -> 40 each.
    let topo = star(&[100, 100, 10, 100], &[100, 100, 100, 90], SimTime::from_ns(1));
    let mut n = flow(topo);
    n.submit(tr(1, 0, 3, 1_000_000, SimTime::ZERO)).unwrap();
    n.submit(tr(2, 1, 3, 1_000_000, SimTime::ZERO)).unwrap();
    n.submit(tr(3, 2, 3, 100_000, SimTime::ZERO)).unwrap();
    let mut done = Vec::new();
    n.advance_to(SimTime::ZERO, &mut done);
    let mut rates: Vec<(u64, f64)> = n.active_rates().map(|(id, r)| (id.0, r)).collect();
    rates.sort_by_key(|x| x.0);
    assert_eq!(rates, vec![(1, 40e9), (2, 40e9), (3, 10e9)]);
    assert_eq!(n.check_rates(), Ok(()));
    let done = common::drive(&mut n);
    // Flow 3: 0.8 Mbit at 10 Gb/s = 80 us. Then flows 1, 2 have 0.6 MB left each at 45 Gb/s.
    let lat = SimTime::from_ns(2);
    assert_eq!(finish_of(&done, 3), SimTime::from_us(80) + lat);
    let rest = (600_000.0f64 * 8.0 / 45e9 * 1e12).ceil() as u64;
    assert_eq!(finish_of(&done, 1), SimTime::from_us(80) + SimTime(rest) + lat);
    assert_eq!(finish_of(&done, 2), finish_of(&done, 1));
    assert!(n.violations().is_empty(), "{:?}", n.violations());
}

/// The permutation "host h sends to the same slot one leaf to the right", with flow hash = id.
fn shift_permutation(c: &Clos, bytes: u64) -> Vec<Transfer> {
    let hosts = c.leaves * c.per_leaf;
    (0..hosts)
        .map(|h| tr(h as u64, h, (h + c.per_leaf) % hosts, bytes, SimTime::ZERO))
        .collect()
}

/// Whether two flows of a leaf pick the same uplink.
fn collides(c: &Clos, ts: &[Transfer]) -> bool {
    let mut used = std::collections::HashSet::new();
    ts.iter()
        .any(|t| !used.insert((t.src.0 / c.per_leaf, c.spine_of(t.src, t.flow_hash))))
}

fn run_on_clos(c: &Clos, ts: &[Transfer]) -> Vec<llmsim_net::Completion> {
    let mut n = flow(c.topo.clone());
    for t in ts {
        n.submit_path(t.clone(), &c.path(t.src, t.dst, t.flow_hash)).unwrap();
    }
    let done = drive(&mut n);
    assert!(n.violations().is_empty(), "{:?}", n.violations());
    done
}

#[test]
fn ecmp_collisions_on_a_two_tier_clos_slow_the_permutation() {
    // 4 leaves x 2 hosts, 2 spines: a leaf's two flows leave on the same uplink or on two.
    let bytes = 1_000_000u64;
    let line = SimTime(serialization_ps(Bytes(bytes), gbps(100), 1) + 4 * 500_000);
    let (mut saw_collision, mut saw_clean) = (false, false);
    for seed in 0..64 {
        let c = Clos::new(4, 2, 2, seed);
        let ts = shift_permutation(&c, bytes);
        let slowest = run_on_clos(&c, &ts).iter().map(|d| d.finish).max().unwrap();
        if collides(&c, &ts) {
            saw_collision = true;
            // Two flows share a 100 Gb/s uplink: the slowest takes twice as long.
            assert_eq!(
                slowest,
                SimTime(2 * serialization_ps(Bytes(bytes), gbps(100), 1) + 4 * 500_000),
                "seed {seed}"
            );
        } else {
            saw_clean = true;
            assert_eq!(slowest, line, "seed {seed}: a collision-free permutation runs at line rate");
        }
    }
    assert!(saw_collision && saw_clean, "the seeds should show both cases");
}

#[test]
fn via_sums_both_legs() {
    // 0 -> 1 -> 2 on a flat fabric: four 500 ns links, bottleneck 100 Gb/s.
    let topo = flat_topo(4);
    let mut t = tr(1, 0, 2, 1_000_000, SimTime::ZERO);
    t.route = RouteSpec::Via(NodeId(1));
    let mut n = flow(topo.clone());
    let done = run_all(&mut n, [t.clone()]).unwrap();
    assert_eq!(done[0].finish, SimTime::from_us(80) + SimTime::from_ns(2000));
    let mut a = AnalyticalNetwork::new(topo.clone());
    assert_eq!(run_all(&mut a, [t]).unwrap(), done);
    // Both legs' links carry the bytes.
    assert_eq!(n.link_bytes().iter().filter(|b| b.0 == 1_000_000).count(), 4);
}

#[test]
fn chain_is_one_flow_with_multiplicity_and_the_largest_leg_latency() {
    let topo = flat_topo(4);
    // Ring 0 -> 1 -> 2 -> 3: every link once, latency of one leg (2 links).
    let mut ring = tr(1, 0, 3, 1_000_000, SimTime::ZERO);
    ring.route = RouteSpec::Chain(Arc::from(vec![NodeId(1), NodeId(2)]));
    let mut n = flow(topo.clone());
    let done = run_all(&mut n, [ring]).unwrap();
    assert_eq!(done[0].finish, SimTime::from_us(80) + SimTime::from_ns(1000));

    // 0 -> 1 -> 0 -> 1 crosses 0's uplink and 1's downlink twice: half rate.
    let mut back = tr(2, 0, 1, 1_000_000, SimTime::ZERO);
    back.route = RouteSpec::Chain(Arc::from(vec![NodeId(1), NodeId(0)]));
    let mut n = flow(topo.clone());
    let done = run_all(&mut n, [back.clone()]).unwrap();
    assert_eq!(done[0].finish, SimTime::from_us(160) + SimTime::from_ns(1000));
    let mut a = AnalyticalNetwork::new(topo.clone());
    assert_eq!(run_all(&mut a, [back.clone()]).unwrap(), done);
    assert_eq!(n.link_bytes().iter().map(|b| b.0).sum::<u64>(), 6 * 1_000_000);

    // With a direct flow 2 -> 1 on 1's downlink (chain weight 2, direct weight 1), the link is
    // split 2:1: the chain gets 100/3 Gb/s per leg, the direct flow 100/3 Gb/s.
    let mut n = flow(topo.clone());
    n.submit(back).unwrap();
    n.submit(tr(3, 2, 1, 1_000_000, SimTime::ZERO)).unwrap();
    let mut done = Vec::new();
    n.advance_to(SimTime::ZERO, &mut done);
    for (_, r) in n.active_rates() {
        assert!((r - 100e9 / 3.0).abs() < 1.0, "{r}");
    }
    let done = drive(&mut n);
    assert_eq!(done.len(), 2);
    assert!(n.violations().is_empty(), "{:?}", n.violations());
}

#[test]
fn same_input_same_completions_whatever_the_submission_order() {
    let topo = flat_topo(16);
    let mut ts: Vec<Transfer> = (0..400u64)
        .map(|i| {
            let s = (llmsim_core::mix64(i) % 16) as u32;
            let d = (llmsim_core::mix64(i + 1000) % 16) as u32;
            tr(i, s, d, 1000 + llmsim_core::mix64(i + 7) % 200_000, SimTime::from_ns((i / 7) * 300))
        })
        .collect();
    let a = run_all(&mut FlowNetwork::new(topo.clone()), ts.clone()).unwrap();
    let b = run_all(&mut FlowNetwork::new(topo.clone()), ts.clone()).unwrap();
    assert_eq!(a, b);
    ts.reverse();
    let c = run_all(&mut FlowNetwork::new(topo.clone()), ts).unwrap();
    assert_eq!(a, c);
    for w in a.windows(2) {
        assert!((w[0].finish, w[0].id) < (w[1].finish, w[1].id));
    }
}

#[test]
fn submission_errors_are_typed() {
    for net in [
        &mut flow(flat_topo(4)) as &mut dyn Network,
        &mut AnalyticalNetwork::new(flat_topo(4)),
    ] {
        net.submit(tr(1, 0, 1, 10, SimTime::from_us(1))).unwrap();
        assert_eq!(
            net.submit(tr(1, 0, 2, 10, SimTime::from_us(1))),
            Err(NetError::Duplicate(TransferId(1)))
        );
        assert!(matches!(
            net.submit(tr(2, 0, 9, 10, SimTime::from_us(1))),
            Err(NetError::Route { .. })
        ));
        let mut done = Vec::new();
        net.advance_to(SimTime::from_us(5), &mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(net.now(), SimTime::from_us(5));
        let e = net.submit(tr(3, 0, 1, 10, SimTime::from_us(4))).unwrap_err();
        assert!(matches!(e, NetError::StartInPast { .. }), "{e}");
        // The id is free again once its transfer completed.
        net.submit(tr(1, 0, 1, 10, SimTime::from_us(5))).unwrap();
        assert_eq!(net.in_flight(), 1);
    }
}

#[test]
fn zero_bytes_and_self_transfers_complete() {
    let mut n = flow(flat_topo(4));
    let done = run_all(
        &mut n,
        [tr(1, 0, 1, 0, SimTime::from_ns(10)), tr(2, 2, 2, 5000, SimTime::from_ns(10))],
    )
    .unwrap();
    assert_eq!(finish_of(&done, 1), SimTime::from_ns(1010));
    assert_eq!(finish_of(&done, 2), SimTime::from_ns(10));
    assert_eq!(n.stats().completed, 2);
}

#[test]
fn explicit_paths_are_checked() {
    let c = Clos::new(4, 2, 2, 0);
    let mut n = FlowNetwork::new(c.topo.clone());
    let p = c.path(NodeId(0), NodeId(3), 1);
    let e = n.submit_path(tr(1, 0, 5, 10, SimTime::ZERO), &p).unwrap_err();
    assert!(matches!(e, NetError::Route { .. }), "{e}");
    n.submit_path(tr(1, 0, 3, 10, SimTime::ZERO), &p).unwrap();
}
