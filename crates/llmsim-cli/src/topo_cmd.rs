//! `llmsim topo`: build a topology, describe it, export it.

use std::io::Write;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};

use crate::topo_args::TopoArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// ns-3 topology text (HPCC / SimAI format).
    Ns3,
    /// The description as JSON.
    Json,
}

#[derive(Args, Debug)]
pub struct TopoCmdArgs {
    #[command(flatten)]
    pub topo: TopoArgs,
    /// Print counts, bandwidths, bisection, diameter and a sample route.
    #[arg(long)]
    pub describe: bool,
    /// Write the topology to stdout in this format.
    #[arg(long, value_enum)]
    pub export: Option<ExportFormat>,
}

pub fn run(a: &TopoCmdArgs) -> Result<()> {
    let mut a_topo = a.topo.clone();
    if a.topo.gpus.is_none() && a.topo.kind == "fat-tree" && a.topo.k.is_some() && a.topo.gpus_per_node == 8 {
        // `llmsim topo --kind fat-tree --k 16`: one GPU per host unless told otherwise.
        a_topo.gpus_per_node = 1;
    }
    let t = a_topo.build()?;
    let text = match (a.describe, a.export) {
        (_, Some(ExportFormat::Ns3)) => llmsim_topo::ns3::to_ns3(&t),
        (_, Some(ExportFormat::Json)) => serde_json::to_string_pretty(&t.describe())? + "\n",
        (true, None) => format!("{}\n", t.describe()),
        (false, None) => bail!("say what to do: --describe or --export ns3|json"),
    };
    // A closed pipe (`| head`) is not an error.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
