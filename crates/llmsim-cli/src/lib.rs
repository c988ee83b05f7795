//! `llmsim`: simulate LLM training clusters. The command-line tool as a library, so the Python
//! package's `llmsim` console script runs exactly this code in-process ([`main_with`]).
//!
//! Standard output: every command prints through `out!`/`outln!`, which return a write error
//! (a closed pipe, `> /dev/full`) from the command instead of panicking as `print!` does.
//! `main_with` then ends quietly with exit 0 on a closed pipe (`llmsim run X | head -1`) and
//! reports any other write error. This is done at the boundary rather than by restoring the
//! default SIGPIPE action in `main`, because the Python package runs the tool in-process, where
//! a SIGPIPE would kill the interpreter.

/// `print!` to stdout that returns a write error from the enclosing function (`?` inside) rather
/// than panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*).map_err($crate::stdout_error)?
    }};
}

/// `println!` to stdout that returns a write error from the enclosing function; see `out!`.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::stdout_error)?
    }};
}

mod collective;
mod ns3;
mod run;
pub mod schema_cmd;
mod sweep;
mod topo_args;
mod topo_cmd;
mod trace;
mod workload_cmd;

use std::ffi::OsString;
use std::io::Write as _;

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
    Collective(Box<collective::CollectiveArgs>),
    /// Build a topology: describe it, or export it in ns-3 format.
    Topo(topo_cmd::TopoCmdArgs),
    /// Run a sweep file (base scenario + axes) on this machine's cores; results are resumable.
    Sweep(sweep::SweepArgs),
    /// Run ns-3 HPCC experiments (config.txt, topology, flows) on the packet engine.
    Ns3(ns3::Ns3Args),
    /// Export a scenario's workload in another tool's format (Chakra execution traces, SimAI).
    #[command(subcommand)]
    Workload(workload_cmd::WorkloadCmd),
    /// Print the JSON Schema of scenario files (--sweep: of sweep files), or their reference
    /// page (--markdown).
    Schema(schema_cmd::SchemaArgs),
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

/// Progress of a long command: an indicatif bar when stderr is a terminal; otherwise (piped,
/// logged, under a scheduler) a plain line on stderr every few seconds, so a long run is never
/// silent. Short runs print nothing. `LLMSIM_PROGRESS_INTERVAL_S` sets the interval of the plain
/// lines (default 5 s).
pub(crate) struct Progress {
    bar: indicatif::ProgressBar,
    plain: Option<PlainProgress>,
    /// On a terminal with a [`Detail`]: the thread that puts it in the bar's message.
    message: Option<Ticker>,
}

/// What a progress line adds after the counts (the simulated time, the network's events, the
/// memory in use), given the time elapsed.
pub(crate) type Detail = std::sync::Arc<dyn Fn(std::time::Duration) -> String + Send + Sync>;

type Ticker = (std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>);

struct PlainProgress {
    what: &'static str,
    unit: &'static str,
    start: std::time::Instant,
    last: std::cell::Cell<std::time::Instant>,
    interval: std::time::Duration,
    /// With an interval above zero, a thread prints the lines on a clock, so a run is never
    /// silent longer than the interval even while one step takes long (a packet-level
    /// collective, a big plan); `stop` ends it.
    ticker: Option<Ticker>,
    detail: Option<Detail>,
}

/// One plain progress line.
fn plain_line(what: &str, unit: &str, done: u64, total: u64, elapsed: std::time::Duration, detail: Option<&Detail>) -> String {
    let pct = if total > 0 { 100.0 * done as f64 / total as f64 } else { 0.0 };
    let more = detail.map(|d| format!("; {}", d(elapsed))).unwrap_or_default();
    format!(
        "llmsim: {what} {done}/{total} {unit} ({pct:.0}%), {:.0} s elapsed{more}",
        elapsed.as_secs_f64()
    )
}

/// Calls `tick(elapsed)` every `interval` from `start` until the returned flag is set.
fn spawn_ticker(start: std::time::Instant, interval: std::time::Duration, tick: impl Fn(std::time::Duration) + Send + 'static) -> Ticker {
    use std::sync::atomic::Ordering;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        let step = std::time::Duration::from_millis(50).min(interval);
        let mut next = start + interval;
        while !flag.load(Ordering::Relaxed) {
            std::thread::sleep(step);
            let now = std::time::Instant::now();
            if now >= next && !flag.load(Ordering::Relaxed) {
                tick(now - start);
                next = now + interval;
            }
        }
    });
    (stop, handle)
}

/// This process's resident memory (Linux: `/proc/self/status`), in MiB.
fn rss_mib() -> Option<u64> {
    status_mib("VmRSS:")
}

/// This process's peak resident memory so far (Linux: `VmHWM` of `/proc/self/status`), in MiB.
pub(crate) fn peak_rss_mib() -> Option<u64> {
    status_mib("VmHWM:")
}

/// A `kB` field of `/proc/self/status`, in MiB; `None` off Linux.
fn status_mib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
}

/// The run time estimated before the run, in milliseconds (0: none yet), for the progress line.
static ESTIMATED_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Records the run time estimated before the run (`llmsim run`'s `on_estimate`).
pub(crate) fn note_estimate(seconds: f64) {
    let ms = (seconds.max(0.0) * 1e3).round() as u64;
    ESTIMATED_MS.store(ms.max(1), std::sync::atomic::Ordering::Relaxed);
}

/// What the progress line adds once a run has taken far longer than estimated before it
/// (5x and at least 60 s): the estimate is a fit on other runs, so a user should know early
/// that this one is off (a packet-level run whose transfers fast-forwarding cannot shorten runs
/// for hours where it was estimated at seconds).
fn slower_than_estimated(elapsed: std::time::Duration) -> Option<String> {
    let est = ESTIMATED_MS.load(std::sync::atomic::Ordering::Relaxed);
    let el = elapsed.as_secs_f64();
    (est > 0 && el >= 60.0 && el >= 5.0 * est as f64 / 1e3).then(|| {
        format!(
            "; far slower than estimated before the run (about {:.0} s): the estimate does not hold for this run",
            est as f64 / 1e3
        )
    })
}

/// A simulation's [`Detail`]: the simulated time it reached, the transfers done, the packet
/// events and their rate (packet backend), the memory in use, and whether the run
/// is far slower than estimated before it.
pub(crate) fn live_detail(live: std::sync::Arc<llmsim_sim::engine::LiveStatus>) -> Detail {
    std::sync::Arc::new(move |elapsed: std::time::Duration| {
        let mut d = format!(
            "simulated {:.6} s, {} transfers done",
            live.sim_time().as_secs_f64(),
            live.transfers_done()
        );
        let ev = live.packet_events();
        if ev > 0 {
            let rate = ev as f64 / elapsed.as_secs_f64().max(1e-9);
            d.push_str(&format!(", {:.1} M packet events ({:.1} M/s)", ev as f64 / 1e6, rate / 1e6));
        }
        let [full, resumed, local, rerated, rerated_full, unchanged] = live.rate_fills();
        if full + resumed + local > 0 {
            d.push_str(&format!(
                ", {:.2} M rate fillings ({:.2} M full, {:.2} M local), {:.1} M flows rerated ({:.1} M in full, {:.1} M unchanged)",
                (full + resumed + local) as f64 / 1e6,
                full as f64 / 1e6,
                local as f64 / 1e6,
                rerated as f64 / 1e6,
                rerated_full as f64 / 1e6,
                unchanged as f64 / 1e6
            ));
        }
        if let Some(m) = rss_mib() {
            d.push_str(&format!(", RSS {m} MiB"));
        }
        if let Some(w) = slower_than_estimated(elapsed) {
            d.push_str(&w);
        }
        d
    })
}

/// Where the running command is, for Ctrl-C: what it does and counts, and its bar (a clone:
/// the bar holds how far it got and since when, even when hidden).
struct Where {
    what: &'static str,
    unit: &'static str,
    bar: indicatif::ProgressBar,
    note: &'static str,
}

static WHERE: std::sync::Mutex<Option<Where>> = std::sync::Mutex::new(None);

/// On Ctrl-C (SIGINT), say where the command stopped and exit 130 (128 + SIGINT), instead of
/// dying silently. Installed once per process.
fn on_interrupt_say_where() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            let w = WHERE.lock().unwrap_or_else(|e| e.into_inner());
            match &*w {
                Some(w) => {
                    let (done, total) = (w.bar.position(), w.bar.length().unwrap_or(0));
                    let secs = w.bar.elapsed().as_secs_f64();
                    if total == 0 {
                        eprintln!(
                            "\nllmsim: interrupted while {}, before its first progress report, after {secs:.1} s; {}",
                            w.what, w.note
                        );
                    } else {
                        let pct = 100.0 * done as f64 / total as f64;
                        eprintln!(
                            "\nllmsim: interrupted while {}: {done}/{total} {} ({pct:.0}%) after {secs:.1} s; {}",
                            w.what, w.unit, w.note
                        );
                    }
                }
                None => eprintln!("\nllmsim: interrupted before any progress was reported"),
            }
            std::process::exit(130);
        });
    });
}

impl Progress {
    /// `what` names the work ("simulating"), `unit` what is counted ("nodes").
    pub(crate) fn new(template: &str, what: &'static str, unit: &'static str) -> Progress {
        Progress::with_note(template, what, unit, "no report was written")
    }

    /// [`Progress::new`] whose Ctrl-C message ends with `note` (what is kept, how to resume).
    pub(crate) fn with_note(template: &str, what: &'static str, unit: &'static str, note: &'static str) -> Progress {
        Progress::with_detail(template, what, unit, note, None)
    }

    /// [`Progress::with_note`] whose lines (or, on a terminal, the bar's `{msg}`, refreshed
    /// every second) end with `detail`.
    pub(crate) fn with_detail(
        template: &str,
        what: &'static str,
        unit: &'static str,
        note: &'static str,
        detail: Option<Detail>,
    ) -> Progress {
        use std::io::IsTerminal;
        let bar = progress_bar(template);
        on_interrupt_say_where();
        *WHERE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Where {
            what,
            unit,
            bar: bar.clone(),
            note,
        });
        let terminal = std::io::stderr().is_terminal();
        let message = detail.clone().filter(|_| terminal).map(|d| {
            let b = bar.clone();
            spawn_ticker(std::time::Instant::now(), std::time::Duration::from_secs(1), move |el| {
                b.set_message(d(el))
            })
        });
        let plain = (!terminal).then(|| {
            let secs = std::env::var("LLMSIM_PROGRESS_INTERVAL_S")
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .unwrap_or(5.0);
            let now = std::time::Instant::now();
            let interval = std::time::Duration::from_secs_f64(secs);
            PlainProgress {
                what,
                unit,
                start: now,
                last: std::cell::Cell::new(now),
                interval,
                ticker: (!interval.is_zero()).then(|| {
                    let (b, d) = (bar.clone(), detail.clone());
                    spawn_ticker(now, interval, move |el| {
                        eprintln!("{}", plain_line(what, unit, b.position(), b.length().unwrap_or(0), el, d.as_ref()));
                    })
                }),
                detail,
            }
        });
        Progress { bar, plain, message }
    }

    pub(crate) fn update(&self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        // A zero interval (tests): a line at every update, from this thread.
        if let Some(p) = self.plain.as_ref().filter(|p| p.ticker.is_none()) {
            let now = std::time::Instant::now();
            if now.duration_since(p.last.get()) >= p.interval {
                p.last.set(now);
                eprintln!(
                    "{}",
                    plain_line(p.what, p.unit, done, total, now.duration_since(p.start), p.detail.as_ref())
                );
            }
        }
    }

    pub(crate) fn finish(&self) {
        self.stop_ticker();
        self.bar.finish_and_clear();
    }

    fn stop_ticker(&self) {
        let plain = self.plain.as_ref().and_then(|p| p.ticker.as_ref());
        for (stop, _) in plain.into_iter().chain(self.message.as_ref()) {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop_ticker();
        if let Some((_, handle)) = self.plain.as_mut().and_then(|p| p.ticker.take()) {
            let _ = handle.join();
        }
        if let Some((_, handle)) = self.message.take() {
            let _ = handle.join();
        }
    }
}

/// A failed write to stdout, as the commands' error.
pub(crate) fn stdout_error(e: std::io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context("writing to stdout")
}

/// Whether `e` is, at bottom, a write to a closed pipe (the reader, e.g. `head`, has gone).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Runs the tool with these arguments (the first is the program name); returns the exit code:
/// 0 success, 2 an error (printed to stderr), clap's code for usage errors and `--help`.
pub fn main_with<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            if e.kind() == clap::error::ErrorKind::InvalidSubcommand
                && let Some(hint) = args.get(1).and_then(|a| python_only_hint(&a.to_string_lossy()))
            {
                eprintln!("\n{hint}");
            }
            return e.exit_code() as u8;
        }
    };
    let r = match cli.cmd {
        Cmd::Collective(a) => collective::run(&a).and_then(|o| {
            out!("{}", collective::render(&o));
            if let Some(dir) = &a.out {
                collective::write_outputs(&o, dir)?;
                let util = if o.util.is_empty() { "" } else { ",util.csv" };
                outln!("wrote {}/{{transfers.csv,steps.csv,trace.json,summary.json{util}}}", dir.display());
            }
            Ok(())
        }),
        Cmd::Topo(a) => topo_cmd::run(&a),
        Cmd::Run(a) => run::run(&a),
        Cmd::Sweep(a) => sweep::run(&a),
        Cmd::Ns3(a) => ns3::run(&a),
        Cmd::Workload(c) => workload_cmd::run(&c),
        Cmd::Schema(a) => schema_cmd::run(&a),
    };
    // Stdout may buffer the last partial line: its write error surfaces here.
    let r = r.and_then(|()| std::io::stdout().lock().flush().map_err(stdout_error));
    match r {
        Ok(()) => 0,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            2
        }
    }
}

/// The subcommands that come with the Python package (`python/llmsim/cli.py`), not this binary.
const PYTHON_SUBCOMMANDS: [&str; 4] = ["plot", "search", "profile", "export"];

/// For a subcommand only the Python package's `llmsim` has: how to get it.
fn python_only_hint(cmd: &str) -> Option<String> {
    PYTHON_SUBCOMMANDS.contains(&cmd).then(|| {
        format!(
            "hint: `llmsim {cmd}` comes with the Python package, not the cargo-built binary: `pip install .` \
             from the repository (in a virtual environment), then `llmsim {cmd} --help` (README.md, \
             \"Design-space exploration\")."
        )
    })
}

/// The error and its causes as one line, `a: b: c`, leaving out a cause whose text the line
/// already ends with (errors such as `cluster.gpu: {0}` print their source themselves).
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// The progress line says when a run takes far longer than estimated before it, and not
    /// before (5x the estimate and at least a minute).
    #[test]
    fn the_progress_line_says_when_the_estimate_does_not_hold() {
        use std::time::Duration;
        super::note_estimate(6.0);
        assert_eq!(super::slower_than_estimated(Duration::from_secs(29)), None);
        assert_eq!(super::slower_than_estimated(Duration::from_secs(59)), None);
        let w = super::slower_than_estimated(Duration::from_secs(90)).expect("90 s against 6 s");
        assert!(w.contains("about 6 s"), "{w}");
        super::note_estimate(30.0);
        assert_eq!(super::slower_than_estimated(Duration::from_secs(140)), None);
        assert!(super::slower_than_estimated(Duration::from_secs(151)).is_some());
    }

    /// The plain lines come on a clock: a step that takes long (here the bar never moves) still
    /// gets a line every interval, showing where the run stands.
    #[test]
    fn the_ticker_prints_while_a_step_takes_long() {
        let bar = indicatif::ProgressBar::hidden();
        bar.set_length(10);
        bar.set_position(3);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let start = Instant::now();
        let detail: super::Detail = Arc::new(|_| "simulated 0.5 s".to_string());
        let (stop, handle) = super::spawn_ticker(start, Duration::from_millis(100), move |el| {
            let line = super::plain_line("simulating", "nodes", bar.position(), bar.length().unwrap_or(0), el, Some(&detail));
            sink.lock().unwrap().push(line)
        });
        std::thread::sleep(Duration::from_millis(550));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        handle.join().unwrap();
        let lines = lines.lock().unwrap();
        // About five; at least two even on a loaded machine, none before the first interval.
        assert!(lines.len() >= 2, "{lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with("llmsim: simulating 3/10 nodes (30%), ") && l.ends_with(" s elapsed; simulated 0.5 s")),
            "{lines:?}"
        );
        // Stopped means stopped: nothing comes after.
        let n = lines.len();
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(n, lines.len());
    }
}
