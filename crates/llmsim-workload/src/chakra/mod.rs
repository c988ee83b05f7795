//! Chakra execution traces (MLCommons), in and out.
//!
//! **Files.** One trace per rank, `<prefix>.<rank>.et`: a length-delimited `GlobalMetadata`
//! message, then length-delimited `Node` messages (varint length, then the message), as Chakra's
//! `third_party/utils/protolib.py` `encodeMessage` writes them. Messages: [`pb`]. Process groups
//! come from a communicator-group JSON, `{"<pg_name>": [ranks]}`; a collective without `pg_name`
//! runs over every rank (as ASTRA-sim does).
//!
//! **Nodes read** (attribute names as in Chakra's converters and ASTRA-sim's feeder):
//! - `COMP_NODE`: `duration_micros` when > 0, else the compute model from `num_ops` (FLOPs) and
//!   `tensor_size` (bytes), timed as a GEMM-class kernel by the roofline. `is_cpu_op = true`
//!   nodes run beside the GPU stream. `MEM_LOAD_NODE`/`MEM_STORE_NODE` are memory-bound kernels of
//!   `tensor_size` bytes (or `duration_micros`), also beside the GPU stream.
//! - `COMM_COLL_NODE`: `comm_type` (ALL_REDUCE .. BARRIER), `comm_size` bytes, `pg_name`.
//!   llmsim's network collectives are all-reduce, all-gather, reduce-scatter and all-to-all, so
//!   BROADCAST and SCATTER run as an all-gather and REDUCE and GATHER as a reduce-scatter of the
//!   same size (a ring broadcast or reduce puts `size` on every link, the ring all-gather or
//!   reduce-scatter `(n-1)/n * size`: within that factor); BARRIER is a zero-byte all-reduce.
//! - `COMM_SEND_NODE`/`COMM_RECV_NODE`: `comm_src`, `comm_dst`, `comm_tag`, `comm_size` (or
//!   `tensor_size`). The k-th send from a to b with a tag matches the k-th such receive.
//! - `METADATA_NODE`: no work (its dependents still wait for it).
//!
//! **Execution.** Dependencies are `ctrl_deps` and `data_deps`. GPU compute nodes run one at a
//! time in trace order (one compute stream); communication nodes start as soon as their
//! dependencies finished. Time a kernel spends waiting on communication is charged to that
//! communication's group kind (TP/CP/EP/DP) or to PP / bubble for a receive.
//!
//! **Ranks to units.** The simulator runs one program per *unit*, a set of ranks in lockstep.
//! [`import`] finds the largest lane count `t` for which every block of `t` consecutive ranks runs
//! the same program with its groups and peers shifted by the lane (a tensor-parallel group, or a
//! fully symmetric trace), and falls back to one rank per unit. That is exact: ranks in lockstep
//! take identical times.
//!
//! **Writing** ([`export`]): every rank of a generated workload gets its program with the groups
//! resolved to ranks; stream order becomes `ctrl_deps`, explicit dependencies `data_deps`. Beside
//! Chakra's own attributes llmsim writes `llmsim_stream`, `llmsim_group` (the group kind),
//! `llmsim_duration_ps` (the exact kernel time; `duration_micros` is rounded to whole µs) and
//! `llmsim_model_flops` (the part of `num_ops` MFU counts) and, in the metadata,
//! `llmsim_layout` = [tp, cp, dp, pp, ep] and the run's description ([`TraceInfo`]), so that
//! export -> import -> run reproduces the original report. Other tools ignore unknown
//! attributes.

pub mod pb;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use llmsim_compute::OpClass;
use llmsim_core::CollectiveOp;
use llmsim_core::SimTime;
use prost::Message as _;

use crate::dag::{
    Direction, Explicit, Group, Layout, NONE, Node, NodeKind, P2pTag, Peer, Phase, ProcessGroup, Program, Segment, Stream, Workload,
};
use crate::import::{ImportError, io};
use crate::ops::{OpSpecKind, Pass};
use pb::{AttrValue, AttributeProto, GlobalMetadata, comm_type, node_type};

/// Longest node duration accepted: a day, so that sums of times stay far inside `u64` ps.
const MAX_DURATION_PS: u64 = 86_400 * 1_000_000_000_000;

/// One rank's trace as read from its file.
#[derive(Clone, Debug)]
pub struct RankTrace {
    pub rank: u32,
    pub file: String,
    pub metadata: GlobalMetadata,
    pub nodes: Vec<pb::Node>,
}

/// Decodes one `.et` file's bytes.
///
/// # Errors
/// [`ImportError::Decode`] naming the file, the rank and the node (by position and the id of the
/// last good node) where the bytes stop making sense.
pub fn decode(bytes: &[u8], file: &str, rank: u32) -> Result<RankTrace, ImportError> {
    let mut buf = bytes;
    let err = |what: String, e: prost::DecodeError| ImportError::Decode {
        file: file.into(),
        rank,
        what,
        message: e.to_string(),
    };
    if buf.is_empty() {
        return Err(ImportError::Decode {
            file: file.into(),
            rank,
            what: "GlobalMetadata".into(),
            message: "empty file".into(),
        });
    }
    let metadata = GlobalMetadata::decode_length_delimited(&mut buf).map_err(|e| err("GlobalMetadata".into(), e))?;
    let mut nodes: Vec<pb::Node> = Vec::new();
    while !buf.is_empty() {
        let n = pb::Node::decode_length_delimited(&mut buf).map_err(|e| {
            let after = match nodes.last() {
                Some(l) => format!(" (after node id {})", l.id),
                None => " (the first node)".into(),
            };
            err(format!("node #{}{after}", nodes.len()), e)
        })?;
        nodes.push(n);
    }
    Ok(RankTrace {
        rank,
        file: file.into(),
        metadata,
        nodes,
    })
}

/// Reads `<prefix>.0.et`, `<prefix>.1.et`, ... until the first missing rank.
///
/// # Errors
/// No `<prefix>.0.et`, an unreadable file, or [`decode`]'s errors.
pub fn read_prefix(prefix: &Path) -> Result<Vec<RankTrace>, ImportError> {
    let mut out = Vec::new();
    loop {
        let path = PathBuf::from(format!("{}.{}.et", prefix.display(), out.len()));
        if !path.exists() {
            break;
        }
        let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
        out.push(decode(&bytes, &path.display().to_string(), out.len() as u32)?);
    }
    if out.is_empty() {
        return Err(ImportError::Invalid(format!(
            "no Chakra trace {}.0.et; give the prefix of files named <prefix>.<rank>.et",
            prefix.display()
        )));
    }
    Ok(out)
}

/// Parses a communicator-group JSON, `{"<pg_name>": [rank, ...]}`.
///
/// # Errors
/// [`ImportError::CommGroups`] for anything else.
pub fn parse_comm_groups(text: &str, file: &str) -> Result<BTreeMap<String, Vec<u32>>, ImportError> {
    serde_json::from_str::<BTreeMap<String, Vec<u32>>>(text).map_err(|e| ImportError::CommGroups {
        file: file.into(),
        message: e.to_string(),
    })
}

/// What the importer needs to know beyond the traces.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// The communicator-group JSON's name, for messages.
    pub groups_file: Option<String>,
    /// GPUs per server: a group inside one server counts as TP in the report. 0: unknown.
    pub gpus_per_node: u32,
}

/// An imported workload and the layout of its units.
#[derive(Clone, Debug)]
pub struct Imported {
    pub workload: Workload,
    pub layout: Layout,
    /// Ranks in the traces.
    pub ranks: u32,
    /// What llmsim's own export recorded about the run (absent in other tools' traces).
    pub info: Option<TraceInfo>,
}

/// The run's description llmsim writes into the metadata, for an identical report after a round
/// trip: attributes `llmsim_model`, `llmsim_parallel` (strings), `llmsim_params`,
/// `llmsim_global_batch`, `llmsim_seq_length`, `llmsim_microbatches`, `llmsim_layers_per_stage`
/// (integers) and
/// `llmsim_memory` (parameters, gradients, optimizer states, activations, workspace, total bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceInfo {
    pub model: String,
    pub parallel: String,
    pub params: u64,
    pub global_batch: u64,
    pub seq_length: u64,
    pub microbatches: u32,
    pub layers_per_stage: u64,
    pub memory: crate::MemoryFootprint,
}

impl TraceInfo {
    fn attrs(&self) -> Vec<AttributeProto> {
        let m = &self.memory;
        vec![
            AttributeProto::string("llmsim_model", &self.model),
            AttributeProto::string("llmsim_parallel", &self.parallel),
            AttributeProto::uint("llmsim_params", self.params),
            AttributeProto::uint("llmsim_global_batch", self.global_batch),
            AttributeProto::uint("llmsim_seq_length", self.seq_length),
            AttributeProto::uint("llmsim_microbatches", self.microbatches as u64),
            AttributeProto::uint("llmsim_layers_per_stage", self.layers_per_stage),
            AttributeProto {
                name: "llmsim_memory".into(),
                doc_string: "parameters, gradients, optimizer_states, activations, workspace, total (bytes)".into(),
                value: Some(AttrValue::Int64List(pb::Int64List {
                    values: [m.parameters, m.gradients, m.optimizer_states, m.activations, m.workspace, m.total]
                        .iter()
                        .map(|x| *x as i64)
                        .collect(),
                })),
            },
        ]
    }

    fn read(m: &GlobalMetadata) -> Option<Self> {
        let s = |k: &str| match meta_attr(m, k)?.value.as_ref()? {
            AttrValue::StringVal(v) => Some(v.clone()),
            _ => None,
        };
        let u = |k: &str| meta_attr(m, k)?.as_i128().and_then(|v| u64::try_from(v).ok());
        let mem: Vec<u64> = match meta_attr(m, "llmsim_memory")?.value.as_ref()? {
            AttrValue::Int64List(l) if l.values.len() == 6 && l.values.iter().all(|v| *v >= 0) => {
                l.values.iter().map(|v| *v as u64).collect()
            }
            _ => return None,
        };
        Some(TraceInfo {
            model: s("llmsim_model")?,
            parallel: s("llmsim_parallel")?,
            params: u("llmsim_params")?,
            global_batch: u("llmsim_global_batch")?,
            seq_length: u("llmsim_seq_length")?,
            microbatches: u32::try_from(u("llmsim_microbatches")?).ok()?,
            layers_per_stage: u("llmsim_layers_per_stage")?,
            memory: crate::MemoryFootprint {
                parameters: mem[0],
                gradients: mem[1],
                optimizer_states: mem[2],
                activations: mem[3],
                workspace: mem[4],
                // The workspace above the fixed part is the allocator allowance (as exported).
                fragmentation: mem[4].saturating_sub(crate::memory::WORKSPACE_FIXED_BYTES),
                total: mem[5],
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Import

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

fn meta_attr<'a>(m: &'a GlobalMetadata, name: &str) -> Option<&'a AttributeProto> {
    m.attr.iter().find(|a| a.name == name)
}

fn group_from_name(s: &str) -> Option<Group> {
    Some(match s {
        "tp" => Group::Tp,
        "cp" => Group::Cp,
        "ep" => Group::Ep,
        "dp" => Group::Dp,
        "edp" => Group::ExpertDp,
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
                RKind::Comp { seg } => NodeKind::Comp { segment: seg },
                RKind::Coll { op, bytes, pg } => {
                    let g = &pgs[pg as usize];
                    let spans = t > 1 && spans_units(&g.ranks, t) && g.ranks.contains(&(u * t + 1));
                    if let Some(id) = by_rank_pg.get(&(pg, spans)) {
                        let kind = NodeKind::CommColl {
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
                    NodeKind::CommColl {
                        op,
                        group: Group::Pg(id),
                        bytes,
                    }
                }
                RKind::Send { peer, bytes, tag } => {
                    let s = send_seq.entry((peer / t, tag)).or_insert(0);
                    *s += 1;
                    NodeKind::CommSend {
                        peer: Peer::Unit(peer / t),
                        bytes,
                        tag: p2p_tag(tag, *s - 1),
                    }
                }
                RKind::Recv { peer, bytes, tag } => {
                    let s = recv_seq.entry((peer / t, tag)).or_insert(0);
                    *s += 1;
                    NodeKind::CommRecv {
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

fn encode_tag(t: &P2pTag) -> u64 {
    ((t.microbatch as u64) << 32) | ((t.chunk as u64 & 0x7fff_ffff) << 1) | (t.dir == Direction::Backward) as u64
}

// ---------------------------------------------------------------------------------------------
// Export

/// Per-rank traces of a generated workload.
#[derive(Clone, Debug)]
pub struct Export {
    /// `.et` bytes of every rank.
    pub ranks: Vec<Vec<u8>>,
    /// The communicator-group JSON's content.
    pub groups: BTreeMap<String, Vec<u32>>,
}

fn collective_type(op: CollectiveOp) -> i64 {
    match op {
        CollectiveOp::AllReduce => comm_type::ALL_REDUCE,
        CollectiveOp::AllGather => comm_type::ALL_GATHER,
        CollectiveOp::ReduceScatter => comm_type::REDUCE_SCATTER,
        CollectiveOp::AllToAll => comm_type::ALL_TO_ALL,
        CollectiveOp::Broadcast => comm_type::BROADCAST,
        CollectiveOp::Reduce => comm_type::REDUCE,
    }
}

/// Writes every rank's trace of a generated workload. `seg_time[s]` is segment `s`'s time.
///
/// # Errors
/// An imported workload (export works from a generated one).
pub fn export(wl: &Workload, layout: Layout, seg_time: &[SimTime], info: &TraceInfo) -> Result<Export, ImportError> {
    if wl.explicit.is_some() {
        return Err(ImportError::Invalid(
            "export works on generated workloads, not on imported ones".into(),
        ));
    }
    let mut pg_ids: HashMap<(Group, u32, u32), u32> = HashMap::new();
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let seg_flops: Vec<u64> = wl
        .segments
        .iter()
        .map(|s| s.ops.iter().map(|o| o.flops()).sum::<f64>() as u64)
        .collect();
    // Model FLOPs: no recomputation, no optimizer (as the report's MFU counts them).
    let seg_model_flops: Vec<u64> = wl
        .segments
        .iter()
        .map(|s| {
            s.ops
                .iter()
                .filter(|o| {
                    o.pass != Pass::Recompute
                        && !matches!(
                            o.kind,
                            OpSpecKind::Compute {
                                class: OpClass::Optimizer,
                                ..
                            }
                        )
                })
                .map(|o| o.flops())
                .sum::<f64>() as u64
        })
        .collect();
    let seg_bytes: Vec<u64> = wl
        .segments
        .iter()
        .map(|s| {
            s.ops
                .iter()
                .map(|o| match o.kind {
                    OpSpecKind::Compute { bytes, .. } => bytes,
                    OpSpecKind::Comm { .. } => 0.0,
                })
                .sum::<f64>() as u64
        })
        .collect();
    let meta = GlobalMetadata {
        version: "0.0.4".into(),
        attr: vec![
            AttributeProto {
                name: "llmsim_layout".into(),
                doc_string: "tp, cp, dp, pp, ep".into(),
                value: Some(AttrValue::Int64List(pb::Int64List {
                    values: vec![
                        layout.tp as i64,
                        layout.cp as i64,
                        layout.dp as i64,
                        layout.pp as i64,
                        layout.ep as i64,
                    ],
                })),
            },
            AttributeProto::string("llmsim_generator", concat!("llmsim ", env!("CARGO_PKG_VERSION"))),
        ]
        .into_iter()
        .chain(info.attrs())
        .collect(),
    };
    let mut ranks = Vec::with_capacity((layout.units() * layout.tp) as usize);
    for u in 0..layout.units() {
        let prog = &wl.stages[layout.stage(u) as usize];
        for lane in 0..layout.tp {
            let rank = layout.rank(u, lane);
            let mut buf: Vec<u8> = Vec::new();
            meta.encode_length_delimited(&mut buf).expect("a Vec grows");
            let mut last: [Option<u64>; Stream::COUNT] = [None; Stream::COUNT];
            for (i, n) in prog.nodes.iter().enumerate() {
                let mut node = pb::Node {
                    id: i as u64,
                    data_deps: prog.deps(i as u32).iter().map(|d| *d as u64).collect(),
                    ctrl_deps: last[n.stream as usize].into_iter().collect(),
                    ..Default::default()
                };
                last[n.stream as usize] = Some(i as u64);
                node.attr.push(AttributeProto::int("llmsim_stream", n.stream as i64));
                match n.kind {
                    NodeKind::Comp { segment } => {
                        let s = segment as usize;
                        let ps = seg_time[s].as_ps();
                        node.name = wl.segments[s].name.clone();
                        node.r#type = node_type::COMP;
                        node.duration_micros = (ps + 500_000) / 1_000_000;
                        node.attr.push(AttributeProto::boolean("is_cpu_op", false));
                        node.attr.push(AttributeProto::uint("num_ops", seg_flops[s]));
                        node.attr.push(AttributeProto::uint("llmsim_model_flops", seg_model_flops[s]));
                        node.attr.push(AttributeProto::uint("tensor_size", seg_bytes[s]));
                        node.attr.push(AttributeProto::uint("llmsim_duration_ps", ps));
                    }
                    NodeKind::CommColl { op, group, bytes } => {
                        let (key, units) = layout.group_units(u, group).expect("generated workloads have symbolic groups");
                        let spans = group == Group::Tp;
                        let id_key = (group, key, if spans { 0 } else { lane });
                        let next = pg_ids.len() as u32;
                        let id = *pg_ids.entry(id_key).or_insert(next);
                        if id == next {
                            let members: Vec<u32> = if spans {
                                units.iter().flat_map(|v| (0..layout.tp).map(move |l| layout.rank(*v, l))).collect()
                            } else {
                                units.iter().map(|v| layout.rank(*v, lane)).collect()
                            };
                            groups.insert(id.to_string(), members);
                        }
                        node.name = format!("{} {op}", group.name());
                        node.r#type = node_type::COMM_COLL;
                        node.attr.push(AttributeProto::boolean("is_cpu_op", false));
                        node.attr.push(AttributeProto::int("comm_type", collective_type(op)));
                        node.attr.push(AttributeProto::int("comm_size", bytes as i64));
                        node.attr.push(AttributeProto::string("pg_name", &id.to_string()));
                        node.attr.push(AttributeProto::string("llmsim_group", group.name()));
                    }
                    NodeKind::CommSend { peer, bytes, tag } | NodeKind::CommRecv { peer, bytes, tag } => {
                        let send = matches!(n.kind, NodeKind::CommSend { .. });
                        let other = layout.rank(layout.peer_unit(u, peer), lane);
                        let (src, dst) = if send { (rank, other) } else { (other, rank) };
                        node.name = format!("{} {:?} mb{}", if send { "send" } else { "recv" }, tag.dir, tag.microbatch).to_lowercase();
                        node.r#type = if send { node_type::COMM_SEND } else { node_type::COMM_RECV };
                        node.attr.push(AttributeProto::boolean("is_cpu_op", false));
                        node.attr.push(AttributeProto::int("comm_src", src as i64));
                        node.attr.push(AttributeProto::int("comm_dst", dst as i64));
                        node.attr.push(AttributeProto::int("comm_tag", encode_tag(&tag) as i64));
                        node.attr.push(AttributeProto::int("comm_size", bytes as i64));
                    }
                }
                node.encode_length_delimited(&mut buf).expect("a Vec grows");
            }
            debug_assert_eq!(ranks.len() as u32, rank);
            ranks.push(buf);
        }
    }
    Ok(Export { ranks, groups })
}

/// Writes `<dir>/<prefix>.<rank>.et` and `<dir>/groups.json`.
///
/// # Errors
/// A file that cannot be written.
pub fn write_export(e: &Export, dir: &Path, prefix: &str) -> Result<(), ImportError> {
    std::fs::create_dir_all(dir).map_err(|x| io(dir, x))?;
    for (r, bytes) in e.ranks.iter().enumerate() {
        let p = dir.join(format!("{prefix}.{r}.et"));
        std::fs::write(&p, bytes).map_err(|x| io(&p, x))?;
    }
    let p = dir.join("groups.json");
    let text = serde_json::to_string_pretty(&e.groups).expect("a map of lists serializes");
    std::fs::write(&p, text).map_err(|x| io(&p, x))?;
    Ok(())
}

#[cfg(test)]
mod tests;
