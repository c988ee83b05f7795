//! `llmsim run`: one training iteration of a scenario file.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use llmsim_core::{NodeId, SimTime};
use llmsim_sim::engine::Span;
use llmsim_sim::scenario::TransportSpec;
use llmsim_sim::{Backend, Outcome, RunOptions, Scenario};
use llmsim_topo::{NodeKind, Topology};
use llmsim_workload::dag::{DagNodeKind, Stream};
use serde_json::json;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Scenario file (YAML). With --workload: the cluster (a scenario without model, training,
    /// parallel), or an ASTRA-sim network YAML.
    pub scenario: PathBuf,
    /// Run a workload from another tool instead of the scenario's model: `chakra:PREFIX`
    /// (PREFIX.<rank>.et) or `simai:FILE` (a SimAI/AICB workload file).
    #[arg(long)]
    pub workload: Option<String>,
    /// Communicator-group JSON of Chakra traces ({"<pg_name>": [ranks]}).
    #[arg(long)]
    pub comm_groups: Option<PathBuf>,
    /// Network backend; overrides `network.backend`.
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Override a scenario value, e.g. `--set parallel.tp=4 --set cluster.gpu=H200`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Write summary.json, ops.csv, trace.json and flows.csv here (with --backend packet also
    /// queues.csv: each port's queue and bytes sent; pfc.csv: the PFC frames).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Make every communication free (isolates compute and the pipeline bubble).
    #[arg(long)]
    pub ideal_comm: bool,
    /// Simulate every data-parallel replica even where folding them is exact (analytical
    /// backend; on flow the same as `--set network.fold=off`).
    #[arg(long)]
    pub no_fold: bool,
    /// Run even when the memory estimated before the run is above the available memory.
    #[arg(long)]
    pub ignore_memory_estimate: bool,
    /// The exact packet engine: no Wormhole fast-forwarding (the packet backend's default);
    /// the same as `--set network.fast_forward=off`.
    #[arg(long)]
    pub exact: bool,
}

pub fn run(a: &RunArgs) -> Result<()> {
    let mut sets = a.sets.clone();
    if let Some(b) = a.backend {
        sets.push(format!("network.backend={b}"));
    }
    if a.exact {
        sets.push("network.fast_forward=off".into());
    }
    let mut sc = if a.workload.is_some() {
        Scenario::load_cluster(&a.scenario, &sets)?
    } else {
        Scenario::load(&a.scenario, &sets)?
    };
    if !sc.jobs.is_empty() {
        if a.workload.is_some() {
            bail!("--workload runs one imported workload; a scenario with `jobs:` brings its own (drop one)");
        }
        // Not written for several jobs yet: a trace and an op table per job.
        sc.output.trace = false;
        sc.output.ops = false;
    }
    if a.out.is_none() {
        // Nothing writes trace.json or flows.csv: do not record them (a flow-level run of 65,536
        // GPUs records 11 M transfers, 0.6 GiB).
        sc.output.trace = false;
        sc.output.flows = false;
    }
    // Legal but costly combinations (spray over go-back-N RoCE, ...), as `llmsim collective` says.
    for w in sc.network.warnings() {
        eprintln!("warning: {w}");
    }
    // The progress line says, besides the program nodes, the simulated time reached and the
    // network's work: a long packet-level collective otherwise looks like a hang.
    let live = std::sync::Arc::new(llmsim_sim::engine::LiveStatus::default());
    let bar = crate::Progress::with_detail(
        "{spinner} simulating [{bar:40}] {pos}/{len} nodes ({eta}) {msg}",
        "simulating",
        "program nodes",
        "no report was written",
        Some(crate::live_detail(live.clone())),
    );
    let mut progress = |done: u64, total: u64| bar.update(done, total);
    let ro = RunOptions {
        ideal_comm: a.ideal_comm,
        no_fold: a.no_fold,
        ignore_memory_estimate: a.ignore_memory_estimate,
        on_estimate: Some(|e| {
            eprintln!("llmsim: estimated before the run: {e}");
            crate::note_estimate(e.seconds);
        }),
        live: Some(live),
    };
    if a.workload.is_some() && sc.workload.is_some() {
        bail!(
            "--workload and the scenario's `workload:` both name a workload; drop one (a cluster file for --workload needs `cluster:` only)"
        );
    }
    let o = match &a.workload {
        Some(w) => {
            let imp = crate::workload_cmd::load(w, a.comm_groups.as_deref(), &sc)?;
            llmsim_sim::simulate_imported(&sc, imp, &ro, &mut progress)
        }
        None => llmsim_sim::simulate(&sc, &ro, &mut progress),
    };
    bar.finish();
    let o = o?;
    // The measured peak beside the estimate printed before the run, so that a user sees how far
    // to trust the estimate (and a test checks it: tests/memory_estimate.rs).
    if let Some(peak) = crate::peak_rss_mib() {
        eprintln!(
            "llmsim: peak memory {peak} MiB (estimated before the run: {} MiB)",
            o.estimate.memory_bytes.div_ceil(1 << 20)
        );
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&o.report)?);
    } else {
        out!("{}", o.report.render());
        if a.workload.is_some() || sc.workload.is_some() {
            out!("{}", crate::workload_cmd::simai_columns(&o.report));
        }
    }
    if let Some(dir) = &a.out {
        write_outputs(&o, &sc, dir)?;
        let mut files = vec!["summary.json"];
        if sc.output.ops {
            files.push("ops.csv");
        }
        if sc.output.trace {
            files.push("trace.json");
        }
        if sc.output.flows {
            files.push("flows.csv");
        }
        if o.engine.packet.is_some() {
            files.extend(["queues.csv", "pfc.csv"]);
        }
        outln!("wrote {}/{{{}}}", dir.display(), files.join(","));
    }
    Ok(())
}

fn write_outputs(o: &Outcome, sc: &Scenario, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let summary = json!({
        "report": o.report,
        "scenario": sc,
    });
    std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(&summary)?)?;
    if sc.output.ops {
        let mut w = csv::Writer::from_path(dir.join("ops.csv"))?;
        for r in &o.ops {
            w.serialize(r)?;
        }
        w.flush()?;
    }
    if sc.output.flows {
        let mut w = csv::Writer::from_path(dir.join("flows.csv"))?;
        // A lossy transport's recovery per transfer: TCP and UET on the packet backend.
        let lossy = sc.network.backend == Backend::Packet && matches!(sc.network.transport, Some(TransportSpec::Tcp | TransportSpec::Uet));
        let mut head = vec!["id", "kind", "src", "dst", "bytes", "start_us", "finish_us", "duration_us"];
        if lossy {
            head.extend(llmsim_net::TransportCounters::COLUMNS);
        }
        w.write_record(&head)?;
        let mut flows: Vec<_> = o.engine.flows.iter().collect();
        flows.sort_by_key(|f| (f.start, f.id));
        for f in flows {
            // A tuple: the writer's own integer formatting, no string per field.
            let (start, finish, dur) = (Us3::new(f.start), Us3::new(f.finish), Us3::new(f.finish - f.start));
            let (s, e, d) = (start.as_str(), finish.as_str(), dur.as_str());
            if lossy {
                let [rp, rto, fr, tr] = f.recovered.values();
                w.serialize((f.id, f.kind, f.src, f.dst, f.bytes, s, e, d, rp, rto, fr, tr))?;
            } else {
                w.serialize((f.id, f.kind, f.src, f.dst, f.bytes, s, e, d))?;
            }
        }
        w.flush()?;
    }
    if let Some(p) = &o.engine.packet {
        write_packet_details(p, &o.topo, dir)?;
    }
    if sc.output.trace {
        let f = std::fs::File::create(dir.join("trace.json"))?;
        let mut w = std::io::BufWriter::new(f);
        write_trace(o, &mut w)?;
        w.flush()?;
    }
    Ok(())
}

/// Packet backend: queues.csv (each egress port that sent anything: its link, the two ends and
/// their kinds, queued bytes p50/p99/max, bytes sent) and pfc.csv (every PFC frame received).
fn write_packet_details(p: &llmsim_net::PacketDetails, topo: &Topology, dir: &Path) -> Result<()> {
    let kind = |n: NodeId| match topo.node(n) {
        NodeKind::Host => "host".to_string(),
        NodeKind::Switch { tier } => format!("switch{tier}"),
        NodeKind::NvSwitch => "nvswitch".to_string(),
    };
    let mut w = csv::Writer::from_path(dir.join("queues.csv"))?;
    w.write_record([
        "link",
        "src",
        "src_kind",
        "dst",
        "dst_kind",
        "gbps",
        "p50_bytes",
        "p99_bytes",
        "max_bytes",
        "tx_bytes",
    ])?;
    for q in &p.ports {
        let l = topo.link(q.link);
        w.write_record([
            q.link.0.to_string(),
            l.src.0.to_string(),
            kind(l.src),
            l.dst.0.to_string(),
            kind(l.dst),
            format!("{}", l.bandwidth.bps_f64() / 1e9),
            q.p50_bytes.to_string(),
            q.p99_bytes.to_string(),
            q.max_bytes.to_string(),
            q.tx_bytes.to_string(),
        ])?;
    }
    w.flush()?;
    let mut w = csv::Writer::from_path(dir.join("pfc.csv"))?;
    w.write_record(["time_us", "node", "node_kind", "link", "pause"])?;
    for e in &p.pfc {
        w.write_record([
            Us3::new(e.time).as_str().to_owned(),
            e.node.0.to_string(),
            kind(e.node),
            e.link.0.to_string(),
            u8::from(e.pause).to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// A time in microseconds with three decimals, exactly as `format!("{:.3}", t.as_us_f64())`
/// writes it, from the integer picoseconds into a buffer on the stack (the float formatting and
/// a string per field took a tenth of a memoized MoE run's wall time for its 25k transfers).
/// A half-nanosecond tie, or a time past 1000 s, goes through the float, whose rounding there
/// depends on its binary value.
struct Us3 {
    buf: [u8; 32],
    start: usize,
}

impl Us3 {
    fn new(t: SimTime) -> Us3 {
        let mut buf = [0u8; 32];
        let ps = t.as_ps();
        if ps % 1000 == 500 || ps >= 1_000_000_000_000_000 {
            let s = format!("{:.3}", t.as_us_f64());
            let start = buf.len() - s.len();
            buf[start..].copy_from_slice(s.as_bytes());
            return Us3 { buf, start };
        }
        let ns = (ps + 500) / 1000;
        let mut i = buf.len();
        let mut frac = ns % 1000;
        for _ in 0..3 {
            i -= 1;
            buf[i] = b'0' + (frac % 10) as u8;
            frac /= 10;
        }
        i -= 1;
        buf[i] = b'.';
        let mut int = ns / 1000;
        loop {
            i -= 1;
            buf[i] = b'0' + (int % 10) as u8;
            int /= 10;
            if int == 0 {
                break;
            }
        }
        Us3 { buf, start: i }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[self.start..]).expect("ASCII digits")
    }
}

fn span_name(o: &Outcome, s: &Span) -> (String, &'static str) {
    let prog = o.workload.program_of(&o.layout, s.unit);
    let n = prog.nodes[s.node as usize];
    let layer = if n.layer == u32::MAX {
        String::new()
    } else {
        format!(" L{}", n.layer)
    };
    let mb = if n.microbatch == u32::MAX {
        String::new()
    } else {
        format!(" mb{}", n.microbatch)
    };
    match n.kind {
        DagNodeKind::Comp { segment } => (format!("{}{layer}{mb}", o.workload.segments[segment as usize].name), "compute"),
        DagNodeKind::CommColl { op, group, bytes } => (format!("{} {op} {}{layer}{mb}", group.name(), human(bytes)), "comm"),
        DagNodeKind::CommSend { bytes, tag, .. } => (format!("send {:?} {}{mb}", tag.dir, human(bytes)).to_lowercase(), "pp"),
        DagNodeKind::CommRecv { bytes, tag, .. } => (format!("recv {:?} {}{mb}", tag.dir, human(bytes)).to_lowercase(), "pp"),
    }
}

fn human(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2}GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1}MB", b / 1e6)
    } else {
        format!("{:.0}KB", b / 1e3)
    }
}

/// Perfetto JSON: one process per traced unit (tensor-parallel group), one thread per stream.
/// Nodes of one stream never overlap, so the `X` events of a track nest trivially.
fn write_trace(o: &Outcome, w: &mut impl std::io::Write) -> Result<()> {
    let mut units: Vec<u32> = o.engine.spans.iter().map(|s| s.unit).collect();
    units.sort_unstable();
    units.dedup();
    writeln!(w, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
    let mut first = true;
    let mut emit = |w: &mut dyn std::io::Write, v: serde_json::Value| -> Result<()> {
        if !first {
            writeln!(w, ",")?;
        }
        first = false;
        write!(w, "{v}")?;
        Ok(())
    };
    // The copy-engine row only where activations are offloaded.
    let offload = o.engine.spans.iter().any(|s| s.stream == Stream::Offload);
    for &u in &units {
        let (c, d, p) = o.layout.coords(u);
        let r0 = o.layout.rank(u, 0);
        emit(
            w,
            json!({"ph":"M","name":"process_name","pid":u,"args":{"name":
                format!("stage {p} (ranks {r0}-{}, dp {d}, cp {c})", r0 + o.layout.tp - 1)}}),
        )?;
        emit(w, json!({"ph":"M","name":"process_sort_index","pid":u,"args":{"sort_index":u}}))?;
        let free = o.workload.explicit.is_some().then_some(Stream::Free);
        for s in Stream::ALL.into_iter().filter(|s| *s != Stream::Offload || offload).chain(free) {
            emit(
                w,
                json!({"ph":"M","name":"thread_name","pid":u,"tid":s as u32,"args":{"name":s.name()}}),
            )?;
        }
    }
    let mut spans: Vec<&Span> = o.engine.spans.iter().collect();
    spans.sort_by_key(|s| (s.unit, s.stream as u32, s.start, s.node));
    for s in spans {
        let (name, cat) = span_name(o, s);
        emit(
            w,
            json!({"ph":"X","name":name,"cat":cat,"pid":s.unit,"tid":s.stream as u32,
                "ts": s.start.as_us_f64(), "dur": (s.end - s.start).as_us_f64()}),
        )?;
    }
    writeln!(w, "\n]}}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn us3_writes_what_float_formatting_writes() {
        let mut rng = llmsim_core::SimRng::seed(11);
        let mut cases: Vec<u64> = vec![0, 1, 499, 500, 501, 999, 1000, 1499, 1500, 999_999_500, 112_983_716_404];
        for _ in 0..200_000 {
            let scale = [1_000, 1_000_000, 1_000_000_000, 1_000_000_000_000, 999_999_999_999_999][rng.below(5) as usize];
            let t = rng.below(scale);
            cases.extend([t, t - t % 1000 + 500]);
        }
        for ps in cases {
            let t = SimTime::from_ps(ps);
            assert_eq!(Us3::new(t).as_str(), format!("{:.3}", t.as_us_f64()), "{ps} ps");
        }
    }
}
