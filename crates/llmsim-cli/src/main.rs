//! The `llmsim` binary: see the library for the commands.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(llmsim_cli::main_with(std::env::args_os()))
}
