//! Sweep results in SQLite (`<out>/results.sqlite`): one row per experiment, keyed by the hash of
//! its resolved scenario, committed as each experiment finishes. A sweep killed at any moment
//! keeps every committed row (WAL journal); re-running it skips their keys, and `INSERT OR
//! IGNORE` on the key makes a second copy of a row impossible.
//!
//! One writer at a time: an open [`Store`] holds an exclusive SQLite lock on `<out>/sweep.lock`
//! (an OS file lock, so a killed sweep leaves no stale lock behind), and a second sweep on the
//! same directory is refused. The spec's fingerprint is kept in the `meta` table: a different
//! spec is refused unless it is claimed with `merge`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::{METRICS, Row, SweepError};

/// The results database's file name inside a results directory.
pub const FILE: &str = "results.sqlite";

/// The lock file of a results directory.
pub const LOCK: &str = "sweep.lock";

/// A results directory's SQLite database: one row per finished point, committed as it finishes.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Holds an exclusive transaction on `<dir>/sweep.lock` while the store is open.
    _lock: Connection,
}

fn db(e: rusqlite::Error, path: &Path) -> SweepError {
    SweepError::Store {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Store {
    /// Opens (creating it and its directory if needed) the results of the sweep in `dir`, and
    /// locks them for this store's life.
    ///
    /// # Errors
    /// [`SweepError::Locked`] while another store holds `dir`; the directory cannot be created
    /// or the database cannot be opened.
    pub fn open(dir: &Path) -> Result<Store, SweepError> {
        std::fs::create_dir_all(dir).map_err(|e| SweepError::Store {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
        let lock_path = dir.join(LOCK);
        let lock = Connection::open(&lock_path).map_err(|e| db(e, &lock_path))?;
        match lock.execute_batch("PRAGMA busy_timeout=0; BEGIN EXCLUSIVE;") {
            Ok(()) => {}
            Err(rusqlite::Error::SqliteFailure(f, _))
                if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) =>
            {
                return Err(SweepError::Locked {
                    dir: dir.to_path_buf(),
                    lock: lock_path,
                });
            }
            Err(e) => return Err(db(e, &lock_path)),
        }
        let path = dir.join(FILE);
        let conn = Connection::open(&path).map_err(|e| db(e, &path))?;
        let metrics: String = METRICS.iter().map(|m| format!(", {m} REAL")).collect();
        let sql = format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000;
             CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, idx INTEGER NOT NULL, axes TEXT NOT NULL,
               status TEXT NOT NULL, error TEXT, parallel TEXT{metrics}, report TEXT);
             CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);"
        );
        conn.execute_batch(&sql).map_err(|e| db(e, &path))?;
        add_missing_metric_columns(&conn, &path)?;
        Ok(Store { conn, path, _lock: lock })
    }

    /// Records that this store holds the results of the spec with `fingerprint`
    /// ([`crate::Plan::fingerprint`]). A store that holds another spec's results is refused,
    /// unless `merge`: then the new fingerprint is recorded and the old one kept under `merged`.
    /// A store from before fingerprints (rows, no fingerprint) takes the first one it is given.
    ///
    /// # Errors
    /// [`SweepError::OtherSpec`], or a database error.
    pub fn claim(&self, fingerprint: &str, merge: bool) -> Result<(), SweepError> {
        let stored = self.meta("fingerprint")?;
        match stored {
            Some(old) if old == fingerprint => return Ok(()),
            Some(old) if !merge => {
                return Err(SweepError::OtherSpec {
                    dir: self.path.parent().map(Path::to_path_buf).unwrap_or_default(),
                    stored: old,
                    this: fingerprint.to_string(),
                });
            }
            Some(old) => {
                let merged = self.meta("merged")?.map_or(old.clone(), |m| format!("{m},{old}"));
                self.set_meta("merged", &merged)?;
            }
            None => {}
        }
        self.set_meta("fingerprint", fingerprint)
    }

    /// A `meta` value.
    ///
    /// # Errors
    /// A database error.
    pub fn meta(&self, k: &str) -> Result<Option<String>, SweepError> {
        use rusqlite::OptionalExtension as _;
        self.conn
            .query_row("SELECT v FROM meta WHERE k = ?", params![k], |r| r.get(0))
            .optional()
            .map_err(|e| db(e, &self.path))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keys of the experiments already recorded.
    ///
    /// # Errors
    /// A database error.
    pub fn done_keys(&self) -> Result<HashSet<String>, SweepError> {
        let mut st = self.conn.prepare("SELECT key FROM results").map_err(|e| db(e, &self.path))?;
        let keys = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| db(e, &self.path))?
            .collect::<Result<HashSet<_>, _>>()
            .map_err(|e| db(e, &self.path))?;
        Ok(keys)
    }

    /// Records a row (its own transaction). Returns false if its key was already there.
    ///
    /// # Errors
    /// A database error.
    pub fn insert(&self, r: &Row) -> Result<bool, SweepError> {
        let cols: String = METRICS.iter().map(|m| format!(", {m}")).collect();
        let qs: String = METRICS.iter().map(|_| ", ?").collect();
        let sql = format!(
            "INSERT OR IGNORE INTO results (key, idx, axes, status, error, parallel{cols}, report) VALUES (?, ?, ?, ?, ?, ?{qs}, ?)"
        );
        let mut st = self.conn.prepare_cached(&sql).map_err(|e| db(e, &self.path))?;
        let mut values: Vec<Box<dyn rusqlite::ToSql>> = vec![
            Box::new(r.key.clone()),
            Box::new(r.idx as i64),
            Box::new(r.axes.clone()),
            Box::new(r.status.clone()),
            Box::new(r.error.clone()),
            Box::new(r.parallel.clone()),
        ];
        for m in &r.metrics {
            values.push(Box::new(*m));
        }
        values.push(Box::new(r.report.clone()));
        let n = st
            .execute(rusqlite::params_from_iter(values.iter().map(|b| b.as_ref())))
            .map_err(|e| db(e, &self.path))?;
        Ok(n == 1)
    }

    /// Sets a `meta` value.
    ///
    /// # Errors
    /// A database error.
    pub fn set_meta(&self, k: &str, v: &str) -> Result<(), SweepError> {
        self.conn
            .execute("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", params![k, v])
            .map_err(|e| db(e, &self.path))?;
        Ok(())
    }

    /// Every row, by point index.
    ///
    /// # Errors
    /// A database error.
    pub fn rows(&self) -> Result<Vec<Row>, SweepError> {
        let cols: String = METRICS.iter().map(|m| format!(", {m}")).collect();
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT key, idx, axes, status, error, parallel{cols}, report FROM results ORDER BY idx"
            ))
            .map_err(|e| db(e, &self.path))?;
        let n = METRICS.len();
        let rows = st
            .query_map([], |r| {
                Ok(Row {
                    key: r.get(0)?,
                    idx: r.get::<_, i64>(1)? as u64,
                    axes: r.get(2)?,
                    status: r.get(3)?,
                    error: r.get(4)?,
                    parallel: r.get(5)?,
                    metrics: (0..n).map(|i| r.get(6 + i)).collect::<Result<_, _>>()?,
                    report: r.get(6 + n)?,
                })
            })
            .map_err(|e| db(e, &self.path))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| db(e, &self.path))?;
        Ok(rows)
    }
}

/// A store written before a metric existed (e.g. `exposed_offload_s`) lacks its column: add it,
/// so the sweep resumes into it (old rows read null there) instead of failing on the insert.
fn add_missing_metric_columns(conn: &Connection, path: &Path) -> Result<(), SweepError> {
    let mut st = conn.prepare("PRAGMA table_info(results)").map_err(|e| db(e, path))?;
    let have: Vec<String> = st
        .query_map([], |r| r.get::<_, String>(1))
        .map_err(|e| db(e, path))?
        .collect::<Result<_, _>>()
        .map_err(|e| db(e, path))?;
    for m in METRICS.iter().filter(|m| !have.iter().any(|h| h == *m)) {
        conn.execute_batch(&format!("ALTER TABLE results ADD COLUMN {m} REAL"))
            .map_err(|e| db(e, path))?;
    }
    Ok(())
}
