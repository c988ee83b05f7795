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

mod decode;
mod export;
mod import;

pub use decode::{RankTrace, decode, parse_comm_groups, read_prefix};
pub use export::{Export, export, write_export};
pub use import::{Importer, import, import_prefix};
use import::{encode_tag, meta_attr};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use llmsim_compute::OpClass;
use llmsim_core::CollectiveOp;
use llmsim_core::SimTime;
use prost::Message as _;

use crate::dag::{
    DagNodeKind, Direction, Explicit, Group, Layout, NONE, Node, P2pTag, Peer, Phase, ProcessGroup, Program, Segment, Stream, Workload,
};
use crate::formats::{ImportedWorkload, ReadRequest, WorkloadFormat};
use crate::import::{ImportError, io};
use crate::ops::{OpSpecKind, Pass};
use pb::{AttrValue, AttributeProto, GlobalMetadata, comm_type, node_type};

/// Longest node duration accepted: a day, so that sums of times stay far inside `u64` ps.
const MAX_DURATION_PS: u64 = 86_400 * 1_000_000_000_000;

/// The `chakra` workload format: `path` is the trace prefix, `comm_groups` the
/// communicator-group JSON.
pub struct Chakra;

impl WorkloadFormat for Chakra {
    fn name(&self) -> &'static str {
        "chakra"
    }

    fn path_help(&self) -> &'static str {
        "a trace prefix (files PREFIX.<rank>.et)"
    }

    fn reads_comm_groups(&self) -> bool {
        true
    }

    fn read(&self, req: &ReadRequest<'_>) -> Result<ImportedWorkload, ImportError> {
        let (groups, file) = match req.comm_groups {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| io(p, e))?;
                let f = p.display().to_string();
                (parse_comm_groups(&text, &f)?, Some(f))
            }
            None => (BTreeMap::new(), None),
        };
        let opts = ImportOptions {
            groups_file: file,
            gpus_per_node: req.gpus_per_node,
        };
        let imp = import_prefix(req.path, &groups, &opts)?;
        Ok(ImportedWorkload::from_chakra(imp, req.label))
    }
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
    /// One program per unit, with explicit process groups.
    pub workload: Workload,
    /// The units: ranks that run matching programs fold into units of `tp` lanes.
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
    /// `llmsim_model`: the model's name.
    pub model: String,
    /// `llmsim_parallel`: the parallel plan, as the report's `parallel` line shows it.
    pub parallel: String,
    /// `llmsim_params`: model parameters.
    pub params: u64,
    /// `llmsim_global_batch`: samples per iteration.
    pub global_batch: u64,
    /// `llmsim_seq_length`: tokens per sample.
    pub seq_length: u64,
    /// `llmsim_microbatches`: micro-batches per iteration per data-parallel rank.
    pub microbatches: u32,
    /// `llmsim_layers_per_stage`: transformer layers per pipeline stage.
    pub layers_per_stage: u64,
    /// `llmsim_memory`: the memory footprint per GPU, in bytes.
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

#[cfg(test)]
mod tests;
