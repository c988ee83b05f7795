//! `llmsim collective`: one collective on a cluster, with NCCL's choice explained.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use llmsim_ccl::expand::Granularity;
use llmsim_ccl::plan::{CollectivePlan, Expansion, Step};
use llmsim_ccl::tuning::{Proto, TuningDecision};
use llmsim_ccl::{AlgoChoice, CollectiveOp, PlanOptions, PlanRun, PlannedCollective, ScaleUpModel, execute, plan_collective};
use llmsim_core::{Bytes, NodeId, SimTime, parse_field};
use llmsim_net::NetStats;
use llmsim_net::packet::CcMode;
use llmsim_sim::Backend;
use llmsim_sim::scenario::{LoadBalanceSpec, NetworkSpec, TcpCcSpec, TcpSpec, TransportSpec};
use llmsim_topo::Topology;
use serde::Serialize;
use serde_json::json;

use crate::topo_args::TopoArgs;
use crate::trace::{self, TraceEvent};

#[derive(Args, Debug)]
pub struct CollectiveArgs {
    /// all-reduce, all-gather, reduce-scatter, all-to-all.
    #[arg(long, default_value = "all-reduce")]
    pub op: String,
    /// nccl-tests size: the all-reduce buffer, the all-gather output, the reduce-scatter input,
    /// the all-to-all per-rank send buffer ("1GiB", "8MB").
    #[arg(long, default_value = "1GiB")]
    pub size: String,
    #[command(flatten)]
    pub topo: TopoArgs,
    /// Network backend (as `network.backend` of a scenario).
    #[arg(long, value_enum, default_value_t = Backend::Flow)]
    pub backend: Backend,
    /// Congestion control of the packet backend (as `network.cc`).
    #[arg(long, value_enum, default_value_t = CcMode::Dcqcn)]
    pub cc: CcMode,
    /// Transport of the packet backend (as `network.transport`): roce (go-back-N over a lossless
    /// PFC fabric), tcp (NewReno over a lossy fabric: PFC off, tail drop) or uet (NSCC over a
    /// lossy fabric whose switches trim; `network.uet` defaults).
    #[arg(long, value_enum, default_value_t = TransportSpec::Roce)]
    pub transport: TransportSpec,
    /// Buffer of each switch of the packet backend (as `network.switch_buffer`; default 32MiB).
    /// Lossy switches divide it evenly among their ports.
    #[arg(long)]
    pub switch_buffer: Option<String>,
    /// TCP's minimum retransmission timeout (as `network.tcp.min_rto`; default 50ms).
    #[arg(long)]
    pub tcp_min_rto: Option<String>,
    /// TCP's largest window (as `network.tcp.max_window`; default 500KB).
    #[arg(long)]
    pub tcp_window: Option<String>,
    /// TCP's segment payload bytes (as `network.tcp.mss`; default 1460).
    #[arg(long)]
    pub tcp_mss: Option<u32>,
    /// TCP's initial congestion window in segments (as `network.tcp.initial_cwnd`; default 10).
    #[arg(long)]
    pub tcp_initial_cwnd: Option<u32>,
    /// TCP's congestion control (as `network.tcp.cc`; default newreno).
    #[arg(long, value_enum)]
    pub tcp_cc: Option<TcpCcSpec>,
    /// Expansion algorithm; `auto` follows NCCL's tuning model (like leaving NCCL_ALGO unset).
    #[arg(long, value_enum, default_value_t = AlgoChoice::Auto)]
    pub algo: AlgoChoice,
    /// Protocol override, like NCCL_PROTO: LL, LL128, Simple.
    #[arg(long)]
    pub proto: Option<String>,
    /// Channel count override (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS).
    #[arg(long)]
    pub channels: Option<u32>,
    /// Ring simulation granularity.
    #[arg(long, value_enum, default_value_t = Granularity::Auto)]
    pub granularity: Granularity,
    /// Do not relay inter-node traffic through the GPU on the destination's rail (NCCL PXN).
    #[arg(long)]
    pub no_pxn: bool,
    /// Pieces the collective is split into (as `collectives.chunks`: ASTRA-sim's "number of
    /// chunks"): tree and hierarchical chunks, ring step-DAG loops, transfers per all-to-all
    /// pair. Default: the expansion's own.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(llmsim_ccl::planner::MAX_CHUNKS)))]
    pub chunks: Option<u32>,
    /// Pieces a rank may work on at once (as `collectives.chunks_in_flight`: ASTRA-sim's
    /// "chunk parallelism"): a tree's piece from the rank's reduce send until its result
    /// arrives (per tree), an all-to-all's until the rank's sends of it are done.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(llmsim_ccl::planner::MAX_CHUNKS)))]
    pub chunks_in_flight: Option<u32>,
    /// NIC-to-GPU time per piece and cross-server step (as `collectives.injection_latency`: the
    /// study's "injection latency"), e.g. "10us". Default 0.
    #[arg(long)]
    pub injection_latency: Option<String>,
    /// Load balancing of the packet backend (as `network.load_balance`): ecmp | spray |
    /// flowlet | adaptive. Default ecmp.
    #[arg(long, value_parser = parse_load_balance)]
    pub load_balance: Option<LoadBalanceSpec>,
    /// Packet backend: record each link's utilization in bins of this width ("100us") and
    /// write util.csv (link, src, dst, kind, bin start, utilization) with `--out`.
    #[arg(long)]
    pub util_bin: Option<String>,
    /// Write transfers.csv, steps.csv, trace.json (Perfetto) and summary.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn parse_load_balance(s: &str) -> Result<LoadBalanceSpec, String> {
    LoadBalanceSpec::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
        let valid: Vec<&str> = LoadBalanceSpec::ALL.iter().map(|k| k.name()).collect();
        format!("{s}: valid {}", valid.join(" | "))
    })
}

/// Everything one collective run produced.
pub struct CollectiveOutcome {
    pub op: CollectiveOp,
    pub bytes: Bytes,
    pub ranks: u32,
    pub decision: Option<TuningDecision>,
    pub expansion: Expansion,
    pub plan: CollectivePlan,
    pub run: PlanRun,
    pub net: NetStats,
    pub topo: Arc<Topology>,
    pub backend: Backend,
    pub transport: TransportSpec,
    /// Per plan node, what TCP or UET did to recover its losses; empty under RoCE and off the
    /// packet backend.
    pub recovered: Vec<llmsim_net::TransportCounters>,
    /// `--load-balance` as given.
    pub load_balance: Option<LoadBalanceSpec>,
    /// Why the simulated expansion differs from NCCL's choice, when it does.
    pub note: Option<&'static str>,
    /// Packet backend: the mean over the hosts' NIC uplinks of the bytes each put on the wire
    /// (every packet: data, retransmissions, ACKs) over its capacity for the collective's time
    /// (the ASTRA-sim + ns-3 DLRM study's "average link utilization", its Fig. 8).
    pub nic_utilization: Option<f64>,
    /// With `--util-bin`: per link and bin with traffic, (link, bin start, utilization of the
    /// bin: bytes on the wire over what the link could carry in it).
    pub util: Vec<(u32, SimTime, f64)>,
}

impl CollectiveOutcome {
    pub fn time(&self) -> SimTime {
        self.run.duration()
    }
    /// nccl-tests algbw in GB/s (10^9 B/s).
    pub fn algbw_gbps(&self) -> f64 {
        self.bytes.0 as f64 / self.time().as_secs_f64() / 1e9
    }
    pub fn busbw_gbps(&self) -> f64 {
        self.algbw_gbps() * self.op.busbw_factor(self.ranks)
    }
}

pub fn run(args: &CollectiveArgs) -> Result<CollectiveOutcome> {
    let op: CollectiveOp = args.op.parse().map_err(|e| anyhow::anyhow!("--{e}"))?;
    let bytes: Bytes = parse_field("--size", &args.size)?;
    if bytes.0 == 0 {
        bail!("--size: must be positive, e.g. \"1GiB\"");
    }
    let tcp_flags = args.tcp_min_rto.is_some()
        || args.tcp_window.is_some()
        || args.tcp_mss.is_some()
        || args.tcp_initial_cwnd.is_some()
        || args.tcp_cc.is_some();
    if tcp_flags && args.transport != TransportSpec::Tcp {
        bail!("--tcp-min-rto, --tcp-window, --tcp-mss, --tcp-initial-cwnd and --tcp-cc need --transport tcp");
    }
    if args.backend != Backend::Packet
        && (args.transport != TransportSpec::Roce || args.switch_buffer.is_some() || args.load_balance.is_some())
    {
        bail!("--transport, --switch-buffer and --load-balance need --backend packet");
    }
    let injection_latency: SimTime = match &args.injection_latency {
        Some(s) => parse_field("--injection-latency", s)?,
        None => SimTime::ZERO,
    };
    let topo = Arc::new(args.topo.build()?);
    let gpus = topo.num_hosts();
    let group: Vec<NodeId> = (0..gpus).map(NodeId).collect();
    let gpn = topo.gpus_per_server();
    let su = ScaleUpModel::from_nvlink(&args.topo.gpu, args.topo.nvlink_bandwidth()?, gpn);
    let proto: Option<Proto> = match &args.proto {
        Some(p) => Some(p.parse().map_err(|e| anyhow::anyhow!("--{e}"))?),
        None => None,
    };
    let opts = PlanOptions {
        arch: args.topo.arch()?,
        nvlink_bw: args.topo.nvlink_bandwidth()?,
        nic_bw: args.topo.nic_bandwidth()?,
        algo: args.algo,
        proto,
        channels: args.channels,
        granularity: args.granularity,
        pxn: !args.no_pxn,
        chunks: args.chunks,
        all_to_all_chunks: None,
        chunks_in_flight: args.chunks_in_flight,
        injection_latency,
        all_to_all_rounds: args.backend == Backend::Analytical,
    };
    let PlannedCollective { plan, decision, note } =
        plan_collective(&topo, op, bytes, &group, &opts, &su).map_err(|e| anyhow::anyhow!("{e}"))?;
    let tcp = (args.transport == TransportSpec::Tcp).then(|| -> Result<TcpSpec> {
        let d = TcpSpec::default();
        Ok(TcpSpec {
            min_rto: match &args.tcp_min_rto {
                Some(s) => parse_field("--tcp-min-rto", s)?,
                None => d.min_rto,
            },
            max_window: match &args.tcp_window {
                Some(s) => parse_field("--tcp-window", s)?,
                None => d.max_window,
            },
            mss: args.tcp_mss.unwrap_or(d.mss),
            initial_cwnd: args.tcp_initial_cwnd.unwrap_or(d.initial_cwnd),
            cc: args.tcp_cc.unwrap_or(d.cc),
            ..d
        })
    });
    let spec = NetworkSpec {
        backend: args.backend,
        cc: args.cc,
        fast_forward: None,
        transport: (args.backend == Backend::Packet).then_some(args.transport),
        switch_buffer: args
            .switch_buffer
            .as_deref()
            .map(|s| parse_field("--switch-buffer", s))
            .transpose()?,
        tcp: tcp.transpose()?,
        load_balance: args.load_balance,
        ..NetworkSpec::default()
    };
    for w in spec.warnings() {
        eprintln!("warning: {w}");
    }
    let util_bin: Option<SimTime> = match &args.util_bin {
        Some(_) if args.backend != Backend::Packet => bail!("--util-bin needs --backend packet"),
        Some(s) => {
            let t: SimTime = parse_field("--util-bin", s)?;
            if t == SimTime::ZERO {
                bail!("--util-bin must be positive, e.g. 100us");
            }
            Some(t)
        }
        None => None,
    };
    // With --util-bin the packet network is kept by type, to read its bins after the run.
    let (mut packet, mut boxed) = (None, None);
    let net: &mut dyn llmsim_net::Network = match util_bin {
        Some(bin) => {
            let mut p = llmsim_net::packet::PacketNetwork::new(topo.clone(), spec.packet_config(args.topo.seed)?)?;
            p.engine_mut().set_util_bin(bin);
            packet.insert(p)
        }
        None => boxed.insert(spec.build(topo.clone(), args.topo.seed)?).as_mut(),
    };
    let run = execute(&plan, net, SimTime::ZERO, 0).map_err(|e| anyhow::anyhow!("{e}"))?;
    let stats = net.stats();
    let nic_utilization = net.packet_details().map(|d| {
        let secs = run.duration().as_secs_f64();
        let mut tx = vec![0u64; topo.links().len()];
        for p in &d.ports {
            tx[p.link.idx()] = p.tx_bytes;
        }
        let up: Vec<f64> = topo
            .links()
            .iter()
            .enumerate()
            .filter(|(_, l)| l.kind == llmsim_topo::LinkKind::HostNic && l.src.0 < topo.num_hosts())
            .map(|(i, l)| tx[i] as f64 * 8.0 / (l.bandwidth.bps_f64() * secs))
            .collect();
        up.iter().sum::<f64>() / up.len().max(1) as f64
    });
    let lossy = args.backend == Backend::Packet && args.transport != TransportSpec::Roce;
    let recovered = if lossy {
        (0..plan.len() as u64)
            .map(|i| net.transport_counters(llmsim_core::TransferId(i)).unwrap_or_default())
            .collect()
    } else {
        Vec::new()
    };
    let util = match (&packet, util_bin) {
        (Some(p), Some(bin)) => p
            .engine()
            .link_utilization()
            .into_iter()
            .map(|(l, b, u)| (l, SimTime::from_ps(bin.as_ps() * b as u64), u))
            .collect(),
        _ => Vec::new(),
    };
    Ok(CollectiveOutcome {
        op,
        bytes,
        ranks: gpus,
        decision,
        expansion: plan.expansion,
        plan,
        run,
        net: stats,
        topo,
        backend: args.backend,
        transport: args.transport,
        recovered,
        load_balance: args.load_balance,
        note,
        nic_utilization,
        util,
    })
}

/// Per-step statistics: transfers grouped by the plan's phase index.
#[derive(Serialize)]
pub struct StepStat {
    pub phase: u32,
    pub transfers: usize,
    pub bytes: u64,
    pub first_start_us: f64,
    pub last_finish_us: f64,
    pub mean_duration_us: f64,
    pub max_duration_us: f64,
}

pub fn step_stats(o: &CollectiveOutcome) -> Vec<StepStat> {
    let mut m: BTreeMap<u32, (usize, u64, f64, f64, f64, f64)> = BTreeMap::new();
    for (i, n) in o.plan.nodes().iter().enumerate() {
        let Step::Transfer { bytes, .. } = &n.step else { continue };
        let (s, f) = (o.run.node_start[i].as_us_f64(), o.run.node_finish[i].as_us_f64());
        let e = m.entry(n.phase).or_insert((0, 0, f64::MAX, 0.0, 0.0, 0.0));
        e.0 += 1;
        e.1 += bytes.0;
        e.2 = e.2.min(s);
        e.3 = e.3.max(f);
        e.4 += f - s;
        e.5 = e.5.max(f - s);
    }
    m.into_iter()
        .map(|(phase, (n, b, s, f, sum, mx))| StepStat {
            phase,
            transfers: n,
            bytes: b,
            first_start_us: s,
            last_finish_us: f,
            mean_duration_us: sum / n as f64,
            max_duration_us: mx,
        })
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// Simulated time over NCCL's predicted time, and why they differ when it is outside 0.9-1.1.
fn model_gap(o: &CollectiveOutcome, d: &TuningDecision) -> Option<String> {
    let ratio = o.time().as_us_f64() / d.time_us;
    let head = format!("simulated / model time: {ratio:.2}x");
    if (0.9..=1.1).contains(&ratio) {
        return Some(head);
    }
    let cell = d.table.iter().find(|c| c.algo == d.algo && c.proto == d.proto)?;
    let bw_us = d.time_us - cell.lat_us;
    let why = if ratio < 1.0 && cell.lat_us > 0.1 * d.time_us {
        format!(
            "NCCL's model adds its latency term ({:.0} us, per-step latency summed over the algorithm's steps) \
             to its bandwidth term ({bw_us:.0} us); the simulated pipeline pays per-step latency only on data \
             dependencies, in parallel across ranks, so it hides behind transfers except for the pipeline fill",
            cell.lat_us
        )
    } else if ratio > 1.0 && o.expansion == Expansion::DoubleBinaryTree {
        "the simulated tree runs the chain inside each server hop by hop, each hop paying NCCL's step \
         latency, in at most a few chunks; NCCL pipelines far smaller pieces, so its fill is shorter"
            .to_string()
    } else if ratio < 1.0 {
        "the simulated fabric sustains more than NCCL's per-channel bandwidth caps (tuning.cc), which \
         were calibrated on NVIDIA's clusters and stand for effects the flow model does not have"
            .to_string()
    } else {
        "the simulated fabric is the bottleneck (contention, routing, or pipeline fill the model does not see); \
         see the per-step table"
            .to_string()
    };
    Some(format!("{head}: {why}"))
}

/// The human-readable report.
pub fn render(o: &CollectiveOutcome) -> String {
    let mut s = String::new();
    let t = &o.topo;
    let _ = writeln!(
        s,
        "llmsim collective: {} of {} on {} GPUs ({} servers x {} GPUs), topology {}, backend {}",
        o.op,
        o.bytes,
        o.ranks,
        t.num_servers(),
        t.gpus_per_server(),
        t.name,
        o.backend
    );
    if let Some(d) = &o.decision {
        let _ = writeln!(s, "\nNCCL cost model (NCCL {}):", d.nccl_version);
        let _ = writeln!(s, "{}", d.explain());
    }
    if let Some(n) = o.note {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(
        s,
        "simulated expansion: {}  ({} plan steps, {} transfers, {} network bytes)",
        o.expansion,
        o.plan.len(),
        o.plan.num_transfers(),
        Bytes(o.plan.network_bytes())
    );
    let _ = writeln!(s, "\ncompletion time: {:.3} us", o.time().as_us_f64());
    let _ = writeln!(
        s,
        "algbw: {:.2} GB/s   busbw: {:.2} GB/s   (nccl-tests definitions; busbw factor {:.4})",
        o.algbw_gbps(),
        o.busbw_gbps(),
        o.op.busbw_factor(o.ranks)
    );
    if let Some(d) = &o.decision {
        let _ = writeln!(
            s,
            "NCCL model predicts: {:.3} us, busbw {:.2} GB/s",
            d.time.as_us_f64(),
            d.predicted_busbw_gbps
        );
        if let Some(why) = model_gap(o, d) {
            let _ = writeln!(s, "{why}");
        }
    }
    let mut durs: Vec<f64> = Vec::new();
    let mut tput: Vec<f64> = Vec::new();
    for (i, n) in o.plan.nodes().iter().enumerate() {
        if let Step::Transfer { bytes, .. } = &n.step {
            let d = (o.run.node_finish[i] - o.run.node_start[i]).as_us_f64();
            durs.push(d);
            if d > 0.0 {
                tput.push(bytes.0 as f64 / d / 1e3);
            }
        }
    }
    durs.sort_by(f64::total_cmp);
    tput.sort_by(f64::total_cmp);
    let _ = writeln!(
        s,
        "\nper-transfer: n={}  duration us p50 {:.3}  p99 {:.3}  max {:.3}   throughput GB/s p50 {:.2}  min {:.2}",
        durs.len(),
        percentile(&durs, 0.5),
        percentile(&durs, 0.99),
        durs.last().copied().unwrap_or(0.0),
        percentile(&tput, 0.5),
        tput.first().copied().unwrap_or(0.0)
    );
    let steps = step_stats(o);
    let _ = writeln!(s, "per-step ({} steps):", steps.len());
    let _ = writeln!(
        s,
        "  {:>6} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "step", "transfers", "bytes", "start us", "end us", "mean dur us"
    );
    let show: Vec<&StepStat> = if steps.len() <= 12 {
        steps.iter().collect()
    } else {
        steps.iter().take(5).chain(steps.iter().skip(steps.len() - 5)).collect()
    };
    for (k, st) in show.iter().enumerate() {
        if steps.len() > 12 && k == 5 {
            let _ = writeln!(s, "  {:>6}", "...");
        }
        let _ = writeln!(
            s,
            "  {:>6} {:>10} {:>12} {:>12.3} {:>12.3} {:>12.3}",
            st.phase,
            st.transfers,
            Bytes(st.bytes).to_string(),
            st.first_start_us,
            st.last_finish_us,
            st.mean_duration_us
        );
    }
    let _ = writeln!(
        s,
        "\nnetwork: {} transfers, {} delivered, {} rate recomputations",
        o.net.completed,
        Bytes(o.net.bytes_delivered),
        o.net.rate_recomputations
    );
    if o.backend == Backend::Packet {
        let n = &o.net;
        let _ = writeln!(
            s,
            "packet ({}): {} events, {} drops, {} trimmed, {} retransmitted, {} RTOs, {} fast retransmits, {} NACKs, {} PFC pauses, {} ECN marks",
            o.transport,
            n.packet_events,
            n.drops,
            n.trimmed,
            Bytes(n.retransmitted_bytes),
            n.tcp_rtos + n.uet_rtos,
            n.tcp_fast_retransmits,
            n.nacks,
            n.pfc_pauses,
            n.ecn_marks
        );
    }
    s
}

pub fn summary_json(o: &CollectiveOutcome) -> serde_json::Value {
    json!({
        "op": o.op,
        "bytes": o.bytes.0,
        "ranks": o.ranks,
        "servers": o.topo.num_servers(),
        "gpus_per_server": o.topo.gpus_per_server(),
        "topology": o.topo.name,
        "backend": o.backend,
        "transport": o.transport,
        "load_balance": o.load_balance.unwrap_or_default().name(),
        "expansion": o.expansion,
        "nccl": o.decision,
        "time_us": o.time().as_us_f64(),
        "time_ps": o.time().0,
        "algbw_gbps": o.algbw_gbps(),
        "busbw_gbps": o.busbw_gbps(),
        "plan_steps": o.plan.len(),
        "transfers": o.plan.num_transfers(),
        "network": o.net,
        "tcp_rtt_us": rtt_summary(o),
        "nic_utilization": o.nic_utilization,
    })
}

/// TCP's per-transfer mean RTTs (the ASTRA-sim + ns-3 DLRM study's per-flow average RTT,
/// its Figs 9-10): how many transfers were sampled and the mean, p50 and p99 over them, in us;
/// null unless the transport is TCP.
pub fn rtt_summary(o: &CollectiveOutcome) -> serde_json::Value {
    if o.transport != TransportSpec::Tcp {
        return serde_json::Value::Null;
    }
    let mut v: Vec<f64> = o.recovered.iter().filter_map(|r| r.mean_rtt()).map(|t| t.as_us_f64()).collect();
    if v.is_empty() {
        return serde_json::Value::Null;
    }
    v.sort_by(f64::total_cmp);
    // Nearest rank: the smallest sample with at least q of them at or below it.
    let q = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    json!({
        "transfers": v.len(),
        "mean": v.iter().sum::<f64>() / v.len() as f64,
        "p50": q(0.5),
        "p99": q(0.99),
    })
}

pub fn write_outputs(o: &CollectiveOutcome, dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--out: cannot create {}", dir.display()))?;
    let mut w = csv::Writer::from_path(dir.join("transfers.csv"))?;
    let mut head = vec![
        "id",
        "kind",
        "src",
        "dst",
        "via",
        "bytes",
        "channel",
        "step",
        "start_us",
        "finish_us",
        "duration_us",
    ];
    let lossy = !o.recovered.is_empty();
    let tcp = lossy && o.transport == TransportSpec::Tcp;
    if lossy {
        head.extend(llmsim_net::TransportCounters::COLUMNS);
    }
    if tcp {
        head.push("mean_rtt_us");
    }
    w.write_record(&head)?;
    let mut spans = Vec::new();
    for (i, n) in o.plan.nodes().iter().enumerate() {
        let (s, f) = (o.run.node_start[i], o.run.node_finish[i]);
        let (kind, src, dst, via, b, pid) = match &n.step {
            Step::Transfer {
                src, dst, bytes, route, ..
            } => {
                let via = match route {
                    llmsim_net::RouteSpec::Via(v) => v.to_string(),
                    llmsim_net::RouteSpec::Chain(h) => format!("chain of {}", h.len() + 1),
                    llmsim_net::RouteSpec::Direct => String::new(),
                };
                ("transfer", src.to_string(), dst.to_string(), via, bytes.0, src.0)
            }
            Step::Local { rank, bytes, .. } => ("local", rank.to_string(), rank.to_string(), String::new(), bytes.0, rank.0),
        };
        let mut row = vec![
            i.to_string(),
            kind.into(),
            src.clone(),
            dst.clone(),
            via,
            b.to_string(),
            n.channel.to_string(),
            n.phase.to_string(),
            format!("{:.6}", s.as_us_f64()),
            format!("{:.6}", f.as_us_f64()),
            format!("{:.6}", (f - s).as_us_f64()),
        ];
        if lossy {
            row.extend(o.recovered[i].values().map(|x| x.to_string()));
        }
        if tcp {
            row.push(
                o.recovered[i]
                    .mean_rtt()
                    .map_or_else(String::new, |t| format!("{:.6}", t.as_us_f64())),
            );
        }
        w.write_record(&row)?;
        spans.push(TraceEvent {
            pid,
            name: if kind == "transfer" {
                format!("send ->{dst} ch{} s{}", n.channel, n.phase)
            } else {
                format!("{} (scale-up)", o.op)
            },
            cat: kind,
            start_us: s.as_us_f64(),
            dur_us: (f - s).as_us_f64(),
            args: json!({"bytes": b, "channel": n.channel, "step": n.phase, "dst": dst}),
        });
    }
    w.flush()?;
    let mut w = csv::Writer::from_path(dir.join("steps.csv"))?;
    for st in step_stats(o) {
        w.serialize(st)?;
    }
    w.flush()?;
    let topo = o.topo.clone();
    let tr = trace::to_json(spans, |pid| {
        format!(
            "rank {pid} (server {}, gpu {})",
            topo.server_of(NodeId(pid)),
            topo.local_rank(NodeId(pid))
        )
    });
    std::fs::write(dir.join("trace.json"), serde_json::to_vec(&tr)?)?;
    std::fs::write(dir.join("summary.json"), serde_json::to_vec_pretty(&summary_json(o))?)?;
    if !o.util.is_empty() {
        let mut w = csv::Writer::from_path(dir.join("util.csv"))?;
        w.write_record(["link", "src", "dst", "kind", "bin_start_us", "utilization"])?;
        for &(l, t, u) in &o.util {
            let link = o.topo.link(llmsim_core::LinkId(l));
            let kind = match link.kind {
                llmsim_topo::LinkKind::NvLink => "nvlink",
                llmsim_topo::LinkKind::HostNic => "nic",
                llmsim_topo::LinkKind::Fabric => "fabric",
            };
            w.write_record([
                l.to_string(),
                link.src.to_string(),
                link.dst.to_string(),
                kind.to_string(),
                format!("{:.3}", t.as_us_f64()),
                format!("{u:.4}"),
            ])?;
        }
        w.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: CollectiveArgs,
    }

    fn outcome(argv: &[&str]) -> CollectiveOutcome {
        let cli = Cli::try_parse_from(["llmsim-collective"].iter().chain(argv)).expect("valid flags");
        run(&cli.args).expect("collective runs")
    }

    #[test]
    fn every_backend_runs_a_collective() {
        let base = ["--gpus", "16", "--size", "8MiB", "--algo", "ring"];
        let flow = outcome(&base);
        for (b, cc) in [("analytical", "dcqcn"), ("packet", "dcqcn"), ("packet", "hpcc")] {
            let o = outcome(&[&base[..], &["--backend", b, "--cc", cc]].concat());
            assert_eq!(o.backend.to_string(), b);
            assert_eq!(o.net.completed, flow.net.completed, "{b}/{cc}: every transfer completes");
            let ratio = o.time().as_us_f64() / flow.time().as_us_f64();
            assert!((0.5..2.0).contains(&ratio), "{b}/{cc}: {ratio} of the flow backend's time");
        }
    }

    #[test]
    fn tcp_runs_a_collective_on_a_lossy_fabric() {
        let base = [
            "--op",
            "all-to-all",
            "--topology",
            "flat",
            "--gpus",
            "8",
            "--gpus-per-node",
            "1",
            "--nic",
            "100Gbps",
            "--size",
            "4MiB",
            "--backend",
            "packet",
        ];
        let roce = outcome(&base);
        // 64 KB per switch: 7 KB per port, under one 10-segment initial window; the all-to-all's
        // incast overflows it.
        let tcp = outcome(&[&base[..], &["--transport", "tcp", "--switch-buffer", "64KB"]].concat());
        assert_eq!(tcp.transport, TransportSpec::Tcp);
        assert_eq!(tcp.net.completed, roce.net.completed, "every transfer completes");
        assert_eq!(tcp.net.net_payload_bytes, roce.net.net_payload_bytes, "every byte is delivered");
        assert_eq!(tcp.net.pfc_pauses, 0);
        assert!(tcp.net.drops > 0 && tcp.net.retransmitted_bytes > 0, "{:?}", tcp.net);
        // Per-transfer counters (transfers.csv) add up to the engine's totals.
        let sum =
            |o: &CollectiveOutcome, f: fn(&llmsim_net::TransportCounters) -> u32| o.recovered.iter().map(|r| u64::from(f(r))).sum::<u64>();
        assert_eq!(sum(&tcp, |r| r.rtos), tcp.net.tcp_rtos);
        assert_eq!(sum(&tcp, |r| r.fast_retransmits), tcp.net.tcp_fast_retransmits);
        assert!(sum(&tcp, |r| r.retransmitted_packets) > 0);
        assert!(roce.recovered.is_empty(), "RoCE has no per-transfer recovery counters");
        assert!(render(&tcp).contains("packet (tcp):"));
        // UET on the same fabric: the incast trims instead of dropping, every byte arrives.
        let uet = outcome(&[&base[..], &["--transport", "uet", "--switch-buffer", "64KB"]].concat());
        assert_eq!(uet.transport, TransportSpec::Uet);
        assert_eq!(uet.net.completed, roce.net.completed, "every transfer completes");
        assert_eq!(uet.net.net_payload_bytes, roce.net.net_payload_bytes, "every byte is delivered");
        assert_eq!((uet.net.pfc_pauses, uet.net.drops), (0, 0));
        assert!(uet.net.trimmed > 0 && uet.net.nacks == uet.net.trimmed, "{:?}", uet.net);
        assert_eq!(sum(&uet, |r| r.trimmed), uet.net.trimmed);
        assert_eq!(sum(&uet, |r| r.rtos), uet.net.uet_rtos);
        assert!(render(&uet).contains("packet (uet):"));
        let cli = Cli::try_parse_from(["x", "--transport", "tcp"]).expect("flags parse");
        let Err(e) = run(&cli.args) else {
            panic!("--transport tcp without --backend packet ran")
        };
        assert!(e.to_string().contains("--backend packet"), "{e}");
    }

    #[test]
    fn tcp_rtt_is_the_path_delay_when_idle_and_grows_under_incast() {
        let fabric = [
            "--topology",
            "flat",
            "--gpus-per-node",
            "1",
            "--nic",
            "100Gbps",
            "--nic-latency",
            "500ns",
            "--backend",
            "packet",
        ];
        let tcp = ["--transport", "tcp"];
        let rtt = |o: &CollectiveOutcome, k: &str| rtt_summary(o)[k].as_f64().expect("an RTT statistic");
        // One 1 MB send between two hosts: nothing queues, so every sample is the path's delay:
        // 4 x 500 ns of links, the data packet serialized twice (host, switch) at 100 Gb/s, and
        // the ACK twice (no larger than a data packet). Full-size packets: 1460 B + 54 B of headers.
        let one = outcome(&[&fabric[..], &tcp, &["--op", "all-gather", "--gpus", "2", "--size", "2MB"]].concat());
        let ser_us = 1514.0 * 8.0 / 100e9 * 1e6;
        let (lo, hi) = (4.0 * 0.5 + 2.0 * ser_us, 4.0 * 0.5 + 4.0 * ser_us);
        for k in ["mean", "p50", "p99"] {
            let r = rtt(&one, k);
            assert!((lo..=hi).contains(&r), "{k} {r} us outside {lo}..{hi}");
        }
        // NIC utilization: each of the 2 uplinks carries 1 MB of payload (plus headers and
        // ACKs) in the collective's time: at least 1 MB's share of the capacity, at most that
        // plus headers (54 B per 1460) and ACKs (no larger than the data's packets).
        // --util-bin: each link's bins add up to the bytes its port put on the wire (two counters
        // of the engine: the bins and the port's total).
        let binned = outcome(
            &[
                &fabric[..],
                &tcp,
                &["--op", "all-gather", "--gpus", "2", "--size", "2MB", "--util-bin", "50us"],
            ]
            .concat(),
        );
        assert_eq!(binned.time(), one.time(), "recording changes nothing");
        let mut per_link = std::collections::BTreeMap::new();
        for &(l, _, u) in &binned.util {
            let bw = binned.topo.link(llmsim_core::LinkId(l)).bandwidth.bps_f64();
            *per_link.entry(l).or_insert(0.0) += u * bw * 50e-6 / 8.0;
        }
        let uplinks: f64 = per_link
            .iter()
            .filter(|(l, _)| binned.topo.link(llmsim_core::LinkId(**l)).src.0 < 2)
            .map(|(_, b)| b)
            .sum();
        let wire = binned.nic_utilization.expect("packet") * 2.0 * 100e9 * binned.time().as_secs_f64() / 8.0;
        assert!((uplinks - wire).abs() <= 1e-6 * wire, "binned {uplinks} B vs on the wire {wire} B");
        let goodput = 1e6 * 8.0 / (100e9 * one.time().as_secs_f64());
        let u = one.nic_utilization.expect("the packet backend reports it");
        assert!(u > goodput && u < goodput * 2.0 * 1514.0 / 1460.0, "{u} vs {goodput}");
        // An all-to-all incast on a 64 KB switch: queues build, the RTTs grow.
        let inc = outcome(
            &[
                &fabric[..],
                &tcp,
                &["--op", "all-to-all", "--gpus", "8", "--size", "4MiB", "--switch-buffer", "64KB"],
            ]
            .concat(),
        );
        assert!(
            rtt(&inc, "p99") > hi && rtt(&inc, "p50") <= rtt(&inc, "p99"),
            "{}",
            rtt_summary(&inc)
        );
        assert_eq!(rtt_summary(&inc)["transfers"].as_u64(), Some(inc.plan.num_transfers() as u64));
        // RoCE keeps no RTT samples.
        let roce = outcome(&[&fabric[..], &["--op", "all-to-all", "--gpus", "8", "--size", "1MiB"]].concat());
        assert!(rtt_summary(&roce).is_null());
    }

    #[test]
    fn study_knobs_reach_the_plan_and_the_network() {
        let fabric = [
            "--topology",
            "flat",
            "--gpus-per-node",
            "1",
            "--nic",
            "100Gbps",
            "--backend",
            "packet",
            "--transport",
            "tcp",
        ];
        let a2a = [&fabric[..], &["--op", "all-to-all", "--gpus", "8", "--size", "1MB"]].concat();
        let one = outcome(&a2a);
        let four = outcome(&[&a2a[..], &["--chunks", "4", "--chunks-in-flight", "2"]].concat());
        assert_eq!(four.plan.num_transfers(), 4 * one.plan.num_transfers(), "4 pieces per pair");
        assert_eq!(four.net.completed as usize, four.plan.num_transfers(), "every piece completes");
        assert_eq!(four.net.net_payload_bytes, one.net.net_payload_bytes, "no byte lost or added");
        // An idle fabric: one transfer each way between two ranks; the whole run moves by the
        // injection latency.
        let pair = [&fabric[..], &["--op", "all-to-all", "--gpus", "2", "--size", "1MB"]].concat();
        let base = outcome(&pair);
        let late = outcome(&[&pair[..], &["--injection-latency", "3us"]].concat());
        assert_eq!(late.time(), base.time() + SimTime::from_us(3));
        let spray = outcome(&[&a2a[..], &["--load-balance", "spray"]].concat());
        assert_eq!(summary_json(&spray)["load_balance"], "spray");
        assert_eq!(summary_json(&one)["load_balance"], "ecmp");
        for (bad, says) in [
            (vec!["--chunks", "0"], "0"),
            (vec!["--load-balance", "random"], "ecmp | spray | flowlet | adaptive"),
        ] {
            let Err(e) = Cli::try_parse_from(["x"].into_iter().chain(a2a.iter().copied()).chain(bad.iter().copied())) else {
                panic!("{bad:?} parsed")
            };
            assert!(e.to_string().contains(says), "{e}");
        }
        let cli = Cli::try_parse_from(["x", "--load-balance", "spray"]).expect("flags parse");
        let Err(e) = run(&cli.args) else {
            panic!("--load-balance without --backend packet ran")
        };
        assert!(e.to_string().contains("--backend packet"), "{e}");
    }
}
