//! One topology family at scale: builds `{"kind": KIND}` (every parameter from its default,
//! sized from the GPU count) for GPUS GPUs in 8-GPU servers, times generation + routing set-up,
//! expands LOOKUPS random (src, dst, flow hash) routes into a reused `Vec`, and prints one
//! table row: kind, name, nodes, links, set-up ms (wall, and on CPU), M lookups/s (wall, and per
//! CPU-second), hops, heap MiB, peak RSS MiB.
//! Run one process per family so that peak RSS (VmHWM) is the family's own.
//!
//! Run: `CARGO_TARGET_DIR=/work/target-34 cargo run --release -p llmsim-topo --example families_scale -- torus 65536`
//! Args: `KIND [GPUS=65536] [LOOKUPS=1000000] [GPUS_PER_SERVER=8] [EXTRA_JSON_FIELDS]`;
//! `bench/topo_families.sh` runs every family.

use std::time::Instant;

use llmsim_core::{LinkId, NodeId, SimRng};
use llmsim_topo::{ScaleUp, TopologySpec};

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// On-CPU time of this thread in ns (`/proc/thread-self/schedstat`), so that figures taken on a
/// shared, loaded machine count only the time this process actually ran.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map_or("torus", String::as_str);
    let gpus: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(65_536);
    let lookups: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let g: u32 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(8);
    let extra = args.get(4).map_or(String::new(), |e| format!(",{e}"));
    let json = format!(r#"{{"kind":"{kind}"{extra}}}"#);
    let spec: TopologySpec = match serde_json::from_str(&json) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{json}: {e}");
            std::process::exit(2);
        }
    };
    let scale_up = if g > 1 {
        ScaleUp {
            gpus_per_server: g,
            ..ScaleUp::dgx_h100()
        }
    } else {
        ScaleUp::none()
    };

    let c0 = cpu_ns();
    let t0 = Instant::now();
    let topo = match spec.build(gpus, scale_up, 1) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{json}: {e}");
            std::process::exit(2);
        }
    };
    let setup = t0.elapsed();
    let c1 = cpu_ns();

    let mut rng = SimRng::seed(7);
    let mut path: Vec<LinkId> = Vec::with_capacity(16);
    let mut hops = 0u64;
    let t1 = Instant::now();
    for _ in 0..lookups {
        let s = NodeId(rng.below(u64::from(gpus)) as u32);
        let d = NodeId(rng.below(u64::from(gpus)) as u32);
        path.clear();
        topo.route(s, d, rng.next_u64(), &mut path).expect("routable");
        hops += path.len() as u64;
    }
    let routing = t1.elapsed();
    let c2 = cpu_ns();
    let cpu_ms = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.1}", (b - a) as f64 / 1e6),
        _ => "n/a".into(),
    };
    let cpu_rate = match (c1, c2) {
        (Some(a), Some(b)) => format!("{:.2}", lookups as f64 / ((b - a) as f64 / 1e9) / 1e6),
        _ => "n/a".into(),
    };
    let rss = vm_hwm_kib().map_or("n/a".to_string(), |k| format!("{:.1}", k as f64 / 1024.0));
    println!(
        "| {kind} | {} | {} | {} | {:.1} ({} on CPU) | {:.2} ({cpu_rate} per CPU-s) | {:.2} | {:.1} | {rss} |",
        topo.name,
        topo.num_nodes(),
        topo.num_links(),
        setup.as_secs_f64() * 1e3,
        cpu_ms(c0, c1),
        lookups as f64 / routing.as_secs_f64() / 1e6,
        hops as f64 / lookups as f64,
        topo.heap_bytes() as f64 / (1024.0 * 1024.0),
    );
}
