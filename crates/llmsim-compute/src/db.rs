//! The op-time database: measured op durations, as in SimAI-CP (Table 4: per-GPU kernel times
//! keyed by op and shape). An entry takes precedence over the roofline.
//!
//! CSV, `#` comment lines allowed, header `gpu,op,shape,time_us`:
//!
//! ```text
//! gpu,op,shape,time_us
//! H100,attn_qkv,"b=1,s=4096,h=8192,tp=8",182.4
//! ```
//!
//! A shape with commas must be quoted. `gpu` is a catalog name (decorations such as `-SXM5`
//! accepted); `op` and `shape` match [`OpQuery::name`] and [`OpQuery::shape`] exactly.

use std::collections::HashMap;
use std::path::Path;

use llmsim_core::SimTime;

use crate::csvtext::CsvText;
use crate::error::ComputeError;
use crate::gpu::{self, GpuSpec};
use crate::op::OpQuery;

/// `op -> shape -> time` for one GPU. Nested maps so that a lookup borrows `&str` keys and
/// allocates nothing.
pub type GpuOpTable = HashMap<String, HashMap<String, SimTime>>;

/// Measured op times for one or more GPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpDatabase {
    /// One table per GPU, keyed by canonical catalog name. Few GPUs: a linear scan is fastest.
    gpus: Vec<(&'static str, GpuOpTable)>,
    len: usize,
}

impl OpDatabase {
    /// An empty database.
    pub fn new() -> OpDatabase {
        OpDatabase::default()
    }

    /// Parses the CSV text described in the module doc.
    ///
    /// # Errors
    /// [`ComputeError::Csv`] with the line and column: unknown column, unknown GPU, an op name
    /// that is not an identifier (letters, digits, `_.-`), a negative or non-finite time, a
    /// duplicate (gpu, op, shape) entry. An op name no workload produces is not an error here
    /// (one database may serve many models); it never matches.
    pub fn from_csv_str(text: &str) -> Result<OpDatabase, ComputeError> {
        OpDatabase::parse("op database CSV", text)
    }

    /// Reads and parses a CSV file.
    ///
    /// # Errors
    /// [`ComputeError::Io`] when the file cannot be read; otherwise as
    /// [`OpDatabase::from_csv_str`], with the path in the message.
    pub fn load(path: impl AsRef<Path>) -> Result<OpDatabase, ComputeError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ComputeError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        OpDatabase::parse(&format!("op database {}", path.display()), &text)
    }

    fn parse(what: &str, text: &str) -> Result<OpDatabase, ComputeError> {
        let csv = CsvText::parse(what, text, &["gpu", "op", "shape", "time_us"], &[])?;
        let mut db = OpDatabase::new();
        let mut lines: HashMap<(&'static str, String, String), u64> = HashMap::new();
        for row in csv.records() {
            let g = row.field("gpu");
            let spec = gpu::find(g).ok_or_else(|| {
                let valid = gpu::catalog().iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
                row.error("gpu", format!("unknown GPU `{g}`; valid: {valid}"))
            })?;
            let op = row.field("op");
            if op.is_empty() {
                return Err(row.error("op", "empty op name"));
            }
            // Workload op names are identifiers (ops.csv's `op` column); anything else cannot match.
            if let Some(c) = op.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
                return Err(row.error(
                    "op",
                    format!(
                        "`{op}` is not an op name (`{c}`): op names are letters, digits and `_.-`, as in ops.csv's `op` column \
                         (e.g. attn_qkv); are the op and shape columns swapped?"
                    ),
                ));
            }
            let shape = row.field("shape");
            let us = row.number("time_us", 0.0, false, f64::INFINITY)?;
            if let Some(first) = lines.insert((spec.name, op.to_string(), shape.to_string()), row.line) {
                return Err(row.error(
                    "shape",
                    format!("duplicate entry ({}, {op}, \"{shape}\"); first at line {first}", spec.name),
                ));
            }
            db.insert(spec, op, shape, SimTime::from_us_f64(us));
        }
        Ok(db)
    }

    /// Adds or replaces one entry.
    pub fn insert(&mut self, gpu: &'static GpuSpec, op: &str, shape: &str, time: SimTime) {
        let i = match self.gpus.iter().position(|(n, _)| *n == gpu.name) {
            Some(i) => i,
            None => {
                self.gpus.push((gpu.name, HashMap::new()));
                self.gpus.len() - 1
            }
        };
        let shapes = self.gpus[i].1.entry(op.to_string()).or_default();
        if shapes.insert(shape.to_string(), time).is_none() {
            self.len += 1;
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The table of one GPU (name as for [`gpu::gpu`], case-insensitive), for callers that look
    /// many ops up on the same GPU.
    pub fn table(&self, gpu: &str) -> Option<&GpuOpTable> {
        self.table_index(gpu).map(|i| &self.gpus[i].1)
    }

    pub(crate) fn table_index(&self, gpu: &str) -> Option<usize> {
        if let Some(i) = self.gpus.iter().position(|(n, _)| n.eq_ignore_ascii_case(gpu)) {
            return Some(i);
        }
        let spec = gpu::find(gpu)?;
        self.gpus.iter().position(|(n, _)| *n == spec.name)
    }

    pub(crate) fn table_at(&self, i: usize) -> Option<&GpuOpTable> {
        self.gpus.get(i).map(|(_, t)| t)
    }

    /// The measured time of `q` on `gpu`: GPU name case-insensitive (decorations accepted),
    /// `q.name == op` and `q.shape == shape` exactly. Allocates nothing.
    pub fn lookup(&self, gpu: &str, q: &OpQuery) -> Option<SimTime> {
        lookup_in(self.table(gpu)?, q)
    }
}

/// Lookup in one GPU's table.
pub fn lookup_in(table: &GpuOpTable, q: &OpQuery) -> Option<SimTime> {
    table.get(q.name.as_str())?.get(q.shape.as_str()).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{DType, OpClass};

    fn q(name: &str, shape: &str) -> OpQuery {
        OpQuery {
            name: name.into(),
            class: OpClass::Gemm,
            dtype: DType::Bf16,
            flops: 1.0,
            bytes: 1.0,
            shape: shape.into(),
            kernel: None,
        }
    }

    const TEXT: &str = "# SimAI-CP style\ngpu,op,shape,time_us\nH100,attn_qkv,\"b=1,s=4096,h=8192,tp=8\",182.5\n\
                        # another\nA100-SXM4-80GB, attn_qkv ,\"b=1,s=4096,h=8192,tp=8\",400\nh100,mlp_fc1,b=1,10\n";

    #[test]
    fn lookups_match_gpu_case_insensitively_and_op_and_shape_exactly() {
        let db = OpDatabase::from_csv_str(TEXT).unwrap();
        assert_eq!(db.len(), 3);
        let shape = "b=1,s=4096,h=8192,tp=8";
        assert_eq!(db.lookup("H100", &q("attn_qkv", shape)), Some(SimTime::from_ps(182_500_000)));
        assert_eq!(
            db.lookup("h100-sxm5-80gb", &q("attn_qkv", shape)),
            Some(SimTime::from_us(182) + SimTime::from_ns(500))
        );
        assert_eq!(db.lookup("a100", &q("attn_qkv", shape)), Some(SimTime::from_us(400)));
        assert_eq!(db.lookup("H100", &q("mlp_fc1", "b=1")), Some(SimTime::from_us(10)));
        assert_eq!(db.lookup("H100", &q("attn_qkv", "b=1,s=4096,h=8192,tp=4")), None);
        assert_eq!(db.lookup("H100", &q("ATTN_QKV", shape)), None);
        assert_eq!(db.lookup("H200", &q("attn_qkv", shape)), None);
        assert_eq!(db.lookup("nonsense", &q("attn_qkv", shape)), None);
    }

    fn err(text: &str) -> (u64, Option<String>, String) {
        match OpDatabase::from_csv_str(text) {
            Err(ComputeError::Csv { line, column, message, .. }) => (line, column, message),
            other => panic!("expected a CSV error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_rows_give_their_line() {
        let head = "gpu,op,shape,time_us\n# c\n";
        assert_eq!(err(&format!("{head}H100,a,s,1\nH100,b,s,x\n")).0, 4);
        assert_eq!(err(&format!("{head}H100,a,s,1\nH100,b,s,-3\n")).1.as_deref(), Some("time_us"));
        let (line, col, msg) = err(&format!("{head}H100,a,s,1\nH100,a,s,2\n"));
        assert_eq!((line, col.as_deref()), (4, Some("shape")));
        assert!(msg.contains("first at line 3"), "{msg}");
        let (line, col, _) = err(&format!("{head}H999,a,s,1\n"));
        assert_eq!((line, col.as_deref()), (3, Some("gpu")));
        // Unquoted commas in a shape: too many fields.
        let (line, _, msg) = err(&format!("{head}H100,a,b=1,s=2,1\n"));
        assert_eq!(line, 3, "{msg}");
        // A shape in the op column (columns swapped).
        let (line, col, msg) = err(&format!("{head}H100,\"b=1,s=2\",attn_qkv,1\n"));
        assert_eq!((line, col.as_deref()), (3, Some("op")), "{msg}");
        assert!(msg.contains("not an op name"), "{msg}");
        let (line, col, _) = err("gpu,op,shape,time_ms\n");
        assert_eq!((line, col.as_deref()), (1, Some("time_ms")));
    }

    #[test]
    fn load_reports_missing_files() {
        match OpDatabase::load("/nonexistent/llmsim/ops.csv") {
            Err(ComputeError::Io { path, .. }) => assert!(path.contains("ops.csv")),
            other => panic!("{other:?}"),
        }
    }
}
