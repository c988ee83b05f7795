//! Dragonfly routing on the flow backend (issue 34): Valiant and UGAL beat minimal routing on a
//! group-to-group shift, whose minimal routes all cross the one global cable between two groups;
//! minimal beats Valiant on a uniform permutation (Valiant doubles the global hops), and UGAL
//! stays within 5% of minimal there.

use std::sync::Arc;

use llmsim_core::{Bytes, NodeId, SimTime, TransferId, mix64};
use llmsim_net::{FlowNetwork, RouteSpec, Transfer, run_all};
use llmsim_topo::dragonfly::{DragonflyRouting, DragonflySpec};
use llmsim_topo::{FamilySpec, ScaleUp, Topology};

/// 9 groups of 4 routers, 2 hosts and 2 global links per router: 72 hosts, one global cable per
/// pair of groups.
fn topo(routing: DragonflyRouting) -> Arc<Topology> {
    let spec = DragonflySpec {
        routers_per_group: Some(4),
        hosts_per_router: Some(2),
        global_links_per_router: Some(2),
        routing,
        ..DragonflySpec::default()
    };
    Arc::new(spec.build(72, ScaleUp::none(), 3).unwrap())
}

fn last_finish(routing: DragonflyRouting, pairs: &[(u32, u32)]) -> SimTime {
    let mut net = FlowNetwork::new(topo(routing));
    net.set_rate_checks(true);
    let ts = pairs.iter().enumerate().map(|(i, &(s, d))| Transfer {
        id: TransferId(i as u64),
        src: NodeId(s),
        dst: NodeId(d),
        bytes: Bytes(4 << 20),
        start: SimTime::ZERO,
        flow_hash: mix64(i as u64),
        route: RouteSpec::Direct,
    });
    let done = run_all(&mut net, ts).unwrap();
    assert_eq!(done.len(), pairs.len());
    assert!(net.violations().is_empty(), "{:?}", net.violations());
    done.iter().map(|c| c.finish).max().unwrap()
}

#[test]
fn valiant_and_ugal_beat_minimal_on_a_group_shift() {
    // Host i of group G to host i of group G + 1 (8 hosts per group).
    let shift: Vec<(u32, u32)> = (0..72).map(|s| (s, (s + 8) % 72)).collect();
    let min = last_finish(DragonflyRouting::Minimal, &shift);
    let val = last_finish(DragonflyRouting::Valiant, &shift);
    let ugal = last_finish(DragonflyRouting::Ugal, &shift);
    // Minimal: 8 flows share the one global cable, so the last takes about 8 NIC-times.
    let nic = SimTime::from_secs_f64((4u64 << 20) as f64 * 8.0 / 400e9);
    assert!(min.0 >= 8 * nic.0, "{min} vs 8 x {nic}");
    eprintln!("shift: minimal {min} valiant {val} ugal {ugal}");
    assert!(val.0 * 4 < min.0 * 3, "valiant {val} vs minimal {min}");
    // UGAL weighs several Valiant routes against the minimal one per flow: it avoids the random
    // collisions plain Valiant suffers.
    assert!(ugal.0 * 3 < min.0 * 2, "ugal {ugal} vs minimal {min}");
    assert!(ugal < val, "ugal {ugal} vs valiant {val}");
    assert!(ugal.0 * 100 <= min.0 * 105, "ugal {ugal} vs minimal {min}");
}

#[test]
fn minimal_beats_valiant_on_a_uniform_permutation_and_ugal_follows_it() {
    // A seeded permutation without fixed points.
    let mut p: Vec<u32> = (0..72).collect();
    for i in (1..72usize).rev() {
        let j = (mix64(0x5eed ^ i as u64) % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    let perm: Vec<(u32, u32)> = (0..72)
        .map(|s| (s, if p[s as usize] == s { (s + 1) % 72 } else { p[s as usize] }))
        .collect();
    let min = last_finish(DragonflyRouting::Minimal, &perm);
    let val = last_finish(DragonflyRouting::Valiant, &perm);
    let ugal = last_finish(DragonflyRouting::Ugal, &perm);
    eprintln!("permutation: minimal {min} valiant {val} ugal {ugal}");
    assert!(min < val, "minimal {min} vs valiant {val}");
    assert!(ugal < val, "ugal {ugal} vs valiant {val}");
    assert!(ugal.0 * 100 <= min.0 * 105, "ugal {ugal} vs minimal {min}");
}

/// UGAL's per-link flow counts survive a fault: a global cable that Valiant routes use, taken
/// down mid-run, reroutes the flows on it (their counts released; rerouted flows take the
/// minimal route around it), every flow still completes, and the run equals itself. The cable
/// is one the shift's minimal routes (group G to G + 1) do not need.
#[test]
fn ugal_flows_complete_across_a_failed_global_cable() {
    use llmsim_core::LinkId;
    use llmsim_net::{LinkChange, Network};
    let shift: Vec<(u32, u32)> = (0..72).map(|s| (s, (s + 8) % 72)).collect();
    let transfers = || {
        shift.iter().enumerate().map(|(i, &(s, d))| Transfer {
            id: TransferId(i as u64),
            src: NodeId(s),
            dst: NodeId(d),
            bytes: Bytes(4 << 20),
            start: SimTime::ZERO,
            flow_hash: mix64(i as u64),
            route: RouteSpec::Direct,
        })
    };
    // Routers follow the 72 hosts, 4 per group: the busiest global cable not from G to G + 1.
    let mut plain = FlowNetwork::new(topo(DragonflyRouting::Ugal));
    run_all(&mut plain, transfers()).unwrap();
    let t = plain.topology().clone();
    let group = |n: NodeId| (n.0 - 72) / 4;
    let global = (0..t.num_links() as u32)
        .map(LinkId)
        .filter(|&l| {
            let k = t.link(l);
            k.src.0 >= 72 && k.dst.0 >= 72 && group(k.src) != group(k.dst) && (group(k.src) + 1) % 9 != group(k.dst)
        })
        .max_by_key(|&l| (plain.link_bytes()[l.idx()], std::cmp::Reverse(l)))
        .unwrap();
    assert!(plain.link_bytes()[global.idx()].0 > 0, "Valiant routes use some global cable");
    let run = || {
        let mut net = FlowNetwork::new(topo(DragonflyRouting::Ugal));
        net.schedule_link_change(SimTime::from_us(50), global, LinkChange::Down).unwrap();
        let done = run_all(&mut net, transfers()).unwrap();
        assert_eq!(done.len(), 72);
        assert_eq!(net.stats().completed, 72);
        let crossed = net.link_bytes()[global.idx()];
        assert!(
            crossed < plain.link_bytes()[global.idx()],
            "{crossed:?} bytes crossed the cable, which failed at 50 us"
        );
        done.iter().map(|c| c.finish).collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}
