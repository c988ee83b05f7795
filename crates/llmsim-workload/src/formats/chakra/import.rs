//! Import: per-rank traces into a workload of lockstep units (see the module docs).

use super::*;

/// A node of one rank after validation, before folding ranks into units.
#[derive(Clone, Debug, PartialEq)]
struct RNode {
    kind: RKind,
    stream: Stream,
    deps: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
enum RKind {
    Comp { seg: u32 },
    Coll { op: CollectiveOp, bytes: u64, pg: u32 },
    Send { peer: u32, bytes: u64, tag: u64 },
    Recv { peer: u32, bytes: u64, tag: u64 },
}

/// A rank-level process group.
struct RPg {
    name: String,
    ranks: Vec<u32>,
    /// The kind llmsim wrote (`llmsim_group`), if any.
    kind: Option<Group>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SegKey {
    name_id: u32,
    duration_ps: Option<u64>,
    flops: u64,
    model_flops: Option<u64>,
    bytes: u64,
    memory: bool,
}

struct Interner {
    names: HashMap<String, u32>,
    segs: HashMap<SegKey, u32>,
    segments: Vec<Segment>,
}

fn attr<'a>(n: &'a pb::Node, name: &str) -> Option<&'a AttributeProto> {
    n.attr.iter().find(|a| a.name == name)
}

pub(super) fn meta_attr<'a>(m: &'a GlobalMetadata, name: &str) -> Option<&'a AttributeProto> {
    m.attr.iter().find(|a| a.name == name)
}

fn group_from_name(s: &str) -> Option<Group> {
    Some(match s {
        "tp" => Group::Tp,
        "cp" => Group::Cp,
        "ep" => Group::Ep,
        "dp" => Group::Dp,
        "edp" => Group::ExpertDp,
        "ep_inter" => Group::EpInter,
        "ep_intra" => Group::EpIntra,
        "embd" => Group::Embedding,
        _ => return None,
    })
}

fn stream_from(v: i128) -> Option<Stream> {
    Some(match v {
        0 => Stream::Compute,
        1 => Stream::PpSend,
        2 => Stream::Dp,
        3 => Stream::Free,
        4 => Stream::Offload,
        _ => return None,
    })
}

/// Imports per-rank traces into a workload the simulator runs.
///
/// # Errors
/// A node that cannot be simulated, a dependency on an unknown id, a cycle, process groups the
/// JSON lacks (all of them, once, with the ranks that use them), a rank outside its own group.
pub fn import(traces: &[RankTrace], groups: &BTreeMap<String, Vec<u32>>, opts: &ImportOptions) -> Result<Imported, ImportError> {
    let mut imp = Importer::new(traces.len() as u32, groups, opts)?;
    for t in traces {
        imp.add(t)?;
    }
    imp.finish()
}

/// [`read_prefix`] and [`import`] one rank at a time, so that only the converted programs, not
/// every decoded trace, are held in memory.
///
/// # Errors
/// As [`read_prefix`] and [`import`].
pub fn import_prefix(prefix: &Path, groups: &BTreeMap<String, Vec<u32>>, opts: &ImportOptions) -> Result<Imported, ImportError> {
    let path = |r: u32| PathBuf::from(format!("{}.{r}.et", prefix.display()));
    let n = (0..).find(|r| !path(*r).exists()).unwrap_or(0);
    if n == 0 {
        return Err(ImportError::Invalid(format!(
            "no Chakra trace {}.0.et; give the prefix of files named <prefix>.<rank>.et",
            prefix.display()
        )));
    }
    let mut imp = Importer::new(n, groups, opts)?;
    // Read and decode a batch of ranks in parallel, convert them in rank order (deterministic).
    let batch = std::thread::available_parallelism().map_or(1, |x| x.get()).clamp(1, 16) as u32;
    let read = |r: u32| -> Result<RankTrace, ImportError> {
        let p = path(r);
        let bytes = std::fs::read(&p).map_err(|e| io(&p, e))?;
        decode(&bytes, &p.display().to_string(), r)
    };
    let mut r0 = 0;
    while r0 < n {
        let r1 = (r0 + batch).min(n);
        let traces: Vec<Result<RankTrace, ImportError>> = if r1 - r0 == 1 {
            vec![read(r0)]
        } else {
            std::thread::scope(|sc| {
                let hs: Vec<_> = (r0..r1).map(|r| sc.spawn(move || read(r))).collect();
                hs.into_iter().map(|h| h.join().expect("a decoding thread panicked")).collect()
            })
        };
        for t in traces {
            imp.add(&t?)?;
        }
        r0 = r1;
    }
    imp.finish()
}

/// Converts ranks one by one ([`Importer::add`]), then folds them into units.
pub struct Importer {
    n: u32,
    pgs: Vec<RPg>,
    pg_index: HashMap<String, u32>,
    world: u32,
    missing: BTreeMap<String, Vec<u32>>,
    it: Interner,
    progs: Vec<Vec<RNode>>,
    hint: Option<Layout>,
    info: Option<TraceInfo>,
    opts: ImportOptions,
}

impl Importer {
    /// An importer for `ranks` ranks and the communicator groups.
    ///
    /// # Errors
    /// No ranks; a group that lists a rank twice or a rank the traces do not have.
    pub fn new(ranks: u32, groups: &BTreeMap<String, Vec<u32>>, opts: &ImportOptions) -> Result<Self, ImportError> {
        let n = ranks;
        if n == 0 {
            return Err(ImportError::Invalid("no ranks".into()));
        }
        // Rank-level process groups: the JSON's, in its (sorted) order, then the world group.
        let mut pgs: Vec<RPg> = Vec::new();
        let mut pg_index: HashMap<String, u32> = HashMap::new();
        for (name, ranks) in groups {
            if let Some(r) = ranks.iter().find(|r| **r >= n) {
                return Err(ImportError::CommGroups {
                    file: opts.groups_file.clone().unwrap_or_default(),
                    message: format!("group {name:?} lists rank {r} but the traces have ranks 0-{}", n - 1),
                });
            }
            let mut sorted = ranks.clone();
            sorted.sort_unstable();
            if sorted.windows(2).any(|w| w[0] == w[1]) || ranks.is_empty() {
                return Err(ImportError::CommGroups {
                    file: opts.groups_file.clone().unwrap_or_default(),
                    message: format!("group {name:?} must list distinct ranks"),
                });
            }
            pg_index.insert(name.clone(), pgs.len() as u32);
            pgs.push(RPg {
                name: name.clone(),
                ranks: ranks.clone(),
                kind: None,
            });
        }
        let world = pgs.len() as u32;
        pgs.push(RPg {
            name: "world".into(),
            ranks: (0..n).collect(),
            kind: None,
        });
        Ok(Importer {
            n,
            pgs,
            pg_index,
            world,
            missing: BTreeMap::new(),
            it: Interner {
                names: HashMap::new(),
                segs: HashMap::new(),
                segments: Vec::new(),
            },
            progs: Vec::with_capacity(n as usize),
            hint: None,
            info: None,
            opts: opts.clone(),
        })
    }

    /// Converts the next rank's trace (ranks in order 0, 1, ...).
    ///
    /// # Errors
    /// As [`import`].
    pub fn add(&mut self, t: &RankTrace) -> Result<(), ImportError> {
        if self.progs.len() as u32 >= self.n {
            return Err(ImportError::Invalid(format!("more than the {} ranks announced", self.n)));
        }
        if self.progs.is_empty() {
            self.hint = layout_hint(&t.metadata);
            self.info = TraceInfo::read(&t.metadata);
        }
        let p = convert_rank(
            t,
            self.n,
            &mut self.pgs,
            &self.pg_index,
            self.world,
            &mut self.missing,
            &mut self.it,
        )?;
        self.progs.push(p);
        Ok(())
    }

    /// Folds the ranks into units and builds the workload.
    ///
    /// # Errors
    /// Process groups the JSON lacks; fewer ranks added than announced.
    pub fn finish(self) -> Result<Imported, ImportError> {
        let n = self.n;
        if self.progs.len() as u32 != n {
            return Err(ImportError::Invalid(format!("{} of {n} ranks given", self.progs.len())));
        }
        if !self.missing.is_empty() {
            return Err(ImportError::MissingGroups {
                missing: self.missing.into_iter().collect(),
                groups_file: self.opts.groups_file.clone(),
            });
        }
        let (progs, pgs, hint) = (&self.progs, &self.pgs, self.hint);
        let mut candidates: Vec<u32> = (1..=n).rev().filter(|t| n.is_multiple_of(*t)).collect();
        if let Some(h) = hint
            && n.is_multiple_of(h.tp)
        {
            candidates.insert(0, h.tp);
        }
        let lanes = candidates
            .into_iter()
            .find(|&t| t == 1 || (0..n / t).all(|u| lanes_match(progs, pgs, t, u)))
            .unwrap_or(1);
        let units = n / lanes;
        let layout = match hint {
            Some(h) if h.tp == lanes && h.units() == units => h,
            _ => Layout {
                tp: lanes,
                cp: 1,
                dp: units,
                pp: 1,
                ep: 1,
                ep_spans_tp: false,
                ep_server_units: 0,
            },
        };
        let mut workload = build_units(progs, pgs, lanes, self.it.segments, &self.opts);
        if let Some(i) = &self.info {
            workload.microbatches = i.microbatches;
        }
        Ok(Imported {
            workload,
            layout,
            ranks: n,
            info: self.info,
        })
    }
}

fn layout_hint(m: &GlobalMetadata) -> Option<Layout> {
    match meta_attr(m, "llmsim_layout")?.value.as_ref()? {
        AttrValue::Int64List(l) if l.values.len() == 5 && l.values.iter().all(|v| *v >= 1 && *v <= u32::MAX as i64) => {
            let v: Vec<u32> = l.values.iter().map(|x| *x as u32).collect();
            Some(Layout {
                tp: v[0],
                cp: v[1],
                dp: v[2],
                pp: v[3],
                ep: v[4],
                ep_spans_tp: false,
                ep_server_units: 0,
            })
        }
        _ => None,
    }
}

fn convert_rank(
    t: &RankTrace,
    n: u32,
    pgs: &mut [RPg],
    pg_index: &HashMap<String, u32>,
    world: u32,
    missing: &mut BTreeMap<String, Vec<u32>>,
    it: &mut Interner,
) -> Result<Vec<RNode>, ImportError> {
    let rank = t.rank;
    let bad = |id: u64, message: String| ImportError::Node {
        file: t.file.clone(),
        rank,
        node: id,
        message,
    };
    // Ids -> positions.
    let mut pos: HashMap<u64, u32> = HashMap::with_capacity(t.nodes.len());
    for (i, nd) in t.nodes.iter().enumerate() {
        if pos.insert(nd.id, i as u32).is_some() {
            return Err(bad(nd.id, "duplicate node id".into()));
        }
    }
    let count = t.nodes.len();
    // Dependencies (by position), stream attribute.
    let mut deps: Vec<Vec<u32>> = Vec::with_capacity(count);
    for nd in &t.nodes {
        let mut d: Vec<u32> = Vec::with_capacity(nd.ctrl_deps.len() + nd.data_deps.len());
        for id in nd.ctrl_deps.iter().chain(&nd.data_deps) {
            match pos.get(id) {
                Some(p) => d.push(*p),
                None => return Err(bad(nd.id, format!("depends on node id {id}, which this trace does not have"))),
            }
        }
        d.sort_unstable();
        d.dedup();
        deps.push(d);
    }
    let order = topo_order(&t.nodes, &deps).map_err(|cycle| ImportError::Cycle {
        file: t.file.clone(),
        rank,
        cycle,
    })?;
    let mut new_pos = vec![0u32; count];
    for (k, &p) in order.iter().enumerate() {
        new_pos[p as usize] = k as u32;
    }
    let mut out: Vec<RNode> = Vec::with_capacity(count);
    let mut last_in_stream: [Option<u32>; Stream::COUNT] = [None; Stream::COUNT];
    for &p in &order {
        let nd = &t.nodes[p as usize];
        let int_attr = |name: &str| -> Result<Option<u64>, ImportError> {
            match attr(nd, name) {
                None => Ok(None),
                Some(a) => match a.as_i128() {
                    Some(v) if (0..=u64::MAX as i128).contains(&v) => Ok(Some(v as u64)),
                    Some(v) => Err(bad(nd.id, format!("attribute {name} = {v} is out of range"))),
                    None => Err(bad(nd.id, format!("attribute {name} must be an integer"))),
                },
            }
        };
        let stream_attr = match int_attr("llmsim_stream")? {
            None => None,
            Some(v) => Some(stream_from(v as i128).ok_or_else(|| bad(nd.id, format!("llmsim_stream {v}: valid 0-3")))?),
        };
        let is_cpu = matches!(attr(nd, "is_cpu_op").and_then(|a| a.as_i128()), Some(1));
        let comm_bytes = || -> Result<u64, ImportError> {
            let v = match int_attr("comm_size")? {
                Some(v) => v,
                None => int_attr("tensor_size")?.unwrap_or(0),
            };
            if v > crate::import::MAX_COMM_BYTES {
                return Err(bad(nd.id, format!("comm_size {v} is more than 2^50 bytes")));
            }
            Ok(v)
        };
        let (kind, default_stream) = match nd.r#type {
            node_type::COMP | node_type::MEM_LOAD | node_type::MEM_STORE | node_type::METADATA | node_type::INVALID => {
                let memory = matches!(nd.r#type, node_type::MEM_LOAD | node_type::MEM_STORE);
                let noop = matches!(nd.r#type, node_type::METADATA | node_type::INVALID);
                let duration_ps = match int_attr("llmsim_duration_ps")? {
                    Some(ps) => Some(ps),
                    None if noop => Some(0),
                    None if nd.duration_micros > 0 => Some(
                        nd.duration_micros
                            .checked_mul(1_000_000)
                            .ok_or_else(|| bad(nd.id, format!("duration_micros {} is out of range", nd.duration_micros)))?,
                    ),
                    None => None,
                };
                if let Some(ps) = duration_ps
                    && ps > MAX_DURATION_PS
                {
                    return Err(bad(nd.id, format!("duration {ps} ps is more than a day")));
                }
                let flops = if memory { 0 } else { int_attr("num_ops")?.unwrap_or(0) };
                let model_flops = int_attr("llmsim_model_flops")?.map(|m| m.min(flops));
                let bytes = int_attr("tensor_size")?.unwrap_or(0);
                let name = if nd.name.is_empty() { "comp" } else { nd.name.as_str() };
                let seg = intern_segment(
                    it,
                    SegSpec {
                        name,
                        duration_ps,
                        flops,
                        model_flops,
                        bytes,
                        memory,
                    },
                );
                let stream = if nd.r#type == node_type::COMP && !is_cpu {
                    Stream::Compute
                } else {
                    Stream::Free
                };
                (RKind::Comp { seg }, stream)
            }
            node_type::COMM_COLL => {
                let ct = attr(nd, "comm_type")
                    .ok_or_else(|| bad(nd.id, "COMM_COLL_NODE without comm_type".into()))?
                    .as_i128()
                    .ok_or_else(|| bad(nd.id, "comm_type must be an integer".into()))?;
                let (op, zero) = match ct as i64 {
                    comm_type::ALL_REDUCE => (CollectiveOp::AllReduce, false),
                    comm_type::REDUCE | comm_type::GATHER => (CollectiveOp::ReduceScatter, false),
                    comm_type::ALL_GATHER => (CollectiveOp::AllGather, false),
                    comm_type::SCATTER | comm_type::BROADCAST => (CollectiveOp::AllGather, false),
                    comm_type::ALL_TO_ALL => (CollectiveOp::AllToAll, false),
                    comm_type::REDUCE_SCATTER | comm_type::REDUCE_SCATTER_BLOCK => (CollectiveOp::ReduceScatter, false),
                    comm_type::BARRIER => (CollectiveOp::AllReduce, true),
                    _ => return Err(bad(nd.id, format!("comm_type {ct}: valid 0 (ALL_REDUCE) to 9 (BARRIER)"))),
                };
                if ct != ct as i64 as i128 {
                    return Err(bad(nd.id, format!("comm_type {ct}: valid 0 (ALL_REDUCE) to 9 (BARRIER)")));
                }
                let bytes = if zero { 0 } else { comm_bytes()? };
                let pg = match attr(nd, "pg_name") {
                    None => world,
                    Some(a) => {
                        let name = match &a.value {
                            Some(AttrValue::StringVal(s)) => s.clone(),
                            _ => match a.as_i128() {
                                Some(v) => v.to_string(),
                                None => return Err(bad(nd.id, "pg_name must be a string".into())),
                            },
                        };
                        if name.is_empty() {
                            world
                        } else {
                            match pg_index.get(name.as_str()) {
                                Some(g) => *g,
                                None => {
                                    let e = missing.entry(name).or_default();
                                    if e.last() != Some(&rank) {
                                        e.push(rank);
                                    }
                                    world
                                }
                            }
                        }
                    }
                };
                if !pgs[pg as usize].ranks.contains(&rank) {
                    return Err(bad(
                        nd.id,
                        format!(
                            "collective over pg_name {:?} (ranks {}) which does not include this rank",
                            pgs[pg as usize].name,
                            crate::import::rank_list(&sorted(&pgs[pg as usize].ranks))
                        ),
                    ));
                }
                if let Some(AttrValue::StringVal(k)) = attr(nd, "llmsim_group").and_then(|a| a.value.as_ref())
                    && let Some(g) = group_from_name(k)
                    && pgs[pg as usize].kind.is_none()
                {
                    pgs[pg as usize].kind = Some(g);
                }
                (RKind::Coll { op, bytes, pg }, Stream::Free)
            }
            node_type::COMM_SEND | node_type::COMM_RECV => {
                let send = nd.r#type == node_type::COMM_SEND;
                let key = if send { "comm_dst" } else { "comm_src" };
                let peer = int_attr(key)?.ok_or_else(|| {
                    bad(
                        nd.id,
                        format!("{} without {key}", if send { "COMM_SEND_NODE" } else { "COMM_RECV_NODE" }),
                    )
                })?;
                if peer >= n as u64 || peer == rank as u64 {
                    return Err(bad(
                        nd.id,
                        format!("{key} = {peer}: valid ranks 0-{} other than this rank {rank}", n - 1),
                    ));
                }
                let tag = int_attr("comm_tag")?.unwrap_or(0);
                let bytes = comm_bytes()?;
                let peer = peer as u32;
                if send {
                    (RKind::Send { peer, bytes, tag }, Stream::Free)
                } else {
                    (RKind::Recv { peer, bytes, tag }, Stream::Free)
                }
            }
            other => return Err(bad(nd.id, format!("node type {other}: valid 0-7 (Chakra NodeType)"))),
        };
        let stream = stream_attr.unwrap_or(default_stream);
        let mut d: Vec<u32> = deps[p as usize].iter().map(|q| new_pos[*q as usize]).collect();
        d.sort_unstable();
        // The stream predecessor is implied by stream order.
        if stream != Stream::Free
            && let Some(prev) = last_in_stream[stream as usize]
        {
            d.retain(|x| *x != prev);
        }
        if stream != Stream::Free {
            last_in_stream[stream as usize] = Some(out.len() as u32);
        }
        out.push(RNode { kind, stream, deps: d });
    }
    Ok(out)
}

fn sorted(v: &[u32]) -> Vec<u32> {
    let mut s = v.to_vec();
    s.sort_unstable();
    s
}

struct SegSpec<'a> {
    name: &'a str,
    duration_ps: Option<u64>,
    flops: u64,
    model_flops: Option<u64>,
    bytes: u64,
    memory: bool,
}

fn intern_segment(it: &mut Interner, g: SegSpec) -> u32 {
    let name_id = match it.names.get(g.name) {
        Some(i) => *i,
        None => {
            let i = it.names.len() as u32;
            it.names.insert(g.name.to_string(), i);
            i
        }
    };
    let key = SegKey {
        name_id,
        duration_ps: g.duration_ps,
        flops: g.flops,
        model_flops: g.model_flops,
        bytes: g.bytes,
        memory: g.memory,
    };
    if let Some(s) = it.segs.get(&key) {
        return *s;
    }
    let id = it.segments.len() as u32;
    let class = if g.memory || g.flops == 0 {
        OpClass::Elementwise
    } else {
        OpClass::Gemm
    };
    let op =
        |name: &'static str, pass: Pass, flops: u64, bytes: u64| crate::ops::compute(name, pass, class, flops as f64, bytes as f64, "");
    // llmsim's own traces say which FLOPs are model FLOPs; the rest (recomputation, optimizer)
    // is kept apart as a recompute-pass op so that MFU and HFU come out as in the original run.
    let mut ops = vec![op(
        if g.memory { "chakra.mem" } else { "chakra.comp" },
        Pass::Forward,
        g.model_flops.unwrap_or(g.flops),
        g.bytes,
    )];
    if let Some(m) = g.model_flops
        && g.flops > m
    {
        ops.push(op("chakra.comp.extra", Pass::Recompute, g.flops - m, 0));
    }
    it.segments.push(Segment {
        name: g.name.to_string(),
        pass: Pass::Forward,
        ops,
        duration: g.duration_ps.map(SimTime::from_ps),
    });
    it.segs.insert(key, id);
    id
}

/// A topological order that keeps trace order wherever the dependencies allow (Kahn's algorithm,
/// lowest position first); on a cycle, the ids around one cycle.
fn topo_order(nodes: &[pb::Node], deps: &[Vec<u32>]) -> Result<Vec<u32>, Vec<u64>> {
    let n = deps.len();
    let mut indeg: Vec<u32> = deps.iter().map(|d| d.len() as u32).collect();
    let mut start = vec![0u32; n + 1];
    for d in deps {
        for &q in d {
            start[q as usize + 1] += 1;
        }
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut rev = vec![0u32; start[n] as usize];
    for (i, d) in deps.iter().enumerate() {
        for &q in d {
            rev[fill[q as usize] as usize] = i as u32;
            fill[q as usize] += 1;
        }
    }
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<u32>> =
        (0..n as u32).filter(|i| indeg[*i as usize] == 0).map(std::cmp::Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = heap.pop() {
        order.push(i);
        for &d in &rev[start[i as usize] as usize..start[i as usize + 1] as usize] {
            indeg[d as usize] -= 1;
            if indeg[d as usize] == 0 {
                heap.push(std::cmp::Reverse(d));
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Every unplaced node has an unplaced dependency: walk them until one repeats.
    let mut seen = vec![u32::MAX; n];
    let mut cur = (0..n).find(|i| indeg[*i] > 0).expect("an unplaced node") as u32;
    let mut path: Vec<u32> = Vec::new();
    loop {
        if seen[cur as usize] != u32::MAX {
            let from = seen[cur as usize] as usize;
            let mut cyc: Vec<u64> = path[from..].iter().map(|p| nodes[*p as usize].id).collect();
            cyc.reverse(); // dependency order: each node runs before the next
            return Err(cyc);
        }
        seen[cur as usize] = path.len() as u32;
        path.push(cur);
        cur = *deps[cur as usize]
            .iter()
            .find(|q| indeg[**q as usize] > 0)
            .expect("an unplaced node has an unplaced dependency");
    }
}

/// Whether the `t` ranks of unit `u` run one program, lane-shifted.
fn lanes_match(progs: &[Vec<RNode>], pgs: &[RPg], t: u32, u: u32) -> bool {
    let r0 = u * t;
    let p0 = &progs[r0 as usize];
    // Groups used by lane 0 must be whole units (one group over the lanes) or lane-0 ranks only.
    for i in 1..t {
        let pi = &progs[(r0 + i) as usize];
        if pi.len() != p0.len() {
            return false;
        }
        for (a, b) in p0.iter().zip(pi) {
            if a.stream != b.stream || a.deps != b.deps {
                return false;
            }
            let ok = match (&a.kind, &b.kind) {
                (RKind::Comp { seg: x }, RKind::Comp { seg: y }) => x == y,
                (RKind::Coll { op: o1, bytes: b1, pg: g1 }, RKind::Coll { op: o2, bytes: b2, pg: g2 }) => {
                    o1 == o2 && b1 == b2 && {
                        let ra = &pgs[*g1 as usize].ranks;
                        let rb = &pgs[*g2 as usize].ranks;
                        (g1 == g2 && spans_units(ra, t))
                            || (ra.len() == rb.len() && ra.iter().zip(rb).all(|(x, y)| x % t == 0 && *y == x + i))
                    }
                }
                (
                    RKind::Send {
                        peer: x,
                        bytes: b1,
                        tag: t1,
                    },
                    RKind::Send {
                        peer: y,
                        bytes: b2,
                        tag: t2,
                    },
                )
                | (
                    RKind::Recv {
                        peer: x,
                        bytes: b1,
                        tag: t1,
                    },
                    RKind::Recv {
                        peer: y,
                        bytes: b2,
                        tag: t2,
                    },
                ) => x % t == 0 && *y == x + i && b1 == b2 && t1 == t2,
                _ => false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

/// Whether `ranks` is a list of whole units of `t` lanes, each in lane order.
fn spans_units(ranks: &[u32], t: u32) -> bool {
    ranks.len().is_multiple_of(t as usize)
        && ranks
            .chunks(t as usize)
            .all(|c| c[0] % t == 0 && c.iter().enumerate().all(|(j, r)| *r == c[0] + j as u32))
}

fn build_units(progs: &[Vec<RNode>], pgs: &[RPg], t: u32, segments: Vec<Segment>, opts: &ImportOptions) -> Workload {
    let units = progs.len() as u32 / t;
    let mut groups: Vec<ProcessGroup> = Vec::new();
    let mut group_index: HashMap<(Vec<u32>, bool), u32> = HashMap::new();
    // (rank-level group, spans lanes) -> unit-level group: the same for every unit using it.
    let mut by_rank_pg: HashMap<(u32, bool), u32> = HashMap::new();
    let mut stages: Vec<Program> = Vec::with_capacity(units as usize);
    for u in 0..units {
        let rp = &progs[(u * t) as usize];
        let mut prog = Program::new();
        let mut send_seq: HashMap<(u32, u64), u32> = HashMap::new();
        let mut recv_seq: HashMap<(u32, u64), u32> = HashMap::new();
        for nd in rp {
            let kind = match nd.kind {
                RKind::Comp { seg } => DagNodeKind::Comp { segment: seg },
                RKind::Coll { op, bytes, pg } => {
                    let g = &pgs[pg as usize];
                    let spans = t > 1 && spans_units(&g.ranks, t) && g.ranks.contains(&(u * t + 1));
                    if let Some(id) = by_rank_pg.get(&(pg, spans)) {
                        let kind = DagNodeKind::CommColl {
                            op,
                            group: Group::Pg(*id),
                            bytes,
                        };
                        prog.push(Node::imported(kind, nd.stream, Phase::Forward, NONE), &nd.deps);
                        continue;
                    }
                    let member_units: Vec<u32> = if spans {
                        g.ranks.iter().step_by(t as usize).map(|r| r / t).collect()
                    } else {
                        g.ranks.iter().map(|r| r / t).collect()
                    };
                    let key = (member_units, spans || t == 1);
                    let id = match group_index.get(&key) {
                        Some(i) => *i,
                        None => {
                            let i = groups.len() as u32;
                            let kind = g.kind.unwrap_or_else(|| classify(&key.0, key.1, t, op, opts.gpus_per_node));
                            groups.push(ProcessGroup {
                                name: g.name.clone(),
                                kind,
                                units: key.0.clone(),
                                spans_lanes: key.1,
                            });
                            group_index.insert(key, i);
                            i
                        }
                    };
                    by_rank_pg.insert((pg, spans), id);
                    DagNodeKind::CommColl {
                        op,
                        group: Group::Pg(id),
                        bytes,
                    }
                }
                RKind::Send { peer, bytes, tag } => {
                    let s = send_seq.entry((peer / t, tag)).or_insert(0);
                    *s += 1;
                    DagNodeKind::CommSend {
                        peer: Peer::Unit(peer / t),
                        bytes,
                        tag: p2p_tag(tag, *s - 1),
                    }
                }
                RKind::Recv { peer, bytes, tag } => {
                    let s = recv_seq.entry((peer / t, tag)).or_insert(0);
                    *s += 1;
                    DagNodeKind::CommRecv {
                        peer: Peer::Unit(peer / t),
                        bytes,
                        tag: p2p_tag(tag, *s - 1),
                    }
                }
            };
            prog.push(Node::imported(kind, nd.stream, Phase::Forward, NONE), &nd.deps);
        }
        stages.push(prog);
    }
    Workload {
        stages,
        segments,
        microbatches: 1,
        vpp: 1,
        explicit: Some(Explicit {
            unit_program: (0..units).collect(),
            groups,
        }),
    }
}

/// The report category of a group without llmsim's own label: one unit's lanes or one server's
/// ranks are TP, an all-to-all group EP, anything else DP.
fn classify(units: &[u32], spans: bool, t: u32, op: CollectiveOp, gpus_per_node: u32) -> Group {
    if spans && units.len() == 1 {
        return Group::Tp;
    }
    if gpus_per_node > 0 {
        let server = |u: u32| u * t / gpus_per_node;
        let last_lane = if spans { t - 1 } else { 0 };
        if units
            .iter()
            .all(|x| server(*x) == server(units[0]) && (x * t + last_lane) / gpus_per_node == server(units[0]))
        {
            return Group::Tp;
        }
    }
    if op == CollectiveOp::AllToAll { Group::Ep } else { Group::Dp }
}

/// llmsim writes `comm_tag = microbatch << 32 | chunk << 1 | direction`; any tag decodes.
fn p2p_tag(tag: u64, seq: u32) -> P2pTag {
    P2pTag {
        dir: if tag & 1 == 1 { Direction::Backward } else { Direction::Forward },
        microbatch: (tag >> 32) as u32,
        chunk: ((tag & 0xffff_ffff) >> 1) as u32,
        seq,
    }
}

pub(super) fn encode_tag(t: &P2pTag) -> u64 {
    ((t.microbatch as u64) << 32) | ((t.chunk as u64 & 0x7fff_ffff) << 1) | (t.dir == Direction::Backward) as u64
}
