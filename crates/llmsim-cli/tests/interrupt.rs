//! Ctrl-C during a long run says where it stopped and exits 130, instead of dying silently.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn ctrl_c_says_where_the_run_stopped() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // Llama 3 405B on 16,384 GPUs, flow, every unit simulated: seconds even in release.
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmsim"))
        .current_dir(root)
        .args(["run", "bench/scenarios/real-llama3-405b-16k.yaml", "--no-fold"])
        .env("LLMSIM_PROGRESS_INTERVAL_S", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llmsim starts");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    // The first progress line comes after the handler is installed.
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr closed before any progress line");
        if line.starts_with("llmsim: simulating ") {
            break;
        }
    }
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "stderr after the interrupt: {rest}");
    let said = rest
        .lines()
        .find(|l| l.starts_with("llmsim: interrupted while simulating"))
        .unwrap_or_else(|| panic!("{rest}"));
    assert!(said.contains("program nodes") && said.contains("no report was written"), "{said}");
}
