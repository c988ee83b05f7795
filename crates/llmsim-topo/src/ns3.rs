//! ns-3 topology text, in and out.
//!
//! Plain format (HPCC / ns-3 RDMA code base):
//! ```text
//! nodes switches links
//! switch_id switch_id ...
//! src dst rate delay error_rate      (one line per cable, e.g. `0 16 100Gbps 1000ns 0`)
//! ```
//! SimAI variant (what llmsim writes when servers have an NVSwitch):
//! ```text
//! nodes gpus_per_server nvswitches switches links gpu_type
//! nvswitch_ids... switch_ids...      (NVSwitch ids first; may span several lines)
//! src dst rate delay error_rate
//! ```
//!
//! On import, hosts are the nodes not listed as (NV)switches. **Nodes are renumbered** so that
//! hosts come first, as [`Topology`] requires: hosts in increasing file id get `0..num_hosts`,
//! then NVSwitches, then switches, each in increasing file id. [`Ns3Import::file_ids`] maps back.
//! Switch tiers are their hop distance from the nearest host (1 = ToR), except where the file
//! ends with `# llmsim tiers: id:tier ...` lines, which llmsim writes for the switches whose tier
//! is not that distance (a partly filled Clos keeps leaves and spines above no host, whose
//! distance is larger than their tier); ns-3 stops reading after the header's link count, and
//! other readers skip `#` lines. Links touching an NVSwitch are NVLink. The imported topology
//! routes by [`BfsRule`] (shortest paths, ECMP).

use std::fmt::Write as _;
use std::path::Path;

use llmsim_core::{Bandwidth, NodeId, SimTime};

use crate::TopoError;
use crate::graph::{LinkKind, LinkParams, NodeKind, ScaleUp, Topology, TopologyBuilder};
use crate::routing::{BfsRule, Routing};

/// An imported topology and the file's id of each of its nodes.
#[derive(Debug)]
pub struct Ns3Import {
    /// The graph read from the file, routed by [`BfsRule`].
    pub topology: Topology,
    /// `file_ids[n]` is the id node `n` has in the file.
    pub file_ids: Vec<u32>,
}

/// Reads an ns-3 topology file. See the module doc for the format and the renumbering.
///
/// # Errors
/// `TopoError::Parse` if the file cannot be read or does not parse.
pub fn read_ns3(path: &Path, ecmp_seed: u64) -> Result<Ns3Import, TopoError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TopoError::Parse {
        file: file.clone(),
        line: 0,
        message: format!("cannot read: {e}"),
    })?;
    parse_ns3(&text, &file, ecmp_seed)
}

/// Parses ns-3 topology text; `file` names it in errors.
///
/// # Errors
/// `TopoError::Parse { file, line, message }` for malformed text: a bad header, an unknown node
/// id, a rate or delay without a unit, a link count that does not match the header.
pub fn parse_ns3(text: &str, file: &str, ecmp_seed: u64) -> Result<Ns3Import, TopoError> {
    let err = |line: usize, message: String| TopoError::Parse {
        file: file.to_string(),
        line,
        message,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (hline, header) = lines
        .next()
        .ok_or_else(|| err(1, "empty file; expected `nodes switches links`".into()))?;
    let h: Vec<&str> = header.split_whitespace().collect();
    let num = |s: &str, what: &str| {
        s.parse::<u32>()
            .map_err(|_| err(hline, format!("{what} {s:?} is not a non-negative integer")))
    };
    let (nodes, gpus_per_server, nvswitches, switches, links) = match h.len() {
        3 => (num(h[0], "node count")?, 1, 0, num(h[1], "switch count")?, num(h[2], "link count")?),
        6 | 7 => (
            num(h[0], "node count")?,
            num(h[1], "gpus_per_server")?,
            num(h[2], "NVSwitch count")?,
            num(h[3], "switch count")?,
            num(h[4], "link count")?,
        ),
        n => {
            return Err(err(
                hline,
                format!(
                    "header has {n} fields; expected `nodes switches links` or SimAI's `nodes gpus_per_server nvswitches switches links gpu_type`"
                ),
            ));
        }
    };
    if nodes > crate::generators::MAX_HOSTS * 2 {
        return Err(err(hline, format!("{nodes} nodes is more than llmsim builds")));
    }
    if gpus_per_server == 0 {
        return Err(err(hline, "gpus_per_server must be at least 1".into()));
    }
    // The node count is untrusted and sizes three tables: every node is a switch id (2 bytes or
    // more: `7 `) or an end of a link line (8 bytes or more), so the file bounds it. (Fuzzing
    // found an 18-byte header of 23.6M nodes taking seconds and 200 MB.)
    let can_name = text.len() / 2 + 2 * (text.len() / 8 + 1) + 1;
    if nodes as usize > can_name {
        return Err(err(
            hline,
            format!(
                "the header's {nodes} nodes cannot all appear in a {}-byte file (at most {can_name}: each node is a switch id or the end of a link line); check the node count",
                text.len()
            ),
        ));
    }
    // Kind per file id: 0 host, 1 NVSwitch, 2 switch.
    let mut kind = vec![0u8; nodes as usize];
    let want_ids = nvswitches as usize + switches as usize;
    let mut got_ids = 0usize;
    let mut last_line = hline;
    let mut first_link: Option<(usize, &str)> = None;
    for (ln, l) in lines.by_ref() {
        last_line = ln;
        if got_ids == want_ids || l.split_whitespace().any(|t| t.parse::<u32>().is_err()) {
            first_link = Some((ln, l));
            break;
        }
        for t in l.split_whitespace() {
            let id = t.parse::<u32>().unwrap_or(u32::MAX);
            if id >= nodes {
                return Err(err(ln, format!("switch id {id} is not below the node count {nodes}")));
            }
            if got_ids >= want_ids {
                return Err(err(ln, format!("more switch ids than the header's {want_ids}")));
            }
            if kind[id as usize] != 0 {
                return Err(err(ln, format!("switch id {id} listed twice")));
            }
            kind[id as usize] = if got_ids < nvswitches as usize { 1 } else { 2 };
            got_ids += 1;
        }
    }
    if got_ids != want_ids {
        return Err(err(last_line, format!("found {got_ids} switch ids; the header says {want_ids}")));
    }
    // Renumber: hosts, NVSwitches, switches, each by file id.
    let mut file_ids: Vec<u32> = Vec::with_capacity(nodes as usize);
    for k in 0..3u8 {
        file_ids.extend((0..nodes).filter(|&i| kind[i as usize] == k));
    }
    let mut new_id = vec![0u32; nodes as usize];
    for (n, &f) in file_ids.iter().enumerate() {
        new_id[f as usize] = n as u32;
    }
    let num_hosts = (nodes as usize - want_ids) as u32;
    if num_hosts == 0 {
        return Err(err(hline, "every node is a switch; a topology needs hosts".into()));
    }
    if !num_hosts.is_multiple_of(gpus_per_server) {
        return Err(err(
            hline,
            format!("{num_hosts} hosts are not a whole number of {gpus_per_server}-GPU servers"),
        ));
    }
    struct Cable {
        a: u32,
        b: u32,
        p: LinkParams,
        err: f64,
        kind: LinkKind,
    }
    // The header's count is untrusted: reserve no more than the file can hold (a link line is
    // at least 8 bytes, `0 1 1 1` and a newline).
    let mut cables = Vec::with_capacity((links as usize).min(text.len() / 8 + 1));
    let link_lines = first_link.into_iter().chain(lines);
    for (ln, l) in link_lines {
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.len() < 4 || t.len() > 5 {
            return Err(err(
                ln,
                format!("expected `src dst rate delay error_rate`, found {} fields", t.len()),
            ));
        }
        let node = |s: &str| match s.parse::<u32>() {
            Ok(id) if id < nodes => Ok(id),
            _ => Err(err(ln, format!("node {s:?} is not an id below {nodes}"))),
        };
        let (a, b) = (node(t[0])?, node(t[1])?);
        if a == b {
            return Err(err(ln, format!("link from node {a} to itself")));
        }
        let bw: Bandwidth = t[2].parse().map_err(|e| err(ln, format!("rate: {e}")))?;
        if bw.is_zero() {
            return Err(err(ln, "rate must be positive, e.g. 100Gbps".into()));
        }
        let delay: SimTime = t[3].parse().map_err(|e| err(ln, format!("delay: {e}")))?;
        let error_rate = match t.get(4) {
            Some(s) => s
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| err(ln, format!("error rate {s:?} is not a number in [0, 1]")))?,
            None => 0.0,
        };
        let (ka, kb) = (kind[a as usize], kind[b as usize]);
        let lk = if ka == 1 || kb == 1 {
            LinkKind::NvLink
        } else if ka == 0 || kb == 0 {
            LinkKind::HostNic
        } else {
            LinkKind::Fabric
        };
        cables.push(Cable {
            a: new_id[a as usize],
            b: new_id[b as usize],
            p: LinkParams::new(bw, delay),
            err: error_rate,
            kind: lk,
        });
        if cables.len() > links as usize {
            return Err(err(ln, format!("more link lines than the header's {links}")));
        }
    }
    if cables.len() != links as usize {
        return Err(err(hline, format!("header says {links} links, the file has {}", cables.len())));
    }
    // Switch tier = hops from the nearest host, over cables between non-NVSwitch nodes, unless
    // the file's tier lines say otherwise.
    let mut tier = hop_tiers(
        nodes as usize,
        num_hosts,
        cables.iter().filter(|c| c.kind != LinkKind::NvLink).map(|c| (c.a, c.b)),
    );
    for (ln, l) in text.lines().enumerate() {
        let Some(rest) = l.trim().strip_prefix(TIER_LINE) else {
            continue;
        };
        for entry in rest.split_whitespace() {
            let parsed = entry
                .split_once(':')
                .and_then(|(id, t)| Some((id.parse::<u32>().ok()?, t.parse::<u8>().ok()?)));
            match parsed {
                Some((id, t)) if id < nodes && kind[id as usize] == 2 && (1..u8::MAX).contains(&t) => {
                    tier[new_id[id as usize] as usize] = t;
                }
                _ => {
                    return Err(err(
                        ln + 1,
                        format!("tier entry {entry:?} is not `switch_id:tier` with a switch of this file and a tier of 1 to 254"),
                    ));
                }
            }
        }
    }
    let mut b = TopologyBuilder::new();
    for (i, &f) in file_ids.iter().enumerate() {
        b.add_node(match kind[f as usize] {
            0 => NodeKind::Host,
            1 => NodeKind::NvSwitch,
            _ => NodeKind::Switch {
                tier: if tier[i] == u8::MAX { 1 } else { tier[i] },
            },
        });
    }
    // NVLink cables first so that a host's port 0 is its NVLink, as in the generated topologies.
    b.reserve_links(2 * cables.len());
    let mut scale_up = ScaleUp::none();
    scale_up.gpus_per_server = gpus_per_server;
    for pass in [true, false] {
        for c in cables.iter().filter(|c| (c.kind == LinkKind::NvLink) == pass) {
            let (x, y) = b.add_cable(NodeId(c.a), NodeId(c.b), c.p, c.kind);
            b.set_error_rate(x, c.err);
            b.set_error_rate(y, c.err);
            if c.kind == LinkKind::NvLink && scale_up.bandwidth.is_zero() {
                scale_up.bandwidth = c.p.bandwidth;
                scale_up.latency = c.p.latency;
            }
        }
    }
    let name = Path::new(file)
        .file_stem()
        .map_or_else(|| "ns3".to_string(), |s| s.to_string_lossy().into_owned());
    let routing_nodes = b.num_nodes();
    let mut topology = b.build(name, num_hosts, scale_up, Routing::Flat { switch: NodeId(0) }, ecmp_seed)?;
    let rule = BfsRule::new(routing_nodes, num_hosts, topology.links());
    topology.set_routing(Routing::Bfs(Box::new(rule)));
    Ok(Ns3Import { topology, file_ids })
}

/// The comment that starts a line of tier overrides (module doc).
const TIER_LINE: &str = "# llmsim tiers:";

/// Hop distance of every node from the nearest host (hosts `0..num_hosts`, 0) over the cables
/// `edges` (both directions), capped at 254; `u8::MAX` where no host is reached. Hosts do not
/// relay, as in every Clos.
fn hop_tiers(n: usize, num_hosts: u32, edges: impl Iterator<Item = (u32, u32)> + Clone) -> Vec<u8> {
    let mut adj_start = vec![0u32; n + 1];
    for (a, b) in edges.clone() {
        adj_start[a as usize + 1] += 1;
        adj_start[b as usize + 1] += 1;
    }
    for i in 0..n {
        adj_start[i + 1] += adj_start[i];
    }
    let mut fill = adj_start.clone();
    let mut adj = vec![0u32; adj_start[n] as usize];
    for (a, b) in edges {
        adj[fill[a as usize] as usize] = b;
        fill[a as usize] += 1;
        adj[fill[b as usize] as usize] = a;
        fill[b as usize] += 1;
    }
    let mut tier = vec![u8::MAX; n];
    let mut queue: Vec<u32> = (0..num_hosts).collect();
    for &h in &queue {
        tier[h as usize] = 0;
    }
    let mut head = 0;
    while head < queue.len() {
        let v = queue[head] as usize;
        head += 1;
        for &u in &adj[adj_start[v] as usize..adj_start[v + 1] as usize] {
            if tier[u as usize] == u8::MAX {
                tier[u as usize] = tier[v].saturating_add(1).min(u8::MAX - 1);
                queue.push(u);
            }
        }
    }
    tier
}

/// ns-3 rate text: exact, in the largest of Gbps/Mbps/Kbps/bps that divides the rate.
fn rate_text(bw: Bandwidth) -> String {
    let b = bw.bps();
    for (div, unit) in [(1_000_000_000, "Gbps"), (1_000_000, "Mbps"), (1_000, "Kbps")] {
        if b.is_multiple_of(div) {
            return format!("{}{unit}", b / div);
        }
    }
    format!("{b}bps")
}

fn delay_text(t: SimTime) -> String {
    if t.as_ps().is_multiple_of(1000) {
        format!("{}ns", t.as_ps() / 1000)
    } else {
        format!("{}ps", t.as_ps())
    }
}

/// Writes `t` as ns-3 topology text: the plain format, or SimAI's variant (with `gpu_type`
/// `H100`) when the topology has NVSwitches. Each cable is written once, from the direction whose
/// source id is lower; cables are assumed symmetric, as every generator builds them.
pub fn to_ns3(t: &Topology) -> String {
    to_ns3_with_gpu_type(t, "H100")
}

/// [`to_ns3`] with the GPU type SimAI's header carries.
pub fn to_ns3_with_gpu_type(t: &Topology, gpu_type: &str) -> String {
    let nvs: Vec<usize> = (0..t.num_nodes()).filter(|&i| t.nodes()[i] == NodeKind::NvSwitch).collect();
    let sws: Vec<usize> = (0..t.num_nodes())
        .filter(|&i| matches!(t.nodes()[i], NodeKind::Switch { .. }))
        .collect();
    let cables: Vec<usize> = (0..t.num_links()).filter(|&i| t.links()[i].src < t.links()[i].dst).collect();
    let mut s = String::with_capacity(32 * (cables.len() + 2) + 8 * t.num_nodes());
    if nvs.is_empty() {
        let _ = writeln!(s, "{} {} {}", t.num_nodes(), sws.len(), cables.len());
    } else {
        let _ = writeln!(
            s,
            "{} {} {} {} {} {gpu_type}",
            t.num_nodes(),
            t.gpus_per_server(),
            nvs.len(),
            sws.len(),
            cables.len()
        );
    }
    let ids: Vec<String> = nvs.iter().chain(&sws).map(|i| i.to_string()).collect();
    let _ = writeln!(s, "{}", ids.join(" "));
    for &i in &cables {
        let l = &t.links()[i];
        let e = t.link_error_rate(llmsim_core::LinkId::from_idx(i));
        let _ = writeln!(s, "{} {} {} {} {e}", l.src, l.dst, rate_text(l.bandwidth), delay_text(l.latency));
    }
    // The switches whose tier an import would not read from the hop distance, after the links.
    let hops = hop_tiers(
        t.num_nodes(),
        t.num_hosts(),
        cables
            .iter()
            .map(|&i| &t.links()[i])
            .filter(|l| l.kind != LinkKind::NvLink)
            .map(|l| (l.src.0, l.dst.0)),
    );
    let differ: Vec<String> = sws
        .iter()
        .filter_map(|&i| match t.nodes()[i] {
            NodeKind::Switch { tier } if tier != if hops[i] == u8::MAX { 1 } else { hops[i] } => Some(format!("{i}:{tier}")),
            _ => None,
        })
        .collect();
    for chunk in differ.chunks(32) {
        let _ = writeln!(s, "{TIER_LINE} {}", chunk.join(" "));
    }
    s
}

/// Writes [`to_ns3`] to a file.
///
/// # Errors
/// `TopoError::Parse` (line 0) naming the file when it cannot be written.
pub fn write_ns3(t: &Topology, path: &Path) -> Result<(), TopoError> {
    std::fs::write(path, to_ns3(t)).map_err(|e| TopoError::Parse {
        file: path.display().to_string(),
        line: 0,
        message: format!("cannot write: {e}"),
    })
}
