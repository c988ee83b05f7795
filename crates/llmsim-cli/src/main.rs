//! `llmsim`: simulate LLM training clusters.

mod collective;
mod run;
mod topo_args;
mod topo_cmd;
mod trace;
mod workload_cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "llmsim",
    version,
    about = "Simulate LLM training clusters: training iterations, collectives, topologies, networks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulate one training iteration of a scenario file (model, parallelism, cluster).
    Run(run::RunArgs),
    /// Simulate one collective (NCCL's algorithm/protocol/channel choice, then the network).
    Collective(collective::CollectiveArgs),
    /// Build a topology: describe it, or export it in ns-3 format.
    Topo(topo_cmd::TopoCmdArgs),
    /// Export a scenario's workload in another tool's format (Chakra execution traces).
    #[command(subcommand)]
    Workload(workload_cmd::WorkloadCmd),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Collective(a) => collective::run(&a).and_then(|o| {
            print!("{}", collective::render(&o));
            if let Some(dir) = &a.out {
                collective::write_outputs(&o, dir)?;
                println!("wrote {}/{{transfers.csv,steps.csv,trace.json,summary.json}}", dir.display());
            }
            Ok(())
        }),
        Cmd::Topo(a) => topo_cmd::run(&a),
        Cmd::Run(a) => run::run(&a),
        Cmd::Workload(c) => workload_cmd::run(&c),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
