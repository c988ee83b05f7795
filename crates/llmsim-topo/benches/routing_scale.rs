//! Routing rules pay off: what a route lookup and the set-up cost as the cluster grows.
//!
//! Measures, on k-ary fat-trees with 8-GPU servers (NVSwitch):
//! - `setup/fat-tree-k{16,32,64}`: building the topology and its rule (1,024 / 8,192 / 65,536 GPUs);
//! - `route/rule/k{16,64}`: one full host-to-host path expansion (random src, dst, hash, reused `Vec`)
//!   with the up-down rule;
//! - `route/bfs/k16`: the same lookups on the same k=16 fat-tree imported from ns-3 text, so routed
//!   by the BFS shortest-path ECMP fallback (distance arrays cached after first use);
//! - `setup/bfs-all-destinations/k16`: the BFS fallback's cost to fill every destination's cache,
//!   the table-like set-up the rule avoids.
//!
//! Run: `CARGO_TARGET_DIR=/work/target-topo cargo bench -p llmsim-topo --bench routing_scale`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use llmsim_core::{Bandwidth, LinkId, NodeId, SimRng, SimTime};
use llmsim_topo::generators::{FatTreeParams, fat_tree};
use llmsim_topo::ns3::{parse_ns3, to_ns3};
use llmsim_topo::{LinkParams, ScaleUp, Topology};

fn build(k: u32) -> Topology {
    let link = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500));
    fat_tree(
        k * k * k / 4,
        &FatTreeParams {
            k,
            host_link: link,
            edge_agg: link,
            agg_core: link,
        },
        ScaleUp::dgx_h100(),
        1,
    )
    .unwrap()
}

fn lookups(c: &mut Criterion, name: &str, t: &Topology) {
    let hosts = u64::from(t.num_hosts());
    let mut rng = SimRng::seed(3);
    let mut path: Vec<LinkId> = Vec::with_capacity(16);
    c.bench_function(name, |b| {
        b.iter(|| {
            let s = NodeId(rng.below(hosts) as u32);
            let d = NodeId(rng.below(hosts) as u32);
            path.clear();
            t.route(s, d, rng.next_u64(), &mut path).unwrap();
            black_box(path.len())
        })
    });
}

fn bench(c: &mut Criterion) {
    for k in [16, 32, 64] {
        c.bench_function(&format!("setup/fat-tree-k{k}"), |b| b.iter(|| black_box(build(k))));
    }
    let small = build(16);
    let large = build(64);
    lookups(c, "route/rule/k16", &small);
    lookups(c, "route/rule/k64", &large);
    let text = to_ns3(&small);
    let bfs = parse_ns3(&text, "k16", 1).unwrap().topology;
    lookups(c, "route/bfs/k16", &bfs);
    let mut g = c.benchmark_group("setup");
    g.sample_size(10);
    g.bench_function("bfs-all-destinations/k16", |b| {
        b.iter(|| {
            let t = parse_ns3(&text, "k16", 1).unwrap().topology;
            let mut path = Vec::new();
            for d in 0..t.num_hosts() {
                path.clear();
                t.route(NodeId((d + 8) % t.num_hosts()), NodeId(d), 0, &mut path).unwrap();
            }
            black_box(t.heap_bytes())
        })
    });
    g.finish();
    println!(
        "heap: rule k64 {:.1} MiB for {} GPUs; BFS k16 with every destination cached {:.1} MiB for {} GPUs",
        large.heap_bytes() as f64 / 1048576.0,
        large.num_hosts(),
        bfs.heap_bytes() as f64 / 1048576.0,
        bfs.num_hosts()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
