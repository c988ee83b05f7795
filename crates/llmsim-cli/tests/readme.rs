//! The commands of README.md and docs/ run as written (issue 35: a fresh clone must be able to
//! run every command the documentation shows).
//!
//! Every shell line of a fenced code block (no language, `sh`, `bash`, `console`) that starts
//! with one of [`PROGRAMS`] is a command; `\` continuations are joined and `# ...` comments
//! dropped. Each runs with `sh -c`, in order, in a scratch copy of the repository root (the
//! documents, `examples/` and `docs/`, so outputs such as `out/` or `topo.txt` land there and
//! commands that read an earlier command's output find it), with `llmsim` on `PATH` being this
//! build's binary. A command fails the test when it exits non-zero or runs past
//! [`LIMIT_S`] seconds. The ones not run are listed in [`SKIPPED`], each with its reason; an
//! entry whose command is no longer in the documents fails the test too, so the list stays true.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Programs whose lines in a code block are commands.
const PROGRAMS: &[&str] = &["llmsim", "cargo", "pip", "./scripts/", "python"];

/// Longest a command may take in a debug build (the suite's), in seconds.
const LIMIT_S: u64 = 90;

/// Commands not run here, and why.
const SKIPPED: &[(&str, &str)] = &[
    (
        "cargo run --release -p llmsim-cli -- run examples/gpt3-13b-128gpu.yaml",
        "a release build (minutes); the same run, `llmsim run examples/gpt3-13b-128gpu.yaml ...`, runs here with --set",
    ),
    (
        "pip install . && llmsim run examples/gpt3-13b-128gpu.yaml",
        "installs the Python package (scripts/test.sh builds it with maturin; tests/python)",
    ),
    (
        "pip install .",
        "installs the Python package (scripts/test.sh builds it with maturin; tests/python)",
    ),
    ("./scripts/test.sh", "the whole suite, which runs this test"),
    (
        "llmsim sweep examples/sweep-topologies.yaml --jobs 2 --out runs/topologies",
        "14 flow runs of GPT-3 175B at 1,024 and 8,192 GPUs (minutes in release); bench/README.md has its table",
    ),
    (
        "llmsim run examples/llama3-70b-1024gpu.yaml --set cluster.topology.oversubscription=4",
        "a 1,024-GPU flow-level run: 45-80 s in a debug build on a loaded 2-core machine; the analytical runs of the same tutorial run here",
    ),
    (
        "llmsim sweep examples/sweep-simai-nic.yaml --out runs/nic",
        "6 flow-level runs of 1,024 GPUs (minutes in a debug build); sweeps are tested in crates/llmsim-sweep",
    ),
    (
        "llmsim run examples/wormhole-moe-8x7b-64gpu.yaml --backend packet --set network.cc=dcqcn --set cluster.topology.servers_per_segment=4 --set cluster.topology.oversubscription=4",
        "a packet-level MoE iteration: 74-97 s in a release build on the 2-core machine",
    ),
    (
        "llmsim run examples/wormhole-moe-8x7b-64gpu.yaml --backend packet --set network.cc=hpcc --set cluster.topology.servers_per_segment=4 --set cluster.topology.oversubscription=4",
        "a packet-level MoE iteration: 74-97 s in a release build on the 2-core machine",
    ),
    (
        "cargo build --release -p llmsim-cli",
        "a release build (minutes); this test runs the debug binary of the same code",
    ),
    (
        "llmsim run examples/gpt3-13b-128gpu.yaml --backend packet --set network.cc=hpcc --set cluster.gpus=16 --set training.global_batch_size=16 --set 'model={preset: gpt3-13b, num_hidden_layers: 1}'",
        "exact packet-level run: 88 s in a debug build",
    ),
    (
        "llmsim run examples/wormhole-gpt-13b-128gpu.yaml --backend packet --set 'network.fast_forward={theta: 0.05, window: 4, uncontended_window: 3, sample_us: 10}'",
        "fast-forwarding without memoization: 127 s in a debug build (the memoized run below runs here)",
    ),
    (
        "llmsim sweep examples/sweep-tp-pp.yaml --jobs 2 --out runs/tp-pp/",
        "44 points: 73 s in a debug build; sweeps are tested in crates/llmsim-sweep and tests/python/test_sweep.py",
    ),
    (
        "llmsim sweep examples/sweep-tp-pp.yaml --ray auto --out runs/tp-pp/",
        "Python package with Ray (tests/python/test_sweep.py)",
    ),
    (
        "llmsim plot runs/tp-pp/ --x parallel.tp --y iteration_time --hue cluster.topology.nic.bandwidth",
        "Python package (plots: tests/python/test_plot.py), and needs the skipped sweep",
    ),
    (
        "llmsim plot runs/tp-pp/",
        "Python package (tests/python/test_plot.py), and needs the skipped sweep",
    ),
    ("llmsim plot out/", "Python package (tests/python/test_netplot.py)"),
    (
        "llmsim sweep examples/ns3/sweep-dcqcn.yaml --out runs/ft16-dcqcn/ --compare-exact 2",
        "a packet-level (`ns3:`) sweep: the Python package's console script with JAX (tests/python/test_batch_sweep.py)",
    ),
    (
        "llmsim plot runs/ft16-dcqcn/ --x rate_ai_bps --y mean_fct_us --hue kmin_bytes",
        "Python package (tests/python/test_batch_sweep.py), and needs the skipped sweep",
    ),
    (
        "llmsim search examples/llama3-70b-1024gpu.yaml --gpus 1024 --objective tokens_per_s --backend analytical",
        "Python package; 147 simulations (tests/python/test_search.py)",
    ),
    (
        "llmsim profile examples/gpt3-13b-128gpu.yaml --out ops_db.csv",
        "Python package (tests/python/test_profile.py)",
    ),
    (
        "llmsim profile examples/gpt3-13b-128gpu.yaml --list",
        "Python package (tests/python/test_profile.py)",
    ),
    (
        "llmsim profile examples/gpt3-13b-128gpu.yaml --check ops_db.csv",
        "Python package (tests/python/test_profile.py)",
    ),
    (
        "llmsim profile examples/gpt3-13b-128gpu.yaml --compare data/op-db/h200/gpt3-13b.csv",
        "Python package (tests/python/test_profile.py runs it as written)",
    ),
    (
        "llmsim sweep examples/sweep-simai-nic.yaml --out runs/simai-nic/",
        "6 GPT-3 175B points on 1,024 GPUs: 82 s in a debug build",
    ),
    (
        "llmsim plot runs/simai-nic/ --x cluster.topology.nic.bandwidth --y iteration_time --hue cluster.gpu",
        "Python package, and needs the skipped sweep",
    ),
    (
        "llmsim workload export examples/gpt3-13b-128gpu.yaml --format chakra --out et/",
        "128 execution traces: 35 s in a debug build; export and import are tested in crates/llmsim-sim/tests/chakra.rs",
    ),
    (
        "llmsim run --workload chakra:et/gpt3-13b-128gpu --comm-groups et/groups.json examples/interop/cluster-128xh100.yaml",
        "needs the skipped Chakra export; 44 s in a debug build (crates/llmsim-sim/tests/chakra.rs)",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents whose commands must run: README.md, docs/**/*.md, examples/**/README.md.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, keep, out);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    let root = root();
    let mut docs = vec![root.join("README.md")];
    walk(&root.join("docs"), &|p| p.extension().is_some_and(|e| e == "md"), &mut docs);
    walk(
        &root.join("examples"),
        &|p| p.file_name().is_some_and(|n| n == "README.md"),
        &mut docs,
    );
    docs
}

/// `line` without a trailing `# comment` (a `#` outside quotes, after a space).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].trim_end(),
            _ => {}
        }
        prev = c;
    }
    line.trim_end()
}

/// The commands of a Markdown document, in order.
fn commands(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut shell = false;
    let mut pending: Option<String> = None;
    for line in markdown.lines() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            if in_block {
                in_block = false;
                pending = None;
            } else {
                in_block = true;
                shell = matches!(lang.trim(), "" | "sh" | "bash" | "console" | "shell");
            }
            continue;
        }
        if !in_block || !shell {
            continue;
        }
        let t = strip_comment(t.trim());
        let joined = match pending.take() {
            Some(p) => format!("{p} {t}"),
            None if PROGRAMS.iter().any(|p| t.starts_with(p)) => t.to_string(),
            None => continue,
        };
        match joined.strip_suffix('\\') {
            Some(head) => pending = Some(head.trim_end().to_string()),
            None => out.push(joined),
        }
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let dest = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

#[test]
fn extracts_commands_with_continuations_and_comments() {
    let md = "text\n```\n# a comment\nllmsim run a.yaml --set 'x=#1'   # why\nllmsim collective --op all-reduce \\\n    --size 1GiB\nnot a command\n```\n```yaml\nllmsim: no\n```\n";
    assert_eq!(
        commands(md),
        ["llmsim run a.yaml --set 'x=#1'", "llmsim collective --op all-reduce --size 1GiB"]
    );
}

#[test]
fn documented_commands_run_as_written() {
    let root = root();
    let scratch = std::env::temp_dir().join(format!("llmsim-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    for dir in ["examples", "docs"] {
        copy_dir(&root.join(dir), &scratch.join(dir));
    }
    let bin = scratch.join(".bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_llmsim"), bin.join("llmsim")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());

    let mut seen = Vec::new();
    let mut failures = Vec::new();
    let mut ran = 0;
    for doc in documents() {
        let rel = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
        for cmd in commands(&std::fs::read_to_string(&doc).unwrap()) {
            seen.push(cmd.clone());
            if SKIPPED.iter().any(|(c, _)| *c == cmd) {
                continue;
            }
            let start = Instant::now();
            let out = Command::new("timeout")
                .args(["-k", "5", &LIMIT_S.to_string(), "sh", "-c", &cmd])
                .current_dir(&scratch)
                .env("PATH", &path)
                .env_remove("LLMSIM_PROGRESS_INTERVAL_S")
                .output()
                .expect("timeout and sh run");
            let secs = start.elapsed().as_secs_f64();
            eprintln!("{secs:6.1} s  {rel}: {cmd}");
            ran += 1;
            let code = out.status.code();
            if code == Some(124) || code.is_none() {
                failures.push(format!(
                    "{rel}: `{cmd}` ran past {LIMIT_S} s in a debug build: make it faster, or list it in SKIPPED with the reason"
                ));
            } else if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = err.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
                failures.push(format!("{rel}: `{cmd}` exited with {code:?}:\n    {}", tail.join("\n    ")));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let stale: Vec<&str> = SKIPPED.iter().map(|(c, _)| *c).filter(|c| !seen.iter().any(|s| s == c)).collect();
    assert!(stale.is_empty(), "SKIPPED lists commands no document shows any more: {stale:?}");
    assert!(ran >= 10, "ran only {ran} commands: did the extraction break?");
    assert!(
        failures.is_empty(),
        "documented commands that do not run as written:\n{}",
        failures.join("\n")
    );
}
