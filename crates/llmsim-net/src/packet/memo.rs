//! Wormhole memoization of unsteady episodes (Long et al., NSDI'26 §4.2-§4.4).
//!
//! - **Key: the flow-conflict graph (FCG)** of a partition when its flow set changes, in
//!   incidence form: one vertex per flow (weight: its rate over its line rate, in 5% steps, its
//!   line rate, its path delays, its private bottleneck, whether it has had an ACK yet) and one
//!   per link that two or more of its flows cross (weight: rate and a coarse queue occupancy);
//!   an edge joins a flow to a shared link, labelled data or ACK direction. The paper's
//!   flow-to-flow FCG (edge weight: the number and capacity of shared links) follows from it;
//!   the incidence form also tells a link shared by three flows from three links shared by
//!   pairs, which the flow-to-flow graph cannot.
//! - **Canonical form:** 1-WL colour refinement gives an invariant hash (the same under any
//!   relabelling of flows and links); graphs are stored with their vertices in refined-colour
//!   order. Two graphs with the same hash are equal only when an exact weighted isomorphism is
//!   found (individualisation-refinement with backtracking, bounded; a search that runs out of
//!   budget is a miss, never a false hit). The isomorphism maps the stored per-vertex values
//!   onto the new flows.
//! - **Value:** the transient's duration up to steady state, and per flow the bytes it moved,
//!   its steady rate and its congestion-control state at that point. Episodes that end in a
//!   completion instead (short flows) are stored under a second key, the graph with every
//!   flow's bytes left: the stretch from a checkpoint to the completion (`wormhole/episodes.rs`).
//! - **Database:** in memory, saved to and loaded from SQLite (`wormhole_memo` table) so runs of
//!   a sweep share it. Entries carry a context hash (the packet config that shapes the dynamics:
//!   CC parameters, MTU, buffers, θ, l, the sample interval; not the seed) and are only used
//!   under the same context.

use std::collections::HashMap;
use std::path::Path;

use super::PacketError;

/// Edge roles: the flow's data path or its ACK path crosses the link.
pub(crate) const ROLE_DATA: u8 = 0;
pub(crate) const ROLE_ACK: u8 = 1;

/// Bumped when the graph or value encoding changes (older rows are then never matched). 2: flow
/// labels count the ACK streams on the flow's data links and its priority class (2026-11-27).
/// 3: an episode of a contended DCQCN partition ends later, never in fast recovery or below
/// line rate off its fair shares (`wormhole/partition.rs`), so stored transients are longer.
const SCHEMA: u64 = 3;

/// Refinement calls one isomorphism search may spend, per vertex.
const SEARCH_BUDGET_PER_VERTEX: usize = 8;

#[inline]
pub(crate) fn mix(h: u64, x: u64) -> u64 {
    // splitmix64 finaliser over h ^ x·φ: fixed, platform-independent (the hash goes to disk).
    let mut z = h ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a byte string (the config fingerprint).
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h, SCHEMA)
}

/// A flow-conflict graph in incidence form: vertices `0..nf` are flows, `nf..` shared links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fcg {
    labels: Vec<u64>,
    nf: u32,
    /// (flow, link vertex, role), sorted.
    edges: Vec<(u32, u32, u8)>,
}

/// One flow as the graph builder sees it.
pub(crate) struct FlowDesc<'a> {
    pub label: u64,
    pub data: &'a [u32],
    pub ack: &'a [u32],
}

impl Fcg {
    /// Builds the graph of `flows`; `link_label(l)` weighs a shared link `l`. Returns the graph
    /// (in input order, not yet canonical).
    pub(crate) fn build(flows: &[FlowDesc<'_>], mut link_label: impl FnMut(u32) -> u64) -> Fcg {
        let mut uses: Vec<(u32, u32, u8)> = Vec::new();
        for (f, d) in flows.iter().enumerate() {
            uses.extend(d.data.iter().map(|&l| (l, f as u32, ROLE_DATA)));
            uses.extend(d.ack.iter().map(|&l| (l, f as u32, ROLE_ACK)));
        }
        uses.sort_unstable();
        uses.dedup();
        let nf = flows.len() as u32;
        let mut labels: Vec<u64> = flows.iter().map(|d| mix(1, d.label)).collect();
        let mut edges = Vec::new();
        for run in uses.chunk_by(|a, b| a.0 == b.0) {
            let distinct = {
                let mut fs: Vec<u32> = run.iter().map(|u| u.1).collect();
                fs.dedup();
                fs.len()
            };
            if distinct >= 2 {
                let v = labels.len() as u32;
                labels.push(mix(2, link_label(run[0].0)));
                edges.extend(run.iter().map(|&(_, f, r)| (f, v, r)));
            }
        }
        edges.sort_unstable();
        Fcg { labels, nf, edges }
    }

    pub fn num_flows(&self) -> usize {
        self.nf as usize
    }

    /// This graph with each flow vertex's weight combined with `extra[v]` (e.g. its bytes left,
    /// for episodes that end in a completion).
    pub(crate) fn with_flow_weights(&self, extra: &[u64]) -> Fcg {
        let mut g = self.clone();
        for (v, &x) in extra.iter().enumerate() {
            g.labels[v] = mix(mix(3, g.labels[v]), x);
        }
        g
    }

    fn adjacency(&self) -> Vec<Vec<(u32, u8)>> {
        let mut adj = vec![Vec::new(); self.labels.len()];
        for &(f, l, r) in &self.edges {
            adj[f as usize].push((l, r));
            adj[l as usize].push((f, r));
        }
        adj
    }

    /// The invariant hash and the canonical vertex order (refined colour, then input index).
    pub fn canonical(&self) -> (u64, Vec<u32>) {
        let adj = self.adjacency();
        let mut colors = initial_colors(&self.labels);
        let sigs = refine(&adj, &mut colors);
        let mut sorted = sigs.clone();
        sorted.sort_unstable();
        let mut h = mix(
            mix(mix(SCHEMA, u64::from(self.nf)), self.labels.len() as u64),
            self.edges.len() as u64,
        );
        for s in sorted {
            h = mix(h, s);
        }
        let mut order: Vec<u32> = (0..self.labels.len() as u32).collect();
        // Flows stay first: colours of flows and links never mix (their labels differ by kind).
        order.sort_by_key(|&v| (v >= self.nf, colors[v as usize], v));
        (h, order)
    }

    /// This graph with its vertices renumbered: vertex `order[i]` becomes `i`. `order` must
    /// keep flows before links.
    pub fn relabel(&self, order: &[u32]) -> Fcg {
        let mut pos = vec![0u32; order.len()];
        for (i, &v) in order.iter().enumerate() {
            pos[v as usize] = i as u32;
        }
        let labels = order.iter().map(|&v| self.labels[v as usize]).collect();
        let mut edges: Vec<_> = self.edges.iter().map(|&(f, l, r)| (pos[f as usize], pos[l as usize], r)).collect();
        edges.sort_unstable();
        Fcg {
            labels,
            nf: self.nf,
            edges,
        }
    }

    /// An exact weighted isomorphism from `self` onto `other`: `m[v]` is the vertex of `other`
    /// that `v` maps to. `None` when there is none, or when the bounded search gave up.
    pub fn isomorphism(&self, other: &Fcg) -> Option<Vec<u32>> {
        if self.nf != other.nf || self.labels.len() != other.labels.len() || self.edges.len() != other.edges.len() {
            return None;
        }
        // Two canonical forms built the same way (flows submitted in the same roles) are often
        // equal outright: then the identity is an isomorphism, and no search is needed.
        if self.labels == other.labels && self.edges == other.edges {
            return Some((0..self.labels.len() as u32).collect());
        }
        let mut a = self.labels.clone();
        let mut b = other.labels.clone();
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            return None;
        }
        // Refine the disjoint union, so colours of the two sides are comparable.
        let n = self.labels.len();
        let mut adj = self.adjacency();
        for mut row in other.adjacency() {
            for x in &mut row {
                x.0 += n as u32;
            }
            adj.push(row);
        }
        let mut labels = self.labels.clone();
        labels.extend_from_slice(&other.labels);
        let colors = initial_colors(&labels);
        let mut budget = SEARCH_BUDGET_PER_VERTEX * n + 64;
        search(self, other, &adj, colors, &mut budget)
    }

    /// Whether `m` maps `self` exactly onto `other` (labels and every edge with its role).
    fn check(&self, other: &Fcg, m: &[u32]) -> bool {
        if (0..self.labels.len()).any(|v| self.labels[v] != other.labels[m[v] as usize]) {
            return false;
        }
        let mut mapped: Vec<_> = self.edges.iter().map(|&(f, l, r)| (m[f as usize], m[l as usize], r)).collect();
        mapped.sort_unstable();
        mapped == other.edges
    }

    #[cfg_attr(not(feature = "memo-db"), allow(dead_code))] // the SQLite file's blob codec
    fn encode(&self, out: &mut Vec<u8>) {
        put(out, u64::from(self.nf));
        put(out, self.labels.len() as u64);
        put(out, self.edges.len() as u64);
        for &l in &self.labels {
            put(out, l);
        }
        for &(f, l, r) in &self.edges {
            put(out, u64::from(f) | u64::from(l) << 32);
            out.push(r);
        }
    }

    #[cfg_attr(not(feature = "memo-db"), allow(dead_code))] // the SQLite file's blob codec
    fn decode(b: &mut &[u8]) -> Option<Fcg> {
        let nf = u32::try_from(get(b)?).ok()?;
        let nv = usize::try_from(get(b)?).ok()?;
        let ne = usize::try_from(get(b)?).ok()?;
        if nv > 1 << 24 || ne > 1 << 26 {
            return None;
        }
        let labels = (0..nv).map(|_| get(b)).collect::<Option<Vec<_>>>()?;
        let mut edges = Vec::with_capacity(ne);
        for _ in 0..ne {
            let x = get(b)?;
            let (&r, rest) = b.split_first()?;
            *b = rest;
            edges.push((x as u32, (x >> 32) as u32, r));
        }
        Some(Fcg { labels, nf, edges })
    }
}

fn initial_colors(labels: &[u64]) -> Vec<u32> {
    let mut distinct = labels.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    labels.iter().map(|l| distinct.binary_search(l).expect("present") as u32).collect()
}

/// 1-WL colour refinement until the number of colours stops growing. Colours are ranks of
/// signature hashes, so they do not depend on vertex numbering. Returns the last signatures.
fn refine(adj: &[Vec<(u32, u8)>], colors: &mut [u32]) -> Vec<u64> {
    let n = colors.len();
    let mut ncolors = {
        let mut c = colors.to_vec();
        c.sort_unstable();
        c.dedup();
        c.len()
    };
    let mut nb: Vec<u64> = Vec::new();
    loop {
        let sigs: Vec<u64> = (0..n)
            .map(|v| {
                nb.clear();
                nb.extend(adj[v].iter().map(|&(u, r)| u64::from(colors[u as usize]) << 8 | u64::from(r)));
                nb.sort_unstable();
                nb.iter().fold(mix(0x5EED, u64::from(colors[v])), |h, &x| mix(h, x))
            })
            .collect();
        let next = initial_colors(&sigs);
        let k = next.iter().copied().max().map_or(0, |m| m as usize + 1);
        colors.copy_from_slice(&next);
        if k <= ncolors {
            return sigs;
        }
        ncolors = k;
    }
}

/// Individualisation-refinement over the disjoint union of `g` (vertices `0..n`) and `h`
/// (`n..2n`).
fn search(g: &Fcg, h: &Fcg, adj: &[Vec<(u32, u8)>], mut colors: Vec<u32>, budget: &mut usize) -> Option<Vec<u32>> {
    if *budget == 0 {
        return None;
    }
    *budget -= 1;
    refine(adj, &mut colors);
    let n = g.labels.len();
    let k = colors.iter().copied().max().map_or(0, |m| m as usize + 1);
    let mut count = vec![(0u32, 0u32); k];
    for (v, &c) in colors.iter().enumerate() {
        if v < n {
            count[c as usize].0 += 1;
        } else {
            count[c as usize].1 += 1;
        }
    }
    if count.iter().any(|&(a, b)| a != b) {
        return None;
    }
    // The smallest class with more than one vertex per side (lowest colour on ties).
    let pick = (0..k).filter(|&c| count[c].0 > 1).min_by_key(|&c| (count[c].0, c));
    let Some(c) = pick else {
        let mut of_color = vec![0u32; k];
        for v in n..2 * n {
            of_color[colors[v] as usize] = (v - n) as u32;
        }
        let m: Vec<u32> = (0..n).map(|v| of_color[colors[v] as usize]).collect();
        return g.check(h, &m).then_some(m);
    };
    let v = (0..n).find(|&v| colors[v] as usize == c).expect("class member");
    let fresh = k as u32;
    for w in (n..2 * n).filter(|&w| colors[w] as usize == c) {
        let mut next = colors.clone();
        next[v] = fresh;
        next[w] = fresh;
        if let Some(m) = search(g, h, adj, next, budget) {
            return Some(m);
        }
        if *budget == 0 {
            return None;
        }
    }
    None
}

/// Congestion-control state of a flow at steady state, carried over on a memo hit (sequence
/// numbers and INT records stay the flow's own).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CcSnap {
    pub rate: u64,
    pub alpha: f64,
    pub target: u64,
    pub rp_stage: u32,
    pub first_cnp: bool,
    pub inc_stage: u32,
    pub cur_rate: u64,
    pub u: f64,
    pub last_rtt: u64,
    pub rtt_diff: f64,
    pub d_alpha: f64,
}

/// What the transient of one flow produced.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct MemoFlow {
    /// Payload bytes acknowledged from the episode's start to steady state.
    pub bytes: u64,
    /// Steady rate R̂ (payload bit/s).
    pub rate_bps: f64,
    pub cc: CcSnap,
}

/// The value of an entry, per flow vertex of the stored (canonical) graph.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MemoValue {
    pub t_conv_ps: u64,
    pub flows: Vec<MemoFlow>,
}

impl MemoValue {
    #[cfg_attr(not(feature = "memo-db"), allow(dead_code))] // the SQLite file's blob codec
    fn encode(&self, out: &mut Vec<u8>) {
        put(out, self.t_conv_ps);
        put(out, self.flows.len() as u64);
        for f in &self.flows {
            let c = &f.cc;
            for x in [
                f.bytes,
                f.rate_bps.to_bits(),
                c.rate,
                c.alpha.to_bits(),
                c.target,
                u64::from(c.rp_stage),
                u64::from(c.first_cnp),
                u64::from(c.inc_stage),
                c.cur_rate,
                c.u.to_bits(),
                c.last_rtt,
                c.rtt_diff.to_bits(),
                c.d_alpha.to_bits(),
            ] {
                put(out, x);
            }
        }
    }

    #[cfg_attr(not(feature = "memo-db"), allow(dead_code))] // the SQLite file's blob codec
    fn decode(b: &mut &[u8]) -> Option<MemoValue> {
        let t_conv_ps = get(b)?;
        let n = usize::try_from(get(b)?).ok()?;
        if n > 1 << 24 {
            return None;
        }
        let mut flows = Vec::with_capacity(n);
        for _ in 0..n {
            let mut x = [0u64; 13];
            for v in &mut x {
                *v = get(b)?;
            }
            flows.push(MemoFlow {
                bytes: x[0],
                rate_bps: f64::from_bits(x[1]),
                cc: CcSnap {
                    rate: x[2],
                    alpha: f64::from_bits(x[3]),
                    target: x[4],
                    rp_stage: x[5] as u32,
                    first_cnp: x[6] != 0,
                    inc_stage: x[7] as u32,
                    cur_rate: x[8],
                    u: f64::from_bits(x[9]),
                    last_rtt: x[10],
                    rtt_diff: f64::from_bits(x[11]),
                    d_alpha: f64::from_bits(x[12]),
                },
            });
        }
        Some(MemoValue { t_conv_ps, flows })
    }
}

#[cfg_attr(not(feature = "memo-db"), allow(dead_code))] // the SQLite file's blob codec
fn put(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}

#[cfg_attr(not(feature = "memo-db"), allow(dead_code))] // the SQLite file's blob codec
fn get(b: &mut &[u8]) -> Option<u64> {
    let (head, rest) = b.split_first_chunk::<8>()?;
    *b = rest;
    Some(u64::from_le_bytes(*head))
}

struct Entry {
    graph: Fcg,
    value: MemoValue,
}

/// The memo database: canonical FCG -> transient outcome, per context.
#[derive(Default)]
pub struct MemoDb {
    map: HashMap<(u64, u64), Vec<Entry>>,
    len: usize,
}

impl MemoDb {
    /// Entries held (all contexts).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry equivalent to `g` (hash `hash`, any vertex order) and the map from `g`'s
    /// vertices to the entry's.
    pub(crate) fn lookup(&self, context: u64, hash: u64, g: &Fcg) -> Option<(&MemoValue, Vec<u32>)> {
        let cands = self.map.get(&(context, hash))?;
        cands.iter().find_map(|e| g.isomorphism(&e.graph).map(|m| (&e.value, m)))
    }

    /// Stores `value` for the canonical graph `g`, unless an equivalent entry exists (the first
    /// one stays: deterministic). True when stored.
    pub(crate) fn insert(&mut self, context: u64, hash: u64, g: Fcg, value: MemoValue) -> bool {
        let cands = self.map.entry((context, hash)).or_default();
        if cands.iter().any(|e| g.isomorphism(&e.graph).is_some()) {
            return false;
        }
        cands.push(Entry { graph: g, value });
        self.len += 1;
        true
    }

    /// Reads every entry of the SQLite file at `path` (a missing file is an empty database).
    ///
    /// # Errors
    /// `PacketError::MemoDb` when the file is not a readable memo database.
    #[cfg(feature = "memo-db")]
    pub fn load(path: &Path) -> Result<MemoDb, PacketError> {
        let mut db = MemoDb::default();
        if !path.exists() {
            return Ok(db);
        }
        let err = |e: rusqlite::Error| memo_err(path, &e.to_string());
        let conn = open(path).map_err(err)?;
        create(&conn).map_err(err)?;
        let mut st = conn
            .prepare("SELECT context, hash, graph, value FROM wormhole_memo ORDER BY rowid")
            .map_err(err)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                ))
            })
            .map_err(err)?;
        for row in rows {
            let (ctx, hash, g, v) = row.map_err(err)?;
            let graph = Fcg::decode(&mut g.as_slice()).ok_or_else(|| memo_err(path, "a graph blob does not decode"))?;
            let value = MemoValue::decode(&mut v.as_slice()).ok_or_else(|| memo_err(path, "a value blob does not decode"))?;
            if value.flows.len() != graph.num_flows() {
                return Err(memo_err(path, "an entry's value does not match its graph"));
            }
            db.insert(ctx as u64, hash as u64, graph, value);
        }
        Ok(db)
    }

    /// Writes every entry to the SQLite file at `path` (rows already there are kept; an
    /// equivalent row is not added twice). Returns the file's size in bytes.
    ///
    /// # Errors
    /// `PacketError::MemoDb` when the file cannot be written.
    #[cfg(feature = "memo-db")]
    pub fn save(&self, path: &Path) -> Result<u64, PacketError> {
        let err = |e: rusqlite::Error| memo_err(path, &e.to_string());
        let mut conn = open(path).map_err(err)?;
        create(&conn).map_err(err)?;
        let tx = conn.transaction().map_err(err)?;
        {
            let mut st = tx
                .prepare("INSERT OR IGNORE INTO wormhole_memo (context, hash, graph, value) VALUES (?1, ?2, ?3, ?4)")
                .map_err(err)?;
            let mut keys: Vec<&(u64, u64)> = self.map.keys().collect();
            keys.sort_unstable();
            for k in keys {
                for e in &self.map[k] {
                    let (mut g, mut v) = (Vec::new(), Vec::new());
                    e.graph.encode(&mut g);
                    e.value.encode(&mut v);
                    st.execute(rusqlite::params![k.0 as i64, k.1 as i64, g, v]).map_err(err)?;
                }
            }
        }
        tx.commit().map_err(err)?;
        drop(conn);
        std::fs::metadata(path).map(|m| m.len()).map_err(|e| memo_err(path, &e.to_string()))
    }

    /// Without the `memo-db` feature there is no SQLite: a database file is an error that says
    /// how to get one.
    ///
    /// # Errors
    /// Always `PacketError::MemoDb`.
    #[cfg(not(feature = "memo-db"))]
    pub fn load(path: &Path) -> Result<MemoDb, PacketError> {
        Err(memo_err(path, NO_SQLITE))
    }

    /// See [`MemoDb::load`]: without the `memo-db` feature a database file is an error.
    ///
    /// # Errors
    /// Always `PacketError::MemoDb`.
    #[cfg(not(feature = "memo-db"))]
    pub fn save(&self, path: &Path) -> Result<u64, PacketError> {
        Err(memo_err(path, NO_SQLITE))
    }
}

/// Opens the file, waiting up to a minute for a lock: the runs of a sweep (threads or
/// processes) save to one database as they finish.
#[cfg(feature = "memo-db")]
fn open(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(60))?;
    Ok(conn)
}

#[cfg(feature = "memo-db")]
fn create(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS wormhole_memo (
             context INTEGER NOT NULL, hash INTEGER NOT NULL, graph BLOB NOT NULL, value BLOB NOT NULL,
             PRIMARY KEY (context, hash, graph));",
    )
}

#[cfg(not(feature = "memo-db"))]
const NO_SQLITE: &str = "this build has no SQLite; build llmsim-net with its `memo-db` feature \
     (the llmsim CLI and the Python package enable it), or drop fast_forward.memo_db";

fn memo_err(path: &Path, message: &str) -> PacketError {
    PacketError::MemoDb {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A graph from flows given as (label, data links, ack links); shared links weigh their id's
    /// rate class `rates[l]`.
    fn graph(flows: &[(u64, Vec<u32>, Vec<u32>)], rates: &[u64]) -> Fcg {
        let d: Vec<FlowDesc> = flows
            .iter()
            .map(|(l, a, b)| FlowDesc {
                label: *l,
                data: a,
                ack: b,
            })
            .collect();
        Fcg::build(&d, |l| rates[l as usize])
    }

    fn random_flows(nf: usize, nl: usize, seed: u64) -> Vec<(u64, Vec<u32>, Vec<u32>)> {
        let mut rng = llmsim_core::SimRng::seed(seed);
        (0..nf)
            .map(|_| {
                let hops = 1 + rng.below(4) as usize;
                let data: Vec<u32> = (0..hops).map(|_| rng.below(nl as u64) as u32).collect();
                let ack: Vec<u32> = (0..hops).map(|_| rng.below(nl as u64) as u32).collect();
                (rng.below(3), data, ack)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Relabelling flows and links changes neither the hash nor equivalence, and the
        /// isomorphism found maps every flow onto its relabelled self (or onto a twin with the
        /// same label and links).
        #[test]
        fn canonical_form_is_invariant_under_relabelling(nf in 1usize..12, nl in 2usize..10, seed in 0u64..1000, perm_seed in 0u64..1000) {
            let flows = random_flows(nf, nl, seed);
            let rates: Vec<u64> = (0..nl as u64).map(|l| 100 + l % 3).collect();
            let g = graph(&flows, &rates);
            let mut rng = llmsim_core::SimRng::seed(perm_seed);
            // Shuffle flows and rename links (keeping each link's rate).
            let mut fperm: Vec<usize> = (0..nf).collect();
            for i in (1..nf).rev() { fperm.swap(i, rng.below(i as u64 + 1) as usize); }
            let mut lperm: Vec<u32> = (0..nl as u32).collect();
            for i in (1..nl).rev() { lperm.swap(i, rng.below(i as u64 + 1) as usize); }
            let mut rates2 = vec![0; nl];
            for l in 0..nl { rates2[lperm[l] as usize] = rates[l]; }
            let flows2: Vec<_> = fperm.iter().map(|&f| {
                let (lab, a, b) = &flows[f];
                (*lab, a.iter().map(|&l| lperm[l as usize]).collect(), b.iter().map(|&l| lperm[l as usize]).collect())
            }).collect();
            let h = graph(&flows2, &rates2);
            let (ha, oa) = g.canonical();
            let (hb, ob) = h.canonical();
            prop_assert_eq!(ha, hb);
            let (cg, ch) = (g.relabel(&oa), h.relabel(&ob));
            let m = cg.isomorphism(&ch);
            prop_assert!(m.is_some(), "relabelled graphs are isomorphic");
            let m = m.unwrap();
            prop_assert!(cg.check(&ch, &m));
            // A flow vertex maps to a flow vertex with the same label.
            for &w in &m[..nf] { prop_assert!((w as usize) < nf); }
        }

        /// Changing one flow's weight, or one link's rate, is never matched.
        #[test]
        fn a_changed_weight_is_never_matched(nf in 2usize..10, nl in 2usize..8, seed in 0u64..1000, which in 0usize..10) {
            let flows = random_flows(nf, nl, seed);
            let rates: Vec<u64> = vec![100; nl];
            let g = graph(&flows, &rates);
            let mut flows2 = flows.clone();
            flows2[which % nf].0 += 7;
            let h = graph(&flows2, &rates);
            prop_assert!(g.isomorphism(&h).is_none());
        }
    }

    #[test]
    fn distinguishes_a_three_way_share_from_three_pairwise_shares() {
        // Three flows on one link vs a triangle of pairwise-shared links: the same flow-to-flow
        // conflict graph (a triangle, weight 1), different dynamics.
        let one = graph(&[(0, vec![0], vec![]), (0, vec![0], vec![]), (0, vec![0], vec![])], &[1; 3]);
        let tri = graph(
            &[(0, vec![0, 2], vec![]), (0, vec![0, 1], vec![]), (0, vec![1, 2], vec![])],
            &[1; 3],
        );
        assert_ne!(one.canonical().0, tri.canonical().0);
        assert!(one.isomorphism(&tri).is_none());
    }

    #[test]
    fn a_hash_collision_is_not_a_match() {
        // 1-WL cannot tell a 6-cycle from two triangles (both 2-regular): flows are cycle
        // vertices, each shared link an edge between two flows.
        let cycle = |edges: &[(u32, u32)]| {
            let mut flows: Vec<(u64, Vec<u32>, Vec<u32>)> = (0..6).map(|_| (0, vec![], vec![])).collect();
            for (i, &(a, b)) in edges.iter().enumerate() {
                flows[a as usize].1.push(i as u32);
                flows[b as usize].1.push(i as u32);
            }
            graph(&flows, &[5; 6])
        };
        let c6 = cycle(&[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)]);
        let two_c3 = cycle(&[(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]);
        assert_eq!(c6.canonical().0, two_c3.canonical().0, "WL hashes collide here");
        assert!(c6.isomorphism(&two_c3).is_none(), "the exact check tells them apart");
        assert!(c6.isomorphism(&c6.clone()).is_some());
    }

    #[test]
    fn a_large_symmetric_star_is_matched_without_blowing_the_budget() {
        // A 200-flow incast: every flow alike; the search individualises one flow per level.
        let flows: Vec<_> = (0..200u32).map(|f| (3, vec![f + 1, 0], vec![])).collect();
        let rates: Vec<u64> = vec![1; 201];
        let g = graph(&flows, &rates);
        let (_, o) = g.canonical();
        let c = g.relabel(&o);
        assert!(c.isomorphism(&g).is_some());
    }

    #[test]
    fn encoding_round_trips_and_the_database_survives_a_file() {
        let g = graph(&[(1, vec![0, 1], vec![2]), (2, vec![1], vec![0, 2])], &[4; 3]);
        let (h, o) = g.canonical();
        let c = g.relabel(&o);
        let v = MemoValue {
            t_conv_ps: 123_000,
            flows: vec![
                MemoFlow {
                    bytes: 10,
                    rate_bps: 1.5e9,
                    cc: CcSnap {
                        rate: 7,
                        alpha: 0.25,
                        first_cnp: true,
                        ..CcSnap::default()
                    },
                },
                MemoFlow {
                    bytes: 20,
                    rate_bps: 2.5e9,
                    cc: CcSnap::default(),
                },
            ],
        };
        let mut db = MemoDb::default();
        assert!(db.insert(9, h, c.clone(), v.clone()));
        assert!(!db.insert(9, h, g.clone(), v.clone()), "an equivalent graph is not stored twice");
        assert_eq!(db.lookup(9, h, &g).map(|(val, _)| val), Some(&v));
        let dir = std::env::temp_dir().join(format!("llmsim-memo-{}", std::process::id()));
        // Without SQLite (`memo-db` off) the file operations fail with an error naming the
        // feature, and the rest of this test needs them.
        #[cfg(not(feature = "memo-db"))]
        {
            let e = db.save(&dir.join("memo.db")).unwrap_err().to_string();
            assert!(e.contains("memo-db"), "{e}");
        }
        #[cfg(feature = "memo-db")]
        {
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("memo.db");
            let _ = std::fs::remove_file(&path);
            let size = db.save(&path).unwrap();
            assert!(size > 0);
            let back = MemoDb::load(&path).unwrap();
            assert_eq!(back.len(), 1);
            let (val, m) = back.lookup(9, h, &g).expect("hit");
            assert_eq!(val, &v);
            assert!(g.check(&c, &m));
            assert!(back.lookup(8, h, &g).is_none(), "another context does not match");
            // Saving again adds nothing.
            back.save(&path).unwrap();
            assert_eq!(MemoDb::load(&path).unwrap().len(), 1);
            std::fs::write(&path, b"not a database").unwrap();
            assert!(matches!(MemoDb::load(&path), Err(PacketError::MemoDb { .. })));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
