//! `llmsim`: simulate LLM training clusters. The command-line tool as a library, so the Python
//! package's `llmsim` console script runs exactly this code in-process ([`main_with`]).

mod collective;
mod ns3;
mod run;
mod sweep;
mod topo_args;
mod topo_cmd;
mod trace;
mod workload_cmd;

use std::ffi::OsString;

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
    /// Run a sweep file (base scenario + axes) on this machine's cores; results are resumable.
    Sweep(sweep::SweepArgs),
    /// Run ns-3 HPCC experiments (config.txt, topology, flows) on the packet engine.
    Ns3(ns3::Ns3Args),
    /// Export a scenario's workload in another tool's format (Chakra execution traces, SimAI).
    #[command(subcommand)]
    Workload(workload_cmd::WorkloadCmd),
}

/// A progress bar on stderr in llmsim's style (hidden when stderr is not a terminal); `template`
/// is an indicatif template with a `{bar:40}`.
pub(crate) fn progress_bar(template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// Runs the tool with these arguments (the first is the program name); returns the exit code:
/// 0 success, 2 an error (printed to stderr), clap's code for usage errors and `--help`.
pub fn main_with<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code() as u8;
        }
    };
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
        Cmd::Sweep(a) => sweep::run(&a),
        Cmd::Ns3(a) => ns3::run(&a),
        Cmd::Workload(c) => workload_cmd::run(&c),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}
