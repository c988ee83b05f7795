//! Workload formats other tools write: Chakra execution traces ([`chakra`]) and SimAI/AICB
//! workload files ([`simai`]), read behind one interface.
//!
//! A format is a [`WorkloadFormat`] (its name, what its `path` names, its reader) listed in
//! [`FORMATS`]. A scenario names one in its `workload:` section ([`WorkloadSource`]); the CLI's
//! `--workload NAME:PATH` finds it with [`find`]. A new format is one module here and one line
//! in [`FORMATS`].

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::dag::{Layout, Workload};
use crate::import::ImportError;
use crate::memory::MemoryFootprint;

pub mod chakra;
pub mod simai;

/// Every workload format llmsim reads, by name.
pub static FORMATS: &[&dyn WorkloadFormat] = &[&chakra::Chakra, &simai::Simai];

/// A workload file format: its name and its reader.
pub trait WorkloadFormat: Sync {
    /// The name in `workload.format` and in `--workload NAME:PATH`.
    fn name(&self) -> &'static str;
    /// What `path` names, for messages: e.g. `"a trace prefix (files PREFIX.<rank>.et)"`.
    fn path_help(&self) -> &'static str;
    /// Whether a communicator-group file (`comm_groups`) means anything to this format.
    fn reads_comm_groups(&self) -> bool {
        false
    }
    /// Reads the workload `req` names.
    ///
    /// # Errors
    /// An unreadable or invalid input, naming the file and what is wrong in it.
    fn read(&self, req: &ReadRequest<'_>) -> Result<ImportedWorkload, ImportError>;
}

/// What a reader gets: the paths (already resolved), the report's label and the cluster's
/// server size.
#[derive(Clone, Copy, Debug)]
pub struct ReadRequest<'a> {
    /// The workload file, or for `chakra` the trace prefix.
    pub path: &'a Path,
    /// The communicator-group JSON, if given.
    pub comm_groups: Option<&'a Path>,
    /// What the report calls the workload when the source does not say, e.g. `chakra:et/gpt`.
    pub label: &'a str,
    /// GPUs per server: collectives inside one are scale-up (NVLink) collectives.
    pub gpus_per_node: u32,
}

/// The format named `name`.
///
/// # Errors
/// [`ImportError::Field`] on `field` listing the formats there are.
pub fn find(name: &str, field: &str) -> Result<&'static dyn WorkloadFormat, ImportError> {
    FORMATS
        .iter()
        .copied()
        .find(|f| f.name() == name)
        .ok_or_else(|| ImportError::Field {
            field: field.to_string(),
            message: format!("unknown workload format {name:?}; valid: {}", valid_formats()),
        })
}

fn valid_formats() -> String {
    FORMATS
        .iter()
        .map(|f| format!("{} (path: {})", f.name(), f.path_help()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `workload:` in a scenario: a workload another tool wrote, run on the scenario's cluster
/// instead of a `model`. Example: `workload: { format: simai, path: gpt3-13b.txt }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSource {
    /// The file format (required): `chakra` (per-rank Chakra execution traces) or `simai` (a
    /// SimAI/AICB workload file).
    #[serde(default)]
    pub format: Option<String>,
    /// Where the workload is (required), relative to the scenario file: for `chakra` the trace
    /// prefix (files `PREFIX.<rank>.et`), for `simai` the workload file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// `chakra` only: the communicator-group JSON, `{"<pg_name>": [ranks]}`, relative to the
    /// scenario file. Default: none (a collective without `pg_name` runs over every rank).
    #[serde(default)]
    pub comm_groups: Option<PathBuf>,
}

impl WorkloadSource {
    /// Reads the workload; relative paths resolve against `base_dir`. The report calls it
    /// `FORMAT:PATH` (the path as written) unless the source names itself.
    ///
    /// # Errors
    /// [`ImportError::Field`] naming `workload.format`, `workload.path` or
    /// `workload.comm_groups` and the fix; the reader's errors otherwise.
    pub fn read(&self, base_dir: &Path, gpus_per_node: u32) -> Result<ImportedWorkload, ImportError> {
        let field = |f: &str, message: String| ImportError::Field {
            field: format!("workload.{f}"),
            message,
        };
        let Some(name) = &self.format else {
            return Err(field("format", format!("missing; give one of {}", valid_formats())));
        };
        let format = find(name, "workload.format")?;
        let Some(path) = &self.path else {
            return Err(field(
                "path",
                format!("missing; give {}, relative to the scenario file", format.path_help()),
            ));
        };
        if self.comm_groups.is_some() && !format.reads_comm_groups() {
            return Err(field(
                "comm_groups",
                format!("{name} has no communicator-group file (it is for chakra traces); remove it"),
            ));
        }
        let full = base_dir.join(path);
        let groups = self.comm_groups.as_ref().map(|g| base_dir.join(g));
        let label = format!("{name}:{}", path.display());
        format
            .read(&ReadRequest {
                path: &full,
                comm_groups: groups.as_deref(),
                label: &label,
                gpus_per_node,
            })
            .map_err(|e| match e {
                // A path that names nothing: say which field and what it should name.
                ImportError::Io { .. } | ImportError::Invalid(_) if !exists(format, &full) => {
                    field("path", format!("{e}; give {}, relative to the scenario file", format.path_help()))
                }
                e => e,
            })
    }
}

/// Whether `path` names an input of `format` (a file, or a trace prefix's rank-0 file).
fn exists(format: &dyn WorkloadFormat, path: &Path) -> bool {
    path.is_file() || (format.name() == "chakra" && PathBuf::from(format!("{}.0.et", path.display())).is_file())
}

/// A workload read from another tool's files, with what the source records about the run.
pub struct ImportedWorkload {
    /// The programs and compute segments.
    pub workload: Workload,
    /// How the ranks are laid out in units.
    pub layout: Layout,
    /// What the report calls the workload, e.g. `chakra:et/gpt`.
    pub label: String,
    /// How the ranks were grouped, for the report's `parallel` line.
    pub parallel: String,
    /// Samples per iteration and tokens per sample, when the source says (else 0).
    pub global_batch: u64,
    /// Tokens per sample, when the source says (else 0).
    pub seq_length: u64,
    /// Model parameters and the memory footprint per GPU, when the source says (else 0).
    pub params: u64,
    /// Memory footprint per GPU, when the source says (else all zero).
    pub memory: MemoryFootprint,
    /// Transformer layers per pipeline stage, when the source says (else 0).
    pub layers_per_stage: u64,
}

impl ImportedWorkload {
    /// A workload whose source records nothing beyond its ranks: no batch, sequence, model size,
    /// memory footprint or layer count (the report shows them as unknown).
    pub fn bare(workload: Workload, layout: Layout, label: String, parallel: String) -> Self {
        ImportedWorkload {
            workload,
            layout,
            label,
            parallel,
            global_batch: 0,
            seq_length: 0,
            params: 0,
            memory: MemoryFootprint::default(),
            layers_per_stage: 0,
        }
    }

    /// An imported Chakra workload, with what llmsim's own export recorded when present.
    pub fn from_chakra(imp: chakra::Imported, label: &str) -> Self {
        let l = imp.layout;
        match imp.info {
            Some(i) => ImportedWorkload {
                workload: imp.workload,
                layout: l,
                label: i.model,
                parallel: i.parallel,
                global_batch: i.global_batch,
                seq_length: i.seq_length,
                params: i.params,
                memory: i.memory,
                layers_per_stage: i.layers_per_stage,
            },
            None => {
                let parallel = format!("{} ranks: {} units of {} lockstep ranks", imp.ranks, l.units(), l.tp);
                ImportedWorkload::bare(imp.workload, l, label.to_string(), parallel)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(format: Option<&str>, path: Option<&str>, groups: Option<&str>) -> WorkloadSource {
        WorkloadSource {
            format: format.map(String::from),
            path: path.map(PathBuf::from),
            comm_groups: groups.map(PathBuf::from),
        }
    }

    fn err(s: &WorkloadSource) -> String {
        s.read(Path::new("/nonexistent-llmsim-dir"), 8).err().expect("an error").to_string()
    }

    #[test]
    fn every_format_is_found_by_its_name() {
        for f in FORMATS {
            assert_eq!(find(f.name(), "x").expect("registered").name(), f.name());
        }
    }

    #[test]
    fn bad_sources_name_the_field_and_the_fix() {
        let e = err(&src(Some("astra"), Some("x"), None));
        assert!(
            e.starts_with("workload.format: unknown workload format \"astra\"; valid: chakra"),
            "{e}"
        );
        let e = err(&src(None, Some("x"), None));
        assert!(e.starts_with("workload.format: missing; give one of chakra"), "{e}");
        let e = err(&src(Some("simai"), None, None));
        assert!(e.starts_with("workload.path: missing; give a SimAI/AICB workload file"), "{e}");
        let e = err(&src(Some("simai"), Some("w.txt"), Some("g.json")));
        assert!(e.starts_with("workload.comm_groups: simai has no communicator-group file"), "{e}");
        let e = err(&src(Some("simai"), Some("w.txt"), None));
        assert!(e.starts_with("workload.path: /nonexistent-llmsim-dir/w.txt: "), "{e}");
        assert!(e.ends_with("give a SimAI/AICB workload file, relative to the scenario file"), "{e}");
        let e = err(&src(Some("chakra"), Some("et/gpt"), None));
        assert!(
            e.starts_with("workload.path: no Chakra trace /nonexistent-llmsim-dir/et/gpt.0.et"),
            "{e}"
        );
    }
}
