//! Routing rules at 65,536 GPUs: builds a k=64 fat-tree (8-GPU servers with NVSwitch), times the
//! set-up, expands 1,000,000 random (src, dst, flow hash) routes into a reused `Vec`, and prints
//! set-up time, lookups/s, peak RSS (VmHWM) and `Topology::heap_bytes()`.
//!
//! Run: `CARGO_TARGET_DIR=/work/target-topo cargo run --release -p llmsim-topo --example route_scale`
//! Optional args: `[gpus_per_server] [lookups]` (defaults 8 and 1000000).

use std::time::Instant;

use llmsim_core::{Bandwidth, LinkId, NodeId, SimRng, SimTime};
use llmsim_topo::generators::{FatTreeParams, fat_tree};
use llmsim_topo::{LinkParams, ScaleUp};

fn vm_hwm_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let g: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let lookups: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let k = 64;
    let hosts = k * k * k / 4;
    let scale_up = if g > 1 {
        ScaleUp {
            gpus_per_server: g,
            ..ScaleUp::dgx_h100()
        }
    } else {
        ScaleUp::none()
    };
    let link = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500));
    let params = FatTreeParams {
        k,
        host_link: link,
        edge_agg: link,
        agg_core: link,
    };

    let t0 = Instant::now();
    let topo = fat_tree(hosts, &params, scale_up, 1).expect("valid fat-tree");
    let setup = t0.elapsed();

    let mut rng = SimRng::seed(7);
    let mut path: Vec<LinkId> = Vec::with_capacity(16);
    let mut hops = 0u64;
    let t1 = Instant::now();
    for _ in 0..lookups {
        let s = NodeId(rng.below(u64::from(hosts)) as u32);
        let d = NodeId(rng.below(u64::from(hosts)) as u32);
        path.clear();
        topo.route(s, d, rng.next_u64(), &mut path).expect("routable");
        hops += path.len() as u64;
    }
    let routing = t1.elapsed();

    let s = topo.describe();
    println!("{s}");
    println!("---");
    println!(
        "fat-tree k={k}: {hosts} GPUs, {g} per server, {} nodes, {} directed links",
        topo.num_nodes(),
        topo.num_links()
    );
    println!("set-up            {:.1} ms", setup.as_secs_f64() * 1e3);
    println!(
        "routing           {lookups} full-path lookups in {:.1} ms = {:.2} M lookups/s ({:.1} ns each, {:.2} hops avg, {:.1} ns/hop)",
        routing.as_secs_f64() * 1e3,
        lookups as f64 / routing.as_secs_f64() / 1e6,
        routing.as_secs_f64() * 1e9 / lookups as f64,
        hops as f64 / lookups as f64,
        routing.as_secs_f64() * 1e9 / hops as f64
    );
    println!("heap_bytes        {:.1} MiB", topo.heap_bytes() as f64 / (1024.0 * 1024.0));
    match vm_hwm_kib() {
        Some(kib) => println!("peak RSS (VmHWM)  {:.1} MiB", kib as f64 / 1024.0),
        None => println!("peak RSS (VmHWM)  unavailable (no /proc/self/status)"),
    }
}
