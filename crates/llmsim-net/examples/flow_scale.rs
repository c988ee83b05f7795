//! Scale figures of the flow backend, without criterion:
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-net cargo run --release -p llmsim-net --example flow_scale [ring|waves|recompute]
//! ```
//!
//! 1. a 1 GiB ring all-reduce over 1,024 GPUs (128 DGX H100 servers on one 400 Gb/s switch),
//!    step by step: 2·1023·1024 ≈ 2.1 M transfers, each alone on its links;
//! 2. many short disjoint transfers: 2,000 waves of a random permutation over 1,024 hosts;
//! 3. the cost of one rate recomputation as the active flows (random pairs on 1,024 hosts, one
//!    giant component) grow 1k -> 10k -> 100k.

#[path = "../benches/support/scenarios.rs"]
mod scenarios;

use std::time::Instant;

use llmsim_core::{SimRng, SimTime};
use llmsim_net::{AnalyticalNetwork, FlowNetwork, Network};

fn main() {
    // Optional argument: run only `ring`, `waves` or `recompute`.
    let only = std::env::args().nth(1);
    let wants = |what: &str| only.as_deref().is_none_or(|o| o == what);
    if wants("ring") {
        ring();
    }
    if wants("waves") {
        waves();
    }
    if wants("recompute") {
        recompute();
    }
}

fn ring() {
    let t0 = Instant::now();
    let mut net = FlowNetwork::new(scenarios::dgx_flat(1024));
    let r = scenarios::ring_allreduce(&mut net, 1024, 1 << 30);
    report(
        "ring all-reduce 1GiB x 1024 GPUs (flow)",
        t0.elapsed().as_secs_f64(),
        r.transfers,
        r.sim_time,
        &net,
    );

    let t0 = Instant::now();
    let mut ana = AnalyticalNetwork::new(scenarios::dgx_flat(1024));
    let r = scenarios::ring_allreduce(&mut ana, 1024, 1 << 30);
    let wall = t0.elapsed().as_secs_f64();
    println!(
        "{:<46} transfers {:>9}  wall {:>8.3} s  sim {}  {:.3} us/transfer",
        "ring all-reduce 1GiB x 1024 GPUs (analytical)",
        r.transfers,
        wall,
        r.sim_time,
        wall * 1e6 / r.transfers as f64
    );
}

fn waves() {
    let t0 = Instant::now();
    let mut net = FlowNetwork::new(scenarios::plain_flat(1024));
    let r = scenarios::disjoint_waves(&mut net, 1024, 2000, 64 << 10, 1);
    report(
        "disjoint 64KiB waves, 2000 x 1024 hosts",
        t0.elapsed().as_secs_f64(),
        r.transfers,
        r.sim_time,
        &net,
    );
}

fn recompute() {
    for flows in [1_000u32, 10_000, 100_000] {
        let t0 = Instant::now();
        let mut net = scenarios::loaded(1024, flows, 3);
        let setup = t0.elapsed().as_secs_f64();
        let before = net.stats();
        let reps = (2_000_000 / flows as u64).clamp(5, 500);
        let mut rng = SimRng::seed(9);
        let mut done = Vec::new();
        let t0 = Instant::now();
        for i in 0..reps {
            scenarios::perturb(&mut net, 1 << 40 | i, &mut rng, &mut done);
        }
        let wall = t0.elapsed().as_secs_f64();
        let s = net.stats();
        let recomputes = s.rate_recomputations - before.rate_recomputations;
        let rerated = s.flows_rerated - before.flows_rerated;
        println!(
            "active {:>7} flows: setup {:>7.3} s, {} recomputations, {:.1} flows/recompute, {:>9.1} us/recompute, {:.3} us/flow rerated",
            flows,
            setup,
            recomputes,
            rerated as f64 / recomputes as f64,
            wall * 1e6 / recomputes as f64,
            wall * 1e6 / rerated as f64
        );
    }
}

fn report(what: &str, wall: f64, transfers: u64, sim: SimTime, net: &FlowNetwork) {
    let s = net.stats();
    // Events: an arrival, a drain and a delivery per transfer.
    let events = 3 * transfers;
    println!(
        "{what:<46} transfers {transfers:>9}  wall {wall:>8.3} s  sim {sim}  recomputations {}  flows rerated {}  {:.3} us/event",
        s.rate_recomputations,
        s.flows_rerated,
        wall * 1e6 / events as f64
    );
}
