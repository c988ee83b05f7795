//! ns-3 experiment files (HPCC code base, `scratch/third.cc`): `config.txt`, the flow file, and
//! the outputs `fct.txt` and `pfc.txt`. The topology file is read by `llmsim_topo::ns3`.
//!
//! `config.txt` is one `KEY value...` per line. Every key `third.cc` reads is accepted; an
//! unknown key, a missing value or a value of the wrong kind is an error naming the line.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use llmsim_core::{Bandwidth, NodeId, SimTime};
use llmsim_topo::ns3::parse_ns3;

use super::config::{CcMode, EcnThresholds, PacketConfig, PacketRouting};
use super::engine::{FlowSpec, PacketEngine, ns3_ip};
use super::{FlowResult, PacketError};

/// Largest `BUFFER_SIZE` accepted, in MB (1 TiB of switch buffer).
pub const MAX_BUFFER_MB: u64 = 1 << 20;

/// Keys `third.cc` reads, in its order.
pub const KNOWN_KEYS: &[&str] = &[
    "ENABLE_QCN",
    "USE_DYNAMIC_PFC_THRESHOLD",
    "CLAMP_TARGET_RATE",
    "PAUSE_TIME",
    "DATA_RATE",
    "LINK_DELAY",
    "PACKET_PAYLOAD_SIZE",
    "L2_CHUNK_SIZE",
    "L2_ACK_INTERVAL",
    "L2_BACK_TO_ZERO",
    "TOPOLOGY_FILE",
    "FLOW_FILE",
    "TRACE_FILE",
    "TRACE_OUTPUT_FILE",
    "SIMULATOR_STOP_TIME",
    "ALPHA_RESUME_INTERVAL",
    "RP_TIMER",
    "EWMA_GAIN",
    "FAST_RECOVERY_TIMES",
    "RATE_AI",
    "RATE_HAI",
    "ERROR_RATE_PER_LINK",
    "CC_MODE",
    "RATE_DECREASE_INTERVAL",
    "MIN_RATE",
    "FCT_OUTPUT_FILE",
    "HAS_WIN",
    "GLOBAL_T",
    "MI_THRESH",
    "VAR_WIN",
    "FAST_REACT",
    "U_TARGET",
    "INT_MULTI",
    "RATE_BOUND",
    "ACK_HIGH_PRIO",
    "DCTCP_RATE_AI",
    "PFC_OUTPUT_FILE",
    "LINK_DOWN",
    "LOAD_BALANCE",
    "ENABLE_TRACE",
    "KMAX_MAP",
    "KMIN_MAP",
    "PMAX_MAP",
    "BUFFER_SIZE",
    "QLEN_MON_FILE",
    "QLEN_MON_START",
    "QLEN_MON_END",
    "MULTI_RATE",
    "SAMPLE_FEEDBACK",
    "PINT_LOG_BASE",
    "PINT_PROB",
];

/// A parsed `config.txt`.
#[derive(Clone, Debug)]
pub struct Ns3Config {
    /// The packet engine's parameters from the file's keys.
    pub packet: PacketConfig,
    /// `TOPOLOGY_FILE`: path of the topology file.
    pub topology_file: String,
    /// `FLOW_FILE`: path of the flow file.
    pub flow_file: String,
    /// `FCT_OUTPUT_FILE`: where ns-3 writes flow completion times.
    pub fct_output_file: String,
    /// `PFC_OUTPUT_FILE`: where ns-3 logs PFC frames.
    pub pfc_output_file: String,
    /// Flows not done by then are reported unfinished.
    pub stop_time: SimTime,
    /// `LINK_DOWN time_us a b` with a time above 0: the cable between the nodes with file ids
    /// `a` and `b` fails at 2 s + `time_us` (HPCC's `third.cc` schedules `TakeDownLink` at
    /// `Seconds(2) + MicroSeconds(link_down_time)`, 2 s being where its flows start).
    pub link_down: Option<(SimTime, u32, u32)>,
}

/// `Seconds(double)` at ns resolution, as ns-3 converts it (64.64 fixed point, floored), in ps;
/// `None` past [`SimTime::MAX_SECS`] (u64 picoseconds). NaN and negatives give zero.
pub fn ns3_seconds(s: f64) -> Option<SimTime> {
    if s.is_nan() || s <= 0.0 {
        return Some(SimTime::ZERO);
    }
    // `as` saturates an out-of-range float; the checked steps then refuse it.
    let fixed = (s * 18_446_744_073_709_551_616.0) as u128;
    let ns = fixed.checked_mul(1_000_000_000u128)? >> 64;
    SimTime::checked_from_ns(u64::try_from(ns).ok()?)
}

/// The error for a time past what u64 picoseconds hold.
fn too_long(what: &str, v: f64) -> String {
    let v = if v < 1e12 { v.to_string() } else { format!("{v:e}") };
    format!(
        "{what} {v} is beyond the longest simulated time, {:.3} s (u64 picoseconds); give a smaller value",
        SimTime::MAX_SECS
    )
}

fn perr(file: &str, line: usize, message: String) -> PacketError {
    PacketError::Parse {
        file: file.to_string(),
        line,
        message,
    }
}

/// Parses `config.txt` text; `file` names it in errors.
///
/// # Errors
/// `PacketError::Parse` with the line for an unknown key, a missing or malformed value, or an
/// unsupported setting (`CC_MODE` other than 1/3/7/8, `MULTI_RATE 1`, `SAMPLE_FEEDBACK 1`).
pub fn parse_config(text: &str, file: &str) -> Result<Ns3Config, PacketError> {
    let mut p = PacketConfig {
        routing: PacketRouting::Ns3,
        ns_resolution: true,
        ..PacketConfig::default()
    };
    let mut cfg = Ns3Config {
        packet: p.clone(),
        topology_file: String::new(),
        flow_file: String::new(),
        fct_output_file: "fct.txt".into(),
        pfc_output_file: "pfc.txt".into(),
        stop_time: SimTime::from_ms(10_000),
        link_down: None,
    };
    let mut cc_mode: Option<(usize, u64)> = None;
    let mut kmin: Vec<(u64, u64)> = vec![];
    let mut kmax: Vec<(u64, u64)> = vec![];
    let mut pmax: Vec<(u64, f64)> = vec![];
    let mut seen_ecn_map = false;
    for (i, raw) in text.lines().enumerate() {
        let ln = i + 1;
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut tok = line.split_whitespace();
        let key = tok.next().unwrap_or("");
        let vals: Vec<&str> = tok.collect();
        if !KNOWN_KEYS.contains(&key) {
            return Err(perr(
                file,
                ln,
                format!("unknown key {key:?}; ns-3's third.cc reads: {}", KNOWN_KEYS.join(", ")),
            ));
        }
        let one = || -> Result<&str, PacketError> {
            match vals.as_slice() {
                [v] => Ok(*v),
                [] => Err(perr(file, ln, format!("{key} needs a value"))),
                _ => Err(perr(file, ln, format!("{key} takes one value, found {}", vals.len()))),
            }
        };
        let num_f = |what: &str| -> Result<f64, PacketError> {
            let v = one()?;
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| perr(file, ln, format!("{key} {v:?} is not a non-negative number ({what})")))
        };
        let num_u = || -> Result<u64, PacketError> {
            let v = one()?;
            v.parse::<u64>()
                .map_err(|_| perr(file, ln, format!("{key} {v:?} is not a non-negative integer")))
        };
        let flag = || -> Result<bool, PacketError> {
            match one()? {
                "0" => Ok(false),
                "1" => Ok(true),
                v => Err(perr(file, ln, format!("{key} {v:?} must be 0 or 1"))),
            }
        };
        let rate = || -> Result<u64, PacketError> {
            let v = one()?;
            v.parse::<Bandwidth>()
                .map(|b| b.bps())
                .map_err(|e| perr(file, ln, format!("{key} {v:?}: {e} (ns-3 style, e.g. 100Mb/s)")))
        };
        let us = || -> Result<SimTime, PacketError> {
            let v = num_f("microseconds")?;
            SimTime::checked_from_us_f64(v).ok_or_else(|| perr(file, ln, too_long(&format!("{key} (us)"), v)))
        };
        // A count that a u32 field holds; `as u32` would wrap 4294967297 to 1.
        let num_u32 = || -> Result<u32, PacketError> {
            let v = num_u()?;
            u32::try_from(v).map_err(|_| perr(file, ln, format!("{key} {v} is too large; valid: 0..={}", u32::MAX)))
        };
        match key {
            "ENABLE_QCN" => p.ecn = flag()?,
            "USE_DYNAMIC_PFC_THRESHOLD" | "ENABLE_TRACE" => {
                flag()?;
            }
            "CLAMP_TARGET_RATE" => p.clamp_target_rate = flag()?,
            "PAUSE_TIME" => {
                num_u()?;
            }
            "DATA_RATE" | "LINK_DELAY" | "TRACE_FILE" | "TRACE_OUTPUT_FILE" | "QLEN_MON_FILE" => {
                one()?;
            }
            "PACKET_PAYLOAD_SIZE" => {
                let v = num_u()?;
                if v == 0 || v > 9000 {
                    return Err(perr(file, ln, format!("PACKET_PAYLOAD_SIZE {v} must be in 1..=9000")));
                }
                p.mtu = v as u32;
            }
            "L2_CHUNK_SIZE" => p.chunk = num_u()?,
            "L2_ACK_INTERVAL" => {
                let v = num_u()?;
                if v == 0 {
                    return Err(perr(file, ln, "L2_ACK_INTERVAL 0 (no ACKs) is not supported; use 1".into()));
                }
                p.ack_interval = v;
            }
            "L2_BACK_TO_ZERO" => p.back_to_zero = flag()?,
            "TOPOLOGY_FILE" => cfg.topology_file = one()?.to_string(),
            "FLOW_FILE" => cfg.flow_file = one()?.to_string(),
            "FCT_OUTPUT_FILE" => cfg.fct_output_file = one()?.to_string(),
            "PFC_OUTPUT_FILE" => cfg.pfc_output_file = one()?.to_string(),
            "SIMULATOR_STOP_TIME" => {
                let v = num_f("seconds")?;
                cfg.stop_time = ns3_seconds(v).ok_or_else(|| perr(file, ln, too_long("SIMULATOR_STOP_TIME (s)", v)))?;
            }
            "ALPHA_RESUME_INTERVAL" => p.alpha_resume_interval = us()?,
            "RATE_DECREASE_INTERVAL" => p.rate_decrease_interval = us()?,
            "RP_TIMER" => p.rp_timer = us()?,
            "EWMA_GAIN" => p.ewma_gain = num_f("gain")?,
            "FAST_RECOVERY_TIMES" => p.fast_recovery_times = num_u32()?,
            "RATE_AI" => p.rate_ai_bps = rate()?,
            "RATE_HAI" => p.rate_hai_bps = rate()?,
            "MIN_RATE" => p.min_rate_bps = rate()?,
            "DCTCP_RATE_AI" => p.dctcp_rate_ai_bps = rate()?,
            "ERROR_RATE_PER_LINK" => {
                let v = num_f("probability")?;
                if v > 1.0 {
                    return Err(perr(file, ln, format!("ERROR_RATE_PER_LINK {v} must be in [0, 1]")));
                }
                p.error_rate_per_link = v;
            }
            "CC_MODE" => cc_mode = Some((ln, num_u()?)),
            "HAS_WIN" => p.has_win = flag()?,
            "GLOBAL_T" => p.global_t = flag()?,
            "VAR_WIN" => p.var_win = flag()?,
            "FAST_REACT" => p.fast_react = flag()?,
            "U_TARGET" => p.u_target = num_f("utilization")?,
            "MI_THRESH" => p.mi_thresh = num_u32()?,
            "INT_MULTI" => p.int_multi = num_u32()?.max(1),
            "RATE_BOUND" => p.rate_bound = flag()?,
            "ACK_HIGH_PRIO" => p.ack_high_prio = flag()?,
            // llmsim's extension (not an ns-3 key): `LOAD_BALANCE ecmp | spray | adaptive |
            // flowlet [gap_us]`. Anything but ecmp routes by the imported graph's shortest-path
            // rule (every equal-cost next hop, as ns-3's tables hold them) instead of ns-3's
            // per-flow hash, since ns-3 has no per-packet balancing to match.
            "LOAD_BALANCE" => {
                use crate::packet::lb::LoadBalanceKind;
                let kind = vals.first().and_then(|v| LoadBalanceKind::from_name(v));
                let lb = match (kind, vals.get(1)) {
                    (Some(LoadBalanceKind::Flowlet), gap) => {
                        let us = match gap {
                            None => 50.0,
                            Some(g) => g.parse::<f64>().ok().filter(|g| g.is_finite() && *g > 0.0).ok_or_else(|| {
                                perr(
                                    file,
                                    ln,
                                    format!("LOAD_BALANCE flowlet {g}: the idle gap is a positive number of microseconds, e.g. 50"),
                                )
                            })?,
                        };
                        LoadBalanceKind::Flowlet.with_gap(SimTime::from_us_f64(us))
                    }
                    (Some(k), None) => k.with_gap(SimTime::ZERO),
                    _ => {
                        let names: Vec<&str> = LoadBalanceKind::ALL.iter().map(|k| k.name()).collect();
                        return Err(perr(
                            file,
                            ln,
                            format!(
                                "LOAD_BALANCE {}: give one of {} (flowlet takes an idle gap in us); an llmsim extension key",
                                vals.join(" "),
                                names.join(", ")
                            ),
                        ));
                    }
                };
                if lb != crate::packet::lb::LoadBalance::Ecmp {
                    p.routing = PacketRouting::Topology;
                }
                p.load_balance = lb;
            }
            "MULTI_RATE" | "SAMPLE_FEEDBACK" => {
                if flag()? {
                    return Err(perr(file, ln, format!("{key} 1 is not supported by llmsim's HPCC; use 0")));
                }
            }
            "PINT_LOG_BASE" => {
                let b = num_f("log base")?;
                if !(b > 1.0 && b.is_finite()) {
                    return Err(perr(file, ln, format!("PINT_LOG_BASE {b} must be above 1, e.g. 1.05")));
                }
                p.pint_log_base = b;
            }
            "PINT_PROB" => {
                let q = num_f("probability")?;
                if !(q > 0.0 && q <= 1.0) {
                    return Err(perr(file, ln, format!("PINT_PROB {q} must be in (0, 1]")));
                }
                p.pint_prob = q;
            }
            "LINK_DOWN" => {
                if vals.len() != 3 || vals.iter().any(|v| v.parse::<u64>().is_err()) {
                    return Err(perr(file, ln, "LINK_DOWN takes three integers: time_us node_a node_b".into()));
                }
                let t_us: u64 = vals[0].parse().unwrap_or(0);
                if t_us > 0 {
                    let at = t_us
                        .checked_mul(SimTime::PS_PER_US)
                        .and_then(|ps| ps.checked_add(2 * SimTime::PS_PER_S))
                        .map(SimTime::from_ps)
                        .ok_or_else(|| perr(file, ln, format!("LINK_DOWN at {t_us} us is past what the engine's clock holds")))?;
                    let node = |v: &str| v.parse::<u32>().unwrap_or(u32::MAX);
                    cfg.link_down = Some((at, node(vals[1]), node(vals[2])));
                }
            }
            "BUFFER_SIZE" => {
                let mb = num_u()?;
                if mb == 0 || mb > MAX_BUFFER_MB {
                    return Err(perr(
                        file,
                        ln,
                        format!("BUFFER_SIZE {mb} (MB of switch buffer) must be in 1..={MAX_BUFFER_MB}, e.g. 32"),
                    ));
                }
                p.buffer_bytes = mb << 20;
            }
            "QLEN_MON_START" | "QLEN_MON_END" => {
                num_u()?;
            }
            "KMAX_MAP" | "KMIN_MAP" | "PMAX_MAP" => {
                seen_ecn_map = true;
                let n: usize = vals
                    .first()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| perr(file, ln, format!("{key} starts with the number of (rate value) pairs")))?;
                if n.checked_mul(2).and_then(|x| x.checked_add(1)) != Some(vals.len()) {
                    return Err(perr(
                        file,
                        ln,
                        format!("{key} {n} needs {n} (rate_bps value) pairs, found {} values", vals.len() - 1),
                    ));
                }
                for k in 0..n {
                    let r: u64 = vals[1 + 2 * k]
                        .parse()
                        .map_err(|_| perr(file, ln, format!("{key}: rate {:?} is not an integer bit/s", vals[1 + 2 * k])))?;
                    let v = vals[2 + 2 * k];
                    match key {
                        "PMAX_MAP" => pmax.push((
                            r,
                            v.parse::<f64>()
                                .ok()
                                .filter(|x| (0.0..=1.0).contains(x))
                                .ok_or_else(|| perr(file, ln, format!("PMAX_MAP: {v:?} is not a probability")))?,
                        )),
                        _ => {
                            let bytes = v.parse::<u64>().ok().and_then(|kb| kb.checked_mul(1000)).ok_or_else(|| {
                                perr(file, ln, format!("{key}: {v:?} is not an integer KB (at most {})", u64::MAX / 1000))
                            })?;
                            if key == "KMAX_MAP" {
                                kmax.push((r, bytes));
                            } else {
                                kmin.push((r, bytes));
                            }
                        }
                    }
                }
            }
            _ => unreachable!("key listed in KNOWN_KEYS: {key}"),
        }
    }
    let modes = || {
        let list: Vec<String> = CcMode::ALL
            .iter()
            .map(|c| format!("{} {}", c.ns3_mode(), c.name().to_uppercase()))
            .collect();
        list.join(", ")
    };
    let (cc_line, mode) = cc_mode.ok_or_else(|| perr(file, 0, format!("CC_MODE is missing ({})", modes())))?;
    p.cc = u32::try_from(mode)
        .ok()
        .and_then(CcMode::from_ns3_mode)
        .ok_or_else(|| perr(file, cc_line, format!("CC_MODE {mode} is not supported; use one of: {}", modes())))?;
    if seen_ecn_map {
        let mut map = Vec::new();
        for &(r, kx) in &kmax {
            let kn = kmin.iter().find(|e| e.0 == r).map(|e| e.1);
            let pm = pmax.iter().find(|e| e.0 == r).map(|e| e.1);
            match (kn, pm) {
                (Some(kn), Some(pm)) => map.push(EcnThresholds {
                    rate_bps: r,
                    kmin_bytes: kn,
                    kmax_bytes: kx,
                    pmax: pm,
                }),
                _ => return Err(perr(file, 0, format!("rate {r} is in KMAX_MAP but not in KMIN_MAP and PMAX_MAP"))),
            }
        }
        p.ecn_map = map;
    }
    if cfg.topology_file.is_empty() || cfg.flow_file.is_empty() {
        return Err(perr(file, 0, "TOPOLOGY_FILE and FLOW_FILE are required".into()));
    }
    cfg.packet = p;
    Ok(cfg)
}

/// One line of a flow file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ns3Flow {
    /// Node ids as the topology file numbers them.
    pub src: u32,
    /// Destination node.
    pub dst: u32,
    /// Priority group (ns-3 `pg`).
    pub pg: u8,
    /// Destination port.
    pub dport: u16,
    /// Payload bytes.
    pub size: u64,
    /// Start time.
    pub start: SimTime,
    /// Line in the file (1-based).
    pub line: usize,
}

/// Parses a flow file: a count, then `src dst pg dport size_bytes start_s` per line, sorted by
/// start.
///
/// # Errors
/// `PacketError::Parse` with the line for a malformed line, a count that does not match, or
/// flows out of start order.
pub fn parse_flows(text: &str, file: &str) -> Result<Vec<Ns3Flow>, PacketError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (hl, h) = lines
        .next()
        .ok_or_else(|| perr(file, 1, "empty file; expected the number of flows".into()))?;
    let n: usize = h
        .parse()
        .map_err(|_| perr(file, hl, format!("{h:?}: expected the number of flows on the first line")))?;
    // The count is untrusted: reserve no more than the file can hold (a flow line is at least
    // 11 bytes and a newline).
    let mut out = Vec::with_capacity(n.min(text.len() / 12 + 1));
    for (ln, l) in lines {
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.len() != 6 {
            return Err(perr(
                file,
                ln,
                format!("expected `src dst pg dport size_bytes start_s` (6 fields), found {}", t.len()),
            ));
        }
        let int = |i: usize, what: &str| -> Result<u64, PacketError> {
            t[i].parse::<u64>()
                .map_err(|_| perr(file, ln, format!("{what} {:?} is not a non-negative integer", t[i])))
        };
        let pg = int(2, "pg")?;
        if pg == 0 || pg > 7 {
            return Err(perr(file, ln, format!("pg {pg} must be in 1..=7")));
        }
        let dport = int(3, "dport")?;
        if dport > 65535 {
            return Err(perr(file, ln, format!("dport {dport} is not a port number")));
        }
        let size = int(4, "size")?;
        if size == 0 {
            return Err(perr(file, ln, "size must be positive".into()));
        }
        let start_s: f64 = t[5]
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| perr(file, ln, format!("start {:?} is not a time in seconds", t[5])))?;
        let node = |i: usize, what: &str| -> Result<u32, PacketError> {
            let v = int(i, what)?;
            u32::try_from(v).map_err(|_| perr(file, ln, format!("{what} {v} is not a node id; valid: 0..={}", u32::MAX)))
        };
        let start = ns3_seconds(start_s).ok_or_else(|| perr(file, ln, too_long("start (s)", start_s)))?;
        let f = Ns3Flow {
            src: node(0, "src")?,
            dst: node(1, "dst")?,
            pg: pg as u8,
            dport: dport as u16,
            size,
            start,
            line: ln,
        };
        if let Some(prev) = out.last().map(|p: &Ns3Flow| p.start)
            && f.start < prev
        {
            return Err(perr(
                file,
                ln,
                "flows must be sorted by start time (ns-3 reads them in order)".into(),
            ));
        }
        out.push(f);
        if out.len() > n {
            return Err(perr(file, ln, format!("more flows than the count {n} on the first line")));
        }
    }
    if out.len() != n {
        return Err(perr(file, hl, format!("the first line says {n} flows, the file has {}", out.len())));
    }
    Ok(out)
}

/// Finds `rel` (a path from a config) relative to the config's folder or any folder above it,
/// then the working directory, as ns-3 resolves paths from its working directory.
pub fn resolve(config_path: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    if p.is_absolute() {
        return p.exists().then(|| p.to_path_buf());
    }
    let abs = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.to_path_buf());
    let mut dir = abs.parent();
    while let Some(d) = dir {
        let c = d.join(p);
        if c.exists() {
            return Some(c);
        }
        dir = d.parent();
    }
    p.exists().then(|| p.to_path_buf())
}

/// An experiment read from a `config.txt`: the engine with every flow added, and the mapping
/// back to the files' node ids.
pub struct Ns3Experiment {
    /// The parsed `config.txt`.
    pub config: Ns3Config,
    /// The engine with every flow of the flow file added.
    pub engine: PacketEngine,
    /// The topology file it read.
    pub topology_path: PathBuf,
    /// The flow file it read.
    pub flow_path: PathBuf,
}

impl Ns3Experiment {
    /// Reads `config.txt`, the topology and the flows it names.
    ///
    /// # Errors
    /// `PacketError::Parse` for any malformed or missing file, with its line.
    pub fn load(config_path: &Path, seed: u64) -> Result<Ns3Experiment, PacketError> {
        Self::load_with(config_path, seed, None)
    }

    /// [`Ns3Experiment::load`], drawing ECN marks from ns-3's streams from `ns3_streams` on
    /// ([`PacketConfig::ns3_stream_base`]).
    ///
    /// # Errors
    /// As [`Ns3Experiment::load`].
    pub fn load_with(config_path: &Path, seed: u64, ns3_streams: Option<u64>) -> Result<Ns3Experiment, PacketError> {
        Self::load_edited(config_path, seed, ns3_streams, |_| {})
    }

    /// [`Ns3Experiment::load_with`], with `edit` applied to the packet engine's configuration
    /// read from the file before the engine is built (e.g. another transport than ns-3's RoCE).
    ///
    /// # Errors
    /// As [`Ns3Experiment::load`], and the engine's refusal of the edited configuration.
    pub fn load_edited(
        config_path: &Path,
        seed: u64,
        ns3_streams: Option<u64>,
        edit: impl FnOnce(&mut PacketConfig),
    ) -> Result<Ns3Experiment, PacketError> {
        let name = config_path.display().to_string();
        let text = std::fs::read_to_string(config_path).map_err(|e| perr(&name, 0, format!("cannot read: {e}")))?;
        let mut config = parse_config(&text, &name)?;
        config.packet.seed = seed;
        config.packet.ns3_stream_base = ns3_streams;
        edit(&mut config.packet);
        let find = |rel: &str, key: &str| {
            resolve(config_path, rel).ok_or_else(|| {
                perr(
                    &name,
                    0,
                    format!("{key} {rel:?} not found relative to the config's folder, its parents or the working directory"),
                )
            })
        };
        let topology_path = find(&config.topology_file, "TOPOLOGY_FILE")?;
        let flow_path = find(&config.flow_file, "FLOW_FILE")?;
        let tname = topology_path.display().to_string();
        let ttext = std::fs::read_to_string(&topology_path).map_err(|e| perr(&tname, 0, format!("cannot read: {e}")))?;
        let imp = parse_ns3(&ttext, &tname, seed).map_err(|e| match e {
            llmsim_topo::TopoError::Parse { file, line, message } => PacketError::Parse { file, line, message },
            other => perr(&tname, 0, other.to_string()),
        })?;
        let fname = flow_path.display().to_string();
        let ftext = std::fs::read_to_string(&flow_path).map_err(|e| perr(&fname, 0, format!("cannot read: {e}")))?;
        let flows = parse_flows(&ftext, &fname)?;
        let mut by_file = vec![u32::MAX; imp.file_ids.len()];
        for (n, &f) in imp.file_ids.iter().enumerate() {
            by_file[f as usize] = n as u32;
        }
        let hosts = imp.topology.num_hosts();
        let topo = Arc::new(imp.topology);
        let mut engine = PacketEngine::new(topo, Some(imp.file_ids), config.packet.clone())?;
        for (i, f) in flows.iter().enumerate() {
            let map = |id: u32| by_file.get(id as usize).copied().filter(|&n| n < hosts);
            let (Some(s), Some(d)) = (map(f.src), map(f.dst)) else {
                return Err(perr(
                    &fname,
                    f.line,
                    format!("flow {} -> {}: both ends must be hosts of the topology", f.src, f.dst),
                ));
            };
            engine
                .add_flow(FlowSpec {
                    src: NodeId(s),
                    dst: NodeId(d),
                    size: f.size,
                    start: f.start,
                    pg: f.pg,
                    dport: f.dport,
                    tag: i as u64,
                    flow_hash: i as u64,
                })
                .map_err(|e| perr(&fname, f.line, e.to_string()))?;
        }
        if let Some((at, a, b)) = config.link_down {
            let (na, nb) = (by_file.get(a as usize).copied(), by_file.get(b as usize).copied());
            let cable: Vec<u32> = match (na, nb) {
                (Some(na), Some(nb)) => engine
                    .topology()
                    .links()
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| (l.src.0, l.dst.0) == (na, nb) || (l.src.0, l.dst.0) == (nb, na))
                    .map(|(i, _)| i as u32)
                    .collect(),
                _ => Vec::new(),
            };
            if cable.is_empty() {
                return Err(perr(
                    &name,
                    0,
                    format!("LINK_DOWN: nodes {a} and {b} of the topology file share no link; name two nodes with a link between them"),
                ));
            }
            for l in cable {
                engine
                    .schedule_link_down(at, l)
                    .map_err(|e| perr(&name, 0, format!("LINK_DOWN: {e}")))?;
            }
        }
        Ok(Ns3Experiment {
            config,
            engine,
            topology_path,
            flow_path,
        })
    }

    /// Runs until every flow is done or the stop time.
    pub fn run(&mut self) {
        self.engine.run_until(self.config.stop_time);
    }

    /// Like [`Ns3Experiment::run`], calling `progress(flows done, flows total)` after every
    /// `step` of simulated time that has events. The same events run in the same order: the
    /// results are identical.
    pub fn run_with_progress(&mut self, step: SimTime, mut progress: impl FnMut(u64, u64)) {
        let stop = self.config.stop_time;
        let total = self.engine.flows.len() as u64;
        let step = step.max(SimTime::from_ps(1));
        while let Some(t) = self.engine.next_event() {
            if t > stop {
                break;
            }
            self.engine.run_until(t.saturating_add(step).min(stop));
            progress(self.engine.stats().flows_done, total);
        }
        self.engine.run_until(stop);
    }
}

/// `fct.txt` as ns-3 writes it: one line per finished flow, in completion order:
/// `sip dip sport dport size start_ns fct_ns standalone_fct_ns`.
///
/// # Errors
/// `PacketError::Flow` when `order` names a flow the engine does not have.
pub fn fct_text(e: &PacketEngine, order: &[u32]) -> Result<String, PacketError> {
    let mut s = String::with_capacity(order.len() * 72);
    for &f in order {
        let r = result_of(e, f)?;
        let _ = writeln!(
            s,
            "{:08x} {:08x} {} {} {} {} {} {}",
            ns3_ip(e.ns3_ids[r.src.idx()]),
            ns3_ip(e.ns3_ids[r.dst.idx()]),
            r.sport,
            r.dport,
            r.size,
            r.start.as_ns(),
            r.fct().as_ns(),
            r.standalone_fct.as_ns()
        );
    }
    Ok(s)
}

/// The result of flow `f`, or an error naming it.
fn result_of(e: &PacketEngine, f: u32) -> Result<FlowResult, PacketError> {
    e.flow_result(f).ok_or_else(|| {
        PacketError::Flow(format!(
            "flow id {f} is out of range: the engine has {} flows (ids 0..{})",
            e.num_flows(),
            e.num_flows()
        ))
    })
}

/// `pfc.txt` as ns-3 writes it: `time_ns node nodetype ifindex type` (1 pause, 0 resume),
/// logged by the node that receives the frame.
pub fn pfc_text(e: &PacketEngine) -> String {
    let mut s = String::new();
    for p in e.pfc_events() {
        let kind = u32::from(p.node.0 >= e.topology().num_hosts());
        let _ = writeln!(
            s,
            "{} {} {} {} {}",
            p.time.as_ns(),
            e.ns3_ids[p.node.idx()],
            kind,
            e.ns3_ifindex(p.link).unwrap_or(0),
            u32::from(p.pause)
        );
    }
    s
}

/// One line of an ns-3 `fct.txt`, the fields a comparison needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ns3Fct {
    /// Payload bytes.
    pub size: u64,
    /// When the flow started (whole ns in the file).
    pub start: SimTime,
    /// Its completion time (whole ns in the file).
    pub fct: SimTime,
    /// The FCT it would have alone on the network (whole ns in the file).
    pub standalone_fct: SimTime,
}

/// Parses an ns-3 `fct.txt` (for comparisons), one [`Ns3Fct`] per line.
///
/// # Errors
/// `PacketError::Parse` with the line for a malformed line or a time past `SimTime`'s range.
pub fn parse_fct(text: &str, file: &str) -> Result<Vec<Ns3Fct>, PacketError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.is_empty() {
            continue;
        }
        if t.len() != 8 {
            return Err(perr(file, i + 1, format!("expected 8 fields, found {}", t.len())));
        }
        let n = |k: usize| {
            t[k].parse::<u64>()
                .map_err(|_| perr(file, i + 1, format!("field {} {:?} is not an integer", k + 1, t[k])))
        };
        let ns = |k: usize| {
            let v = n(k)?;
            SimTime::checked_from_ns(v).ok_or_else(|| {
                perr(
                    file,
                    i + 1,
                    format!("field {} {v} ns is past the longest time, {} ps", k + 1, u64::MAX),
                )
            })
        };
        out.push(Ns3Fct {
            size: n(4)?,
            start: ns(5)?,
            fct: ns(6)?,
            standalone_fct: ns(7)?,
        });
    }
    Ok(out)
}

/// Results of finished flows, in completion order.
///
/// # Errors
/// `PacketError::Flow` when `order` names a flow the engine does not have.
pub fn finished(e: &PacketEngine, order: &[u32]) -> Result<Vec<FlowResult>, PacketError> {
    order.iter().map(|&f| result_of(e, f)).collect()
}

/// Each flow's data path as ns-3 node ids (for debugging ECMP).
pub fn flow_paths(e: &PacketEngine) -> Vec<Vec<u32>> {
    (0..e.num_flows())
        .map(|f| {
            let fl = &e.flows[f];
            let mut p = Vec::new();
            let _ = e.route_path(fl.src, fl.dst, f as u32, &mut p);
            let mut nodes = vec![e.ns3_ids[fl.src as usize]];
            nodes.extend(p.iter().map(|&l| e.ns3_ids[e.ports[l as usize].dst as usize]));
            nodes
        })
        .collect()
}
