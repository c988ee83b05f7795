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
    /// With --describe: also list every directed link by name (`leaf0->spine3`), the names a
    /// scenario's `faults:` take.
    #[arg(long)]
    pub links: bool,
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
        (true, None) if a.links => format!("{}\n{}", t.describe(), link_table(&t)),
        (true, None) => format!("{}\n", t.describe()),
        (false, None) => bail!("say what to do: --describe or --export ns3|json"),
    };
    // A closed pipe (`| head`) is not an error.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// One line per directed link: id, name, kind, bandwidth, latency.
fn link_table(t: &llmsim_topo::Topology) -> String {
    use std::fmt::Write as _;
    let names = llmsim_topo::names::link_names(t);
    let mut out = format!("links ({}; a fault names one as a->b, or a cable as a-b):\n", names.len());
    for (i, (l, n)) in t.links().iter().zip(&names).enumerate() {
        let kind = match l.kind {
            llmsim_topo::LinkKind::NvLink => "nvlink",
            llmsim_topo::LinkKind::HostNic => "nic",
            llmsim_topo::LinkKind::Fabric => "fabric",
        };
        let _ = writeln!(out, "  {i:>6}  {n:<24} {kind:<7} {} {}", l.bandwidth, l.latency);
    }
    out
}
