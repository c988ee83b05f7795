//! Sweep results in SQLite (`<out>/results.sqlite`): one row per experiment, keyed by the hash of
//! its resolved scenario, committed as each experiment finishes. A sweep killed at any moment
//! keeps every committed row (WAL journal); re-running it skips their keys, and `INSERT OR
//! IGNORE` on the key makes a second copy of a row impossible.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::{METRICS, Row, SweepError};

pub const FILE: &str = "results.sqlite";

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

fn db(e: rusqlite::Error, path: &Path) -> SweepError {
    SweepError::Store {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Store {
    /// Opens (creating it and its directory if needed) the results of the sweep in `dir`.
    ///
    /// # Errors
    /// The directory cannot be created or the database cannot be opened.
    pub fn open(dir: &Path) -> Result<Store, SweepError> {
        std::fs::create_dir_all(dir).map_err(|e| SweepError::Store {
            path: dir.to_path_buf(),
            message: e.to_string(),
        })?;
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
        Ok(Store { conn, path })
    }

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
