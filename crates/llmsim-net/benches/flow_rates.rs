//! Flow backend costs.
//!
//! - `recompute/{1000,10000,100000}`: one short transfer joins, then leaves, a network holding
//!   that many long flows between random pairs of 1,024 hosts on one switch (one giant
//!   component): the cost of two max-min recomputations of the whole component, as the active
//!   flows grow 1k -> 10k -> 100k.
//! - `disjoint_waves`: 20 waves of a random permutation of 64 KiB transfers over 1,024 hosts
//!   (20,480 transfers, each alone on its links): submit + rate + drain + delivery throughput
//!   on the one-flow-component fast path.
//! - `ring_allreduce_128`: a 64 MiB ring all-reduce over 128 GPUs (16 DGX H100 servers).
//!
//! Run with:
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-net cargo bench -p llmsim-net --bench flow_rates
//! ```
//!
//! The same figures without criterion, at full scale:
//! `cargo run --release -p llmsim-net --example flow_scale`.

#[path = "support/scenarios.rs"]
mod scenarios;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use llmsim_core::SimRng;
use llmsim_net::{FlowNetwork, Network};

fn recompute(c: &mut Criterion) {
    let mut g = c.benchmark_group("recompute");
    g.sample_size(10);
    for flows in [1_000u32, 10_000, 100_000] {
        let mut net = scenarios::loaded(1024, flows, 3);
        let mut rng = SimRng::seed(9);
        let mut done = Vec::new();
        let mut id = 1u64 << 40;
        g.throughput(Throughput::Elements(flows as u64));
        g.bench_with_input(BenchmarkId::from_parameter(flows), &flows, |b, _| {
            b.iter(|| {
                id += 1;
                scenarios::perturb(&mut net, id, &mut rng, &mut done);
            })
        });
        let s = net.stats();
        println!(
            "recompute/{flows}: {:.1} flows rerated per recomputation",
            s.flows_rerated as f64 / s.rate_recomputations as f64
        );
    }
    g.finish();
}

fn disjoint(c: &mut Criterion) {
    let mut g = c.benchmark_group("throughput");
    g.sample_size(10);
    g.throughput(Throughput::Elements(20 * 1024));
    g.bench_function("disjoint_waves", |b| {
        b.iter(|| {
            let mut net = FlowNetwork::new(scenarios::plain_flat(1024));
            scenarios::disjoint_waves(&mut net, 1024, 20, 64 << 10, 1).transfers
        })
    });
    g.throughput(Throughput::Elements(2 * 127 * 128));
    g.bench_function("ring_allreduce_128", |b| {
        b.iter(|| {
            let mut net = FlowNetwork::new(scenarios::dgx_flat(128));
            scenarios::ring_allreduce(&mut net, 128, 64 << 20).transfers
        })
    });
    g.finish();
}

criterion_group!(benches, recompute, disjoint);
criterion_main!(benches);
