//! `llmsim ns3`: run ns-3 HPCC experiments (config.txt + topology + flow files) on the packet
//! engine, and generate workloads for them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use llmsim_core::SimRng;
use llmsim_net::packet::FlowResult;
use llmsim_net::packet::ns3::{Ns3Experiment, fct_text, finished, parse_fct, pfc_text};

#[derive(Args)]
pub struct Ns3Args {
    #[command(subcommand)]
    cmd: Ns3Cmd,
}

#[derive(Subcommand)]
enum Ns3Cmd {
    /// Run an ns-3 experiment: its config.txt, topology and flow files, unchanged.
    Run(RunArgs),
    /// Write an ns-3 flow file: Poisson arrivals of web-search-sized flows between random hosts.
    Gen(GenArgs),
}

#[derive(Args)]
struct RunArgs {
    /// ns-3 `config.txt`. Its TOPOLOGY_FILE/FLOW_FILE are found relative to its folder or a
    /// folder above it (ns-3 resolves them from its working directory).
    config: PathBuf,
    /// Output folder: fct.txt and pfc.txt (ns-3 formats), flows.csv, queues.csv, summary.json
    /// (and util.csv with --util-bin).
    /// The config's own output paths are ignored.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed of ECN marking and link errors.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Draw ECN marks from ns-3's own random streams, with its stream counter at this value
    /// when the run starts (see bench/ns3-fidelity.md for the value of the reference runs).
    #[arg(long)]
    ns3_streams: Option<u64>,
    /// A folder with ns-3's fct.txt (and pfc.txt) for the same experiment: print both side by side.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// Also write util.csv: each link's utilization in bins of this width (e.g. 10us).
    #[arg(long)]
    util_bin: Option<String>,
    /// Wormhole: fast-forward partitions whose flows' rates are steady (off: the exact engine).
    #[arg(long)]
    fast_forward: bool,
    /// Wormhole θ: steady when (max - min) / mean of the last --ff-window rate samples is below it.
    #[arg(long, default_value_t = 0.05)]
    ff_theta: f64,
    /// Wormhole l: rate samples per steadiness test.
    #[arg(long, default_value_t = 8)]
    ff_window: usize,
    /// Wormhole: rate samples per steadiness test of an uncontended partition (no two flows
    /// sending data over the same link). Default: --ff-window (eq. 6 everywhere). `llmsim run`
    /// uses 3; here that perturbs chaotic workloads such as web-search (see bench/HISTORY.md).
    #[arg(long)]
    ff_uncontended_window: Option<usize>,
    /// Wormhole: time between two rate samples (e.g. 50us).
    #[arg(long, default_value = "50us")]
    ff_sample: String,
    /// Wormhole memoization: a partition whose flow-conflict graph was seen before skips its
    /// transient (needs --fast-forward).
    #[arg(long)]
    ff_memo: bool,
    /// Memo database (SQLite): loaded before the run if it exists, saved after it (implies --ff-memo).
    #[arg(long)]
    ff_memo_db: Option<PathBuf>,
    /// Run the experiment's flows over another transport than ns-3's RoCE (an llmsim
    /// extension): tcp or uet switch PFC off (lossy switches) and keep PACKET_PAYLOAD_SIZE as
    /// the segment/packet payload; tcp also turns ECN marking off. Default roce (the file as is).
    #[arg(long, value_enum, default_value_t = llmsim_sim::scenario::TransportSpec::Roce)]
    transport: llmsim_sim::scenario::TransportSpec,
}

#[derive(Args)]
struct GenArgs {
    /// ns-3 topology file (hosts are the nodes not listed as switches).
    #[arg(long)]
    topology: PathBuf,
    /// Offered load as a fraction of the hosts' NIC bandwidth.
    #[arg(long, default_value_t = 0.3)]
    load: f64,
    /// Arrivals span this long (seconds).
    #[arg(long, default_value_t = 0.005)]
    duration: f64,
    /// First arrival time (seconds).
    #[arg(long, default_value_t = 2.0)]
    start: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Priority group and destination port written on every line.
    #[arg(long, default_value_t = 3)]
    pg: u8,
    #[arg(long, default_value_t = 100)]
    dport: u16,
}

pub fn run(a: &Ns3Args) -> Result<()> {
    match &a.cmd {
        Ns3Cmd::Run(r) => run_experiment(r),
        Ns3Cmd::Gen(g) => generate(g),
    }
}

/// `q`-quantile as the reference tables compute it: the sorted value at `floor(q * n)`.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((q * sorted.len() as f64) as usize).min(sorted.len() - 1)]
}

struct Summary {
    flows: usize,
    mean: f64,
    p50: u64,
    p99: u64,
    mean_sd: f64,
    pauses: usize,
}

fn summarize(fct: &[(u64, u64)], pauses: usize) -> Summary {
    let mut v: Vec<u64> = fct.iter().map(|x| x.0).collect();
    v.sort_unstable();
    let n = v.len().max(1) as f64;
    Summary {
        flows: fct.len(),
        mean: v.iter().sum::<u64>() as f64 / n,
        p50: quantile(&v, 0.5),
        p99: quantile(&v, 0.99),
        mean_sd: fct.iter().map(|&(f, s)| f as f64 / s.max(1) as f64).sum::<f64>() / n,
        pauses,
    }
}

fn run_experiment(a: &RunArgs) -> Result<()> {
    let t0 = Instant::now();
    use llmsim_sim::scenario::TransportSpec;
    let transport = a.transport;
    let mut x = Ns3Experiment::load_edited(&a.config, a.seed, a.ns3_streams, |p| match transport {
        TransportSpec::Roce => {}
        TransportSpec::Tcp => {
            p.transport = llmsim_net::packet::Transport::Tcp;
            p.pfc = false;
            p.ecn = false;
        }
        TransportSpec::Uet => {
            p.transport = llmsim_net::packet::Transport::Uet;
            p.pfc = false;
        }
    })?;
    if let Some(b) = &a.util_bin {
        let t: llmsim_core::SimTime = b.parse().with_context(|| format!("--util-bin {b:?}: a time such as 10us"))?;
        if t.as_ps() == 0 {
            bail!("--util-bin must be positive, e.g. 10us");
        }
        x.engine.set_util_bin(t);
    }
    let memo = a.ff_memo || a.ff_memo_db.is_some();
    if memo && !a.fast_forward {
        bail!("--ff-memo and --ff-memo-db need --fast-forward");
    }
    if a.util_bin.is_some() && a.fast_forward {
        bail!(
            "--util-bin counts the packets on the wire, and --fast-forward skips them: the skipped stretches would read as idle links; run without --fast-forward for util.csv"
        );
    }
    if a.fast_forward {
        let sample_interval: llmsim_core::SimTime = a
            .ff_sample
            .parse()
            .with_context(|| format!("--ff-sample {:?}: a time such as 20us", a.ff_sample))?;
        x.engine.set_wormhole(llmsim_net::packet::WormholeConfig::fast_forwarding(
            a.ff_theta,
            a.ff_window,
            a.ff_uncontended_window.unwrap_or(a.ff_window),
            sample_interval,
            memo,
        ))?;
        if let Some(p) = &a.ff_memo_db {
            x.engine.set_memo_db(llmsim_net::packet::MemoDb::load(p)?)?;
        }
    }
    let load_s = t0.elapsed().as_secs_f64();
    let bar = crate::Progress::new(
        "{spinner} simulating [{bar:40}] {pos}/{len} flows done ({eta})",
        "simulating",
        "flows done",
    );
    let t1 = Instant::now();
    x.run_with_progress(llmsim_core::SimTime::from_us(10), |done, total| bar.update(done, total));
    let sim_s = t1.elapsed().as_secs_f64();
    bar.finish();
    let memo_db_bytes = match (&a.ff_memo_db, x.engine.memo_db()) {
        (Some(p), Some(db)) => Some(db.save(p)?),
        _ => None,
    };
    let memo_entries = x.engine.memo_db().map(|db| db.len());
    let mut order = Vec::new();
    x.engine.drain_completed(&mut order);
    let e = &x.engine;
    let results: Vec<FlowResult> = finished(e, &order)?;
    let st = e.stats();
    let pairs: Vec<(u64, u64)> = results.iter().map(|r| (r.fct().as_ns(), r.standalone_fct.as_ns())).collect();
    let s = summarize(&pairs, st.pfc_pauses as usize);
    let mut sds: Vec<u64> = results.iter().map(|r| (r.slowdown() * 1000.0) as u64).collect();
    sds.sort_unstable();
    let total = e.num_flows();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        write(dir, "fct.txt", &fct_text(e, &order)?)?;
        write(dir, "pfc.txt", &pfc_text(e))?;
        // Node and link ids below come from the engine itself: the lookups always answer.
        let ns3_id = |n: u32| e.ns3_id(n).unwrap_or_default();
        let ifindex = |l: u32| e.ns3_ifindex(l).unwrap_or_default();
        let mut csv = String::from("flow,src,dst,size_bytes,start_ns,fct_ns,standalone_fct_ns,slowdown\n");
        for r in &results {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{:.4}",
                r.tag,
                ns3_id(r.src.0),
                ns3_id(r.dst.0),
                r.size,
                r.start.as_ps() / 1000,
                r.fct().as_ns(),
                r.standalone_fct.as_ns(),
                r.slowdown()
            );
        }
        write(dir, "flows.csv", &csv)?;
        let mut q = String::from("node,ifindex,link,p50_bytes,p99_bytes,max_bytes,tx_bytes\n");
        let tx = e.port_tx_bytes();
        for (l, p50, p99, max) in e.queue_stats() {
            let src = e.topology().link(llmsim_core::LinkId(l)).src;
            let _ = writeln!(q, "{},{},{l},{p50},{p99},{max},{}", ns3_id(src.0), ifindex(l), tx[l as usize]);
        }
        write(dir, "queues.csv", &q)?;
        if let Some(bin) = &a.util_bin {
            // A transmission counts in each bin by the time it spends there; a bin can read a
            // few % over 1 (serialization times truncated to whole ns, as in ns-3).
            let mut u = String::from("node,ifindex,link,bin_start_ns,bin_ns,utilization\n");
            let w = bin.parse::<llmsim_core::SimTime>().map(|t| t.as_ps() / 1000).unwrap_or(0);
            for (l, b, util) in e.link_utilization() {
                let src = e.topology().link(llmsim_core::LinkId(l)).src;
                let _ = writeln!(u, "{},{},{l},{},{w},{util:.4}", ns3_id(src.0), ifindex(l), b as u64 * w);
            }
            write(dir, "util.csv", &u)?;
        }
        let json = serde_json::json!({
            "config": a.config.display().to_string(),
            "cc": e.config().cc.name(),
            "flows_total": total,
            "flows_done": s.flows,
            "fct_mean_ns": s.mean,
            "fct_p50_ns": s.p50,
            "fct_p99_ns": s.p99,
            "slowdown_mean": s.mean_sd,
            "slowdown_p50": quantile(&sds, 0.5) as f64 / 1000.0,
            "slowdown_p99": quantile(&sds, 0.99) as f64 / 1000.0,
            "stats": st,
            "wall_s": sim_s,
            "events_per_s": st.events as f64 / sim_s.max(1e-9),
        });
        write(dir, "summary.json", &serde_json::to_string_pretty(&json)?)?;
    }
    let reference = match &a.reference {
        Some(dir) => {
            let f = dir.join("fct.txt");
            let text = std::fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
            let refs = parse_fct(&text, &f.display().to_string())?;
            let pauses = std::fs::read_to_string(dir.join("pfc.txt"))
                .map(|t| t.lines().filter(|l| l.trim().ends_with(" 1")).count())
                .unwrap_or(0);
            let identical = a
                .out
                .as_ref()
                .map(|o| std::fs::read(o.join("fct.txt")).ok() == Some(text.clone().into_bytes()));
            Some((
                summarize(
                    &refs.iter().map(|x| (x.fct.as_ns(), x.standalone_fct.as_ns())).collect::<Vec<_>>(),
                    pauses,
                ),
                identical,
            ))
        }
        None => None,
    };
    let js = |s: &Summary| serde_json::json!({"flows": s.flows, "fct_mean_ns": s.mean, "fct_p50_ns": s.p50, "fct_p99_ns": s.p99, "slowdown_mean": s.mean_sd, "pfc_pauses": s.pauses});
    if a.json {
        let mut j = serde_json::json!({
            "llmsim": js(&s), "flows_total": total, "events": st.events, "wall_s": sim_s, "load_s": load_s, "stats": st,
        });
        if let Some(w) = e.wormhole_stats() {
            j["wormhole"] = serde_json::json!(w);
            if let Some(n) = memo_entries {
                j["wormhole"]["memo_entries"] = serde_json::json!(n);
                j["wormhole"]["memo_db_bytes"] = serde_json::json!(memo_db_bytes.unwrap_or(0));
            }
        }
        if let Some((r, identical)) = &reference {
            j["ns3"] = js(r);
            j["fct_identical"] = serde_json::json!(identical);
        }
        outln!("{j}");
        return Ok(());
    }
    outln!(
        "{}: {} ({}), {} of {} flows done",
        a.config.display(),
        e.config().cc.name(),
        x.topology_path.display(),
        s.flows,
        total
    );
    outln!(
        "FCT ns: mean {:.0}  p50 {}  p99 {}   slowdown: mean {:.2}  p50 {:.2}  p99 {:.2}",
        s.mean,
        s.p50,
        s.p99,
        s.mean_sd,
        quantile(&sds, 0.5) as f64 / 1000.0,
        quantile(&sds, 0.99) as f64 / 1000.0
    );
    outln!(
        "PFC pauses {}  resumes {}  drops (buffer) {}  drops (link errors) {}  NACKs {}  retransmitted {} B  ECN marks {}",
        st.pfc_pauses,
        st.pfc_resumes,
        st.drops_buffer,
        st.drops_error,
        st.nacks,
        st.retransmitted_bytes,
        st.ecn_marks
    );
    outln!(
        "{} events in {:.3} s ({:.1} M events/s); load {:.3} s",
        st.events,
        sim_s,
        st.events as f64 / sim_s.max(1e-9) / 1e6,
        load_s
    );
    if let Some(w) = e.wormhole_stats() {
        outln!(
            "wormhole: {} freezes ({} skip-backs), {:.3} ms skipped (sum over partitions), {} B fast-forwarded",
            w.freezes,
            w.skip_backs,
            w.skipped.as_ps() as f64 / 1e9,
            w.skipped_bytes
        );
        if let Some(n) = memo_entries {
            outln!(
                "memo: {} hits, {} misses ({} waited for an identical partition), {} episodes stored, {n} entries{}",
                w.memo_hits,
                w.memo_misses,
                w.memo_deferred,
                w.memo_inserts,
                memo_db_bytes.map_or(String::new(), |b| format!(", database {b} B"))
            );
        }
    }
    if let Some((r, identical)) = &reference {
        let err = |a: f64, b: f64| if b == 0.0 { 0.0 } else { 100.0 * (a - b) / b };
        outln!("                 llmsim        ns-3     error");
        outln!("flows      {:>12} {:>11}", s.flows, r.flows);
        outln!("mean FCT   {:>12.0} {:>11.0} {:>+8.2}%", s.mean, r.mean, err(s.mean, r.mean));
        outln!("p50 FCT    {:>12} {:>11} {:>+8.2}%", s.p50, r.p50, err(s.p50 as f64, r.p50 as f64));
        outln!("p99 FCT    {:>12} {:>11} {:>+8.2}%", s.p99, r.p99, err(s.p99 as f64, r.p99 as f64));
        outln!(
            "mean SD    {:>12.2} {:>11.2} {:>+8.2}%",
            s.mean_sd,
            r.mean_sd,
            err(s.mean_sd, r.mean_sd)
        );
        outln!("PFC pauses {:>12} {:>11}", s.pauses, r.pauses);
        if let Some(same) = identical {
            outln!("fct.txt byte-identical to ns-3's: {}", if *same { "yes" } else { "no" });
        }
    }
    if let Some(dir) = &a.out {
        let util = if a.util_bin.is_some() { ",util.csv" } else { "" };
        outln!(
            "wrote {}/{{fct.txt,pfc.txt,flows.csv,queues.csv,summary.json{util}}}",
            dir.display()
        );
        outln!("plot them: llmsim plot {} (pip install .; writes report.html)", dir.display());
    }
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<()> {
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
}

/// Web-search flow sizes (DCTCP paper, as in the HPCC repo's `WebSearch_distribution.txt`):
/// (bytes, cumulative probability), interpolated linearly.
const WEB_SEARCH_CDF: &[(f64, f64)] = &[
    (0.0, 0.0),
    (10_000.0, 0.15),
    (20_000.0, 0.2),
    (30_000.0, 0.3),
    (50_000.0, 0.4),
    (80_000.0, 0.53),
    (200_000.0, 0.6),
    (1_000_000.0, 0.7),
    (2_000_000.0, 0.8),
    (5_000_000.0, 0.9),
    (10_000_000.0, 0.97),
    (30_000_000.0, 1.0),
];

fn sample_size(rng: &mut SimRng) -> u64 {
    let u = rng.unit_f64();
    for w in WEB_SEARCH_CDF.windows(2) {
        let ((x0, p0), (x1, p1)) = (w[0], w[1]);
        if u <= p1 {
            let t = if p1 > p0 { (u - p0) / (p1 - p0) } else { 0.0 };
            return (x0 + t * (x1 - x0)).max(1.0) as u64;
        }
    }
    30_000_000
}

fn generate(g: &GenArgs) -> Result<()> {
    if !(g.load > 0.0 && g.load <= 1.0) {
        bail!("--load {} must be in (0, 1]", g.load);
    }
    let text = std::fs::read_to_string(&g.topology).with_context(|| format!("cannot read {}", g.topology.display()))?;
    let imp = llmsim_topo::ns3::parse_ns3(&text, &g.topology.display().to_string(), 0)?;
    let t = &imp.topology;
    let hosts = t.num_hosts();
    if hosts < 2 {
        bail!("the topology has {hosts} hosts; need at least 2");
    }
    let nic = t.link(t.ports(llmsim_core::NodeId(0))[0]).bandwidth.bps_f64();
    let mean_size: f64 = WEB_SEARCH_CDF.windows(2).map(|w| (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0).sum();
    // Aggregate arrival rate so that offered bytes = load x total host bandwidth.
    let lambda = g.load * nic * f64::from(hosts) / (8.0 * mean_size);
    let mut rng = SimRng::derive(g.seed, 0x5EB);
    let mut t_s = g.start;
    let mut lines = Vec::new();
    loop {
        t_s += -(1.0 - rng.unit_f64()).ln() / lambda;
        if t_s >= g.start + g.duration {
            break;
        }
        let s = rng.below(u64::from(hosts)) as u32;
        let mut d = rng.below(u64::from(hosts) - 1) as u32;
        if d >= s {
            d += 1;
        }
        let size = sample_size(&mut rng);
        lines.push(format!(
            "{} {} {} {} {size} {t_s:.9}",
            imp.file_ids[s as usize], imp.file_ids[d as usize], g.pg, g.dport
        ));
    }
    outln!("{}", lines.len());
    for l in lines {
        outln!("{l}");
    }
    Ok(())
}
