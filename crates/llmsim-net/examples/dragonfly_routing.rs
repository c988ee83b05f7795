//! Dragonfly minimal vs Valiant vs UGAL on the flow backend (issue 34): a group-to-group shift
//! (every host of group `G` sends to the same host index of group `G + 1`, the adversarial
//! pattern for minimal routing), a random permutation (seeded) and a uniform all-to-all, each
//! host sending `MiB` MiB in all. Prints a markdown table: the last completion per pattern and
//! routing.
//!
//! `cargo run --release -p llmsim-net --example dragonfly_routing -- [GPUS=1024] [MIB=64]`

use std::sync::Arc;
use std::time::Instant;

use llmsim_core::{Bytes, NodeId, SimTime, TransferId, mix64};
use llmsim_net::{FlowNetwork, RouteSpec, Transfer, run_all};
use llmsim_topo::dragonfly::{DragonflyRouting, DragonflySpec};
use llmsim_topo::{FamilySpec, ScaleUp, Topology};

fn topo(gpus: u32, routing: DragonflyRouting) -> Arc<Topology> {
    let spec = DragonflySpec {
        routing,
        ..DragonflySpec::default()
    };
    Arc::new(spec.build(gpus, ScaleUp::none(), 1).expect("dragonfly"))
}

#[derive(Clone, Copy, PartialEq)]
enum Pattern {
    Shift,
    Permutation,
    AllToAll,
}

/// `(src, dst)` pairs: `Shift` sends host `i` of group `G` to host `i` of group `G + 1`.
fn pairs(gpus: u32, per_group: u32, pattern: Pattern) -> Vec<(u32, u32)> {
    if pattern == Pattern::Shift {
        return (0..gpus).map(|s| (s, (s + per_group) % gpus)).collect();
    }
    if pattern == Pattern::AllToAll {
        return (0..gpus).flat_map(|s| (1..gpus).map(move |k| (s, (s + k) % gpus))).collect();
    }
    // A seeded random permutation without fixed points (Fisher-Yates, then rotate fixed points).
    let mut p: Vec<u32> = (0..gpus).collect();
    for i in (1..gpus as usize).rev() {
        let j = (mix64(0x5eed ^ i as u64) % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    (0..gpus)
        .map(|s| (s, if p[s as usize] == s { (s + 1) % gpus } else { p[s as usize] }))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let gpus: u32 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    println!("| pattern | routing | instance | last completion | vs minimal | wall ms |");
    println!("|---|---|---|---|---|---|");
    for pattern in [Pattern::Shift, Pattern::Permutation, Pattern::AllToAll] {
        let bytes = if pattern == Pattern::AllToAll {
            (mib << 20) / u64::from(gpus - 1)
        } else {
            mib << 20
        };
        let mut minimal = 0.0;
        for routing in [DragonflyRouting::Minimal, DragonflyRouting::Valiant, DragonflyRouting::Ugal] {
            let t = topo(gpus, routing);
            // The default (balanced) dragonfly: a = 2h routers of p = h hosts per group.
            let h = llmsim_topo::dragonfly::balanced_h(gpus);
            let per_group = 2 * h * h;
            let ts = pairs(gpus, per_group, pattern).into_iter().enumerate().map(|(i, (s, d))| Transfer {
                id: TransferId(i as u64),
                src: NodeId(s),
                dst: NodeId(d),
                bytes: Bytes(bytes),
                start: SimTime::ZERO,
                flow_hash: mix64(i as u64),
                route: RouteSpec::Direct,
            });
            let mut net = FlowNetwork::new(t.clone());
            let wall = Instant::now();
            let done = run_all(&mut net, ts).expect("run");
            let ms = wall.elapsed().as_secs_f64() * 1e3;
            let last = done.iter().map(|c| c.finish).max().unwrap_or(SimTime::ZERO).as_secs_f64() * 1e6;
            if routing == DragonflyRouting::Minimal {
                minimal = last;
            }
            println!(
                "| {} | {routing:?} | {} | {last:.1} us | {:.2}x | {ms:.0} |",
                match pattern {
                    Pattern::Shift => "group shift",
                    Pattern::Permutation => "random permutation",
                    Pattern::AllToAll => "all-to-all",
                },
                t.name,
                last / minimal
            );
        }
    }
}
