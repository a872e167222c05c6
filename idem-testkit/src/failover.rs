//! A PostgreSQL primary and a streaming standby of the test's own, to fail over: the
//! repository's `.ci/failover`, on free ports, in a new directory.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::new_dir;

/// A primary and its standby (`.ci/failover start`), stopped and removed when dropped. The
/// script and PostgreSQL's server programs must be there: a missing one fails the test.
#[derive(Debug)]
pub struct Failover {
    dir: PathBuf,
    /// The primary's port.
    pub primary_port: u16,
    /// The standby's port.
    pub standby_port: u16,
    /// Both, as a host list: `postgres://postgres@127.0.0.1:P,127.0.0.1:S/test?target_session_attrs=read-write`.
    pub url: String,
}

impl Failover {
    /// Starts both; `sync`: the standby is synchronous (a commit waits for it), otherwise
    /// asynchronous.
    ///
    /// # Panics
    /// When the script fails.
    #[must_use]
    pub fn start(sync: bool) -> Self {
        let dir = new_dir("failover");
        let [primary_port, standby_port] = free_ports();
        let mut this = Self {
            dir,
            primary_port,
            standby_port,
            url: String::new(),
        };
        let url = this.run(&["start", if sync { "sync" } else { "async" }]);
        this.url = url.lines().last().unwrap_or_default().to_owned();
        assert!(this.url.starts_with("postgres://"), "failover start: {url}");
        this
    }

    /// The standby stops receiving the primary's changes: with an asynchronous standby, what
    /// the primary commits from then on is acknowledged and lost at the promotion.
    pub fn cut_standby(&self) {
        self.run(&["cut-standby"]);
    }

    /// `kill -9` of the primary's postmaster.
    pub fn kill_primary(&self) {
        self.run(&["kill-primary"]);
    }

    /// Promotes the standby and waits until it takes writes.
    pub fn promote(&self) {
        self.run(&["promote"]);
    }

    /// Database `database` on one server, as a single host.
    #[must_use]
    pub fn url_of(port: u16, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{database}")
    }

    /// Runs `.ci/failover ARGS` for these servers; what it printed.
    ///
    /// # Panics
    /// When it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let output = Command::new(script())
            .args(args)
            .env("FAILOVER_PRIMARY_PORT", self.primary_port.to_string())
            .env("FAILOVER_STANDBY_PORT", self.standby_port.to_string())
            .env("TMPDIR", &self.dir)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script().display()));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            ".ci/failover {args:?}: {}\n{stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

impl Drop for Failover {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .env("FAILOVER_PRIMARY_PORT", self.primary_port.to_string())
            .env("FAILOVER_STANDBY_PORT", self.standby_port.to_string())
            .env("TMPDIR", &self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `.ci/failover` of the repository.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/failover")
}

/// Two free ports, bound at once so that they differ.
fn free_ports() -> [u16; 2] {
    let listeners = [(); 2]
        .map(|()| TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("a free port: {e}")));
    listeners.map(|listener| {
        listener
            .local_addr()
            .map(|address| address.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"))
    })
}
