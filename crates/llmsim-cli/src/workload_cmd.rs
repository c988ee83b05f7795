//! `llmsim workload`: export a scenario's generated workload for other tools, and read the
//! workloads other tools write (`llmsim run --workload chakra:PREFIX | simai:FILE`, or a
//! scenario's `workload:` key), through [`llmsim_workload::formats`].

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use llmsim_sim::{ImportedRun, Scenario};
use llmsim_workload::chakra;
use llmsim_workload::formats;
use llmsim_workload::simai;

#[derive(Subcommand, Debug)]
pub enum WorkloadCmd {
    /// Write a scenario's workload in another tool's format.
    Export(ExportArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Chakra execution traces: <out>/<prefix>.<rank>.et and <out>/groups.json.
    Chakra,
    /// A SimAI/AICB workload file: <out>/<prefix>.txt (pp 1, cp 1).
    Simai,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Scenario file (YAML) with a transformer model.
    pub scenario: PathBuf,
    #[arg(long, value_enum, default_value = "chakra")]
    pub format: Format,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// File prefix. Default: the scenario's file name without extension.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Override a scenario value, as for `llmsim run`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

pub fn run(cmd: &WorkloadCmd) -> Result<()> {
    match cmd {
        WorkloadCmd::Export(a) => export(a),
    }
}

fn export(a: &ExportArgs) -> Result<()> {
    let mut sc = Scenario::load(&a.scenario, &a.sets)?;
    let prefix = a.prefix.clone().unwrap_or_else(|| sc.name.clone());
    match a.format {
        Format::Simai => {
            let r = llmsim_sim::resolve(&sc)?;
            let cm = llmsim_sim::compute_model(&sc, r.gpu, r.parallel.world_size())?;
            let text = simai::export(&r.model, &r.training, &r.parallel, &cm)?;
            std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
            let path = a.out.join(format!("{prefix}.txt"));
            std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            outln!("wrote {} ({} layer lines)", path.display(), text.lines().count() - 2);
            outln!("run it: llmsim run --workload simai:{} CLUSTER.yaml", path.display());
        }
        Format::Chakra => {
            // Chakra traces have no collective that runs beside one GEMM: the backward's TP
            // collectives stay nodes of their own (`parallel.tp_backward_overlap` off), as
            // `simai::export` keeps them lines of their own.
            sc.parallel.tp_backward_overlap = false;
            let g = llmsim_sim::generate(&sc)?;
            let e = chakra::export(&g.workload, g.layout, &g.seg_time, &g.info)?;
            chakra::write_export(&e, &a.out, &prefix)?;
            let bytes: usize = e.ranks.iter().map(Vec::len).sum();
            outln!(
                "wrote {n} Chakra traces ({:.1} MB) {out}/{prefix}.{{0..{last}}}.et and {out}/groups.json ({} process groups)",
                bytes as f64 / 1e6,
                e.groups.len(),
                n = e.ranks.len(),
                last = e.ranks.len() - 1,
                out = a.out.display()
            );
            outln!(
                "run it: llmsim run --workload chakra:{}/{prefix} --comm-groups {}/groups.json CLUSTER.yaml",
                a.out.display(),
                a.out.display()
            );
        }
    }
    Ok(())
}

/// Reads `FORMAT:PATH` (`chakra:PREFIX`, `simai:FILE`: any of [`formats::FORMATS`]) into a
/// workload for the scenario's cluster. Paths are relative to the working directory.
pub fn load(spec: &str, comm_groups: Option<&Path>, sc: &Scenario) -> Result<ImportedRun> {
    let format = spec
        .split_once(':')
        .and_then(|(name, _)| formats::FORMATS.iter().copied().find(|f| f.name() == name));
    let Some(format) = format else {
        let valid: Vec<String> = formats::FORMATS
            .iter()
            .map(|f| format!("{}:PATH ({})", f.name(), f.path_help()))
            .collect();
        bail!("--workload {spec:?}: expected {}", valid.join(" or "));
    };
    if comm_groups.is_some() && !format.reads_comm_groups() {
        bail!(
            "--comm-groups is for Chakra traces; a {} workload derives its groups from its own file",
            format.name()
        );
    }
    let path = &spec[format.name().len() + 1..];
    let imp = format.read(&formats::ReadRequest {
        path: Path::new(path),
        comm_groups,
        label: spec,
        gpus_per_node: sc.cluster.gpus_per_node,
    })?;
    Ok(imp)
}

/// The report's mean breakdown in the columns of SimAI's `EndToEnd.csv` summary row (µs and %
/// of the iteration). DP_EP traffic is inside the DP column here.
pub fn simai_columns(r: &llmsim_sim::Report) -> String {
    let b = &r.mean;
    let it = r.iteration_time_s;
    let exposed = b.exposed_tp_s + b.exposed_cp_s + b.exposed_ep_s + b.exposed_pp_s + b.exposed_dp_s;
    let cols = [
        ("Expose DP comm (incl. DP_EP)", b.exposed_dp_s),
        ("Expose TP comm", b.exposed_tp_s + b.exposed_cp_s),
        ("Expose_EP_comm", b.exposed_ep_s),
        ("Expose_PP_comm", b.exposed_pp_s),
        ("bubble time", b.bubble_s),
        ("total comp", b.compute_s),
        ("total exposed comm", exposed),
        ("Total time", it),
    ];
    let mut s = String::from("\n  SimAI-style summary (mean over ranks; µs, % of the iteration)\n");
    for (k, v) in cols {
        let pct = if it > 0.0 { 100.0 * v / it } else { 0.0 };
        s.push_str(&format!("  {k:<30} {:>14.0} ({pct:.2}%)\n", v * 1e6));
    }
    s
}
